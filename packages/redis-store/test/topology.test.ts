/**
 * Connecting to the wrong thing fails at once, typed, naming the address
 * (issue 32, item 8), and Redis Sentinel is a topology of its own (item 6):
 *
 * - a server that accepts TCP connections and never answers: `make` fails
 *   `BackendUnavailable` at its deadline (`connectTimeoutMs`) naming
 *   host:port and the command that got no answer; before, it stayed
 *   pending (the CLI's own: @shardline/tools test/cliTopology.test.ts);
 * - a single-node URL (or host/port) aimed at a node of the 3-node cluster:
 *   `TopologyMismatch` "a Redis Cluster node (MOVED): use `nodes`" (before,
 *   it connected, and every key of another node's slots was answered MOVED);
 * - cluster nodes that are one server: `TopologyMismatch` "not a cluster",
 *   not ioredis' "Failed to refresh slots cache";
 * - Sentinel (a primary, a replica, 3 sentinels: `startRedisSentinel`):
 *   `sentinel: { sentinels, name }` reaches the primary; a URL naming a
 *   sentinel is a `TopologyMismatch`; a name the sentinels do not know
 *   fails at the deadline with their answer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll, inject } from "vitest"
import * as RedisConnection from "../src/RedisConnection.js"
import { type RedisSentinel, startRedisSentinel, startSilentServer } from "../src/testing.js"
import { unique } from "./support/targets.js"

/** A server that never answers (`startSilentServer`), closed with the scope. */
const silentServer = Effect.acquireRelease(Effect.promise(startSilentServer), (silent) =>
  Effect.promise(silent.close),
)

describe("a server that accepts connections and never answers", () => {
  it.live(
    "make fails BackendUnavailable at connectTimeoutMs, naming host:port and the unanswered command",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { port } = yield* silentServer
          const error = yield* Effect.flip(
            Effect.scoped(
              RedisConnection.make({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 300 }),
            ),
          )
          assert.strictEqual(error._tag, "BackendUnavailable")
          assert.strictEqual((error as { operation?: string }).operation, "connect")
          assert.include(
            error.message,
            `cannot connect to Redis at redis://127.0.0.1:${port}: CLIENT SETINFO to 127.0.0.1:${port} got no answer within 300 ms (it accepted the TCP connection)`,
          )
          // with a password the first command is AUTH: named, its arguments never
          const withAuth = yield* Effect.flip(
            Effect.scoped(
              RedisConnection.make({
                host: "127.0.0.1",
                port,
                username: "app",
                password: "s3cret",
                connectTimeoutMs: 300,
              }),
            ),
          )
          assert.include(withAuth.message, `AUTH to 127.0.0.1:${port} got no answer within 300 ms`)
          assert.notInclude(withAuth.message, "s3cret")
        }),
      ),
  )
})

const cluster = inject("cluster7")
const redis7 = inject("redis7")

describe("a single-node URL aimed at a cluster node, cluster nodes that are one server", () => {
  it.live(
    "a cluster node's URL, or host and port: TopologyMismatch, a Redis Cluster node (MOVED): use `nodes`",
    () =>
      Effect.gen(function* () {
        if (!cluster.ok) return yield* Effect.die(new Error(cluster.error))
        const node = cluster.nodes[1]!
        const at = `${node.host}:${node.port}`
        for (const options of [
          { url: `redis://${at}` },
          { host: node.host, port: node.port },
        ] satisfies Array<RedisConnection.RedisConnectionOptions>) {
          const error = yield* Effect.flip(Effect.scoped(RedisConnection.make(options)))
          assert.strictEqual(error._tag, "TopologyMismatch")
          assert.deepInclude(error, { expected: "standalone", found: "cluster", address: at })
          assert.include(error.message, `${at} is a Redis Cluster node (MOVED): use \`nodes\``)
          assert.include(error.message, `--cluster ${at}`)
        }
      }),
  )

  it.live("cluster nodes that are one server: TopologyMismatch, not a cluster", () =>
    Effect.gen(function* () {
      if (!redis7.ok) return yield* Effect.die(new Error(redis7.error))
      const at = `${redis7.host}:${redis7.port}`
      const error = yield* Effect.flip(
        Effect.scoped(RedisConnection.make({ cluster: { nodes: [at] } })),
      )
      assert.strictEqual(error._tag, "TopologyMismatch")
      assert.deepInclude(error, { expected: "cluster", found: "standalone", address: at })
      assert.include(error.message, `${at} is not a cluster`)
      assert.include(error.message, `redis: { url: "redis://${at}" }`)
      assert.notInclude(error.message, "Failed to refresh slots cache")
    }),
  )
})

describe("Redis Sentinel: a primary, a replica and 3 sentinels", () => {
  let deployment: RedisSentinel | undefined
  beforeAll(async () => {
    deployment = await startRedisSentinel({ kind: "redis7" })
  }, 120_000)
  afterAll(async () => {
    await deployment?.stop()
  })
  const d = () => {
    if (deployment === undefined) throw new Error("the Sentinel deployment did not start")
    return deployment
  }

  it.live("sentinel: { sentinels, name } connects to the primary they name", () =>
    Effect.gen(function* () {
      const connection = yield* RedisConnection.make({
        sentinel: { sentinels: d().sentinels.map((s) => `${s.host}:${s.port}`), name: d().name },
      })
      const primary = yield* Effect.promise(() => d().primary())
      const role = yield* connection.command("info", (c) => c.info("replication"))
      assert.include(role, "role:master")
      const key = unique("sentinel-key")
      yield* connection.command("set", (c) => c.set(key, "1"))
      assert.strictEqual(primary.cli("GET", key).trim(), "1")
      assert.include(
        RedisConnection.describeTarget({ sentinel: { sentinels: d().sentinels, name: d().name } }),
        `"${d().name}" of the sentinels`,
      )
    }).pipe(Effect.scoped),
  )

  it.live("a URL naming a sentinel: TopologyMismatch, give the sentinels and the name", () =>
    Effect.gen(function* () {
      const at = `${d().sentinels[0]!.host}:${d().sentinels[0]!.port}`
      const error = yield* Effect.flip(
        Effect.scoped(RedisConnection.make({ url: `redis://${at}` })),
      )
      assert.strictEqual(error._tag, "TopologyMismatch")
      assert.deepInclude(error, { expected: "standalone", found: "sentinel", address: at })
      assert.include(error.message, `${at} is a Redis Sentinel`)
      assert.include(error.message, "sentinels")
    }),
  )

  it.live("a name the sentinels do not know fails at the deadline with their answer", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Effect.scoped(
          RedisConnection.make({
            sentinel: { sentinels: d().sentinels, name: "no-such-primary" },
            connectTimeoutMs: 1_000,
          }),
        ),
      )
      assert.strictEqual(error._tag, "BackendUnavailable")
      assert.include(error.message, `named no primary of "no-such-primary"`)
      assert.include(error.message, "within 1000 ms")
      assert.include(error.message, "No such master with that name")
    }),
  )
})
