/**
 * The runtime on Redis (docs/runtime.md, "On Redis"): one option switches a
 * runtime from the in-memory ports to `RedisPorts` (packages/redis-store),
 * every port on one connection (a `Cluster` client with `nodes`).
 *
 * - Promise API: `start({ redis: { url: "redis://127.0.0.1:6379" }, ... })`,
 *   `start({ redis: { nodes: ["10.0.0.1:7000", "10.0.0.2:7000"] }, ... })` for a
 *   cluster, or `start({ redis: { sentinels: ["10.0.0.1:26379", ...], name: "mymaster" } })`
 *   for a primary whose replicas Redis Sentinel promotes.
 * - Effect API: `make(options).pipe(Effect.provide(redisPorts({ url }).layer))`.
 *
 * The options are validated with Effect Schema before anything connects: a
 * bad URL, an empty or malformed `nodes` or `sentinels`, not exactly one of
 * `url`, `nodes` and `sentinels`, `sentinels` without `name`, fail with an
 * `InvalidRuntimeConfig` naming the field (`redis.url`, `redis.nodes[1]`,
 * `redis.name`, ...). Connecting has a deadline (`connectTimeoutMs`, 10 s by
 * default); a server of another kind than the options name (a cluster node
 * given as a `url`, `nodes` that are one server) is a `TopologyMismatch`.
 *
 * @example
 * const runtime = await start({
 *   redis: { url: process.env.REDIS_URL ?? "redis://127.0.0.1:6379" },
 *   listeners: [new Billing()],
 * })
 */
import type { ConnectionOptions as TlsOptions } from "node:tls"
import { Keys, type RedisConnection, RedisPorts } from "@shardline/redis-store"
import { Effect, Layer, Result, Schema } from "effect"
import type { ClusterOptions, RedisOptions as IoRedisOptions } from "ioredis"
import { decodeOptions } from "./Config.js"
import type { InvalidRuntimeConfig } from "./Errors.js"
import type { Ports } from "./Ports.js"

/** A Redis node's address (`nodes`, `sentinels`), as an alternative to `"host:port"`. */
export interface RedisNode {
  readonly host: string
  readonly port: number
}

