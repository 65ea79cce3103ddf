/**
 * One Redis deployment as the ports see it: a command connection that never
 * blocks, dedicated connections for blocking commands (XREAD BLOCK, BLPOP,
 * BLMPOP; pooled, one command at a time each), one subscriber connection for
 * notices, and the server's features probed once.
 *
 * Options are passed through to ioredis: `new Redis(url, options)`,
 * `new Redis(options)` or `new Redis.Cluster(nodes, { redisOptions })`.
 * `keyPrefix` is the namespace every key and channel lives in
 * (src/keys.ts); ioredis' own `keyPrefix` option is refused.
 * docs/redis.md lists every command and key the ports use, for an ACL user.
 */
import net from "node:net"
import type { ConnectionOptions as TlsOptions } from "node:tls"
import { BackendUnavailable, InvalidArgument, NotReplicated } from "@shardline/core"
import calculateSlot from "cluster-key-slot"
import { Context, Duration, Effect, Exit, Layer, type Scope } from "effect"
import { Cluster, type ClusterOptions, Command, Redis, type RedisOptions } from "ioredis"
import {
  EvictionPolicyRefused,
  InvalidDatabase,
  InvalidKeyPrefix,
  type KeySchemaMismatch,
  PermissionDenied,
  TopologyMismatch,
} from "./Errors.js"
import { REDIRECTION } from "./internal/gatedRead.js"
import * as KeySchema from "./KeySchema.js"
import * as Keys from "./keys.js"
import { ioredisScripts } from "./scripts.js"

export interface RedisConnectionOptions {
  /** `redis://[user:password@]host:port[/db]` or `rediss://...` (TLS). */
  readonly url?: string
  readonly host?: string
  readonly port?: number
  /** ACL user (Redis 6+); see docs/redis.md for the least-privilege rules. */
  readonly username?: string
  readonly password?: string
  readonly db?: number
  /** TLS options (node:tls); `{}` enables TLS with the system CAs. */
  readonly tls?: TlsOptions
  /** Redis Cluster: startup nodes; the slots are discovered from them. */
  readonly cluster?: {
    readonly nodes: ReadonlyArray<string | { readonly host: string; readonly port: number }>
    readonly options?: Omit<ClusterOptions, "redisOptions" | "scripts">
  }
  /**
   * Redis Sentinel: the sentinels to ask where the primary of `name` is
   * (`"host:port"` or `{ host, port }`). Every connection asks them when it
   * connects, so after a failover a reconnect reaches the promoted replica.
   * `username` / `password` / `tls` above are the primary's; the sentinels'
   * own are here. Not with `cluster` or `url`.
   */
  readonly sentinel?: SentinelOptions
  /**
   * How long `make` may take to have a client ready and probed (TCP and TLS,
   * AUTH, ioredis' ready check, SELECT, the feature probe, the key schema's
   * record), default 10,000 ms: a server that accepts connections and never
   * answers fails `BackendUnavailable` naming the address and the command
   * that got no answer, instead of leaving `make` (and a runtime's `start`)
   * pending. Not ioredis' `connectTimeout`, which bounds the TCP connect only.
   */
  readonly connectTimeoutMs?: number
  /**
   * How long any one command may wait for its reply, default 5,000 ms
   * (docs/redis.md, "Command deadline"; docs/protocol.md rule 27): a master
   * that hangs (SIGSTOP, a full disk, a network that drops packets without a
   * reset) fails the command with `BackendUnavailable` ("no reply ... within")
   * instead of leaving it pending for ever. ioredis alone has no deadline.
   * A command that waits by its own arguments (XREAD BLOCK, BLMPOP, WAIT)
   * gets that wait plus this deadline; one told to wait for ever (BLOCK 0)
   * keeps no deadline. Retries, redirections and a reconnect's queueing all
   * count toward it.
   */
  readonly commandTimeoutMs?: number
  /**
   * The namespace of every key and channel (default `shardline:`): two
   * applications or tenants with different prefixes share one Redis, each
   * with an ACL user of its own (`Acl.aclRules({ prefix })`). 1 to 64 of
   * `A-Z a-z 0-9 _ . : / @ -`; no prefix may begin another tenant's.
   */
  readonly keyPrefix?: string
  /**
   * Any further ioredis options (timeouts, retry strategy, ...), applied
   * last. Not ioredis' `keyPrefix` (`InvalidKeyPrefix`): use `keyPrefix` above.
   */
  readonly redis?: RedisOptions
  /** Override the probed features, e.g. to force the Lua fallbacks on Redis 8. */
  readonly features?: Partial<ServerFeatures>
  /**
   * Idle dedicated connections kept for blocking commands (default 128): at
   * least the number of shards that wait at once, or connections churn.
   */
  readonly maxIdleBlocking?: number
  /**
   * Kafka's `acks=all` (docs/redis.md, "Durability"): every send, every
   * transactional commit and every metadata commit is confirmed only once
   * `replicas` replicas have it (WAIT; with `fsync`, WAITAOF: in their AOF,
   * Redis >= 7.2 / Valkey), within `timeoutMs`; otherwise it fails with
   * `NotReplicated`, and the write may still exist. Default: none (a write
   * is confirmed once the master ran it).
   */
  readonly durability?: Durability
  /**
   * Run on a server (in a cluster: any master) whose `maxmemory-policy` is
   * not `noeviction` (default false: refused with `EvictionPolicyRefused`).
   * Such a server deletes keys under memory pressure, Shardline's shard
   * streams, consumer groups and owner tokens included, and nothing tells
   * anyone (docs/redis.md, "Eviction"). With `true` the connection is made
   * and a warning logged (`Effect.logWarning`).
   */
  readonly allowEviction?: boolean
  /**
   * Ask each cluster master for `cluster-require-full-coverage` at connect
   * and warn when it is `yes` (default true). A connection that only reads
   * (the dashboard, under a read-only ACL user that may not run CONFIG)
   * turns it off, so the server's ACL log records no refusal.
   */
  readonly checkClusterSettings?: boolean
}

export interface Durability {
  /** Replicas that must have each write before it is confirmed (at least 1). */
  readonly replicas: number
  /** How long to wait for them (ms, at least 1). */
  readonly timeoutMs: number
  /** Wait for the replicas' AOF fsync (WAITAOF) rather than their memory (WAIT). */
  readonly fsync?: boolean
}

/** Where the sentinels of a Redis Sentinel deployment are, and the primary's name. */
export interface SentinelOptions {
  readonly sentinels: ReadonlyArray<string | { readonly host: string; readonly port: number }>
  /** The primary's name in the sentinels' configuration (`sentinel monitor <name> ...`). */
  readonly name: string
  /** ACL user of the sentinels (their `requirepass` / ACL, not the primary's). */
  readonly username?: string
  readonly password?: string
  /** TLS to the sentinels (node:tls options); `tls` of the connection is the primary's. */
  readonly tls?: TlsOptions
}

