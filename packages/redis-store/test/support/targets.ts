/**
 * The implementations every contract suite runs against, unchanged: core's
 * memory ports (through thin wrappers until core takes per-group tokens and
 * GroupKey), and the Redis ports on Redis 7.0, Redis 8.x, Valkey 8 and a
 * 3-node Redis 7.0 cluster.
 */
import { randomUUID } from "node:crypto"
import type { ShardStreams } from "@shardline/core"
import { Effect, Exit, Scope } from "effect"
import { afterAll, beforeAll, describe, inject, it } from "vitest"
import * as RedisConnection from "../../src/RedisConnection.js"
import * as RedisShardStreams from "../../src/RedisShardStreams.js"

export interface RedisTarget {
  readonly kind: "redis7" | "redis8" | "valkey8" | "cluster7"
  readonly name: string
  readonly options?: RedisConnection.RedisConnectionOptions
  /** Why the server is not there (one line): the suite is one failing test. */
  readonly error?: string
}

/** The real servers started by test/globalSetup.ts. */
export const redisTargets = (): ReadonlyArray<RedisTarget> => {
  const single = (name: string, key: "redis7" | "redis8" | "valkey8"): RedisTarget => {
    const info = inject(key)
    return info.ok
      ? {
          kind: key,
          name: `${name} ${info.version}`,
          options: { host: info.host, port: info.port },
        }
      : { kind: key, name: `${name} ${key.slice(-1)}`, error: info.error }
  }
  const cluster = inject("cluster7")
  return [
    single("redis", "redis7"),
    single("redis", "redis8"),
    single("valkey", "valkey8"),
    cluster.ok
      ? {
          kind: "cluster7",
          name: `cluster of ${cluster.nodes.length} (redis ${cluster.version})`,
          options: { cluster: { nodes: cluster.nodes } },
        }
      : { kind: "cluster7", name: "cluster", error: cluster.error },
  ]
}

/** A unique name, so tests sharing a server never share keys. */
export const unique = (prefix: string): string => `${prefix}-${randomUUID().slice(0, 8)}`

/**
 * A describe block whose subject is acquired once (in its own scope) and
 * released after the block; a target with an error is one failing test.
 */
export const describeTarget = <S>(
  title: string,
  target: { readonly name: string; readonly error?: string },
  acquire: Effect.Effect<S, unknown, Scope.Scope>,
  body: (subject: () => S) => void,
) =>
  describe(`${title} on ${target.name}`, () => {
    if (target.error !== undefined) {
      const error = target.error
      it("server available", () => {
        throw new Error(error)
      })
      return
    }
    let subject: S | undefined
    const scope = Scope.makeUnsafe()
    beforeAll(async () => {
      subject = await Effect.runPromise(Scope.provide(acquire, scope))
    })
    afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
    body(() => {
      if (subject === undefined) throw new Error("subject not acquired")
      return subject
    })
  })

/** A Redis connection for a target, closed with the scope. */
export const connect = (target: RedisTarget) => RedisConnection.make(target.options ?? {})

/**
 * A connection of its own ACL user (every command, every key), and a way to
 * drop every connection of that user: a test that kills "its" connections
 * must not kill the connections of the tests running beside it on the same
 * server (CLIENT KILL has no filter by connection name). Single nodes only.
 */
export const connectAsOwnUser = (target: RedisTarget) =>
  Effect.gen(function* () {
    const user = unique("own-user")
    const admin = yield* connect(target)
    const raw = admin.client as import("ioredis").Redis
    yield* Effect.promise(() =>
      raw.call("ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all"),
    )
    const connection = yield* RedisConnection.make({ ...target.options, username: user })
    /** Closes every connection of the user (the dedicated ones too); how many it closed. */
    const killAll = Effect.promise(() => raw.client("KILL", "USER", user).then(Number))
    return { connection, killAll }
  })

/** A `ShardStreams` with the given read fence over a connection of its own ACL user (`connectAsOwnUser`). */
export const ownUserStreams = (
  target: RedisTarget,
  read: "gated" | "optimistic",
): Effect.Effect<
  {
    readonly connection: RedisConnection.RedisConnectionShape
    readonly killAll: Effect.Effect<number>
    readonly streams: ShardStreams.ShardStreamsShape
  },
  unknown,
  Scope.Scope
> =>
  Effect.map(connectAsOwnUser(target), ({ connection, killAll }) => ({
    connection,
    killAll,
    streams: RedisShardStreams.makeWith(connection, { read }),
  }))