/** Where the runtime's Redis is, and how to reach it. Exactly one of `url`, `nodes` and `sentinels`. */
export interface RedisOptions {
  /** One server: `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS. */
  readonly url?: string
  /** Redis Cluster: startup nodes (`"host:port"` or `{ host, port }`); slots are discovered from them. */
  readonly nodes?: ReadonlyArray<string | RedisNode>
  /**
   * Redis Sentinel: the sentinels (`"host:port"` or `{ host, port }`) that
   * name the primary of `name`. Every connection asks them where the primary
   * is when it connects, so after a failover the runtime reconnects to the
   * promoted replica (docs/redis.md, "Sentinel"). With `name`.
   */
  readonly sentinels?: ReadonlyArray<string | RedisNode>
  /** The primary's name in the sentinels' configuration (`sentinel monitor <name> ...`); with `sentinels`. */
  readonly name?: string
  /** ACL user of the sentinels themselves (`username` / `password` are the primary's); with `sentinels`. */
  readonly sentinelUsername?: string
  readonly sentinelPassword?: string
  /** TLS to the sentinels (node:tls options; `tls` is the primary's); with `sentinels`. */
  readonly sentinelTls?: TlsOptions
  /** ACL user (docs/redis.md lists the commands and keys the ports need). */
  readonly username?: string
  readonly password?: string
  /** TLS options (node:tls); `{}` enables TLS with the system CAs (the `rediss://` URL does too). */
  readonly tls?: TlsOptions
  /**
   * How long connecting may take before `start` fails (default 10,000 ms):
   * TCP and TLS, AUTH, the ready check, the feature probe. A server that
   * accepts connections and never answers is a `BackendUnavailable` naming
   * its address and the command that got no answer. Not ioredis'
   * `connectTimeout` (the TCP connect alone).
   */
  readonly connectTimeoutMs?: number
  /**
   * How long any one command may wait for its reply (default 5,000 ms;
   * docs/redis.md, "Command deadline"): a hung or cut-off node fails the
   * command with `BackendUnavailable` instead of leaving it pending. A
   * blocking command (XREAD BLOCK, BLMPOP, WAIT) gets its own wait plus
   * this.
   *
   * ```ts
   * redis: { nodes: ["10.0.0.1:7000"], commandTimeoutMs: 2_000 }
   * ```
   */
  readonly commandTimeoutMs?: number
  /** Further ioredis options (timeouts, retry strategy, ...), applied last to every connection. */
  readonly ioredis?: IoRedisOptions
  /** Cluster client options (with `nodes`). */
  readonly cluster?: Omit<ClusterOptions, "redisOptions" | "scripts">
  /**
   * Port options passed to `RedisPorts.layer` (packages/redis-store/src/RedisPorts.ts):
   * the store, the heartbeat transport and the shard streams (`{ read: "script" }` to keep every read in a Lua script; docs/redis.md, "The gated fence").
   */
  readonly ports?: Pick<RedisPorts.RedisPortsOptions, "store" | "transport" | "shardStreams">
  /** Override the probed server features, e.g. `{ xackdel: false }` to force the Lua fallback. */
  readonly features?: RedisPorts.RedisPortsOptions["features"]
  /**
   * The namespace of every Shardline key and channel (default `shardline:`;
   * docs/redis.md, "Keys"): runtimes with different prefixes share one Redis
   * without seeing each other, each with an ACL user of its own
   * (`Acl.aclRules({ prefix })`). Not ioredis' `keyPrefix` option, which is
   * refused (`InvalidKeyPrefix`).
   */
  readonly keyPrefix?: string
  /**
   * Kafka's `acks=all` (docs/redis.md, "Durability"): a send, a
   * transactional commit and a group metadata commit are confirmed only once
   * `replicas` replicas have them (WAIT; `fsync: true`: WAITAOF, in their
   * AOF), within `timeoutMs`; otherwise they fail with `NotReplicated` (the
   * write may still exist: retry an idempotent send).
   *
   * @example
   * redis: { url: "redis://primary:6379", durability: { replicas: 1, timeoutMs: 500 } }
   */
  readonly durability?: RedisConnection.Durability
  /**
   * Start on a server (in a cluster: any master) whose `maxmemory-policy`
   * is not `noeviction` (default false: `start` fails with
   * `EvictionPolicyRefused`, naming the setting). Such a server deletes
   * keys under memory pressure, Shardline's streams, consumer groups and
   * owner tokens included, so accepted messages can vanish; with `true` the
   * runtime starts and logs a warning (docs/redis.md, "Eviction").
   */
  readonly allowEviction?: boolean
}

const URL_PROTOCOLS = new Set(["redis:", "rediss:"])

const RedisUrl = Schema.String.check(
  Schema.makeFilter((u: string) => {
    if (!u.includes("://"))
      return `must be a redis:// or rediss:// URL (redis://host:6379), got ${JSON.stringify(u)}`
    let parsed: URL
    try {
      parsed = new URL(u)
    } catch {
      return `must be a redis:// or rediss:// URL, got ${JSON.stringify(u)}`
    }
    if (!URL_PROTOCOLS.has(parsed.protocol))
      return `must be a redis:// or rediss:// URL, got protocol ${parsed.protocol}`
    if (parsed.hostname === "") return `must name a host, got ${JSON.stringify(u)}`
    if (parsed.port !== "" && !(Number(parsed.port) >= 1 && Number(parsed.port) <= 65_535))
      return `has a bad port ${parsed.port}`
    const db = parsed.pathname.replace(/^\//, "")
    if (db !== "" && !/^\d+$/.test(db)) return `database must be a number, got ${db}`
    return undefined
  }),
)

/** `host:port` with a port in 1..65535. */
const parseNode = (s: string): RedisNode | undefined => {
  const m = /^\[?([^\s[\]]+?)\]?:(\d{1,5})$/.exec(s)
  if (m === null) return undefined
  const port = Number(m[2])
  return port >= 1 && port <= 65_535 ? { host: m[1]!, port } : undefined
}

const NodeString = Schema.String.check(
  Schema.makeFilter((s: string) =>
    parseNode(s) === undefined ? `must be "host:port", got ${JSON.stringify(s)}` : undefined,
  ),
)
const NodeStruct = Schema.Struct({
  host: Schema.String.check(Schema.isNonEmpty({ message: "must be a non-empty string" })),
  port: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65_535 })),
})

