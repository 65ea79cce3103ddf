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
import { BackendUnavailable, ShardStreams, type Transaction } from "@shardline/core"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { makeSendRouter } from "../src/internal/SendRouter.js"
import { commit, type TransactionEnv } from "../src/internal/TransactionCommit.js"
import { TransactionHandle } from "../src/internal/TransactionHandle.js"
import * as LayoutSource from "../src/LayoutSource.js"
import type { BatchContext, MessageContext } from "../src/Message.js"
import { type Harness, makeHarness } from "./support/pollerHarness.js"

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

describe("group commit (docs/exactly-once.md, 'Group commit')", () => {
  /** The memory port with its commits counted, and a hook on each group commit. */
  const counting = (
    around?: (
      o: Transaction.GroupCommitOptions,
      run: Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError>,
      call: number,
    ) => Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError>,
  ) => {
    const calls = { single: 0, groups: [] as Array<number> }
    const wrap = (port: Transaction.TransactionsShape): Transaction.TransactionsShape => ({
      ...port,
      commit: (o) => {
        calls.single++
        return port.commit(o)
      },
      commitGroup: (o) => {
        calls.groups.push(o.parts.length)
        const run = port.commitGroup(o)
        return around === undefined ? run : around(o, run, calls.groups.length)
      },
    })
    return { calls, wrap }
  }
  const keyOf = (h: Harness, name: string) => h.streams.transactions!.keys("orders", 0).key(name)
  const stored = (h: Harness, name: string) => h.streams.transactions!.read(keyOf(h, name))
  const settle = (h: Harness) =>
    Effect.gen(function* () {
      for (let i = 0; i < 5_000 && (yield* h.pending(0)).length > 0; i++) yield* TestClock.adjust(1)
    })

  for (const slowPath of [false, true])
    it.effect(
      `eachMessage (${slowPath ? "slow" : "fast"} path): a batch's transactions commit in ONE group commit with their acks, after the batch`,
      () =>
        Effect.gen(function* () {
          const { calls, wrap } = counting()
          const seen: Array<unknown> = []
          let h: Harness | undefined
          h = yield* makeHarness({
            transactions: true,
            wrapTransactions: wrap,
            slowPath,
            settings: { batchSize: 10 },
            eachMessage: (_m, ctx) =>
              Effect.runPromise(
                Effect.gen(function* () {
                  // nothing of the batch is visible before its group commit
                  seen.push(yield* stored(h!, "n"))
                  ctx.transaction.incr(ctx.transaction.key("n"))
                }),
              ),
          })
          yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("the batch handled", () => h!.handled().length === 3)
          yield* settle(h)
          assert.deepStrictEqual(calls, { single: 0, groups: [3] })
          assert.deepStrictEqual(seen, [undefined, undefined, undefined])
          assert.deepStrictEqual(yield* stored(h, "n"), { type: "string", value: "3" })
          assert.deepStrictEqual(yield* h.pending(0), [])
        }),
    )

  for (const mode of ["eachMessage", "eachBatch", "plain"] as const)
    it.effect(
      `${mode}: the read after a commit follows its ack (afterAck, docs/exactly-once.md "Cost"); no other read does`,
      () =>
        Effect.gen(function* () {
          const events: Array<string> = []
          let seen = 0
          const { wrap } = counting((_o, run) =>
            Effect.tap(run, () => Effect.sync(() => events.push("commit"))),
          )
          const wrapSingle = (port: Transaction.TransactionsShape) => {
            const inner = wrap(port)
            return {
              ...inner,
              commit: (o: Transaction.CommitOptions) =>
                Effect.tap(inner.commit(o), () => Effect.sync(() => events.push("commit"))),
            }
          }
          const h = yield* makeHarness({
            transactions: true,
            wrapTransactions: wrapSingle,
            settings: { batchSize: 10 },
            beforeRead: (o) =>
              Effect.sync(() => {
                if (o.from !== "pending")
                  events.push(o.afterAck === true ? "read after ack" : "read")
              }),
            ...(mode === "eachBatch"
              ? {
                  eachBatch: (
                    b: { readonly messages: ReadonlyArray<unknown> },
                    ctx: BatchContext,
                  ) => {
                    ctx.transaction.incrby(ctx.transaction.key("n"), b.messages.length)
                    seen += b.messages.length
                  },
                }
              : {
                  eachMessage: (_m: unknown, ctx: MessageContext) => {
                    if (mode === "eachMessage") ctx.transaction.incr(ctx.transaction.key("n"))
                    seen++
                  },
                }),
          })
          yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("the first batch", () => seen === 3)
          yield* settle(h)
          yield* h.produce(0, 2)
          yield* h.runUntil("the second batch", () => seen === 5)
          yield* settle(h)
          if (mode === "plain") {
            assert.isFalse(events.includes("commit"))
            assert.isFalse(events.includes("read after ack"))
          } else {
            // each read right after a commit follows its ack, and only those
            for (const [i, e] of events.entries())
              if (e !== "commit")
                assert.strictEqual(
                  e === "read after ack",
                  events[i - 1] === "commit",
                  `${events.join(", ")}`,
                )
            assert.deepStrictEqual(events.slice(0, 3), ["read", "commit", "read after ack"])
            assert.strictEqual(events.filter((e) => e === "commit").length, 2)
          }
          if (mode !== "plain")
            assert.deepStrictEqual(yield* stored(h, "n"), { type: "string", value: "5" })
        }),
    )

  for (const rideReads of [false, true]) {
    const rides = rideReads ? " (the commit rides the read)" : ""
    it.effect(
      `message 2 of 3 fails in its handler: message 1 commits with its ack before 2's nack; 2's effects are dropped${rides}`,
      () =>
        Effect.gen(function* () {
          let h: Harness | undefined
          const atRetry: Array<unknown> = []
          h = yield* makeHarness({
            transactions: true,
            rideReads,
            settings: { batchSize: 10, maxDeliveries: 3 },
            eachMessage: (m, ctx) =>
              Effect.runPromise(
                Effect.gen(function* () {
                  const tx = ctx.transaction
                  tx.incr(tx.key(`m${m.fields.n}`))
                  if (m.fields.n !== "1") return
                  if (m.deliveryCount === 1) throw new Error("message 2 fails once")
                  // its retry: message 1 committed and acknowledged, 2 (its first
                  // attempt's write) and 3 not
                  atRetry.push(
                    yield* stored(h!, "m0"),
                    yield* stored(h!, "m1"),
                    yield* stored(h!, "m2"),
                    (yield* h!.pending(0)).length,
                  )
                }),
              ),
          })
          const ids = yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("message 2 retried", () => atRetry.length > 0)
          assert.deepStrictEqual(atRetry, [{ type: "string", value: "1" }, undefined, undefined, 2])
          // message 1's ack came no later than message 2's nack
          const nackAt = h.log.findIndex((e) => e.kind === "nack")
          assert.strictEqual((h.log[nackAt] as { id: string }).id, ids[1])
          yield* settle(h)
          for (const name of ["m0", "m1", "m2"])
            assert.deepStrictEqual(yield* stored(h, name), { type: "string", value: "1" }, name)
        }),
    )

    it.effect(
      `message 2 of 3 refused at the group commit: message 1 committed and acked, 2 and 3 neither until 2 is settled; then 3 once${rides}`,
      () =>
        Effect.gen(function* () {
          let h: Harness | undefined
          const atRetry: Array<unknown> = []
          h = yield* makeHarness({
            transactions: true,
            rideReads,
            settings: { batchSize: 10, maxDeliveries: 2 },
            eachMessage: (m, ctx) =>
              Effect.runPromise(
                Effect.gen(function* () {
                  const tx = ctx.transaction
                  // message 1 leaves a string no counter takes, which message 2 INCRs
                  if (m.fields.n === "0") tx.set(tx.key("text"), "x")
                  if (m.fields.n === "1") {
                    if (m.deliveryCount === 2)
                      atRetry.push(
                        yield* stored(h!, "text"),
                        yield* stored(h!, "third"),
                        (yield* h!.pending(0)).length,
                      )
                    tx.incr(tx.key("text"))
                  }
                  if (m.fields.n === "2") tx.incr(tx.key("third"))
                }),
              ),
          })
          const ids = yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("message 2 redelivered", () => atRetry.length > 0)
          // message 3 was handled (its group commit stopped at message 2) but committed nothing
          assert.deepStrictEqual(atRetry, [{ type: "string", value: "x" }, undefined, 2])
          yield* settle(h)
          // message 2 dead-lettered (refused twice), message 3 committed once
          assert.deepStrictEqual(
            h.log.flatMap((e) => (e.kind === "deadLetter" ? [e.id] : [])),
            [ids[1]],
          )
          assert.deepStrictEqual(yield* stored(h, "third"), { type: "string", value: "1" })
          assert.deepStrictEqual(yield* stored(h, "text"), { type: "string", value: "x" })
        }),
    )

    it.effect(
      `message 2 of 3 refused at the group commit and dead-lettered at once: message 3, handled but not committed, is read again and committed once${rides}`,
      () =>
        Effect.gen(function* () {
          const h = yield* makeHarness({
            transactions: true,
            rideReads,
            settings: { batchSize: 10, maxDeliveries: 1 },
            eachMessage: (m, ctx) => {
              const tx = ctx.transaction
              if (m.fields.n === "0") tx.set(tx.key("text"), "x")
              if (m.fields.n === "1") tx.incr(tx.key("text"))
              if (m.fields.n === "2") tx.incr(tx.key("third"))
            },
          })
          const ids = yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("message 2 dead-lettered", () =>
            h.log.some((e) => e.kind === "deadLetter"),
          )
          yield* settle(h)
          assert.deepStrictEqual(yield* h.pending(0), [])
          assert.deepStrictEqual(yield* stored(h, "third"), { type: "string", value: "1" })
          // message 3 was handled twice: in the group that stopped at 2, then alone
          assert.deepStrictEqual(
            h.handled().map((e) => e.id),
            [ids[0], ids[1], ids[2], ids[2]],
          )
        }),
    )

    it.effect(
      `a stale owner's group commit (the shard taken while its handlers ran) writes nothing and acknowledges nothing${rides}`,
      () =>
        Effect.gen(function* () {
          let h: Harness | undefined
          h = yield* makeHarness({
            transactions: true,
            rideReads,
            settings: { batchSize: 10 },
            eachMessage: (m, ctx) =>
              Effect.runPromise(
                Effect.gen(function* () {
                  ctx.transaction.incr(ctx.transaction.key("n"))
                  // another member takes the shard before this batch commits
                  if (m.fields.n === "2") yield* h!.steal(0)
                }),
              ),
          })
          const ids = yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("the commit refused", () => h!.stale.length > 0)
          assert.strictEqual(yield* stored(h, "n"), undefined)
          assert.deepStrictEqual(
            (yield* h.pending(0)).map((p) => p.id),
            ids,
          )
        }),
    )

    it.effect(
      `the process dies between the handlers and the group commit (it never reaches the storage): nothing of the batch is visible, and every message is delivered again and committed once${rides}`,
      () =>
        Effect.gen(function* () {
          const atCrash: Array<unknown> = []
          let h: Harness | undefined
          const { calls, wrap } = counting((_o, run, call) =>
            call === 1
              ? Effect.gen(function* () {
                  atCrash.push(yield* stored(h!, "n"), (yield* h!.pending(0)).length)
                  return yield* new BackendUnavailable({ operation: "commit", message: "died" })
                })
              : run,
          )
          h = yield* makeHarness({
            transactions: true,
            rideReads,
            wrapTransactions: wrap,
            settings: { batchSize: 10 },
            eachMessage: (_m, ctx) => {
              ctx.transaction.incr(ctx.transaction.key("n"))
            },
          })
          const ids = yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("handled again", () => h!.handled().length === 6)
          yield* settle(h)
          assert.deepStrictEqual(atCrash, [undefined, 3])
          assert.deepStrictEqual(
            h.handled().map((e) => e.id),
            [...ids, ...ids],
          )
          assert.deepStrictEqual(calls.groups, [3, 3])
          assert.deepStrictEqual(yield* stored(h, "n"), { type: "string", value: "3" })
        }),
    )

    it.effect(
      `a group commit whose reply is lost applies once: the retry finds its messages acknowledged${rides}`,
      () =>
        Effect.gen(function* () {
          const { wrap } = counting((_o, run, call) =>
            call === 1
              ? Effect.andThen(
                  run,
                  new BackendUnavailable({ operation: "commit", message: "lost" }),
                )
              : run,
          )
          const h = yield* makeHarness({
            transactions: true,
            rideReads,
            wrapTransactions: wrap,
            settings: { batchSize: 10 },
            eachMessage: (_m, ctx) => {
              ctx.transaction.incr(ctx.transaction.key("n"))
            },
          })
          yield* h.produce(0, 3)
          yield* h.start(0)
          yield* h.runUntil("handled", () => h.handled().length === 3)
          yield* settle(h)
          for (let i = 0; i < 200; i++) yield* TestClock.adjust(1)
          assert.strictEqual(h.handled().length, 3)
          assert.deepStrictEqual(yield* stored(h, "n"), { type: "string", value: "3" })
        }),
    )
  }
})