/** The default of `connectTimeoutMs`. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000

/** The default of `commandTimeoutMs`. */
export const DEFAULT_COMMAND_TIMEOUT_MS = 5_000

/**
 * A command got no reply within its deadline (`commandTimeoutMs`, plus its
 * own wait for a blocking command). Its outcome is unknown: it may still
 * run. The ports turn it into `BackendUnavailable`.
 */
export class CommandTimedOut extends Error {
  override readonly name = "CommandTimedOut"
  constructor(
    readonly command: string,
    readonly deadlineMs: number,
  ) {
    super(
      `no reply from Redis to ${command.toUpperCase()} within ${deadlineMs} ms (commandTimeoutMs): the node may be hung, overloaded or cut off; the command may still run (docs/redis.md, "Command deadline")`,
    )
  }
}

/** How long a command may wait on the server by its own arguments (ms), 0 for ever, undefined when it does not wait. */
const ownWaitMs = (command: Command): number | undefined => {
  const name = command.name.toLowerCase()
  if (name === "wait" || name === "waitaof") {
    const last = command.args[command.args.length - 1]
    const ms = Number(Buffer.isBuffer(last) ? last.toString() : last)
    return Number.isFinite(ms) && ms > 0 ? ms : 0
  }
  if (!Command.checkFlag("BLOCKING_COMMANDS", name as "blpop")) return undefined
  const wait = command.extractBlockingTimeout()
  // null: XREAD / XREADGROUP without BLOCK, an ordinary read
  return wait === null || wait === undefined ? undefined : wait
}

const deadlines = new WeakMap<Client, number>()
const armed = new WeakSet<Command>()

/**
 * Gives every command sent through `client` a deadline of `deadlineMs`
 * (plus a blocking command's own wait): when no reply came by then it fails
 * with `CommandTimedOut`. Redirections and resends pass through here again
 * with the same command: the first deadline stands. Connections duplicated
 * from it get the same through `withDeadlines(c.duplicate(), ...)`.
 */
export const withDeadlines = <C extends Client>(client: C, deadlineMs: number): C => {
  deadlines.set(client, deadlineMs)
  const send = client.sendCommand.bind(client) as (...args: Array<unknown>) => unknown
  ;(client as { sendCommand: unknown }).sendCommand = (
    command: Command,
    ...rest: Array<unknown>
  ) => {
    if (!armed.has(command)) {
      armed.add(command)
      const wait = ownWaitMs(command)
      if (wait !== 0) {
        const ms = deadlineMs + (wait ?? 0)
        const timer = setTimeout(() => {
          if (!command.isResolved) command.reject(new CommandTimedOut(command.name, ms))
        }, ms)
        timer.unref?.()
        const clear = () => clearTimeout(timer)
        command.promise.then(clear, clear)
      }
    }
    return send(command, ...rest)
  }
  return client
}

/** A connection made from `client` (duplicate) with `client`'s deadline, if it has one. */
const sameDeadline = <C extends Client>(client: Client, made: C): C => {
  const ms = deadlines.get(client)
  return ms === undefined ? made : withDeadlines(made, ms)
}

export interface ServerFeatures {
  readonly server: "redis" | "valkey" | "unknown"
  readonly version: string
  /**
   * XACKDEL with its ACKED option exists (Redis >= 8.2): `xackdel` acks use
   * it; without it, the Lua fallback (XACK, then XDEL of what every group
   * has acknowledged).
   */
  readonly xackdel: boolean
  /** XREADGROUP takes CLAIM min-idle-time (Redis >= 8.4). */
  readonly readClaim: boolean
}

export type Client = Redis | Cluster

export interface RedisConnectionShape {
  /** The command connection: never used for a blocking command. */
  readonly client: Client
  readonly isCluster: boolean
  readonly features: ServerFeatures
  /** Every key and channel of the connection's namespace (src/keys.ts). */
  readonly keys: Keys.KeySpace
  /**
   * Runs one blocking command on a dedicated connection. On interruption the
   * connection is closed (Redis would still be blocking on it), otherwise it
   * goes back to a small pool.
   *
   * `key`: the one key the command addresses. In a cluster the command then
   * runs on a dedicated connection to the node of the key's slot (pooled per
   * node), not on a duplicated cluster client, which fetches the slot map
   * itself (CLUSTER SLOTS on a connection of its own) each time one is made;
   * a redirection (the slot moved or is migrating: MOVED, ASK, TRYAGAIN,
   * CLUSTERDOWN, which ran nothing) or a failed node connection runs it
   * again through a duplicated cluster client, which follows redirections
   * and failovers itself: for a read-only command only (XREAD BLOCK), which
   * may run twice (docs/redis.md, "The gated fence in a cluster").
   */
  readonly blocking: <A>(
    operation: string,
    run: (connection: Client) => Promise<A>,
    key?: string,
  ) => Effect.Effect<A, BackendUnavailable>
  /**
   * The shared subscriber connection (created on first use). In a cluster it
   * uses sharded pub/sub (SSUBSCRIBE, "smessage"): a channel lives on the
   * node of its hash slot, so a group's notices stay on one node, in order.
   */
  readonly subscriber: () => Client
  /**
   * A dedicated connection held by the caller until it releases it (e.g. a
   * read loop keeping a WATCH across calls); `release(true)` returns it to the
   * pool (the caller has cleared any WATCH), `release(false)` closes it.
   */
  readonly lease: () => { readonly client: Client; readonly release: (healthy: boolean) => void }
  /**
   * A dedicated connection to one node of a cluster (`node`: one of the
   * cluster client's `nodes()`, so it has the cluster's options: AUTH, TLS,
   * the NAT-mapped address), made like a single node's: it never reconnects
   * or resends. Closed on `release` and when the connection closes; never
   * pooled (the gated fence's per-node wires, internal/clusterGatedRead.ts).
   */
  readonly leaseNode: (node: Redis) => { readonly client: Redis; readonly release: () => void }
  /** `options.durability`, when given. */
  readonly durability: Durability | undefined
  /**
   * With `durability`: confirms that the writes this process already ran on
   * the node of `key` reached the replicas it asks for (WAIT / WAITAOF on the
   * connection that ran them), else fails with `NotReplicated`. Without it:
   * nothing to do.
   */
  readonly confirmReplicated: (
    operation: string,
    key: string,
  ) => Effect.Effect<void, NotReplicated | BackendUnavailable>
  /** Wraps a command-connection promise, mapping failures to BackendUnavailable. */
  readonly command: <A>(
    operation: string,
    run: (client: Client) => Promise<A>,
  ) => Effect.Effect<A, BackendUnavailable>
}

export class RedisConnection extends Context.Service<RedisConnection, RedisConnectionShape>()(
  "@shardline/redis-store/RedisConnection",
) {}

/** The connection is gone for good (a dedicated one never reconnects). */
export const isClosed = (c: Client): boolean => c.status === "end" || c.status === "close"

/**
 * A connection of its own to one cluster node (one of the cluster client's
 * `nodes()`, so with its AUTH, TLS and NAT map): no reconnect, no resend, no
 * auto-pipelining, as a single node's dedicated connection ("The gated fence
 * in a cluster" in docs/redis.md).
 */
