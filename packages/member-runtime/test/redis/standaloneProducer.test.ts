/**
 * A producer of its own on real Redis and a 3-node cluster (docs/runtime.md,
 * "A producer of its own"): it opens one command connection (one per master),
 * creates or follows the stream's stored layout, follows a reshard made while
 * it sends (every message in its generation's shard, consumed exactly once,
 * per-key order kept), keeps idempotent sends, and closes its connections.
 */
import { Layout } from "@shardline/core"
import { Keys, RedisPorts } from "@shardline/redis-store"
import type { RedisServer } from "@shardline/redis-store/testing"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { Producer, Sent } from "../../src/Producer.js"
import type { RedisOptions } from "../../src/Redis.js"
import { start } from "../../src/Runtime.js"
import { createProducer } from "../../src/StandaloneProducer.js"
import { eventually, useRedisCluster, useRedisServer } from "../support/redis.js"

/** Client connections of a server (CLIENT LIST, less redis-cli's own). */
const connections = (server: RedisServer): number =>
  server.cli("CLIENT", "LIST").trim().split("\n").length - 1

interface Handled {
  readonly key: string
  readonly n: number
  readonly shard: number
}

/**
 * A group consuming `stream` while a producer of its own sends `total`
 * keyed messages and the stream is resharded `from` -> `to` after a third
 * of them: returns what each send returned and what the group handled.
 */
const reshardWhileProducing = async (
  redis: RedisOptions,
  portsOptions: RedisPorts.RedisPortsOptions,
  stream: string,
  from: number,
  to: number,
  total: number,
) => {
  const producer = await createProducer({ redis, stream, shardCount: from })
  const handled: Array<Handled> = []
  const runtime = await start({
    redis,
    handleSignals: false,
    memberBase: `producer-test-${process.pid}`,
    consumers: [
      consumer({
        stream,
        group: "billing",
        shardCount: from,
        runtimeMaxConcurrency: 2,
        heartbeatIntervalMs: 200,
        sessionTimeoutMs: 6_000,
        eachMessage: async (m) => {
          handled.push({ key: m.key ?? "", n: Number(m.fields.n), shard: m.shard })
        },
      }),
    ],
  })
  const sent: Array<Sent & { readonly n: number; readonly afterReshard: boolean }> = []
  try {
    let resharded = false
    for (let batch = 0; batch < total / 20; batch++) {
      if (batch === Math.floor(total / 60))
        await Effect.runPromise(
          Layout.Reshard.reshardStream(stream, to).pipe(
            Effect.provide(RedisPorts.layer(portsOptions)),
          ),
        ).then(() => {
          resharded = true
        })
      const afterReshard = resharded
      const messages = Array.from({ length: 20 }, (_, i) => {
        const n = batch * 20 + i
        return { key: `k${n % 13}`, fields: { n: String(n) } }
      })
      const results = await producer.sendBatch(messages)
      for (const [i, r] of results.entries()) sent.push({ ...r, n: batch * 20 + i, afterReshard })
    }
    await eventually("the group handled every message", () => handled.length >= total, 60_000)
    // anything handled twice would show up now
    await new Promise((resolve) => setTimeout(resolve, 500))
  } finally {
    await producer.close()
    await runtime.stop()
  }
  return { sent, handled }
}

const checkReshard = (
  result: Awaited<ReturnType<typeof reshardWhileProducing>>,
  from: number,
  to: number,
  total: number,
) => {
  const g0: Layout.Generation = { generation: 0, firstShard: 0, shardCount: from }
  const g1 = Layout.next(g0, to)
  // every message in its generation's shard for its key
  for (const s of result.sent) {
    const g = s.generation === 0 ? g0 : g1
    expect(s.generation === 0 || s.generation === 1).toBe(true)
    expect(s.shard).toBe(Layout.shardOf(g, `k${s.n % 13}`))
    // once the reshard was done (its old shards sealed), only the new generation
    if (s.afterReshard) expect(s.generation).toBe(1)
  }
  expect(result.sent.some((s) => s.generation === 0)).toBe(true)
  expect(result.sent.some((s) => s.generation === 1)).toBe(true)
  // consumed exactly once, from the shard it was sent to
  const ns = result.handled.map((h) => h.n).sort((a, b) => a - b)
  expect(ns).toEqual(Array.from({ length: total }, (_, n) => n))
  const shardOf = new Map(result.sent.map((s) => [s.n, s.shard]))
  for (const h of result.handled) expect(h.shard).toBe(shardOf.get(h.n))
  // per key, in the order sent
  const byKey = new Map<string, Array<number>>()
  for (const h of result.handled) byKey.set(h.key, [...(byKey.get(h.key) ?? []), h.n])
  for (const [key, order] of byKey) expect(order, key).toEqual([...order].sort((a, b) => a - b))
}