describe("the commit rides the read (docs/exactly-once.md, 'The commit rides the read')", () => {
  /** Events of commits and reads of new entries, and a hook run after each group commit. */
  const tracing = (afterCommit?: (call: number) => Effect.Effect<void>) => {
    const events: Array<string> = []
    let commits = 0
    const wrap = (port: Transaction.TransactionsShape): Transaction.TransactionsShape => ({
      ...port,
      commitGroup: (o) =>
        Effect.tap(port.commitGroup(o), () =>
          Effect.andThen(
            Effect.sync(() => events.push(`commit ${o.parts.length}`)),
            afterCommit?.(++commits) ?? Effect.void,
          ),
        ),
    })
    const beforeRead = (o: { readonly from?: string }) =>
      Effect.sync(() => {
        if (o.from !== "pending") events.push("read")
      })
    return { events, wrap, beforeRead }
  }
  const counted = (h: Harness) =>
    h.streams.transactions!.read(h.streams.transactions!.keys("orders", 0).key("n"))

  for (const mode of ["eachMessage", "eachBatch"] as const)
    it.effect(
      `${mode}: each batch's commit carries the next read, and the next turn handles what it read without a read of its own`,
      () =>
        Effect.gen(function* () {
          const { events, wrap, beforeRead } = tracing()
          const seen: Array<string> = []
          const h = yield* makeHarness({
            transactions: true,
            rideReads: true,
            wrapTransactions: wrap,
            beforeRead,
            settings: { batchSize: 10 },
            ...(mode === "eachBatch"
              ? {
                  eachBatch: (
                    b: { readonly messages: ReadonlyArray<{ readonly id: string }> },
                    ctx: BatchContext,
                  ) => {
                    ctx.transaction.incrby(ctx.transaction.key("n"), b.messages.length)
                    for (const m of b.messages) seen.push(m.id)
                  },
                }
              : {
                  eachMessage: (m: { readonly id: string }, ctx: MessageContext) => {
                    ctx.transaction.incr(ctx.transaction.key("n"))
                    seen.push(m.id)
                  },
                }),
          })
          const ids = yield* h.produce(0, 25)
          yield* h.start(0)
          yield* h.runUntil("all handled", () => seen.length === 25)
          for (let i = 0; i < 5_000 && (yield* h.pending(0)).length > 0; i++)
            yield* TestClock.adjust(1)
          const parts = mode === "eachBatch" ? [1, 1, 1] : [10, 10, 5]
          // the first read, then each commit followed by the read it carried:
          // never a second read between two commits
          assert.deepStrictEqual(events.slice(0, 7), [
            "read",
            `commit ${parts[0]}`,
            "read",
            `commit ${parts[1]}`,
            "read",
            `commit ${parts[2]}`,
            "read",
          ])
          assert.deepStrictEqual(seen, ids)
          assert.deepStrictEqual(yield* counted(h), { type: "string", value: "25" })
          assert.deepStrictEqual(yield* h.pending(0), [])
        }),
    )

  it.effect(
    "a shard paused after a commit read its next batch keeps it: handled after the resume, committed once",
    () =>
      Effect.gen(function* () {
        let h: Harness | undefined
        const { wrap, beforeRead } = tracing((call) =>
          Effect.sync(() => {
            if (call === 1) h!.paused.add(0)
          }),
        )
        h = yield* makeHarness({
          transactions: true,
          rideReads: true,
          wrapTransactions: wrap,
          beforeRead,
          settings: { batchSize: 5 },
          eachMessage: (_m, ctx) => {
            ctx.transaction.incr(ctx.transaction.key("n"))
          },
        })
        const ids = yield* h.produce(0, 10)
        yield* h.start(0)
        yield* h.runUntil("paused", () => h!.poller.current(0)?.state === "paused")
        yield* TestClock.adjust(10_000)
        // the second batch was read (it is pending with this consumer) but not handled
        assert.strictEqual(h.handled().length, 5)
        assert.deepStrictEqual(
          (yield* h.pending(0)).map((p) => p.id),
          ids.slice(5),
        )
        h.paused.delete(0)
        h.poller.resume(0)
        yield* h.runUntil("all handled", () => h!.handled().length === 10)
        for (let i = 0; i < 5_000 && (yield* h.pending(0)).length > 0; i++)
          yield* TestClock.adjust(1)
        assert.deepStrictEqual(
          h.handled().map((e) => e.id),
          ids,
        )
        assert.deepStrictEqual(yield* counted(h), { type: "string", value: "10" })
      }),
  )

  it.effect(
    "a shard revoked after a commit read its next batch: that batch stays pending for the next owner, which commits it once",
    () =>
      Effect.gen(function* () {
        let h: Harness | undefined
        // held (paused) right after the commit that read the next batch, then revoked
        const { wrap, beforeRead } = tracing((call) =>
          Effect.sync(() => {
            if (call === 1) h!.paused.add(0)
          }),
        )
        h = yield* makeHarness({
          transactions: true,
          rideReads: true,
          wrapTransactions: wrap,
          beforeRead,
          settings: { batchSize: 5 },
          eachMessage: (_m, ctx) => {
            ctx.transaction.incr(ctx.transaction.key("n"))
          },
        })
        const ids = yield* h.produce(0, 10)
        yield* h.start(0)
        yield* h.runUntil("paused", () => h!.poller.current(0)?.state === "paused")
        const drained = yield* Effect.forkChild(h.poller.drain(0, 1_000))
        yield* h.runUntil("revoked", () => drained.pollUnsafe() !== undefined)
        assert.isFalse((yield* Fiber.join(drained)).abandoned)
        h.paused.delete(0)
        assert.strictEqual(h.handled().length, 5)
        assert.deepStrictEqual(
          (yield* h.pending(0)).map((p) => p.id),
          ids.slice(5),
        )
        // the next owner (here: this member again, under a new token) claims and commits them
        yield* h.start(0)
        yield* h.runUntil("all handled", () => h!.handled().length === 10)
        for (let i = 0; i < 5_000 && (yield* h.pending(0)).length > 0; i++)
          yield* TestClock.adjust(1)
        assert.deepStrictEqual(
          h.handled().map((e) => e.id),
          ids,
        )
        assert.deepStrictEqual(yield* counted(h), { type: "string", value: "10" })
      }),
  )

  it.effect(
    "a seek asked after a commit read its next batch applies once that batch is handled",
    () =>
      Effect.gen(function* () {
        let h: Harness | undefined
        const seeks: Array<number> = []
        const { wrap, beforeRead } = tracing((call) =>
          call === 1
            ? Effect.asVoid(
                Effect.forkDetach(
                  Effect.andThen(
                    h!.poller.seek(0, "end"),
                    Effect.sync(() => {
                      seeks.push(h!.handled().length)
                    }),
                  ),
                ),
              )
            : Effect.void,
        )
        h = yield* makeHarness({
          transactions: true,
          rideReads: true,
          wrapTransactions: wrap,
          beforeRead,
          settings: { batchSize: 5 },
          eachMessage: (_m, ctx) => {
            ctx.transaction.incr(ctx.transaction.key("n"))
          },
        })
        const ids = yield* h.produce(0, 10)
        yield* h.start(0)
        yield* h.runUntil("seeked", () => seeks.length > 0)
        for (let i = 0; i < 5_000 && (yield* h.pending(0)).length > 0; i++)
          yield* TestClock.adjust(1)
        // the batch read with the first commit was handled before the seek ran
        assert.deepStrictEqual(seeks, [10])
        assert.deepStrictEqual(
          h.handled().map((e) => e.id),
          ids,
        )
        assert.deepStrictEqual(yield* counted(h), { type: "string", value: "10" })
      }),
  )

  it.effect(
    "no ride when a transaction sends (its outbox or seal is handled before the next read)",
    () =>
      Effect.gen(function* () {
        const { events, wrap, beforeRead } = tracing()
        const h = yield* makeHarness({
          transactions: true,
          rideReads: true,
          wrapTransactions: wrap,
          beforeRead,
          settings: { batchSize: 5 },
          eachMessage: (m, ctx) => {
            // back into the shard, once per message produced here
            if (m.fields.n !== "x") ctx.transaction.send("orders", `k${m.fields.n}`, { n: "x" })
          },
        })
        yield* h.produce(0, 5)
        yield* h.start(0)
        yield* h.runUntil("handled", () => h.handled().length >= 5)
        for (let i = 0; i < 200; i++) yield* TestClock.adjust(1)
        const at = events.indexOf("commit 5")
        assert.isAtLeast(at, 0)
        // the read after the commit is the next turn's own (it sees the sends)
        assert.strictEqual(events[at + 1], "read")
        yield* h.runUntil("the sends handled", () => h.handled().length === 10)
      }),
  )
})

