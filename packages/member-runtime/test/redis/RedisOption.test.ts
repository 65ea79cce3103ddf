/**
 * `start({ redis })` and `redisPorts(...)`: one option moves a runtime onto
 * real Redis (one server, and a 3-node cluster through `nodes`), and bad
 * Redis options fail before anything connects, naming the field. `start`
 * fails, typed and naming the address, on a server that never answers
 * (`connectTimeoutMs`), a cluster node given as a URL and `nodes` that are
 * one server (`TopologyMismatch`). Sentinel: test/redis/sentinel.test.ts.
 */
import { Keys, RedisConnection } from "@shardline/redis-store"
import { startSilentServer } from "@shardline/redis-store/testing"
import { Effect, Exit, Layer, Metric, Result } from "effect"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { InvalidRuntimeConfig } from "../../src/Errors.js"
import type { Message } from "../../src/Message.js"
import { memoryPorts } from "../../src/Ports.js"
import { decodeRedisOptions, type RedisOptions, redisPorts } from "../../src/Redis.js"
import { make, type StartOptions, start } from "../../src/Runtime.js"
import { eventually, useRedisCluster, useRedisServer } from "../support/redis.js"

const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }
const handler = () => {}

/** The InvalidRuntimeConfig `start` rejects with. */
const rejection = async (options: StartOptions): Promise<InvalidRuntimeConfig> => {
  try {
    const runtime = await start({ handleSignals: false, ...options })
    await runtime.stop()
  } catch (error) {
    return error as InvalidRuntimeConfig
  }
  throw new Error("start succeeded")
}

describe("redis option validation (nothing connects)", () => {
  const one = [consumer({ stream: "s", group: "g", eachMessage: handler })]
  // a port nothing listens on: a validation that connected first would fail
  // with BackendUnavailable instead of naming the field
  const closed = "redis://127.0.0.1:1"
  const cases: ReadonlyArray<readonly [string, unknown, string]> = [
    ["a URL of another scheme", { url: "http://127.0.0.1:6379" }, "redis.url"],
    ["a string that is no URL", { url: "localhost:6379" }, "redis.url"],
    ["a URL without a host", { url: "redis://" }, "redis.url"],
    ["a URL with a database that is not a number", { url: "redis://h:6379/x" }, "redis.url"],
    ["empty cluster nodes", { nodes: [] }, "redis.nodes"],
    ["a node without a port", { nodes: ["10.0.0.1"] }, "redis.nodes[0]"],
    ["a node with port 0", { nodes: ["a:7000", { host: "b", port: 0 }] }, "redis.nodes[1].port"],
    ["both url and nodes", { url: closed, nodes: ["a:7000"] }, "redis.nodes"],
    ["neither url nor nodes", {}, "redis.url"],
    ["an unknown option (a typo)", { url: closed, pasword: "x" }, "redis.pasword"],
    ["a key prefix with a glob character", { url: closed, keyPrefix: "app*" }, "redis.keyPrefix"],
    ["an empty key prefix", { url: closed, keyPrefix: "" }, "redis.keyPrefix"],
    [
      "durability with no replica to wait for",
      { url: closed, durability: { replicas: 0, timeoutMs: 100 } },
      "redis.durability.replicas",
    ],
    [
      "durability with a timeout of 0 (WAIT would wait for ever)",
      { url: closed, durability: { replicas: 1, timeoutMs: 0 } },
      "redis.durability.timeoutMs",
    ],
    [
      "ioredis' own keyPrefix (it leaves channels unprefixed)",
      { url: closed, ioredis: { keyPrefix: "app:" } },
      "redis.ioredis.keyPrefix",
    ],
    ["sentinels without the primary's name", { sentinels: ["127.0.0.1:26379"] }, "redis.name"],
    ["a name without sentinels", { url: closed, name: "mymaster" }, "redis.name"],
    [
      "both url and sentinels",
      { url: closed, sentinels: ["127.0.0.1:26379"], name: "mymaster" },
      "redis.sentinels",
    ],
    ["empty sentinels", { sentinels: [], name: "mymaster" }, "redis.sentinels"],
    ["a sentinel without a port", { sentinels: ["10.0.0.1"], name: "m" }, "redis.sentinels[0]"],
    [
      "a sentinel with port 0",
      { sentinels: [{ host: "a", port: 0 }], name: "m" },
      "redis.sentinels[0].port",
    ],
    ["an empty primary name", { sentinels: ["a:26379"], name: "" }, "redis.name"],
    [
      "a sentinel password without sentinels",
      { url: closed, sentinelPassword: "x" },
      "redis.sentinelPassword",
    ],
    [
      "Sentinel through ioredis' options (untyped)",
      { url: closed, ioredis: { sentinels: [{ host: "a", port: 26379 }], name: "m" } },
      "redis.ioredis.sentinels",
    ],
    ["a connect deadline of 0 ms", { url: closed, connectTimeoutMs: 0 }, "redis.connectTimeoutMs"],
    [
      "a fractional connect deadline",
      { url: closed, connectTimeoutMs: 1.5 },
      "redis.connectTimeoutMs",
    ],
  ]
  for (const [what, redis, field] of cases)
    it(`${what}: ${field}`, async () => {
      const error = await rejection({ redis: redis as RedisOptions, consumers: one })
      expect(error._tag).toBe("InvalidRuntimeConfig")
      expect(error.field).toBe(field)
      expect(error.message.startsWith(`${field}: `)).toBe(true)
    })

  it("redis and ports together are refused", async () => {
    const error = await rejection({ redis: { url: closed }, ports: memoryPorts(), consumers: one })
    expect(error.field).toBe("redis")
  })

  it("a bad consumer fails before the runtime connects to Redis", async () => {
    const error = await rejection({
      redis: { url: closed },
      consumers: [consumer({ stream: "s", group: "g", batchSize: 0, eachMessage: handler })],
    })
    expect(error.field).toBe("consumers[0].batchSize")
  })

  it("the Effect API: redisPorts' layer fails with the same error", async () => {
    const exit = await Effect.runPromiseExit(
      Effect.scoped(make({ consumers: one })).pipe(
        Effect.provide(redisPorts({ url: "http://x" }).layer),
      ),
    )
    expect(Exit.isFailure(exit)).toBe(true)
    const error = Exit.isFailure(exit) ? (exit.cause.reasons[0] as { error?: unknown }) : undefined
    expect(error?.error).toMatchObject({ _tag: "InvalidRuntimeConfig", field: "redis.url" })
  })

  it("an unreachable server is a BackendUnavailable from start", async () => {
    const error = await rejection({
      redis: { url: closed, ioredis: { maxRetriesPerRequest: 0, retryStrategy: () => null } },
      consumers: one,
    })
    expect(error._tag).toBe("BackendUnavailable")
  })
})