describe("a producer of its own on Redis 7.0", () => {
  const server = useRedisServer("redis7")
  let streams = 0
  const fresh = () => `standalone-${process.pid}-${++streams}`

  it("opens one connection, and closes it", async () => {
    // nobody else connected (the harness's start-up probe closes on its own)
    await eventually("no other client", () => connections(server()) === 0, 10_000)
    const before = 0
    const producer = await createProducer({
      redis: { url: server().url },
      stream: fresh(),
      shardCount: 8,
    })
    try {
      await producer.sendBatch(Array.from({ length: 50 }, (_, n) => ({ key: `k${n}` })))
      expect(connections(server()) - before).toBe(1)
    } finally {
      await producer.close()
    }
    await eventually("its connection closed", () => connections(server()) === before, 5_000)
  })

  it("refuses a stream without a layout, or another shard count, typed; routes by the stored layout", async () => {
    const redis = { url: server().url }
    const stream = fresh()
    await expect(createProducer({ redis, stream })).rejects.toMatchObject({
      _tag: "UnknownStream",
    })
    const creator = await createProducer({ redis, stream, shardCount: 5 })
    await creator.close()
    await expect(createProducer({ redis, stream, shardCount: 6 })).rejects.toMatchObject({
      _tag: "ShardCountMismatch",
      given: 6,
      stored: 5,
    })
    const follower = await createProducer({ redis, stream })
    try {
      expect((await follower.send("customer-42")).shard).toBe(
        Layout.shardOf({ generation: 0, firstShard: 0, shardCount: 5 }, "customer-42"),
      )
    } finally {
      await follower.close()
    }
  })

  it("idempotent sends are stored once (the runtime producer's code)", async () => {
    const redis = { url: server().url }
    const stream = fresh()
    const make = (): Promise<Producer> =>
      createProducer({ redis, stream, shardCount: 1, idempotent: { producerId: "billing-1" } })
    const a = await make()
    const b = await make() // a restarted process with the same producer id
    try {
      const first = await a.send("k", { n: "1" }, { idempotencyKey: "order-1" })
      expect((await a.send("k", { n: "1" }, { idempotencyKey: "order-1" })).id).toBe(first.id)
      expect((await b.send("k", { n: "1" }, { idempotencyKey: "order-1" })).id).toBe(first.id)
      await b.send("k", { n: "2" }, { idempotencyKey: "order-2" })
      expect(Number(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, 0)).trim())).toBe(2)
    } finally {
      await Promise.all([a.close(), b.close()])
    }
  })

  it("codec json: its value is consumed by a json consumer unchanged", async () => {
    interface Order {
      readonly amount: number
      readonly tags: ReadonlyArray<string>
    }
    const redis = { url: server().url }
    const stream = fresh()
    const producer = await createProducer<Order>({ redis, stream, shardCount: 3, codec: "json" })
    const orders: ReadonlyArray<Order> = [
      { amount: 12.5, tags: ["eu"] },
      { amount: 0.1, tags: [] },
    ]
    await producer.sendBatch(orders.map((value, n) => ({ key: `customer-${n}`, value })))
    const seen = new Map<string, Order>()
    const runtime = await start({
      redis,
      handleSignals: false,
      logLevel: "silent",
      consumers: [
        consumer<Order>({
          stream,
          group: "billing",
          shardCount: 3,
          codec: "json",
          heartbeatIntervalMs: 200,
          eachMessage: async (m) => {
            seen.set(m.key ?? "", m.value)
          },
        }),
      ],
    })
    try {
      await eventually("both handled", () => seen.size >= 2, 20_000)
      expect(seen.get("customer-0")).toEqual(orders[0])
      expect(seen.get("customer-1")).toEqual(orders[1])
    } finally {
      await producer.close()
      await runtime.stop()
    }
  })

  it("follows a reshard 4 -> 6 made while it sends: each message in its generation's shard, consumed once, per-key order kept", async () => {
    const url = server().url
    const result = await reshardWhileProducing({ url }, { url }, fresh(), 4, 6, 600)
    checkReshard(result, 4, 6, 600)
  }, 120_000)
})

describe("a producer of its own on a 3-node Redis Cluster", () => {
  const cluster = useRedisCluster("redis7")
  let streams = 0
  const fresh = () => `standalone-cluster-${process.pid}-${++streams}`
  const nodes = () => cluster().nodes.map((n) => `${n.host}:${n.port}`)

  it("opens one connection per master, and closes them", async () => {
    const count = () => cluster().servers.reduce((sum, s) => sum + connections(s), 0)
    await eventually("no other client", () => count() === 0, 10_000)
    const before = 0
    const producer = await createProducer({
      redis: { nodes: nodes() },
      stream: fresh(),
      shardCount: 16,
    })
    try {
      // 16 shards spread over the 3 masters' slots
      await producer.sendBatch(Array.from({ length: 200 }, (_, n) => ({ key: `k${n}` })))
      expect(count() - before).toBe(cluster().servers.length)
    } finally {
      await producer.close()
    }
    await eventually("its connections closed", () => count() === before, 5_000)
  })

  it("follows a reshard 3 -> 5 made while it sends, on the cluster", async () => {
    const result = await reshardWhileProducing(
      { nodes: nodes() },
      { cluster: { nodes: cluster().nodes } },
      fresh(),
      3,
      5,
      400,
    )
    checkReshard(result, 3, 5, 400)
  }, 120_000)
})
