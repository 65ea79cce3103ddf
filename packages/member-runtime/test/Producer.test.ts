/** The producer: routing, batching, trimming, idempotent sends, re-routing after ShardSealed. */
import { assert, describe, it } from "@effect/vitest"
import { BackendUnavailable, Layout, ShardStreams } from "@shardline/core"
import { Admin } from "@shardline/tools"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import * as LayoutSource from "../src/LayoutSource.js"
import { KEY_FIELD } from "../src/Message.js"
import { makeProducer } from "../src/Producer.js"

const stream = "orders"
const g0 = { generation: 0, firstShard: 0, shardCount: 4 }

const entries = (streams: ShardStreams.ShardStreamsShape, shard: number) =>
  streams.range(ShardStreams.shardKey(stream, shard))

describe("producer", () => {
  it.effect("routes each key with Layout.shardOf and stores it in the key field", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.makeMemory
      const producer = yield* makeProducer(streams, stream, {
        layout: LayoutSource.fixed({ orders: 4 }),
      })
      for (const key of ["a", "customer-42", "ü-ñ", ""]) {
        const sent = yield* producer.send(key, { v: key })
        assert.strictEqual(sent.shard, Layout.shardOf(g0, key))
        assert.strictEqual(sent.generation, 0)
        const stored = (yield* entries(streams, sent.shard)).find((e) => e.id === sent.id)!
        assert.deepStrictEqual(stored.fields, { v: key, [KEY_FIELD]: key })
      }
    }),
  )

  it.effect(
    "batches sends: nothing is appended before the linger ends, then all, in send order per key",
    () =>
      Effect.gen(function* () {
        const streams = yield* ShardStreams.makeMemory
        let appends = 0
        const counting: ShardStreams.ShardStreamsShape = {
          ...streams,
          append: (...args) =>
            Effect.tap(streams.append(...args), () => Effect.sync(() => appends++)),
        }
        const producer = yield* makeProducer(counting, stream, {
          layout: LayoutSource.fixed({ orders: 4 }),
          lingerMs: 50,
          maxBatch: 1_000,
        })
        const sends = yield* Effect.forkChild(
          producer.sendBatch(
            Array.from({ length: 100 }, (_, i) => ({ key: `k${i % 5}`, fields: { i: String(i) } })),
          ),
        )
        yield* TestClock.adjust(49)
        assert.strictEqual(appends, 0)
        yield* TestClock.adjust(1)
        const sent = yield* Fiber.join(sends)
        assert.strictEqual(appends, 100)
        assert.strictEqual(sent.length, 100)
        // per key, the stream holds the sends in call order
        for (let shard = 0; shard < 4; shard++) {
          const byKey = new Map<string, Array<number>>()
          for (const e of yield* entries(streams, shard))
            byKey.set(e.fields[KEY_FIELD]!, [
              ...(byKey.get(e.fields[KEY_FIELD]!) ?? []),
              Number(e.fields.i),
            ])
          for (const [, is] of byKey)
            assert.deepStrictEqual(
              is,
              [...is].sort((a, b) => a - b),
            )
        }
        yield* producer.flush
      }),
  )

  it.effect("trims every append (MAXLEN) when asked", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.makeMemory
      const producer = yield* makeProducer(streams, stream, {
        layout: LayoutSource.fixed({ orders: 1 }),
        trim: { maxLen: 5, approximate: true },
      })
      for (let i = 0; i < 20; i++) yield* producer.send("k", { i: String(i) })
      const left = yield* entries(streams, 0)
      assert.deepStrictEqual(
        left.map((e) => e.fields.i),
        ["15", "16", "17", "18", "19"],
      )
    }),
  )

  it.effect("idempotent sends: an append retried after an unknown outcome is stored once", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.makeMemory
      let calls = 0
      // every first attempt is written, but its reply is lost
      const flaky: ShardStreams.ShardStreamsShape = {
        ...streams,
        append: (s, shard, fields, options) =>
          Effect.flatMap(streams.append(s, shard, fields, options), (id) =>
            ++calls % 2 === 1
              ? Effect.fail(new BackendUnavailable({ operation: "append", message: "reply lost" }))
              : Effect.succeed(id),
          ),
      }
      const idempotent = yield* makeProducer(flaky, stream, {
        layout: LayoutSource.fixed({ orders: 1 }),
        idempotent: { producerId: "p-1" },
      })
      const a = yield* idempotent.send("k", { v: "1" })
      const b = yield* idempotent.send("k", { v: "2" })
      const stored = yield* entries(streams, 0)
      assert.deepStrictEqual(
        stored.map((e) => [e.id, e.fields.v]),
        [
          [a.id, "1"],
          [b.id, "2"],
        ],
      )
      // without idempotence the unknown outcome is an error, never a silent duplicate
      calls = 0
      const plain = yield* makeProducer(flaky, stream, {
        layout: LayoutSource.fixed({ orders: 1 }),
      })
      const error = yield* Effect.flip(plain.send("k", { v: "3" }))
      assert.strictEqual(error._tag, "SendFailed")
    }),
  )

  it.effect(
    "idempotent sends across a reshard: an append whose reply was lost before the seal is stored once, on the sealed shard",
    () =>
      Effect.gen(function* () {
        const streams = yield* ShardStreams.makeMemory
        const layout = LayoutSource.mutable({ orders: g0 })
        const g1 = Layout.next(g0, 8)
        let lost = 0
        // the first append lands; its reply is lost while a reshard 4 -> 8 seals generation 0
        const resharding: ShardStreams.ShardStreamsShape = {
          ...streams,
          append: (s, shard, fields, options) =>
            Effect.flatMap(streams.append(s, shard, fields, options), (id) =>
              lost++ > 0
                ? Effect.succeed(id)
                : Effect.gen(function* () {
                    layout.set(stream, g1)
                    for (let sealed = 0; sealed < 4; sealed++) yield* streams.seal(stream, sealed)
                    return yield* new BackendUnavailable({
                      operation: "append",
                      message: "reply lost",
                    })
                  }),
            ),
        }
        const producer = yield* makeProducer(resharding, stream, {
          layout,
          idempotent: { producerId: "p-1" },
        })
        const sent = yield* producer.send("customer-42", { v: "1" })
        // the retry found its message id in the sealed shard's window: the first entry's id
        assert.strictEqual(sent.generation, 0)
        assert.strictEqual(sent.shard, Layout.shardOf(g0, "customer-42"))
        const stored: Array<{ shard: number; id: string }> = []
        for (let shard = 0; shard < 12; shard++)
          for (const e of yield* entries(streams, shard)) stored.push({ shard, id: e.id })
        assert.deepStrictEqual(stored, [{ shard: sent.shard, id: sent.id }])
        // the next send goes to the new generation
        const next = yield* producer.send("customer-42", { v: "2" })
        assert.strictEqual(next.generation, 1)
        assert.strictEqual(next.shard, Layout.shardOf(g1, "customer-42"))
      }),
  )

  it.effect("ShardSealed: refresh the layout from the LayoutSource and route again", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.makeMemory
      const layout = LayoutSource.mutable({ orders: g0 })
      const producer = yield* makeProducer(streams, stream, { layout })
      const before = yield* producer.send("customer-42")
      assert.strictEqual(before.generation, 0)
      // a reshard 4 -> 8: generation 1 gets shards 4..11, generation 0 is sealed
      const g1 = Layout.next(g0, 8)
      layout.set(stream, g1)
      for (let shard = 0; shard < 4; shard++) yield* streams.seal(stream, shard)
      const after = yield* producer.send("customer-42", { v: "after" })
      assert.strictEqual(after.generation, 1)
      assert.strictEqual(after.shard, Layout.shardOf(g1, "customer-42"))
      assert.isAtLeast(after.shard, 4)
      // later sends use the refreshed layout at once
      const next = yield* producer.send("other-key")
      assert.strictEqual(next.generation, 1)
    }),
  )

  it.effect("a shard that stays sealed fails the send after maxAttempts, naming the key", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.makeMemory
      for (let shard = 0; shard < 4; shard++) yield* streams.seal(stream, shard)
      const producer = yield* makeProducer(streams, stream, {
        layout: LayoutSource.fixed({ orders: 4 }),
        maxAttempts: 2,
      })
      const error = yield* Effect.flip(producer.send("k"))
      assert.strictEqual(error._tag, "SendFailed")
      assert.strictEqual(error._tag === "SendFailed" && error.attempts, 2)
    }),
  )

  it.effect(
    "bad sends are refused: reserved field, non-string value, unknown stream, closed producer",
    () =>
      Effect.gen(function* () {
        const streams = yield* ShardStreams.makeMemory
        const producer = yield* makeProducer(streams, stream, {
          layout: LayoutSource.fixed({ orders: 4 }),
        })
        assert.strictEqual(
          (yield* Effect.flip(producer.send("k", { [KEY_FIELD]: "x" })))._tag,
          "SendFailed",
        )
        assert.strictEqual(
          (yield* Effect.flip(producer.send("k", { n: 1 as never })))._tag,
          "SendFailed",
        )
        const unknown = yield* makeProducer(streams, "payments", {
          layout: LayoutSource.fixed({ orders: 4 }),
        })
        const noLayout = yield* Effect.flip(unknown.send("k"))
        assert.strictEqual(noLayout._tag, "UnknownStream")
        // it says why and what to do (it was an empty message)
        assert.include(noLayout.message, 'stream "payments" has no shard layout yet')
        assert.include(noLayout.message, "Start a consumer of the stream first")
        assert.include(noLayout.message, 'layout: LayoutSource.fixed({ "payments":')
        yield* producer.close
        assert.strictEqual((yield* Effect.flip(producer.send("k")))._tag, "RuntimeStopped")
      }),
  )
})

describe("the producer's scope", () => {
  it.live("closing it appends what was queued first: a send accepted is never dropped", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.makeMemory
      const pending = yield* Effect.scoped(
        Effect.gen(function* () {
          // the linger keeps the send queued when the scope closes
          const producer = yield* makeProducer(streams, stream, {
            layout: LayoutSource.fixed({ orders: 4 }),
            lingerMs: 20,
          })
          const send = yield* Effect.forkDetach(producer.send("k", { n: "1" }))
          yield* Effect.yieldNow
          return send
        }),
      )
      const sent = yield* Fiber.join(pending)
      assert.deepStrictEqual(
        (yield* entries(streams, sent.shard)).map((e) => e.fields.n),
        ["1"],
      )
    }),
  )
})

describe("the key field", () => {
  it("is the one the dead-letter tools (@shardline/tools) read and replay (Admin.KEY_FIELD)", () => {
    assert.strictEqual(Admin.KEY_FIELD, KEY_FIELD)
  })
})