const nodeWire = (node: Redis, deadlineOf: Client): Redis => {
  const c = sameDeadline(
    deadlineOf,
    node.duplicate({
      enableAutoPipelining: false,
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => null,
      enableOfflineQueue: true,
      readOnly: false,
    }),
  )
  // errors surface on the commands; without a listener ioredis logs them
  c.on("error", () => {})
  return c
}

export const unavailable = (operation: string, cause: unknown): BackendUnavailable =>
  new BackendUnavailable({
    operation,
    message: cause instanceof Error ? cause.message : String(cause),
    cause,
  })

const nodeList = (
  nodes: ReadonlyArray<string | { readonly host: string; readonly port: number }>,
): Array<string | { host: string; port: number }> =>
  nodes.map((n) => (typeof n === "string" ? n : { host: n.host, port: n.port }))

/** `host:port` (`[v6]:port` too) as `{ host, port }`; a string without a port is the host on 26379. */
const hostPort = (
  node: string | { readonly host: string; readonly port: number },
  defaultPort: number,
): { host: string; port: number } => {
  if (typeof node !== "string") return { host: node.host, port: node.port }
  const m = /^\[?([^\s[\]]+?)\]?:(\d{1,5})$/.exec(node)
  return m === null
    ? { host: node.replace(/^\[|\]$/g, ""), port: defaultPort }
    : { host: m[1]!, port: Number(m[2]) }
}

/** `host:port`, with brackets around an IPv6 address. */
const address = (host: string, port: number | string): string =>
  `${host.includes(":") ? `[${host}]` : host}:${port}`

/** The sentinel options of ioredis for `sentinel`: the primary's TLS only when `tls` is given. */
const sentinelClientOptions = (
  sentinel: SentinelOptions,
  tls: TlsOptions | undefined,
): RedisOptions => ({
  sentinels: sentinel.sentinels.map((n) => hostPort(n, 26_379)),
  name: sentinel.name,
  ...(sentinel.username === undefined ? {} : { sentinelUsername: sentinel.username }),
  ...(sentinel.password === undefined ? {} : { sentinelPassword: sentinel.password }),
  ...(sentinel.tls === undefined ? {} : { sentinelTLS: sentinel.tls }),
  ...(tls === undefined ? {} : { enableTLSForSentinelMode: true }),
})

/** Creates the ioredis client the options describe (scripts registered). */
export const makeClient = (options: RedisConnectionOptions): Client => {
  const common: RedisOptions = {
    ...(options.username === undefined ? {} : { username: options.username }),
    ...(options.password === undefined ? {} : { password: options.password }),
    ...(options.tls === undefined ? {} : { tls: options.tls }),
    ...(options.db === undefined ? {} : { db: options.db }),
    ...options.redis,
  }
  const deadlineMs = options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS
  if (options.cluster !== undefined)
    return withDeadlines(
      new Cluster(nodeList(options.cluster.nodes), {
        ...options.cluster.options,
        // A command whose connection closed before its reply came has an
        // unknown outcome: fail it, never send it again behind the caller's
        // back (ioredis' default re-sends it after 100 ms). A read that Redis
        // ran twice strands the first run's entries pending with the consumer
        // (docs/redis.md, "Connections"; test/lostReply.test.ts).
        retryDelayOnFailover: 0,
        redisOptions: common,
        scripts: ioredisScripts,
      }),
      deadlineMs,
    )
  // Likewise on one node: ioredis re-sends the unanswered commands after a
  // reconnect unless told not to, and then drops them unanswered; they fail
  // at the close instead (failUnansweredOnClose).
  const withScripts: RedisOptions = {
    ...common,
    scripts: ioredisScripts,
    autoResendUnfulfilledCommands: false,
  }
  const client =
    options.sentinel !== undefined
      ? new Redis({ ...sentinelClientOptions(options.sentinel, options.tls), ...withScripts })
      : options.url !== undefined
        ? new Redis(options.url, withScripts)
        : new Redis({
            ...(options.host === undefined ? {} : { host: options.host }),
            ...(options.port === undefined ? {} : { port: options.port }),
            ...withScripts,
          })
  failUnansweredOnClose(client)
  return withDeadlines(client, deadlineMs)
}

/** The error of a command whose connection closed before its reply came. */
export const UNANSWERED =
  "the connection to Redis closed before the reply came: the command may have run, and is not sent again"

/**
 * When a reconnecting connection closes, fails the commands it sent and got
 * no reply for (their outcome is unknown: the caller decides), and keeps the
 * ones queued while it was down (they never reached Redis; they go out after
 * the reconnect). ioredis 5 emits "close" on the next tick after it moved to
 * "close", before any reconnect, so its command queue then holds exactly the
 * unanswered commands; `flushQueue` is its own (private) way to fail them.
 */
const failUnansweredOnClose = (client: Redis): void => {
  const internals = client as unknown as {
    flushQueue: (error: Error, options: { offlineQueue: boolean; commandQueue: boolean }) => void
  }
  client.on("close", () =>
    internals.flushQueue(new Error(UNANSWERED), { offlineQueue: false, commandQueue: true }),
  )
}

const flatten = (value: unknown): Array<unknown> =>
  Array.isArray(value) ? value.flatMap(flatten) : [value]

/**
 * The words of one command's COMMAND DOCS entry (the reply alternates a
 * command name and its docs), or undefined when the server has no such
 * command.
 */
export const commandDocs = (docs: unknown, name: string): Array<unknown> | undefined => {
  const top = Array.isArray(docs) ? docs : []
  for (let i = 0; i + 1 < top.length; i += 2) {
    const key = Buffer.isBuffer(top[i]) ? top[i].toString() : top[i]
    if (typeof key === "string" && key.toLowerCase() === name)
      return flatten(top[i + 1]).map((w) => (Buffer.isBuffer(w) ? w.toString() : w))
  }
  return undefined
}

/**
 * Probes the server once: INFO server for the version, COMMAND DOCS for
 * XACKDEL's ACKED option and XREADGROUP's CLAIM argument (a cluster answers
 * from any node: its nodes are assumed to run one version). An XACKDEL
 * without ACKED would not do: its KEEPREF deletes entries other groups have
 * not acknowledged (docs/runtime.md, "Ack policies and other groups").
 */
export const probe = (client: Client): Promise<ServerFeatures> =>
  Promise.all([
    client.info("server"),
    client.call("COMMAND", "DOCS", "XACKDEL", "XREADGROUP"),
  ]).then(([info, docs]) => {
    const field = (name: string) => new RegExp(`^${name}:(.*)$`, "m").exec(info)?.[1]?.trim()
    const valkey = field("valkey_version")
    return {
      server: valkey !== undefined ? "valkey" : field("redis_version") ? "redis" : "unknown",
      version: valkey ?? field("redis_version") ?? "unknown",
      xackdel: commandDocs(docs, "xackdel")?.includes("ACKED") === true,
      readClaim: commandDocs(docs, "xreadgroup")?.includes("CLAIM") === true,
    }
  })