describe("a batch's transaction with part of the batch resolved (docs/exactly-once.md, 'Batches')", () => {
  it.effect(
    "commits with the resolved messages' acks; the first unresolved one fails, and its retry commits its own",
    () =>
      Effect.gen(function* () {
        let calls = 0
        const handled: Array<ReadonlyArray<string>> = []
        const h = yield* makeHarness({
          transactions: true,
          autoResolve: false,
          settings: { batchSize: 4, retryBackoff: { initialMs: 10 } },
          eachBatch: (b, ctx) => {
            calls++
            handled.push(b.messages.map((m) => m.id))
            ctx.transaction.incrby(ctx.transaction.key("n"), b.messages.length)
            // the first call resolves two of four; later calls resolve all
            ctx.resolve(b.messages[calls === 1 ? 1 : b.messages.length - 1]!)
          },
        })
        const ids = yield* h.produce(0, 4)
        yield* h.start(0)
        yield* h.runUntil("the rest handled again", () => handled.length >= 2, 10_000, 10)
        for (let i = 0; i < 5_000 && (yield* h.pending(0)).length > 0; i++)
          yield* TestClock.adjust(1)
        // the rest is read again from the first unresolved message
        assert.deepStrictEqual(handled[0], ids)
        assert.deepStrictEqual(handled[1], ids.slice(2))
        // each call's transaction committed once, with its resolved messages:
        // 4 (the first call's writes) + 2 (the retry's)
        assert.deepStrictEqual(
          yield* h.streams.transactions!.read(h.streams.transactions!.keys("orders", 0).key("n")),
          { type: "string", value: "6" },
        )
        assert.deepStrictEqual(
          h.log.filter((e) => e.kind === "nack").map((e) => (e.kind === "nack" ? e.id : undefined)),
          [ids[2]],
        )
        assert.deepStrictEqual(yield* h.pending(0), [])
      }),
  )
})