const Opaque = Schema.Record(Schema.String, Schema.Unknown)

/** The Effect Schema that validates `RedisOptions` before anything connects (a bad field is an `InvalidRuntimeConfig` naming it). */
export const RedisOptionsSchema = Schema.Struct({
  url: Schema.optional(RedisUrl),
  nodes: Schema.optional(
    Schema.Array(Schema.Union([NodeString, NodeStruct])).check(
      Schema.makeFilter((a: ReadonlyArray<unknown>) =>
        a.length === 0 ? "must list at least one cluster node" : undefined,
      ),
    ),
  ),
  sentinels: Schema.optional(
    Schema.Array(Schema.Union([NodeString, NodeStruct])).check(
      Schema.makeFilter((a: ReadonlyArray<unknown>) =>
        a.length === 0 ? "must list at least one sentinel" : undefined,
      ),
    ),
  ),
  name: Schema.optional(
    Schema.String.check(Schema.isNonEmpty({ message: "must be a non-empty string" })),
  ),
  sentinelUsername: Schema.optional(Schema.String),
  sentinelPassword: Schema.optional(Schema.String),
  sentinelTls: Schema.optional(Opaque),
  username: Schema.optional(Schema.String),
  password: Schema.optional(Schema.String),
  tls: Schema.optional(Opaque),
  connectTimeoutMs: Schema.optional(
    Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3_600_000 })),
  ),
  commandTimeoutMs: Schema.optional(
    Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3_600_000 })),
  ),
  ioredis: Schema.optional(Opaque),
  cluster: Schema.optional(Opaque),
  ports: Schema.optional(
    Schema.Struct({
      store: Schema.optional(Opaque),
      transport: Schema.optional(Opaque),
      shardStreams: Schema.optional(Opaque),
    }),
  ),
  features: Schema.optional(Opaque),
  keyPrefix: Schema.optional(
    Schema.String.check(Schema.makeFilter((p: string) => Keys.prefixProblem(p))),
  ),
  durability: Schema.optional(
    Schema.Struct({
      replicas: Schema.Int.check(
        Schema.isGreaterThanOrEqualTo(1, {
          message: "must be a whole number of replicas, at least 1",
        }),
      ),
      timeoutMs: Schema.Int.check(
        Schema.isGreaterThanOrEqualTo(1, {
          message: "must be a whole number of ms, at least 1 (WAIT 0 would wait for ever)",
        }),
      ),
      fsync: Schema.optional(Schema.Boolean),
    }),
  ),
  allowEviction: Schema.optional(Schema.Boolean),
}).check(
  Schema.makeFilter((o) => {
    if (o.ioredis?.keyPrefix !== undefined)
      return {
        path: ["ioredis", "keyPrefix"],
        issue:
          "ioredis' keyPrefix is not supported (it leaves channels and SCAN patterns unprefixed): give redis.keyPrefix instead",
      }
    for (const field of ["sentinels", "name"] as const)
      if (o.ioredis?.[field] !== undefined)
        return {
          path: ["ioredis", field],
          issue: `give Sentinel's options as redis.sentinels and redis.name (typed, checked, and named in errors), not through ioredis`,
        }
    const given = (["url", "nodes", "sentinels"] as const).filter((f) => o[f] !== undefined)
    if (given.length > 1)
      return {
        path: [given[1]!],
        issue: `give one of url (one server), nodes (a cluster) and sentinels (Redis Sentinel), not ${given.join(" and ")}`,
      }
    if (given.length === 0)
      return {
        path: ["url"],
        issue: "give url (one server), nodes (a cluster) or sentinels and name (Redis Sentinel)",
      }
    if (o.sentinels !== undefined && o.name === undefined)
      return {
        path: ["name"],
        issue:
          "give the primary's name as the sentinels know it (sentinel monitor <name> ...) with sentinels",
      }
    for (const field of ["name", "sentinelUsername", "sentinelPassword", "sentinelTls"] as const)
      if (o.sentinels === undefined && o[field] !== undefined)
        return { path: [field], issue: "goes with sentinels (Redis Sentinel) only" }
    return undefined
  }),
)