/** A master's `maxmemory-policy`, or undefined when neither INFO nor CONFIG GET says it. */
export const evictionPolicyOf = async (node: Redis): Promise<string | undefined> => {
  // INFO memory first: the least-privilege user may run INFO (the probe
  // needs it) but not CONFIG, which managed services often disable too; a
  // refused command would also land in the ACL log at every start
  const info = await node.info("memory").catch(() => "")
  const fromInfo = /^maxmemory_policy:(.*)$/m.exec(info)?.[1]?.trim()
  if (fromInfo !== undefined && fromInfo !== "") return fromInfo
  const config = await node.config("GET", "maxmemory-policy").catch(() => undefined)
  const value = Array.isArray(config) ? config[1] : undefined
  return typeof value === "string" && value !== "" ? value : undefined
}

/** Where a node is, for messages: `host:port`. */
const nodeName = (node: Redis): string => `${node.options.host}:${node.options.port}`

/**
 * Refuses a server that evicts keys (docs/redis.md, "Eviction";
 * docs/protocol.md rule 26): every master's `maxmemory-policy` must be
 * `noeviction`, or the options opt in (`allowEviction`), and then a loud
 * warning is logged. A policy nobody may read (neither INFO memory nor
 * CONFIG GET) is a warning, not a refusal.
 */
export const checkEviction = (
  client: Client,
  target: string,
  allowEviction: boolean,
): Effect.Effect<void, EvictionPolicyRefused> =>
  Effect.gen(function* () {
    const nodes: ReadonlyArray<{ readonly name: string; readonly node: Redis }> =
      client instanceof Cluster
        ? client.nodes("master").map((node) => ({ name: nodeName(node), node }))
        : [{ name: target, node: client }]
    const policies = yield* Effect.promise(() =>
      Promise.all(nodes.map(({ node }) => evictionPolicyOf(node))),
    )
    const evicting = nodes.flatMap(({ name }, i) => {
      const policy = policies[i]
      return policy !== undefined && policy !== "noeviction" ? [{ name, policy }] : []
    })
    const unknown = nodes.filter((_, i) => policies[i] === undefined).map(({ name }) => name)
    if (unknown.length > 0)
      yield* Effect.logWarning(
        `could not read maxmemory-policy on ${unknown.join(", ")} (INFO memory and CONFIG GET both refused or silent): if that server evicts keys (any policy but noeviction), it can delete Shardline's streams, consumer groups and owner tokens without a trace. Make sure it runs with maxmemory-policy noeviction (docs/redis.md, "Eviction")`,
      )
    if (evicting.length === 0) return
    const where = evicting.map((e) => `${e.name} (${e.policy})`)
    const policy = evicting[0]!.policy
    if (!allowEviction)
      return yield* new EvictionPolicyRefused({
        policy,
        nodes: where,
        message: `Redis at ${where.join(", ")} evicts keys: maxmemory-policy is ${policy}, so under memory pressure it deletes Shardline's shard streams, consumer groups and owner tokens, and accepted messages disappear without an error. Run CONFIG SET maxmemory-policy noeviction on ${evicting.length > 1 ? "each of those nodes" : "it"} (and set it in redis.conf), so that a full server refuses writes (OOM) instead of deleting data; or, knowingly, opt in with redis: { allowEviction: true } (RedisConnectionOptions.allowEviction; the CLI's --allow-eviction) (docs/redis.md, "Eviction")`,
      })
    yield* Effect.logWarning(
      `WARNING: Redis at ${where.join(", ")} evicts keys (maxmemory-policy ${policy}) and allowEviction is on: under memory pressure it may delete Shardline's shard streams, consumer groups and owner tokens, and messages that were accepted are lost. A vanished token stops its shard's reads, a vanished stream or group is reported (dataLost events); nothing brings the data back. CONFIG SET maxmemory-policy noeviction keeps it (docs/redis.md, "Eviction")`,
    )
  })

/**
 * Warns when a cluster master runs with `cluster-require-full-coverage yes`
 * (Redis' default; docs/redis.md, "Recommended settings"): once one master
 * is marked failed, every node refuses every command (CLUSTERDOWN) until a
 * replica took over, so one node's failure stalls every group on the
 * cluster, not only the shards that node holds (docs/protocol.md rule 27).
 * A setting nobody may read (CONFIG refused: ACL, a managed service) is
 * not mentioned: the warning would be noise on every start.
 */
export const checkFullCoverage = (client: Cluster): Effect.Effect<void> =>
  Effect.gen(function* () {
    const masters = client.nodes("master")
    const values = yield* Effect.promise(() =>
      Promise.all(
        masters.map((node) =>
          node.config("GET", "cluster-require-full-coverage").then(
            (reply) => (Array.isArray(reply) ? String(reply[1]) : undefined),
            () => undefined,
          ),
        ),
      ),
    )
    const full = masters.filter((_, i) => values[i] === "yes").map(nodeName)
    if (full.length === 0) return
    yield* Effect.logWarning(
      `Redis Cluster master(s) ${full.join(", ")} run with cluster-require-full-coverage yes (Redis' default): when one master fails, every node refuses every command until its replica took over, so one node's failure stalls every group, not only the shards it holds. Set cluster-require-full-coverage no on every node (CONFIG SET and redis.conf; docs/redis.md, "Recommended settings")`,
    )
  })

/** QUIT when connected (lets pending replies arrive), else or after 1 s: disconnect. */
const quit = (client: Client): Promise<void> => {
  if (client.status !== "ready") {
    client.disconnect()
    return Promise.resolve()
  }
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      client.disconnect()
      resolve()
    }, 1_000)
    client.quit().then(
      () => {
        clearTimeout(timer)
        resolve()
      },
      () => {
        clearTimeout(timer)
        client.disconnect()
        resolve()
      },
    )
  })
}

/**
 * Wraps an existing client (for instance ioredis-mock); the caller keeps
 * ownership of it. `features` replaces the probe.
 */
