/**
 * The producer on real Redis (docs/runtime.md, "Producer"): idempotent sends
 * (a retried send with the same message id, even from another process with
 * the same producer id, is stored once; across a reshard's seal too) and
 * trimming (XADD MAXLEN).
 */
import { BackendUnavailable, Layout, type ShardStreams } from "@shardline/core"
import { Keys, RedisConnection, RedisShardStreams } from "@shardline/redis-store"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import * as LayoutSource from "../../src/LayoutSource.js"
import { makeProducer } from "../../src/Producer.js"
import { start } from "../../src/Runtime.js"
import { sendsAfterStopAreRefused, sendsBeforeStopAreAppended } from "../support/producerStop.js"
import { useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")
const xlen = (stream: string) =>
  Number(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, 0)).trim())

it("an idempotent send retried (same producer id and message id) is stored once", async () => {
  const stream = "idempotent"
  const layout = LayoutSource.fixed({ [stream]: 1 })
  const a = await start({ redis: { url: server().url }, handleSignals: false })
  const b = await start({ redis: { url: server().url }, handleSignals: false })
  try {
    const first = a.producer(stream, { layout, idempotent: { producerId: "billing-1" } })
    const sent = await first.send("k", { n: "1" }, { idempotencyKey: "order-1" })
    const again = await first.send("k", { n: "1" }, { idempotencyKey: "order-1" })
    expect(again.id).toBe(sent.id)
    // the same producer id in another process (a restarted pod retrying)
    const restarted = b.producer(stream, { layout, idempotent: { producerId: "billing-1" } })
    expect((await restarted.send("k", { n: "1" }, { idempotencyKey: "order-1" })).id).toBe(sent.id)
    // another message id, or another producer, is a new entry
    await first.send("k", { n: "2" }, { idempotencyKey: "order-2" })
    const other = b.producer(stream, { layout, idempotent: { producerId: "billing-2" } })
    await other.send("k", { n: "1" }, { idempotencyKey: "order-1" })
    expect(xlen(stream)).toBe(3)
  } finally {
    await Promise.all([a.stop(), b.stop()])
  }
})

it("a producer's trim keeps the shard stream at maxLen", async () => {
  const stream = "trimmed"
  const runtime = await start({ redis: { url: server().url }, handleSignals: false })
  try {
    const producer = runtime.producer(stream, {
      layout: LayoutSource.fixed({ [stream]: 1 }),
      trim: { maxLen: 5 },
    })
    for (let n = 0; n < 20; n++) await producer.send("k", { n: String(n) })
    expect(xlen(stream)).toBe(5)
    const last = server().cli(
      "XREVRANGE",
      Keys.defaultKeys.shardKey(stream, 0),
      "+",
      "-",
      "COUNT",
      "1",
    )
    expect(last).toContain("19")
  } finally {
    await runtime.stop()
  }
})

it("an idempotent send whose reply was lost before a reshard sealed its shard is stored once (the append script checks the window before the seal)", async () => {
  const stream = "resharded"
  const g0 = { generation: 0, firstShard: 0, shardCount: 2 }
  const g1 = Layout.next(g0, 4)
  const layout = LayoutSource.mutable({ [stream]: g0 })
  const xlenOf = (shard: number) =>
    Number(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, shard)).trim())
  const sent = await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const connection = yield* RedisConnection.make({ url: server().url })
        const streams = RedisShardStreams.makeWith(connection)
        let lost = 0
        // the first append runs on Redis; its reply is lost while a reshard seals generation 0
        const resharding: ShardStreams.ShardStreamsShape = {
          ...streams,
          append: (s, shard, fields, options) =>
            Effect.flatMap(streams.append(s, shard, fields, options), (id) =>
              lost++ > 0
                ? Effect.succeed(id)
                : Effect.gen(function* () {
                    layout.set(stream, g1)
                    for (let sealed = 0; sealed < 2; sealed++) yield* streams.seal(stream, sealed)
                    return yield* new BackendUnavailable({
                      operation: "append",
                      message: "reply lost",
                    })
                  }),
            ),
        }
        const producer = yield* makeProducer(resharding, stream, {
          layout,
          idempotent: { producerId: "billing-1" },
        })
        return yield* producer.send("customer-42", { n: "1" })
      }),
    ),
  )
  expect(sent.generation).toBe(0)
  expect(sent.shard).toBe(Layout.shardOf(g0, "customer-42"))
  expect(Array.from({ length: 6 }, (_, shard) => xlenOf(shard))).toEqual(
    Array.from({ length: 6 }, (_, shard) => (shard === sent.shard ? 1 : 0)),
  )
})

describe('a runtime\'s producer and stop() on Redis (docs/runtime.md, "Producer")', () => {
  const count = async (stream: string, shardCount: number) => {
    let n = 0
    for (let shard = 0; shard < shardCount; shard++)
      n += Number(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, shard)).trim())
    return n
  }
  it("sends called before stop() are appended, stop waits for them", async () => {
    const runtime = await start({ redis: { url: server().url }, handleSignals: false })
    await sendsBeforeStopAreAppended(runtime, "stop-after-send", count)
  })
  it("sends called after stop() are RuntimeStopped, nothing written", async () => {
    const runtime = await start({ redis: { url: server().url }, handleSignals: false })
    await sendsAfterStopAreRefused(runtime, "send-after-stop", count)
  })
})