/** The error `start` rejects with (a runtime that started is stopped, and the test fails). */
const startFailure = (options: StartOptions): Promise<{ _tag: string; message: string }> =>
  start({ handleSignals: false, logLevel: "silent", ...options }).then(
    async (runtime) => {
      await runtime.stop()
      throw new Error("start succeeded")
    },
    (error: { _tag: string; message: string }) => error,
  )

describe("start's connect deadline (redis.connectTimeoutMs): a server that accepts connections and never answers", () => {
  // without the deadline start stays pending (issue 32: over 90 s, no log
  // line), and these tests time out instead of seeing the rejection
  it("start with consumers rejects with BackendUnavailable naming host:port and what got no answer", async () => {
    const silent = await startSilentServer()
    try {
      const error = await startFailure({
        redis: { url: `redis://127.0.0.1:${silent.port}`, connectTimeoutMs: 500 },
        consumers: [consumer({ stream: "s", group: "g", eachMessage: handler })],
      })
      expect(error._tag).toBe("BackendUnavailable")
      expect(error.message).toContain(`to 127.0.0.1:${silent.port} got no answer within 500 ms`)
      expect(error.message).toContain("it accepted the TCP connection")
      expect(error.message).toContain("connectTimeoutMs")
    } finally {
      await silent.close()
    }
  })

  it("a runtime that only produces rejects the same way", async () => {
    const silent = await startSilentServer()
    try {
      const error = await startFailure({
        redis: { url: `redis://127.0.0.1:${silent.port}`, connectTimeoutMs: 500 },
      })
      expect(error._tag).toBe("BackendUnavailable")
      expect(error.message).toContain(`to 127.0.0.1:${silent.port} got no answer within 500 ms`)
    } finally {
      await silent.close()
    }
  })

  it("the default deadline is 10 s, and the option reaches the connection", () => {
    expect(RedisConnection.DEFAULT_CONNECT_TIMEOUT_MS).toBe(10_000)
    const decoded = decodeRedisOptions({ url: "redis://h:1", connectTimeoutMs: 250 })
    expect(Result.isSuccess(decoded) && decoded.success.connectTimeoutMs).toBe(250)
  })
})

/** Runs a consumer group of two runtimes on `redis`; every message is handled once, in key order. */
const roundTrip = async (redis: RedisOptions, stream: string) => {
  const handled = new Map<string, Array<number>>()
  const record = (m: Message) => {
    const list = handled.get(m.key!) ?? []
    list.push(Number(m.fields.n))
    handled.set(m.key!, list)
  }
  const declared = { stream, group: "g", shardCount: 8, ...fast, eachMessage: record }
  const a = await start({
    redis,
    handleSignals: false,
    memberBase: "a",
    consumers: [consumer(declared)],
  })
  const b = await start({
    redis,
    handleSignals: false,
    memberBase: "b",
    consumers: [consumer(declared)],
  })
  try {
    const producer = a.producer(stream)
    const total = 400
    await producer.sendBatch(
      Array.from({ length: total }, (_, n) => ({ key: `k${n % 17}`, fields: { n: String(n) } })),
    )
    await producer.flush()
    const count = () => [...handled.values()].reduce((s, l) => s + l.length, 0)
    await eventually(`${total} messages handled`, () => count() >= total)
    // both runtimes own shards of the one group on the shared server
    await eventually(
      "both members own shards",
      () => a.members()[0]!.owned.length > 0 && b.members()[0]!.owned.length > 0,
    )
    expect(count()).toBe(total)
    for (const [key, ns] of handled) {
      expect(new Set(ns).size, key).toBe(ns.length)
      expect(
        [...ns].sort((x, y) => x - y),
        key,
      ).toEqual(ns)
    }
  } finally {
    await Promise.all([a.stop(), b.stop()])
  }
}