export const fromClient = (
  client: Client,
  features: ServerFeatures,
  options: {
    readonly maxIdleBlocking?: number
    readonly keyPrefix?: string
    readonly durability?: Durability
  } = {},
): Effect.Effect<RedisConnectionShape, InvalidKeyPrefix, Scope.Scope> =>
  Effect.gen(function* () {
    const keys = yield* keySpaceOf(options.keyPrefix, ioredisKeyPrefix(client))
    const maxIdle = options.maxIdleBlocking ?? 128
    const idle: Array<Client> = []
    const busy = new Set<Client>()
    let sub: Client | undefined
    let closed = false

    yield* Effect.addFinalizer(() =>
      Effect.promise(() => {
        closed = true
        const onNodes = [...idleOnNode.values()].flat()
        idleOnNode.clear()
        const all = [...idle, ...onNodes, ...busy, ...(sub === undefined ? [] : [sub])]
        idle.length = 0
        for (const c of busy) c.disconnect()
        return Promise.all(all.map(quit)).then(() => undefined)
      }),
    )

    const dedicated = (): Client => {
      // A single node's dedicated connection never reconnects and never
      // resends: a WATCH (the optimistic fence's) and a MULTI die with their
      // connection, so a queued command must fail rather than run on a new
      // connection without them. No auto-pipelining either: it would reorder
      // a burst (internal/burst.ts).
      const c = sameDeadline(
        client,
        client instanceof Cluster
          ? client.duplicate()
          : client.duplicate({
              enableAutoPipelining: false,
              autoResendUnfulfilledCommands: false,
              retryStrategy: () => null,
            }),
      )
      // errors surface on the commands; without a listener ioredis logs them
      c.on("error", () => {})
      return c
    }

    /** An idle dedicated connection that is still open (a closed one is dropped). */
    const takeIdle = (): Client | undefined => {
      for (;;) {
        const c = idle.pop()
        if (c === undefined || !isClosed(c)) return c
        c.disconnect()
      }
    }

    /** Idle dedicated connections to one node of a cluster, by `host:port` (`blocking` with a key). */
    const idleOnNode = new Map<string, Array<Client>>()
    let idleOnNodes = 0

    /**
     * A dedicated connection to the node of `key`'s slot (the cluster client's
     * own connection to it, duplicated: its AUTH, TLS, NAT-mapped address), and
     * where to pool it; undefined when the slot map names no known node.
     */
    const nodeConnection = (key: string): { client: Client; node: string } | undefined => {
      const cluster = client as Cluster
      const node = cluster.slots[calculateSlot(key)]?.[0]
      if (node === undefined) return undefined
      const pooled = idleOnNode.get(node) ?? []
      for (;;) {
        const c = pooled.pop()
        if (c === undefined) break
        idleOnNodes--
        if (!isClosed(c)) return { client: c, node }
        c.disconnect()
      }
      const owner = cluster
        .nodes("master")
        .find((n) => `${n.options.host}:${n.options.port}` === node)
      if (owner === undefined) return undefined
      return { client: nodeWire(owner, client), node }
    }

    /** `blocking` on the node of `key`'s slot; a redirection or a failed connection runs it through a cluster client. */
    const blockingOnNode = <A>(
      operation: string,
      run: (connection: Client) => Promise<A>,
      key: string,
    ): Effect.Effect<A, BackendUnavailable> =>
      Effect.suspend(() => {
        const taken = nodeConnection(key)
        if (taken === undefined) return blocking(operation, run)
        const { client: connection, node } = taken
        busy.add(connection)
        return Effect.tryPromise({
          try: (signal) => {
            signal.addEventListener("abort", () => connection.disconnect(), { once: true })
            return run(connection).then(
              (value) => ({ redirected: false as const, value }),
              (error: unknown) => {
                // an error reply of Redis' own (WRONGTYPE, ...) is the command's answer;
                // a redirection ran nothing; a connection that failed (the node is
                // down: a failover) leaves a read-only command safe to run again
                const reply = error instanceof Error && error.name === "ReplyError"
                if (reply && !REDIRECTION.test(error.message)) throw error
                if (!reply || (error as Error).message.startsWith("MOVED "))
                  (client as Cluster).refreshSlotsCache()
                return { redirected: true as const }
              },
            )
          },
          catch: (cause) => unavailable(operation, cause),
        }).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              busy.delete(connection)
              if (Exit.isSuccess(exit) && !closed && idle.length + idleOnNodes < maxIdle) {
                const pooled = idleOnNode.get(node) ?? []
                pooled.push(connection)
                idleOnNode.set(node, pooled)
                idleOnNodes++
              } else connection.disconnect()
            }),
          ),
          Effect.flatMap((done) =>
            done.redirected ? blocking(operation, run) : Effect.succeed(done.value),
          ),
        )
      })

    const blocking = <A>(
      operation: string,
      run: (connection: Client) => Promise<A>,
      key?: string,
    ): Effect.Effect<A, BackendUnavailable> =>
      Effect.suspend(() => {
        if (key !== undefined && client instanceof Cluster)
          return blockingOnNode(operation, run, key)
        const connection = takeIdle() ?? dedicated()
        busy.add(connection)
        return Effect.tryPromise({
          try: (signal) => {
            signal.addEventListener("abort", () => connection.disconnect(), { once: true })
            return run(connection)
          },
          catch: (cause) => unavailable(operation, cause),
        }).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              busy.delete(connection)
              if (Exit.isSuccess(exit) && !closed && idle.length < maxIdle) idle.push(connection)
              else connection.disconnect()
            }),
          ),
        )
      })

    const lease = () => {
      const c = takeIdle() ?? dedicated()
      busy.add(c)
      let released = false
      return {
        client: c,
        release: (healthy: boolean) => {
          if (released) return
          released = true
          busy.delete(c)
          if (healthy && !closed && idle.length < maxIdle) idle.push(c)
          else c.disconnect()
        },
      }
    }

    const leaseNode = (node: Redis) => {
      const c = nodeWire(node, client)
      if (closed) c.disconnect()
      else busy.add(c)
      return {
        client: c,
        release: () => {
          busy.delete(c)
          c.disconnect()
        },
      }
    }

    const command = <A>(operation: string, run: (c: Client) => Promise<A>) =>
      Effect.tryPromise({ try: () => run(client), catch: (cause) => unavailable(operation, cause) })

    const durability = options.durability
    /**
     * The connection that ran this process's writes on `key`'s node: one
     * node's command connection, or in a cluster the cluster client's own
     * connection to the slot's master (WAIT counts that connection's writes).
     */
    const writerOf = (key: string): Redis | undefined => {
      if (!(client instanceof Cluster)) return client
      const node = client.slots[calculateSlot(key)]?.[0]
      return client.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === node)
    }
    const confirmReplicated = (
      operation: string,
      key: string,
    ): Effect.Effect<void, NotReplicated | BackendUnavailable> =>
      durability === undefined
        ? Effect.void
        : Effect.gen(function* () {
            const writer = writerOf(key)
            if (writer === undefined)
              return yield* unavailable(
                `${operation} (WAIT)`,
                new Error(`no known master holds ${key}'s slot`),
              )
            const { replicas, timeoutMs } = durability
            const reply = yield* Effect.tryPromise({
              try: () =>
                durability.fsync === true
                  ? writer.call("WAITAOF", 0, replicas, timeoutMs)
                  : writer.call("WAIT", replicas, timeoutMs),
              catch: (cause) => unavailable(`${operation} (WAIT)`, cause),
            })
            const acknowledged = Number(Array.isArray(reply) ? reply[1] : reply)
            if (acknowledged >= replicas) return
            return yield* new NotReplicated({
              operation,
              key,
              replicas,
              acknowledged,
              timeoutMs,
              message: `${operation} on ${key}: ${acknowledged} of ${replicas} replica(s) confirmed it within ${timeoutMs} ms (${durability.fsync === true ? "WAITAOF" : "WAIT"}); it is not confirmed and may still exist (docs/redis.md, "Durability")`,
            })
          })

    return {
      client,
      isCluster: client instanceof Cluster,
      features,
      keys,
      blocking,
      lease,
      leaseNode,
      subscriber: () => {
        if (sub === undefined) {
          sub = sameDeadline(
            client,
            client instanceof Cluster
              ? client.duplicate([], { shardedSubscribers: true })
              : client.duplicate(),
          )
          sub.on("error", () => {})
        }
        return sub
      },
      command,
      durability,
      confirmReplicated,
    }
  })