/**
 * Validate Redis options (`prefix` names them in errors, `redis` by default)
 * and turn them into `RedisPorts.layer` options.
 */
export const decodeRedisOptions = (
  input: unknown,
  prefix = "redis",
): Result.Result<RedisPorts.RedisPortsOptions, InvalidRuntimeConfig> => {
  const decoded = decodeOptions(RedisOptionsSchema, input, prefix)
  if (Result.isFailure(decoded)) return Result.fail(decoded.failure)
  // the schema checked the shapes; the values pass through as given
  const o = input as RedisOptions
  const common = {
    ...(o.username === undefined ? {} : { username: o.username }),
    ...(o.password === undefined ? {} : { password: o.password }),
    ...(o.tls === undefined ? {} : { tls: o.tls }),
    ...(o.ioredis === undefined ? {} : { redis: o.ioredis }),
    ...(o.features === undefined ? {} : { features: o.features }),
    ...(o.keyPrefix === undefined ? {} : { keyPrefix: o.keyPrefix }),
    ...(o.durability === undefined ? {} : { durability: o.durability }),
    ...(o.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: o.connectTimeoutMs }),
    ...(o.commandTimeoutMs === undefined ? {} : { commandTimeoutMs: o.commandTimeoutMs }),
    ...(o.allowEviction === undefined ? {} : { allowEviction: o.allowEviction }),
    ...(o.ports ?? {}),
  }
  if (o.sentinels !== undefined)
    return Result.succeed({
      ...common,
      sentinel: {
        sentinels: o.sentinels.map((n) => (typeof n === "string" ? parseNode(n)! : n)),
        name: o.name!,
        ...(o.sentinelUsername === undefined ? {} : { username: o.sentinelUsername }),
        ...(o.sentinelPassword === undefined ? {} : { password: o.sentinelPassword }),
        ...(o.sentinelTls === undefined ? {} : { tls: o.sentinelTls }),
      },
    })
  if (o.nodes !== undefined)
    return Result.succeed({
      ...common,
      cluster: {
        nodes: o.nodes.map((n) => (typeof n === "string" ? parseNode(n)! : n)),
        ...(o.cluster === undefined ? {} : { options: o.cluster }),
      },
    })
  return Result.succeed({ ...common, url: o.url! })
}

/**
 * Ports on Redis: every runtime given them (or given the same `redis`
 * options) shares the server's streams, groups and coordinators. The layer
 * validates the options first (`InvalidRuntimeConfig`), then connects:
 * `BackendUnavailable` at once when the server cannot be reached (its
 * message names the cause: ECONNREFUSED, ENOTFOUND, WRONGPASS, ...),
 * `InvalidDatabase` for a database the server does not have,
 * `TopologyMismatch` for a server of another kind than the options name (a
 * cluster node given as `url`, `nodes` that are one server, a `url` naming a
 * sentinel), a `BackendUnavailable` naming the address and the command that
 * got no answer when connecting takes longer than `connectTimeoutMs`,
 * `PermissionDenied` when the ACL user may not run the connection's own
 * commands, `InvalidKeyPrefix` for ioredis' own `keyPrefix` option,
 * `KeySchemaMismatch` when the namespace records another key schema,
 * `EvictionPolicyRefused` when the server evicts keys and `allowEviction`
 * is not set (docs/redis.md, "Eviction"); its connections close with it.
 */
export const redisPorts = (
  options: RedisOptions,
): Ports & {
  readonly layer: Layer.Layer<
    RedisPorts.RedisPorts,
    InvalidRuntimeConfig | RedisConnection.ConnectError
  >
} => ({
  layer: Layer.unwrap(
    Effect.suspend(() => {
      const decoded = decodeRedisOptions(options)
      return Result.isFailure(decoded)
        ? Effect.fail(decoded.failure)
        : Effect.succeed(RedisPorts.layer(decoded.success))
    }),
  ),
})
