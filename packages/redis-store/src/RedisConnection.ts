/**
 * One Redis deployment as the ports see it: a command connection that never
 * blocks, dedicated connections for blocking commands (XREAD BLOCK, BLPOP,
 * BLMPOP; pooled, one command at a time each), one subscriber connection for
 * notices, and the server's features probed once.
 *
 * Options are passed through to ioredis: `new Redis(url, options)`,
 * `new Redis(options)` or `new Redis.Cluster(nodes, { redisOptions })`.
 * docs/redis.md lists every command and key the ports use, for an ACL user.
 */
import type { ConnectionOptions as TlsOptions } from "node:tls"
import { BackendUnavailable } from "@shardline/core"
import { Context, Effect, Exit, Layer, type Scope } from "effect"
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis"
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
  /** Any further ioredis options (timeouts, retry strategy, ...), applied last. */
  readonly redis?: RedisOptions
  /** Override the probed features, e.g. to force the Lua fallbacks on Redis 8. */
  readonly features?: Partial<ServerFeatures>
  /**
   * Idle dedicated connections kept for blocking commands (default 128): at
   * least the number of shards that wait at once, or connections churn.
   */
  readonly maxIdleBlocking?: number
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
  /**
   * Runs one blocking command on a dedicated connection. On interruption the
   * connection is closed (Redis would still be blocking on it), otherwise it
   * goes back to a small pool.
   */
  readonly blocking: <A>(
    operation: string,
    run: (connection: Client) => Promise<A>,
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

/** Creates the ioredis client the options describe (scripts registered). */
export const makeClient = (options: RedisConnectionOptions): Client => {
  const common: RedisOptions = {
    ...(options.username === undefined ? {} : { username: options.username }),
    ...(options.password === undefined ? {} : { password: options.password }),
    ...(options.tls === undefined ? {} : { tls: options.tls }),
    ...(options.db === undefined ? {} : { db: options.db }),
    ...options.redis,
  }
  if (options.cluster !== undefined)
    return new Cluster(nodeList(options.cluster.nodes), {
      ...options.cluster.options,
      redisOptions: common,
      scripts: ioredisScripts,
    })
  const withScripts: RedisOptions = { ...common, scripts: ioredisScripts }
  if (options.url !== undefined) return new Redis(options.url, withScripts)
  return new Redis({
    ...(options.host === undefined ? {} : { host: options.host }),
    ...(options.port === undefined ? {} : { port: options.port }),
    ...withScripts,
  })
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
  options: { readonly maxIdleBlocking?: number } = {},
): Effect.Effect<RedisConnectionShape, never, Scope.Scope> =>
  Effect.gen(function* () {
    const maxIdle = options.maxIdleBlocking ?? 128
    const idle: Array<Client> = []
    const busy = new Set<Client>()
    let sub: Client | undefined
    let closed = false

    yield* Effect.addFinalizer(() =>
      Effect.promise(() => {
        closed = true
        const all = [...idle, ...busy, ...(sub === undefined ? [] : [sub])]
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
      const c =
        client instanceof Cluster
          ? client.duplicate()
          : client.duplicate({
              enableAutoPipelining: false,
              autoResendUnfulfilledCommands: false,
              retryStrategy: () => null,
            })
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

    const blocking = <A>(operation: string, run: (connection: Client) => Promise<A>) =>
      Effect.suspend(() => {
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

    const command = <A>(operation: string, run: (c: Client) => Promise<A>) =>
      Effect.tryPromise({ try: () => run(client), catch: (cause) => unavailable(operation, cause) })

    return {
      client,
      isCluster: client instanceof Cluster,
      features,
      blocking,
      lease,
      subscriber: () => {
        if (sub === undefined) {
          sub =
            client instanceof Cluster
              ? client.duplicate([], { shardedSubscribers: true })
              : client.duplicate()
          sub.on("error", () => {})
        }
        return sub
      },
      command,
    }
  })

/** Connects, probes the server and closes everything when the scope closes. */
export const make = (
  options: RedisConnectionOptions,
): Effect.Effect<RedisConnectionShape, BackendUnavailable, Scope.Scope> =>
  Effect.gen(function* () {
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const c = makeClient(options)
        c.on("error", () => {})
        return c
      }),
      (c) => Effect.promise(() => quit(c)),
    )
    const probed = yield* Effect.tryPromise({
      try: () => probe(client),
      catch: (cause) => unavailable("probe (INFO server, COMMAND DOCS)", cause),
    })
    const features: ServerFeatures = { ...probed, ...options.features }
    return yield* fromClient(
      client,
      features,
      options.maxIdleBlocking === undefined ? {} : { maxIdleBlocking: options.maxIdleBlocking },
    )
  })

export const layer = (
  options: RedisConnectionOptions,
): Layer.Layer<RedisConnection, BackendUnavailable> => Layer.effect(RedisConnection, make(options))