/** ioredis' own `keyPrefix` option of a client ("" when unset). */
const ioredisKeyPrefix = (client: Client): string => {
  const own = client.options.keyPrefix
  const nodes = client instanceof Cluster ? client.options.redisOptions?.keyPrefix : undefined
  return String(own ?? "") || String(nodes ?? "")
}

/**
 * The namespace of `keyPrefix` (default `shardline:`), or why not: a prefix
 * `Keys.prefixProblem` refuses, or ioredis' own `keyPrefix` set on the
 * client. ioredis prefixes a command's keys and SPUBLISH / SSUBSCRIBE
 * channels but not PUBLISH / SUBSCRIBE channels nor SCAN patterns, so the
 * keys and channels it makes could not be named by one ACL pattern each;
 * Shardline's prefix names every key and channel itself.
 */
const keySpaceOf = (
  keyPrefix: string | undefined,
  ioredisPrefix: string,
): Effect.Effect<Keys.KeySpace, InvalidKeyPrefix> => {
  if (ioredisPrefix !== "")
    return Effect.fail(
      new InvalidKeyPrefix({
        prefix: ioredisPrefix,
        message: `ioredis' keyPrefix option (${JSON.stringify(ioredisPrefix)}) is not supported: it prefixes keys but not every channel nor SCAN patterns, so no ACL pattern could name what it makes. Give Shardline's own keyPrefix instead (${keyPrefix === undefined ? `keyPrefix: ${JSON.stringify(ioredisPrefix)}` : "it is already given"}; runtime: redis: { keyPrefix }, CLI: --prefix), and drop ioredis' (docs/redis.md, "Keys")`,
      }),
    )
  const prefix = keyPrefix ?? Keys.DEFAULT_PREFIX
  const problem = Keys.prefixProblem(prefix)
  return problem === undefined
    ? Effect.succeed(Keys.make(prefix))
    : Effect.fail(new InvalidKeyPrefix({ prefix, message: problem }))
}

/** Where the options point, for messages: the URL without its password, the nodes, or the sentinels. */
export const describeTarget = (options: RedisConnectionOptions): string => {
  if (options.cluster !== undefined)
    return `the cluster nodes ${options.cluster.nodes
      .map((n) => (typeof n === "string" ? n : `${n.host}:${n.port}`))
      .join(", ")}`
  if (options.sentinel !== undefined)
    return `the primary ${JSON.stringify(options.sentinel.name)} of the sentinels ${options.sentinel.sentinels
      .map((n) => (typeof n === "string" ? n : address(n.host, n.port)))
      .join(", ")}`
  if (options.url !== undefined) {
    try {
      const u = new URL(options.url)
      if (u.password !== "") u.password = "***"
      return u.toString()
    } catch {
      return "the URL given"
    }
  }
  return `${options.host ?? "127.0.0.1"}:${options.port ?? 6379}`
}

/** The ACL user a client logs in as (`default` when none is named). */
export const userOf = (client: Client): string =>
  (client instanceof Cluster ? client.options.redisOptions?.username : client.options.username) ||
  "default"

/** Redis refused a command to this user (an ACL rule is missing). */
export const isNoPerm = (cause: unknown): boolean =>
  /\bNOPERM\b/.test(cause instanceof Error ? cause.message : String(cause))

/** `PermissionDenied` for a command refused outside the ACL probe (the connection's own commands). */
export const commandDenied = (
  client: Client,
  command: string,
  cause: unknown,
): PermissionDenied => {
  const user = userOf(client)
  const reason = cause instanceof Error ? cause.message : String(cause)
  return new PermissionDenied({
    user,
    missing: [{ kind: "command", command, rule: `+${command}` }],
    message: `the Redis user ${JSON.stringify(user)} may not run ${command.toUpperCase().replace("|", " ")} (${reason}), which Shardline needs: ACL SETUSER ${user} +${command} (docs/redis.md, "ACL", lists every rule)`,
  })
}

/** How a TCP connection to each node ends, for a cluster that could not be reached. */
const nodeReachability = (
  nodes: ReadonlyArray<string | { readonly host: string; readonly port: number }>,
): Promise<string> =>
  Promise.all(
    nodes.map((n) => {
      const node = typeof n === "string" ? n : `${n.host}:${n.port}`
      const at = node.lastIndexOf(":")
      const host = node.slice(0, at).replace(/^\[|\]$/g, "")
      const port = Number(node.slice(at + 1))
      return new Promise<string>((resolve) => {
        const socket = net.connect({ host, port })
        socket.setTimeout(2_000)
        const done = (result: string) => {
          socket.destroy()
          resolve(`${node}: ${result}`)
        }
        socket.once("connect", () => done("accepts TCP connections"))
        socket.once("timeout", () => done("no answer within 2 s (ETIMEDOUT)"))
        socket.once("error", (e: NodeJS.ErrnoException) => done(e.message))
      })
    }),
  ).then((lines) => lines.join("; "))

/**
 * Resolves once the client is ready; rejects when its first connection
 * attempt ends without becoming ready (refused, unknown host, timeout, TLS,
 * wrong password), with the error it met, instead of letting commands wait
 * through ioredis' reconnection attempts (20 by default, about 10 s) and
 * fail with "max retries per request". A failed SELECT is not the end of
 * an attempt (ioredis goes on with database 0): `make` checks the database.
 * A server that accepts the connection and never answers leaves it pending:
 * `make`'s deadline (`connectTimeoutMs`) ends that.
 */
const connected = (client: Client): Promise<void> => {
  if (client.status === "ready") return Promise.resolve()
  if (client.status === "wait") return client.connect().then(() => undefined)
  return new Promise<void>((resolve, reject) => {
    let last: Error | undefined
    const off = () => {
      client.off("ready", onReady)
      client.off("error", onError)
      client.off("close", onClose)
      client.off("end", onClose)
    }
    const onReady = () => {
      off()
      resolve()
    }
    const onError = (error: Error) => {
      last = error
    }
    const onClose = () => {
      off()
      reject(last ?? new Error("the connection closed before it was ready"))
    }
    client.on("ready", onReady)
    client.on("error", onError)
    client.on("close", onClose)
    client.on("end", onClose)
  })
}

