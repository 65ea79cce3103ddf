/**
 * The runtime's side of handlers' transactions (docs/exactly-once.md), on
 * core's memory ports: the handle refuses bad use at the call (and the
 * refusal sticks), and the commit step (src/internal/TransactionCommit.ts)
 * acknowledges with the writes, writes nothing for a stale owner, finds a
 * commit sent again after a lost reply already done, and routes sends over
 * the target stream's layout. Real Redis and the cluster:
 * test/redis/transactions.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { makeSendRouter } from "../src/internal/SendRouter.js"
import { commit, type TransactionEnv } from "../src/internal/TransactionCommit.js"
import { TransactionHandle } from "../src/internal/TransactionHandle.js"
import * as LayoutSource from "../src/LayoutSource.js"
import type { BatchContext, MessageContext } from "../src/Message.js"
import { makeHarness } from "./support/pollerHarness.js"

const stream = "in"
const group = "g"

const setUp = (n: number) =>
  Effect.gen(function* () {
    const s = yield* ShardStreams.makeMemory
    const address = { stream, shard: 0, group }
    yield* s.setOwnerToken({ ...address, token: 5 })
    for (let i = 0; i < n; i++) yield* s.append(stream, 0, { n: String(i) })
    const read = yield* s.read({ ...address, token: 5, consumer: "c", count: n })
    const env: TransactionEnv = {
      port: s.transactions,
      router: makeSendRouter(LayoutSource.fixed({ out: 4 })),
    }
    const handle = (limits = { maxOperations: 10, maxBytes: 1_000 }) =>
      new TransactionHandle({ rules: s.transactions!.keys(stream, 0), ...limits })
    return { s, address, ids: read.map((m) => m.id), env, handle }
  })

const refusalOf = (f: () => unknown): string | undefined => {
  try {
    f()
    return undefined
  } catch (error) {
    return (error as { reason?: string }).reason
  }
}

describe("the transaction handle refuses at the call", () => {
  it.effect("a command outside the allow-list; the refusal sticks though caught", () =>
    Effect.gen(function* () {
      const { handle } = yield* setUp(0)
      const tx = handle()
      tx.incr(tx.key("a"))
      assert.strictEqual(
        refusalOf(() => tx.command("EVAL", "return 1", "0")),
        "CommandNotAllowed",
      )
      assert.strictEqual(tx.refusal?.reason, "CommandNotAllowed")
      assert.strictEqual(tx.used, true)
    }),
  )

  it.effect("arguments that do not fit, and Shardline's own keys", () =>
    Effect.gen(function* () {
      const { handle } = yield* setUp(0)
      assert.strictEqual(
        refusalOf(() => handle().incrby(handle().key("a"), 1.5)),
        "InvalidArguments",
      )
      assert.strictEqual(
        refusalOf(() => handle().del(ShardStreams.ownerTokenKey(stream, 0, group))),
        "ReservedKey",
      )
      assert.strictEqual(
        refusalOf(() => handle().send("out", "k", { "shardline-key": "x" })),
        "InvalidArguments",
      )
    }),
  )

  it.effect("past maxOperations or maxBytes (TooLarge), at the operation that crosses it", () =>
    Effect.gen(function* () {
      const { handle } = yield* setUp(0)
      const ops = handle({ maxOperations: 2, maxBytes: 1_000 })
      ops.incr(ops.key("a")).send("out", "k")
      assert.strictEqual(
        refusalOf(() => ops.incr(ops.key("a"))),
        "TooLarge",
      )
      assert.strictEqual(ops.operations, 2)
      const bytes = handle({ maxOperations: 10, maxBytes: 50 })
      bytes.set(bytes.key("a"), "x")
      assert.strictEqual(
        refusalOf(() => bytes.set(bytes.key("b"), "y".repeat(50))),
        "TooLarge",
      )
    }),
  )

  it.effect(
    "maxBytes counts UTF-8 bytes: exactly at the limit passes, one byte over is TooLarge",
    () =>
      Effect.gen(function* () {
        const { handle } = yield* setUp(0)
        // "€" is 3 bytes in UTF-8 (1 UTF-16 code unit), "😀" 4 (2 code units)
        const three = "€"
        const four = "😀"
        assert.strictEqual(Buffer.byteLength(three), 3)
        assert.strictEqual(Buffer.byteLength(four), 4)
        for (const [what, fill] of [
          ["a write", (tx: TransactionHandle, s: string) => tx.set(tx.key("k"), s)],
          ["a send", (tx: TransactionHandle, s: string) => tx.send("out", "k", { v: s })],
        ] as const) {
          const base = (tx: TransactionHandle) =>
            what === "a write" ? Buffer.byteLength(tx.key("k")) : "outkv".length
          const limit = 3 * 40 + 4 * 10
          const budget = base(handle()) + limit
          // exactly at the limit
          const exact = handle({ maxOperations: 10, maxBytes: budget })
          assert.strictEqual(
            refusalOf(() => fill(exact, three.repeat(40) + four.repeat(10))),
            undefined,
            `${what} of exactly maxBytes`,
          )
          // one byte over
          const over = handle({ maxOperations: 10, maxBytes: budget })
          assert.strictEqual(
            refusalOf(() => fill(over, `${three.repeat(40)}${four.repeat(10)}x`)),
            "TooLarge",
            `${what} one byte over maxBytes`,
          )
          // 3-byte characters at three times the limit in code units are refused
          const tripled = handle({ maxOperations: 10, maxBytes: budget - limit + 40 })
          assert.strictEqual(
            refusalOf(() => fill(tripled, three.repeat(40))),
            "TooLarge",
            `${what} of 120 bytes under a 40-byte budget`,
          )
        }
      }),
  )

  it.effect("after the handler returned (Closed)", () =>
    Effect.gen(function* () {
      const { handle } = yield* setUp(0)
      const tx = handle()
      tx.close()
      assert.strictEqual(
        refusalOf(() => tx.incr(tx.key("a"))),
        "Closed",
      )
    }),
  )

  it.effect("without the ports' transactions: Unsupported", () =>
    Effect.sync(() => {
      const tx = new TransactionHandle({ rules: undefined, maxOperations: 10, maxBytes: 100 })
      assert.strictEqual(
        refusalOf(() => tx.incr("a")),
        "Unsupported",
      )
    }),
  )
})

describe("the commit step", () => {
  it.effect("writes, routes the sends and acknowledges in one step", () =>
    Effect.gen(function* () {
      const { s, address, ids, env, handle } = yield* setUp(2)
      const tx = handle()
      tx.hincrby(tx.key("counts"), "k", 1).send("out", "k", { v: "1" })
      const done = yield* commit(env, { ...address, token: 5 }, "ack", tx, [ids[0]!])
      assert.deepStrictEqual(done, { _tag: "Acked", count: 1 })
      assert.deepStrictEqual(yield* s.transactions!.read(tx.key("counts")), {
        type: "hash",
        value: { k: "1" },
      })
      const routed = yield* env.router.route("out", "k")
      const landed = yield* s.range(ShardStreams.shardKey("out", routed))
      assert.deepStrictEqual(
        landed.map((e) => e.fields),
        [{ v: "1", "shardline-key": "k" }],
      )
      assert.deepStrictEqual(
        (yield* s.pending(address)).map((p) => p.id),
        [ids[1]!],
      )
    }),
  )

  it.effect("a stale owner's commit writes nothing and acknowledges nothing", () =>
    Effect.gen(function* () {
      const { s, address, ids, env, handle } = yield* setUp(1)
      yield* s.setOwnerToken({ ...address, token: 6 })
      const tx = handle()
      tx.incr(tx.key("n")).send("out", "k")
      const done = yield* commit(env, { ...address, token: 5 }, "ack", tx, ids)
      assert.deepStrictEqual(done, { _tag: "Stale" })
      assert.strictEqual(yield* s.transactions!.read(tx.key("n")), undefined)
      for (let shard = 0; shard < 4; shard++)
        assert.deepStrictEqual(yield* s.range(ShardStreams.shardKey("out", shard)), [])
      assert.deepStrictEqual(
        (yield* s.pending(address)).map((p) => p.id),
        ids,
      )
    }),
  )

  it.effect("a commit sent again (its reply lost) applies once", () =>
    Effect.gen(function* () {
      const { s, address, ids, env, handle } = yield* setUp(1)
      const tx = handle()
      tx.incr(tx.key("n"))
      assert.deepStrictEqual(yield* commit(env, { ...address, token: 5 }, "ack", tx, ids), {
        _tag: "Acked",
        count: 1,
      })
      // the same transaction again: its message is no longer pending, nothing is written
      assert.deepStrictEqual(yield* commit(env, { ...address, token: 5 }, "ack", tx, ids), {
        _tag: "Acked",
        count: 1,
      })
      assert.deepStrictEqual(yield* s.transactions!.read(tx.key("n")), {
        type: "string",
        value: "1",
      })
    }),
  )

  it.effect(
    "a send to a stream without a layout is refused (the message fails), nothing written",
    () =>
      Effect.gen(function* () {
        const { s, address, ids, env, handle } = yield* setUp(1)
        const tx = handle()
        tx.incr(tx.key("n")).send("nowhere", "k")
        const done = yield* commit(env, { ...address, token: 5 }, "ack", tx, ids)
        assert.strictEqual(done._tag, "Refused")
        assert.strictEqual(yield* s.transactions!.read(tx.key("n")), undefined)
        assert.strictEqual((yield* s.pending(address)).length, 1)
      }),
  )
})

describe("a handler's transaction after it returned: its own, closed", () => {
  /** What a call on `tx` threw: its refusal's reason, or undefined. */
  const lateCall = (ctx: MessageContext) =>
    refusalOf(() => ctx.transaction.incr(ctx.transaction.key("late")))

  for (const slowPath of [false, true])
    it.effect(
      `eachMessage (${slowPath ? "slow" : "fast"} path): message 1's context read by a late callback while message 2 is in flight refuses with Closed; message 2's transaction is unaffected`,
      () =>
        Effect.gen(function* () {
          let first: MessageContext | undefined
          let release: (() => void) | undefined
          const h = yield* makeHarness({
            transactions: true,
            slowPath,
            settings: { batchSize: 10, maxDeliveries: 1 },
            eachMessage: (m, ctx) => {
              // message 1 keeps its context for a callback that runs after it returned
              if (m.fields.n === "0") {
                first = ctx
                return undefined
              }
              ctx.transaction.incr(ctx.transaction.key("second"))
              return new Promise<void>((resolve) => {
                release = resolve
              })
            },
          })
          yield* h.produce(0, 2)
          yield* h.start(0)
          yield* h.runUntil("message 2 in flight", () => release !== undefined)
          // message 1's late callback: its transaction, closed, never message 2's
          assert.strictEqual(lateCall(first!), "Closed")
          release!()
          const tx = h.streams.transactions!
          const key = (name: string) => tx.keys("orders", 0).key(name)
          for (let i = 0; i < 1_000 && (yield* h.pending(0)).length > 0; i++)
            yield* TestClock.adjust(1)
          // message 2 committed its own write with both acks, and nothing of message 1's callback
          assert.deepStrictEqual(yield* h.pending(0), [])
          assert.deepStrictEqual(yield* tx.read(key("second")), { type: "string", value: "1" })
          assert.strictEqual(yield* tx.read(key("late")), undefined)
          assert.isFalse(h.log.some((e) => e.kind === "deadLetter"))
          assert.deepStrictEqual(
            h.handled().map((e) => e.id),
            h.log.flatMap((e) => (e.kind === "handle" ? [e.id] : [])),
          )
          assert.strictEqual(h.handled().length, 2)
        }),
    )

  for (const readInHandler of [true, false])
    for (const slowPath of [false, true])
      it.effect(
        `eachBatch (${slowPath ? "slow" : "fast"} path): the batch's transaction used after the handler returned is refused with Closed (${readInHandler ? "read in the handler" : "first read after it"}); nothing of it is written`,
        () =>
          Effect.gen(function* () {
            let captured: BatchContext | undefined
            const h = yield* makeHarness({
              transactions: true,
              slowPath,
              eachBatch: (_b, ctx) => {
                captured = ctx
                if (readInHandler) ctx.transaction.incr(ctx.transaction.key("inside"))
                return undefined
              },
            })
            yield* h.produce(0, 2)
            yield* h.start(0)
            yield* h.runUntil("the batch handled", () => captured !== undefined)
            for (let i = 0; i < 1_000 && (yield* h.pending(0)).length > 0; i++)
              yield* TestClock.adjust(1)
            assert.strictEqual(lateCall(captured!), "Closed")
            const tx = h.streams.transactions!
            const key = (name: string) => tx.keys("orders", 0).key(name)
            assert.strictEqual(yield* tx.read(key("late")), undefined)
            assert.deepStrictEqual(
              yield* tx.read(key("inside")),
              readInHandler ? { type: "string", value: "1" } : undefined,
            )
          }),
      )
})