describe("start({ redis: { url } }) on one server", () => {
  const server = useRedisServer("redis7")

  it("nodes naming the one server: TopologyMismatch, not a cluster (not ioredis' 'Failed to refresh slots cache')", async () => {
    const address = `${server().host}:${server().port}`
    const error = await startFailure({
      redis: { nodes: [address] },
      consumers: [consumer({ stream: "s", group: "g", eachMessage: handler })],
    })
    expect(error).toMatchObject({
      _tag: "TopologyMismatch",
      expected: "cluster",
      found: "standalone",
    })
    expect(error.message).toContain(`${address} is not a cluster`)
    expect(error.message).toContain(`redis: { url: "redis://${address}" }`)
    expect(error.message).not.toContain("Failed to refresh slots cache")
  })

  it("two runtimes share one group on the server", async () => {
    await roundTrip({ url: server().url }, "orders-url")
    // the shard streams and the group's records are on the server, not in memory
    const shard0 = Keys.defaultKeys.shardKey("orders-url", 0)
    expect(server().cli("TYPE", shard0).trim()).toBe("stream")
    expect(server().cli("XINFO", "GROUPS", shard0)).toContain("g")
    expect(
      server()
        .cli("EXISTS", Keys.defaultKeys.storeRevisionKey({ stream: "orders-url", group: "g" }))
        .trim(),
    ).toBe("1")
  })

  it("an earlier version's unprefixed keys of the group: KeySchemaMismatch, nothing started", async () => {
    const stream = "orders-schema1"
    const old = `{shardline:${stream}:g}:store:revision`
    server().cli("SET", old, "12")
    const error = await start({
      redis: { url: server().url, keyPrefix: "upgrade:" },
      handleSignals: false,
      logLevel: "silent",
      consumers: [consumer({ stream, group: "g", ...fast, eachMessage: handler })],
    }).then(
      async (runtime) => {
        await runtime.stop()
        return undefined
      },
      (e: { _tag: string; message: string; keys: ReadonlyArray<string> }) => e,
    )
    expect(error?._tag).toBe("KeySchemaMismatch")
    expect(error?.keys).toEqual([old])
    expect(error?.message).toContain("shardline migrate-keys")
    // nothing of the group was created in the namespace, nor recorded
    const keys = Keys.make("upgrade:")
    expect(
      server()
        .cli("EXISTS", keys.storeRevisionKey({ stream, group: "g" }))
        .trim(),
    ).toBe("0")
    expect(server().cli("EXISTS", keys.schema).trim()).toBe("0")
    server().cli("DEL", old)
  })

  it("the Effect API on redisPorts(...).layer", async () => {
    const seen: Array<string> = []
    const program = Effect.gen(function* () {
      const runtime = yield* make({
        memberBase: "fx",
        consumers: [
          consumer({
            stream: "orders-fx",
            group: "g",
            shardCount: 4,
            ...fast,
            eachMessage: (m) => {
              seen.push(m.fields.n!)
            },
          }),
        ],
      })
      const producer = yield* runtime.producer("orders-fx")
      for (let n = 0; n < 20; n++) yield* producer.send(`k${n}`, { n: String(n) })
      yield* producer.flush
      yield* Effect.promise(() => eventually("20 handled", () => seen.length >= 20))
      yield* runtime.stop
    })
    await Effect.runPromise(
      Effect.scoped(program).pipe(
        Effect.provide(
          Layer.merge(
            redisPorts({ url: server().url }).layer,
            Layer.succeed(Metric.MetricRegistry, new Map()),
          ),
        ),
      ),
    )
    expect(new Set(seen).size).toBe(20)
  })
})

describe("start({ redis: { nodes } }) on a 3-node cluster", () => {
  const cluster = useRedisCluster("redis7")

  it("a URL naming one of its nodes: TopologyMismatch at start, a Redis Cluster node (MOVED): use nodes", async () => {
    // before, start succeeded and its members idled: every key of another
    // node's slots answered MOVED
    const node = cluster().nodes[0]!
    for (const consumers of [
      [consumer({ stream: "s-moved", group: "g", ...fast, eachMessage: handler })],
      [],
    ]) {
      const error = await startFailure({
        redis: { url: `redis://${node.host}:${node.port}` },
        consumers,
      })
      expect(error).toMatchObject({
        _tag: "TopologyMismatch",
        expected: "standalone",
        found: "cluster",
        address: `${node.host}:${node.port}`,
      })
      expect(error.message).toContain(
        `${node.host}:${node.port} is a Redis Cluster node (MOVED): use \`nodes\``,
      )
    }
  })

  it("two runtimes share one group across the cluster", async () => {
    await roundTrip({ nodes: cluster().nodes.map((n) => `${n.host}:${n.port}`) }, "orders-cluster")
  })
})