/** The database the options select: `db`, else the URL's path (`redis://host/3`); 0 by default. */
const databaseOf = (options: RedisConnectionOptions): number => {
  if (options.redis?.db !== undefined) return options.redis.db
  if (options.db !== undefined) return options.db
  if (options.url === undefined) return 0
  try {
    const path = new URL(options.url).pathname.replace(/^\//, "")
    return path === "" ? 0 : Number(path)
  } catch {
    return 0
  }
}

/** What kind of deployment a server is: INFO server's mode (Valkey: `server_mode`), INFO cluster's `cluster_enabled`. */
export const serverMode = (
  infoServer: string,
  infoCluster: string,
): "standalone" | "cluster" | "sentinel" => {
  const field = (info: string, name: string) =>
    new RegExp(`^${name}:(.*)$`, "m").exec(info)?.[1]?.trim()
  const mode = field(infoServer, "redis_mode") ?? field(infoServer, "server_mode")
  if (mode === "sentinel") return "sentinel"
  if (mode === "cluster" || field(infoCluster, "cluster_enabled") === "1") return "cluster"
  return "standalone"
}

/**
 * The host:port a single-node client talks to: its socket's peer once
 * connected (a sentinel client's primary), else the options' host and port.
 */
const peerOf = (client: Redis): string => {
  const stream = (client as unknown as { stream?: net.Socket }).stream
  if (stream?.remoteAddress !== undefined && stream.remotePort !== undefined)
    return address(stream.remoteAddress, stream.remotePort)
  return address(client.options.host ?? "localhost", client.options.port ?? 6379)
}

/** Commands whose first argument is a subcommand (named in messages; other arguments never are: AUTH's are secrets). */
const CONTAINERS = new Set(["client", "command", "cluster", "config", "sentinel", "info", "hello"])

/**
 * The first command a client sent and got no reply for (ioredis' own queue
 * of sent commands; undefined when it holds none or its shape changed), as
 * `CLIENT SETINFO`, `AUTH`, `INFO`.
 */
const firstUnanswered = (client: Client): string | undefined => {
  const queue = (client as unknown as { commandQueue?: { peekFront?: () => unknown } }).commandQueue
  const head =
    typeof queue?.peekFront === "function"
      ? (queue.peekFront() as { command?: { name?: unknown; args?: Array<unknown> } } | undefined)
      : undefined
  const name = head?.command?.name
  if (typeof name !== "string") return undefined
  const first = head?.command?.args?.[0]
  const sub =
    CONTAINERS.has(name.toLowerCase()) && typeof first === "string" && /^[a-z-]+$/i.test(first)
      ? ` ${first.toUpperCase()}`
      : ""
  return `${name.toUpperCase()}${sub}`
}

/**
 * What a client that is not ready yet is waiting for, at `make`'s deadline:
 * a connection never made, or the first command the server did not answer
 * (`aside`: what did happen).
 */
const notReadyYet = (
  client: Client,
  options: RedisConnectionOptions,
): { readonly what: string; readonly aside?: string; readonly hint?: string } => {
  if (client instanceof Cluster)
    return {
      what: `the cluster client did not become ready (CLUSTER SLOTS, then a connection to each primary) with ${describeTarget(options)}`,
    }
  if (client.status === "connect")
    return {
      what: `${firstUnanswered(client) ?? "the connection's first command"} to ${peerOf(client)} got no answer`,
      aside: "it accepted the TCP connection",
    }
  if (options.sentinel !== undefined)
    return {
      what: `the sentinels ${options.sentinel.sentinels
        .map((n) => (typeof n === "string" ? n : address(n.host, n.port)))
        .join(
          ", ",
        )} named no primary of ${JSON.stringify(options.sentinel.name)} that could be connected to`,
      hint: `Are the sentinels reachable, and is ${JSON.stringify(options.sentinel.name)} the name in their "sentinel monitor" line?`,
    }
  return {
    what: `no connection to ${peerOf(client)} was made (TCP${options.tls === undefined && !options.url?.startsWith("rediss:") ? "" : ", TLS"})`,
  }
}

/** A promise's outcome as a value. */
const settle = <A>(
  run: () => Promise<A>,
): Effect.Effect<
  { readonly ok: true; readonly value: A } | { readonly ok: false; readonly cause: unknown }
> =>
  Effect.promise(() =>
    run().then(
      (value) => ({ ok: true as const, value }),
      (cause: unknown) => ({ ok: false as const, cause }),
    ),
  )

const reason = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

/**
 * Connects (failing fast, naming the cause: ECONNREFUSED, ENOTFOUND, ...),
 * checks that the database exists (ioredis only logs a failed SELECT and
 * goes on with database 0), that the server is the kind of deployment the
 * options name (`TopologyMismatch`), probes the server, refuses a server
 * that evicts keys unless `allowEviction` (`EvictionPolicyRefused`), and
 * closes everything when the scope closes. All of it within
 * `connectTimeoutMs` (default 10 s): a server that never answers is
 * `BackendUnavailable` naming the address and the command that got no
 * answer.
 */
export const make = (
  options: RedisConnectionOptions,
): Effect.Effect<RedisConnectionShape, ConnectError, Scope.Scope> =>
  Effect.gen(function* () {
    const deadline = options.commandTimeoutMs
    if (deadline !== undefined && (!Number.isSafeInteger(deadline) || deadline < 1))
      return yield* new InvalidArgument({
        message: `commandTimeoutMs must be a whole number of ms, at least 1, got ${deadline} (docs/redis.md, "Command deadline")`,
      })
    // the namespace first: nothing connects with a prefix that cannot work
    const keys = yield* keySpaceOf(
      options.keyPrefix,
      String(options.redis?.keyPrefix ?? "") || String(options.cluster?.options?.keyPrefix ?? ""),
    )
    let lastError: Error | undefined
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const c = makeClient(options)
        c.on("error", (error: Error) => {
          lastError = error
        })
        return c
      }),
      (c) => Effect.promise(() => quit(c)),
    )
    const target = describeTarget(options)
    const deadlineMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS
    /** What `make` waits for now (undefined: the client to become ready), for the deadline's message. */
    let waiting: string | undefined

    const ready = Effect.gen(function* () {
      const isCluster = client instanceof Cluster
      const notConnected = yield* settle(() => connected(client))
      if (!notConnected.ok) {
        const { cause } = notConnected
        // a standalone server answers the cluster client's CLUSTER SLOTS with this
        const lastNodeError = (cause as { lastNodeError?: unknown }).lastNodeError
        if (isCluster && /cluster support disabled/i.test(reason(lastNodeError)))
          return yield* notACluster(options, reason(lastNodeError))
        const nodes =
          options.cluster === undefined
            ? ""
            : ` (${yield* Effect.promise(() => nodeReachability(options.cluster!.nodes))})`
        return yield* new BackendUnavailable({
          operation: "connect",
          message: `cannot connect to Redis at ${target}: ${reason(cause)}${nodes}. Is the server running, and are the host, port, TLS and credentials right?`,
          cause,
        })
      }
      const at = isCluster ? target : peerOf(client as Redis)
      const db = databaseOf(options)
      if (db !== 0 && !isCluster) {
        waiting = `SELECT ${db} to ${at}`
        const selected = yield* settle(() => (client as Redis).select(db))
        if (!selected.ok)
          return yield* isNoPerm(selected.cause)
            ? commandDenied(client, "select", selected.cause)
            : new InvalidDatabase({
                db,
                message: `cannot use database ${db} on ${target}: ${reason(selected.cause)}. A server has the databases 0 to (its "databases" setting - 1), 16 by default: fix the database in the URL (redis://host:port/<db>) or the db option`,
              })
      }
      // the kind of server, before anything else runs on it
      waiting = `INFO server and INFO cluster (the topology check) to ${at}`
      const infos = yield* settle(() =>
        Promise.all([client.info("server"), client.info("cluster")]),
      )
      if (!infos.ok)
        return yield* isNoPerm(infos.cause)
          ? commandDenied(client, "info", infos.cause)
          : unavailable("probe (INFO server, INFO cluster)", infos.cause)
      const found = serverMode(infos.value[0], infos.value[1])
      if (!isCluster && found === "cluster")
        return yield* aClusterNode(
          options,
          at,
          options.sentinel === undefined ? "standalone" : "sentinel",
        )
      if (!isCluster && found === "sentinel") return yield* aSentinel(at)
      if (isCluster && found !== "cluster")
        return yield* notACluster(options, `redis_mode ${found}`)
      waiting = `INFO server and COMMAND DOCS (the feature probe) to ${at}`
      const probed = yield* settle(() => probe(client))
      if (!probed.ok) {
        const { cause } = probed
        if (!isNoPerm(cause)) return yield* unavailable("probe (INFO server, COMMAND DOCS)", cause)
        return yield* commandDenied(
          client,
          /'command'|command\|docs/i.test(reason(cause)) ? "command|docs" : "info",
          cause,
        )
      }
      const features: ServerFeatures = { ...probed.value, ...options.features }
      // a server that evicts keys: refused unless the options opt in (docs/redis.md, "Eviction")
      waiting = `INFO memory (maxmemory-policy) to ${at}`
      yield* checkEviction(client, target, options.allowEviction === true)
      if (isCluster && options.checkClusterSettings !== false) {
        waiting = `CONFIG GET cluster-require-full-coverage to ${at}`
        yield* checkFullCoverage(client as Cluster)
      }
      // another key schema recorded in the namespace: refused before any port runs
      waiting = `GET ${keys.schema} (the key schema's record) to ${at}`
      yield* KeySchema.checkRecorded(client, keys)
      return features
    })

    const features = yield* ready.pipe(
      Effect.timeoutOrElse({
        duration: Duration.millis(deadlineMs),
        orElse: () => {
          const { what, aside, hint } =
            waiting === undefined
              ? notReadyYet(client, options)
              : { what: waiting, aside: undefined, hint: undefined }
          const last =
            lastError === undefined || waiting !== undefined
              ? ""
              : `last error: ${lastError.message}`
          const asides = [aside, last].filter((a) => a !== undefined && a !== "")
          return Effect.fail(
            new BackendUnavailable({
              operation: "connect",
              message: `cannot connect to Redis at ${target}: ${what} within ${deadlineMs} ms${asides.length === 0 ? "" : ` (${asides.join("; ")})`}. ${hint ?? "Is it a Redis server, reachable, and not paused or overloaded?"} (the deadline is connectTimeoutMs, a runtime's redis: { connectTimeoutMs }, the CLI's --connect-timeout)`,
              ...(lastError === undefined ? {} : { cause: lastError }),
            }),
          )
        },
      }),
    )
    if (options.durability !== undefined) yield* checkDurability(options.durability)
    return yield* fromClient(client, features, {
      keyPrefix: keys.prefix,
      ...(options.durability === undefined ? {} : { durability: options.durability }),
      ...(options.maxIdleBlocking === undefined
        ? {}
        : { maxIdleBlocking: options.maxIdleBlocking }),
    })
  })

/** `durability` as the connection takes it: whole replicas and milliseconds, at least 1. */
const checkDurability = (d: Durability): Effect.Effect<void, InvalidArgument> =>
  !Number.isSafeInteger(d.replicas) || d.replicas < 1
    ? Effect.fail(
        new InvalidArgument({
          message: `durability.replicas must be a whole number of replicas, at least 1, got ${d.replicas}`,
        }),
      )
    : !Number.isSafeInteger(d.timeoutMs) || d.timeoutMs < 1
      ? Effect.fail(
          new InvalidArgument({
            message: `durability.timeoutMs must be a whole number of ms, at least 1, got ${d.timeoutMs} (WAIT 0 would wait for ever)`,
          }),
        )
      : Effect.void

/** The options name one server and it is a cluster node. */
const aClusterNode = (
  options: RedisConnectionOptions,
  at: string,
  expected: "standalone" | "sentinel",
): TopologyMismatch =>
  new TopologyMismatch({
    expected,
    found: "cluster",
    address: at,
    message: `${at} is a Redis Cluster node (MOVED): use \`nodes\` to connect to a cluster (a runtime's redis: { nodes: ["${at}", ...] }, RedisConnection's cluster: { nodes }, the CLI's --cluster ${at},...)${options.url === undefined ? "" : ` instead of the URL`}. Through one node's connection every key of another node's hash slots is answered MOVED, so nothing would be read or written there`,
  })

/** The options name one server and it is a Sentinel. */
const aSentinel = (at: string): TopologyMismatch =>
  new TopologyMismatch({
    expected: "standalone",
    found: "sentinel",
    address: at,
    message: `${at} is a Redis Sentinel, which holds no data: give the sentinels and the primary's name instead (a runtime's redis: { sentinels: ["${at}", ...], name: "<primary>" }, RedisConnection's sentinel: { sentinels, name }, the CLI's --sentinels ${at},... --sentinel-name <primary>)`,
  })

/** The options name cluster nodes and the server is not a cluster. */
const notACluster = (options: RedisConnectionOptions, why: string): TopologyMismatch => {
  const nodes = (options.cluster?.nodes ?? []).map((n) =>
    typeof n === "string" ? n : address(n.host, n.port),
  )
  const first = nodes[0] ?? "host:port"
  return new TopologyMismatch({
    expected: "cluster",
    found: "standalone",
    address: nodes.join(", "),
    message: `${nodes.join(", ")} ${nodes.length === 1 ? "is" : "are"} not a cluster (${why}): use \`url\` for one server (a runtime's redis: { url: "redis://${first}" }, RedisConnection's url, the CLI's --redis redis://${first}) instead of \`nodes\``,
  })
}

/** Why a connection could not be made ready for the ports. */
export type ConnectError =
  | InvalidArgument
  | BackendUnavailable
  | TopologyMismatch
  | InvalidDatabase
  | PermissionDenied
  | InvalidKeyPrefix
  | KeySchemaMismatch
  | EvictionPolicyRefused

export const layer = (
  options: RedisConnectionOptions,
): Layer.Layer<RedisConnection, ConnectError> => Layer.effect(RedisConnection, make(options))
