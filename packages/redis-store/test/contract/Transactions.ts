/**
 * The transaction contract (docs/exactly-once.md): written once, run
 * unchanged on core's memory port and on every Redis target
 * (test/Transactions.test.ts). A commit's writes, sends and ack happen
 * together or not at all: a stale owner, a commit sent again after its
 * reply was lost, messages no longer pending, a write the stored value
 * cannot take and a sealed target each leave everything as it was.
 */
import { assert, it } from "@effect/vitest"
import { ShardStreams, Transaction, type TransactionRefused } from "@shardline/core"
import { Effect } from "effect"
import { unique } from "../support/targets.js"
import type { Vanish } from "./ShardStreams.js"

const { shardKey } = ShardStreams

type Streams = ShardStreams.ShardStreamsShape

/** A source shard with `n` messages read (pending) by consumer c1 under token 5. */
const setUp = (s: Streams, n: number) =>
  Effect.gen(function* () {
    const stream = unique("tx-in")
    const out = unique("tx-out")
    const base = { stream, shard: 2, group: "g" }
    yield* s.setOwnerToken({ ...base, token: 5 })
    for (let i = 0; i < n; i++) yield* s.append(stream, 2, { n: String(i) })
    const read = yield* s.read({ ...base, token: 5, consumer: "c1", count: n })
    const tx = s.transactions!
    const keys = tx.keys(stream, 2)
    return { stream, out, base, ids: read.map((m) => m.id), tx, keys }
  })

const w = (command: string, ...args: Array<string>): Transaction.Write => ({ command, args })

/** Where a send of the transaction is now: in its target shard (direct) or in the outbox. */
const sentEntries = (s: Streams, source: ShardStreams.GroupAddress, out: string, shard: number) =>
  Effect.gen(function* () {
    const tx = s.transactions!
    if (tx.sends === "direct")
      return (yield* s.range(shardKey(out, shard))).map((e) => ({ ...e.fields }))
    return (yield* tx.outbox!.read(source, 100)).map((e) => ({
      ...e.fields,
      "shardline-key": e.key,
    }))
  })

export const transactionsContract = (subject: () => Streams) => {
  it.live("a commit writes, sends and acknowledges together", () =>
    Effect.gen(function* () {
      const s = subject()
      const { out, base, ids, tx, keys } = yield* setUp(s, 2)
      const counter = keys.key("counter")
      const members = keys.key("members")
      const outcome = yield* tx.commit({
        ...base,
        token: 5,
        ids: [ids[0]!],
        mode: "ack",
        writes: [w("HINCRBY", counter, "k1", "1"), w("SADD", members, "a", "b")],
        sends: [{ stream: out, shard: 1, key: "k1", fields: { v: "x" } }],
      })
      assert.deepStrictEqual(outcome, { _tag: "Committed" })
      assert.deepStrictEqual(yield* tx.read(counter), { type: "hash", value: { k1: "1" } })
      assert.deepStrictEqual(yield* tx.read(members), { type: "set", value: ["a", "b"] })
      assert.deepStrictEqual(yield* sentEntries(s, base, out, 1), [
        { v: "x", "shardline-key": "k1" },
      ])
      // acknowledged: only the other message is still pending
      assert.deepStrictEqual(
        (yield* s.pending(base)).map((p) => p.id),
        [ids[1]!],
      )
    }),
  )

  it.live("a stale owner's commit writes nothing and acknowledges nothing", () =>
    Effect.gen(function* () {
      const s = subject()
      const { out, base, ids, tx, keys } = yield* setUp(s, 1)
      yield* s.setOwnerToken({ ...base, token: 6 })
      const counter = keys.key("counter")
      const result = yield* Effect.flip(
        tx.commit({
          ...base,
          token: 5,
          ids,
          mode: "ack",
          writes: [w("INCR", counter)],
          sends: [{ stream: out, shard: 0, key: "k", fields: { v: "1" } }],
        }),
      )
      assert.strictEqual(result._tag, "StaleOwner")
      assert.isUndefined(yield* tx.read(counter))
      assert.deepStrictEqual(yield* sentEntries(s, base, out, 0), [])
      assert.deepStrictEqual(
        (yield* s.pending(base)).map((p) => p.id),
        ids,
      )
    }),
  )

  it.live(
    "a commit sent again after its reply was lost finds its messages acknowledged and writes nothing",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { out, base, ids, tx, keys } = yield* setUp(s, 1)
        const counter = keys.key("counter")
        const commit = {
          ...base,
          token: 5,
          ids,
          mode: "ack" as const,
          writes: [w("INCRBY", counter, "3")],
          sends: [{ stream: out, shard: 0, key: "k", fields: { v: "1" } }],
        }
        assert.deepStrictEqual(yield* tx.commit(commit), { _tag: "Committed" })
        // the same commit again (a resend, or a retried handler's): nothing more
        assert.deepStrictEqual(yield* tx.commit(commit), { _tag: "AlreadyCommitted" })
        assert.deepStrictEqual(yield* tx.commit(commit), { _tag: "AlreadyCommitted" })
        assert.deepStrictEqual(yield* tx.read(counter), { type: "string", value: "3" })
        assert.strictEqual((yield* sentEntries(s, base, out, 0)).length, 1)
        // and a newer owner's retry of it too (the fence holds, then the pending check)
        yield* s.setOwnerToken({ ...base, token: 7 })
        assert.deepStrictEqual(yield* tx.commit({ ...commit, token: 7 }), {
          _tag: "AlreadyCommitted",
        })
        assert.deepStrictEqual(yield* tx.read(counter), { type: "string", value: "3" })
      }),
  )

  it.live("some messages no longer pending: nothing written, nothing acknowledged", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, tx, keys } = yield* setUp(s, 3)
      yield* s.ack({ ...base, token: 5, ids: [ids[1]!], mode: "ack" })
      const counter = keys.key("counter")
      const outcome = yield* tx.commit({
        ...base,
        token: 5,
        ids,
        mode: "ack",
        writes: [w("INCR", counter)],
        sends: [],
      })
      assert.deepStrictEqual(outcome, { _tag: "NotPending", ids: [ids[1]!] })
      assert.isUndefined(yield* tx.read(counter))
      assert.deepStrictEqual(
        (yield* s.pending(base)).map((p) => p.id),
        [ids[0]!, ids[2]!],
      )
    }),
  )

  it.live(
    "a write the stored value cannot take refuses the whole commit before anything is written",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { out, base, ids, tx, keys } = yield* setUp(s, 1)
        const str = keys.key("str")
        const n = keys.key("n")
        const big = keys.key("big")
        const hash = keys.key("hash")
        // set the stage with a committed transaction of another message
        yield* s.append(base.stream, 2, { n: "x" })
        const stage = yield* s.read({ ...base, token: 5, consumer: "c1", count: 1 })
        yield* tx.commit({
          ...base,
          token: 5,
          ids: [stage[0]!.id],
          mode: "ack",
          writes: [
            w("SET", str, "abc"),
            w("SET", big, "9007199254740991"),
            w("INCRBY", n, "1"),
            w("HSET", hash, "f", "abc", "g", "9007199254740991"),
          ],
          sends: [],
        })
        const cases: ReadonlyArray<readonly [Transaction.Write, string]> = [
          [w("HSET", str, "f", "v"), "WrongType"],
          [w("SADD", n, "m"), "WrongType"],
          [w("INCR", str), "NotANumber"],
          [w("INCRBYFLOAT", str, "1"), "NotANumber"],
          [w("INCR", big), "OutOfRange"],
          [w("INCRBY", n, "9007199254740991"), "OutOfRange"],
          // a counter's first read also checks the key's type (GET / HGET)
          [w("INCR", hash), "WrongType"],
          [w("INCRBYFLOAT", hash, "1"), "WrongType"],
          [w("HINCRBY", str, "f", "1"), "WrongType"],
          [w("HINCRBYFLOAT", n, "f", "1"), "WrongType"],
          [w("HINCRBY", hash, "f", "1"), "NotANumber"],
          [w("HINCRBYFLOAT", hash, "f", "1"), "NotANumber"],
          [w("HINCRBY", hash, "g", "1"), "OutOfRange"],
          // last: it commits (and acknowledges `ids`)
          [w("HINCRBY", keys.key("h"), "f", "1"), "ok"],
        ]
        // a stored hash's other fields are read from storage too: the first
        // field's read does not make the hash look empty
        const second = yield* Effect.flip(
          tx.commit({
            ...base,
            token: 5,
            ids,
            mode: "ack",
            writes: [w("HINCRBY", hash, "absent", "1"), w("HINCRBY", hash, "f", "1")],
            sends: [],
          }),
        )
        assert.strictEqual((second as { reason?: string }).reason, "NotANumber")
        assert.strictEqual((second as { index?: number }).index, 1)
        for (const [bad, reason] of cases) {
          const before = [yield* tx.read(n), yield* tx.read(keys.key("other"))]
          const result = yield* Effect.result(
            tx.commit({
              ...base,
              token: 5,
              ids,
              mode: "ack",
              writes: [w("INCRBY", n, "10"), w("SET", keys.key("other"), "x"), bad],
              sends: [{ stream: out, shard: 0, key: "k", fields: { v: "1" } }],
            }),
          )
          if (reason === "ok") {
            assert.strictEqual(result._tag, "Success", bad.command)
            continue
          }
          assert.strictEqual(result._tag, "Failure", bad.command)
          const error = (result as { failure: { _tag: string; reason?: string; index?: number } })
            .failure
          assert.strictEqual(error._tag, "TransactionRefused")
          assert.strictEqual(error.reason, reason, bad.command)
          assert.strictEqual(error.index, 2)
          if (reason === "WrongType")
            assert.match(String((error as { message?: string }).message), /holds a (hash|string)/)
          assert.deepStrictEqual([yield* tx.read(n), yield* tx.read(keys.key("other"))], before)
          assert.deepStrictEqual(yield* sentEntries(s, base, out, 0), [])
          assert.deepStrictEqual(
            (yield* s.pending(base)).map((p) => p.id),
            ids,
          )
        }
      }),
  )

  it.live("writes see the writes before them: types and counters through the transaction", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, tx, keys } = yield* setUp(s, 2)
      const k = keys.key("k")
      const typed = yield* Effect.flip(
        tx.commit({
          ...base,
          token: 5,
          ids: [ids[0]!],
          mode: "ack",
          writes: [w("DEL", k), w("SET", k, "1"), w("HSET", k, "f", "v")],
          sends: [],
        }),
      )
      assert.strictEqual((typed as { reason?: string }).reason, "WrongType")
      const ok = yield* tx.commit({
        ...base,
        token: 5,
        ids: [ids[0]!],
        mode: "ack",
        writes: [
          w("SET", k, "5"),
          w("INCRBY", k, "2"),
          w("HSET", keys.key("h"), "a", "1"),
          w("HINCRBY", keys.key("h"), "a", "4"),
          w("HINCRBYFLOAT", keys.key("h"), "b", "0.5"),
          w("ZADD", keys.key("z"), "1", "m"),
          w("ZINCRBY", keys.key("z"), "2", "m"),
          w("RPUSH", keys.key("l"), "x", "y"),
          w("LPUSH", keys.key("l"), "w"),
          w("INCRBYFLOAT", keys.key("f"), "1.5"),
          w("DECR", keys.key("d")),
          w("SET", keys.key("ttl"), "v", "PX", "60000"),
          w("PEXPIRE", keys.key("l"), "60000"),
        ],
        sends: [],
      })
      assert.deepStrictEqual(ok, { _tag: "Committed" })
      assert.deepStrictEqual(yield* tx.read(k), { type: "string", value: "7" })
      assert.deepStrictEqual(yield* tx.read(keys.key("h")), {
        type: "hash",
        value: { a: "5", b: "0.5" },
      })
      assert.deepStrictEqual(yield* tx.read(keys.key("z")), { type: "zset", value: [["m", 3]] })
      assert.deepStrictEqual(yield* tx.read(keys.key("l")), {
        type: "list",
        value: ["w", "x", "y"],
      })
      assert.deepStrictEqual(yield* tx.read(keys.key("f")), { type: "string", value: "1.5" })
      assert.deepStrictEqual(yield* tx.read(keys.key("d")), { type: "string", value: "-1" })
      assert.deepStrictEqual(yield* tx.read(keys.key("ttl")), { type: "string", value: "v" })
    }),
  )

  it.live(
    "the port itself refuses what no transaction may do: other commands, Shardline's keys",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { base, ids, tx, keys } = yield* setUp(s, 1)
        const refusal = (writes: ReadonlyArray<Transaction.Write>) =>
          Effect.map(
            Effect.flip(tx.commit({ ...base, token: 5, ids, mode: "ack", writes, sends: [] })),
            (e) => (e as { reason?: string }).reason ?? e._tag,
          )
        assert.strictEqual(yield* refusal([w("FLUSHALL")]), "CommandNotAllowed")
        assert.strictEqual(yield* refusal([w("EVAL", "return 1", "0")]), "CommandNotAllowed")
        assert.strictEqual(yield* refusal([w("GET", keys.key("x"))]), "CommandNotAllowed")
        assert.strictEqual(
          yield* refusal([w("SET", `${shardKey(base.stream, 2)}:owner:g`, "999999999")]),
          "ReservedKey",
        )
        assert.strictEqual(yield* refusal([w("DEL", shardKey(base.stream, 2))]), "ReservedKey")
        assert.strictEqual(yield* refusal([w("INCRBY", keys.key("x"), "1.5")]), "InvalidArguments")
        // a lower-case name is the same command
        assert.deepStrictEqual(
          yield* tx.commit({
            ...base,
            token: 5,
            ids,
            mode: "ack",
            writes: [w("incr", keys.key("x"))],
            sends: [],
          }),
          { _tag: "Committed" },
        )
        assert.deepStrictEqual(yield* tx.read(keys.key("x")), { type: "string", value: "1" })
        assert.strictEqual(yield* s.ownerToken(base), 5)
      }),
  )

  it.live("xackdel: the committed message is deleted once every group acknowledged it", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, tx, keys } = yield* setUp(s, 2)
      const outcome = yield* tx.commit({
        ...base,
        token: 5,
        ids: [ids[0]!],
        mode: "xackdel",
        writes: [w("INCR", keys.key("n"))],
        sends: [],
      })
      assert.deepStrictEqual(outcome, { _tag: "Committed" })
      assert.deepStrictEqual(
        (yield* s.range(shardKey(base.stream, 2))).map((e) => e.id),
        [ids[1]!],
      )
    }),
  )

  it.live("sends keep their order and land only at commit", () =>
    Effect.gen(function* () {
      const s = subject()
      const { out, base, ids, tx } = yield* setUp(s, 3)
      for (const [i, id] of ids.entries()) {
        assert.deepStrictEqual(
          yield* sentEntries(s, base, out, 4),
          ids.slice(0, i).map((_, j) => ({
            n: String(j),
            "shardline-key": "k",
          })),
        )
        yield* tx.commit({
          ...base,
          token: 5,
          ids: [id],
          mode: "ack",
          writes: [],
          sends: [{ stream: out, shard: 4, key: "k", fields: { n: String(i) } }],
        })
      }
      assert.deepStrictEqual(
        (yield* sentEntries(s, base, out, 4)).map((e: Record<string, string>) => e.n),
        ["0", "1", "2"],
      )
    }),
  )
}

/**
 * The group commit (docs/exactly-once.md, "Group commit"): the parts of one
 * batch in one fenced step, in order, stopping at the first that cannot
 * commit; a part's effects commit only with its own ack.
 */
export const groupCommitContract = (subject: () => Streams) => {
  const part = (id: string, ...writes: Array<Transaction.Write>): Transaction.CommitPart => ({
    ids: [id],
    writes,
    sends: [],
  })
  const pendingIds = (s: Streams, base: ShardStreams.GroupAddress) =>
    Effect.map(s.pending(base), (ps) => ps.map((p) => p.id))

  it.live("a group commits every part, its writes and its ack, in one step", () =>
    Effect.gen(function* () {
      const s = subject()
      const { out, base, ids, tx, keys } = yield* setUp(s, 4)
      const n = keys.key("n")
      const done = yield* tx.commitGroup({
        ...base,
        token: 5,
        mode: "ack",
        parts: [
          { ids: [ids[0]!], writes: [], sends: [] },
          part(ids[1]!, w("INCR", n)),
          {
            ids: [ids[2]!],
            writes: [w("INCRBY", n, "10")],
            sends: [{ stream: out, shard: 0, key: "k", fields: { v: "2" } }],
          },
        ],
      })
      assert.deepStrictEqual(done, { committed: ["Committed", "Committed", "Committed"] })
      assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "11" })
      assert.deepStrictEqual(yield* sentEntries(s, base, out, 0), [
        { v: "2", "shardline-key": "k" },
      ])
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[3]!])
    }),
  )

  it.live(
    "other pending entries between the parts' messages: every part commits, they stay pending",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { base, ids, tx, keys } = yield* setUp(s, 6)
        const n = keys.key("n")
        // ids 0, 2 and 5 pending but not in the group (a retry's, a later batch's)
        const done = yield* tx.commitGroup({
          ...base,
          token: 5,
          mode: "ack",
          parts: [part(ids[1]!, w("INCR", n)), part(ids[3]!, w("INCR", n)), part(ids[4]!)],
        })
        assert.deepStrictEqual(done, { committed: ["Committed", "Committed", "Committed"] })
        assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "2" })
        assert.deepStrictEqual(yield* pendingIds(s, base), [ids[0]!, ids[2]!, ids[5]!])
        // sent again (its reply lost): every part had committed, nothing written again
        const again = yield* tx.commitGroup({
          ...base,
          token: 5,
          mode: "ack",
          parts: [part(ids[1]!, w("INCR", n)), part(ids[3]!, w("INCR", n))],
        })
        assert.deepStrictEqual(again, { committed: ["AlreadyCommitted", "AlreadyCommitted"] })
        assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "2" })
      }),
  )

  it.live("message 2 of 3 refused: message 1 committed and acknowledged, 2 and 3 neither", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, tx, keys } = yield* setUp(s, 3)
      const n = keys.key("n")
      const text = keys.key("text")
      const third = keys.key("third")
      const done = yield* tx.commitGroup({
        ...base,
        token: 5,
        mode: "ack",
        parts: [
          // message 1 leaves a string no counter takes ...
          part(ids[0]!, w("INCR", n), w("SET", text, "x")),
          // ... so message 2's INCR of it cannot apply (seen as message 1 leaves it)
          part(ids[1]!, w("INCR", n), w("INCR", text)),
          // message 3 could commit alone: it must not, after a failed message 2
          part(ids[2]!, w("INCR", third)),
        ],
      })
      assert.deepStrictEqual(done.committed, ["Committed"])
      assert.strictEqual(done.stopped?._tag, "Refused")
      const refusal = (done.stopped as { error: { reason: string; index: number } }).error
      assert.deepStrictEqual([refusal.reason, refusal.index], ["NotANumber", 1])
      assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "1" })
      assert.deepStrictEqual(yield* tx.read(text), { type: "string", value: "x" })
      assert.isUndefined(yield* tx.read(third))
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!, ids[2]!])
    }),
  )

  it.live(
    "a counter's range is checked across parts: the part that leaves it stops the group",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { base, ids, tx, keys } = yield* setUp(s, 2)
        const n = keys.key("n")
        const done = yield* tx.commitGroup({
          ...base,
          token: 5,
          mode: "ack",
          parts: [
            part(ids[0]!, w("INCRBY", n, String(Number.MAX_SAFE_INTEGER - 1))),
            part(ids[1]!, w("INCRBY", n, "2")),
          ],
        })
        assert.deepStrictEqual(done.committed, ["Committed"])
        assert.strictEqual(
          (done.stopped as { error: { reason: string } } | undefined)?.error.reason,
          "OutOfRange",
        )
        assert.deepStrictEqual(yield* tx.read(n), {
          type: "string",
          value: String(Number.MAX_SAFE_INTEGER - 1),
        })
        assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!])
      }),
  )

  it.live("a stale owner's group commit writes nothing and acknowledges nothing", () =>
    Effect.gen(function* () {
      const s = subject()
      const { out, base, ids, tx, keys } = yield* setUp(s, 2)
      yield* s.setOwnerToken({ ...base, token: 6 })
      const n = keys.key("n")
      const failed = yield* Effect.flip(
        tx.commitGroup({
          ...base,
          token: 5,
          mode: "ack",
          parts: [
            part(ids[0]!, w("INCR", n)),
            {
              ids: [ids[1]!],
              writes: [w("INCR", n)],
              sends: [{ stream: out, shard: 0, key: "k", fields: { v: "1" } }],
            },
          ],
        }),
      )
      assert.strictEqual(failed._tag, "StaleOwner")
      assert.isUndefined(yield* tx.read(n))
      assert.deepStrictEqual(yield* sentEntries(s, base, out, 0), [])
      assert.deepStrictEqual(yield* pendingIds(s, base), ids)
    }),
  )

  it.live(
    "a group sent again: its committed parts are AlreadyCommitted and not repeated, the rest commits",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { base, ids, tx, keys } = yield* setUp(s, 3)
        const n = keys.key("n")
        const first = {
          ...base,
          token: 5,
          mode: "ack" as const,
          parts: [part(ids[0]!, w("INCR", n))],
        }
        assert.deepStrictEqual(yield* tx.commitGroup(first), { committed: ["Committed"] })
        const again = yield* tx.commitGroup({
          ...first,
          parts: [...first.parts, part(ids[1]!, w("INCR", n))],
        })
        assert.deepStrictEqual(again, { committed: ["AlreadyCommitted", "Committed"] })
        assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "2" })
        assert.deepStrictEqual(yield* pendingIds(s, base), [ids[2]!])
      }),
  )

  it.live("a part partly pending stops the group there: nothing of it or after it", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, tx, keys } = yield* setUp(s, 4)
      yield* s.ack({ ...base, token: 5, ids: [ids[2]!], mode: "ack" })
      const n = keys.key("n")
      const done = yield* tx.commitGroup({
        ...base,
        token: 5,
        mode: "ack",
        parts: [
          part(ids[0]!, w("INCR", n)),
          { ids: [ids[1]!, ids[2]!], writes: [w("INCR", n)], sends: [] },
          part(ids[3]!, w("INCR", n)),
        ],
      })
      assert.deepStrictEqual(done, {
        committed: ["Committed"],
        stopped: { _tag: "NotPending", ids: [ids[2]!] },
      })
      assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "1" })
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!, ids[3]!])
    }),
  )

  it.live("a part the storage's own checks refuse stops the group there (a reserved key)", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, tx, keys } = yield* setUp(s, 2)
      const n = keys.key("n")
      const done = yield* tx.commitGroup({
        ...base,
        token: 5,
        mode: "ack",
        parts: [
          part(ids[0]!, w("INCR", n)),
          part(ids[1]!, w("INCR", ShardStreams.ownerTokenKey(base.stream, 2, "g"))),
        ],
      })
      assert.deepStrictEqual(done.committed, ["Committed"])
      assert.strictEqual(
        (done.stopped as { error: { reason: string } } | undefined)?.error.reason,
        "ReservedKey",
      )
      assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "1" })
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!])
    }),
  )
}

/** Direct sends (memory, one Redis node): a sealed target refuses the commit. */
export const directSendsContract = (subject: () => Streams) => {
  it.live("a send to a sealed shard refuses the whole commit (route again, commit again)", () =>
    Effect.gen(function* () {
      const s = subject()
      const { out, base, ids, tx, keys } = yield* setUp(s, 1)
      yield* s.seal(out, 1)
      const commit = {
        ...base,
        token: 5,
        ids,
        mode: "ack" as const,
        writes: [w("INCR", keys.key("n"))],
        sends: [
          { stream: out, shard: 0, key: "a", fields: { v: "1" } },
          { stream: out, shard: 1, key: "b", fields: { v: "2" } },
        ],
      }
      const refused = yield* Effect.flip(tx.commit(commit))
      assert.deepStrictEqual(
        [refused._tag, (refused as { shard?: number }).shard],
        ["ShardSealed", 1],
      )
      assert.isUndefined(yield* tx.read(keys.key("n")))
      assert.deepStrictEqual(yield* s.range(shardKey(out, 0)), [])
      assert.deepStrictEqual(
        (yield* s.pending(base)).map((p) => p.id),
        ids,
      )
      const routed = { ...commit, sends: [commit.sends[0]!, { ...commit.sends[1]!, shard: 2 }] }
      assert.deepStrictEqual(yield* tx.commit(routed), { _tag: "Committed" })
      assert.strictEqual((yield* s.range(shardKey(out, 2))).length, 1)
    }),
  )

  it.live(
    "a group stops at the part whose send targets a sealed shard; the parts before commit",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { out, base, ids, tx, keys } = yield* setUp(s, 2)
        yield* s.seal(out, 1)
        const n = keys.key("n")
        const done = yield* tx.commitGroup({
          ...base,
          token: 5,
          mode: "ack",
          parts: [
            {
              ids: [ids[0]!],
              writes: [w("INCR", n)],
              sends: [{ stream: out, shard: 0, key: "a", fields: { v: "1" } }],
            },
            {
              ids: [ids[1]!],
              writes: [w("INCR", n)],
              sends: [{ stream: out, shard: 1, key: "b", fields: { v: "2" } }],
            },
          ],
        })
        assert.deepStrictEqual(done.committed, ["Committed"])
        assert.strictEqual(done.stopped?._tag, "Sealed")
        assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "1" })
        assert.strictEqual((yield* s.range(shardKey(out, 0))).length, 1)
        assert.deepStrictEqual(
          (yield* s.pending(base)).map((p) => p.id),
          [ids[1]!],
        )
      }),
  )
}

/**
 * The outbox (a cluster; a single node with `transactionSends: "outbox"`):
 * each entry delivered exactly once to one shard, in order, across resends,
 * seals and two relayers.
 */
export const outboxContract = (subject: () => Streams) => {
  it.live(
    "delivered once per target shard: a second delivery, or a later one, is a duplicate",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { out, base, ids, tx } = yield* setUp(s, 2)
        const outbox = tx.outbox!
        for (const [i, id] of ids.entries())
          yield* tx.commit({
            ...base,
            token: 5,
            ids: [id],
            mode: "ack",
            writes: [],
            sends: [{ stream: out, shard: 3, key: "k", fields: { n: String(i) } }],
          })
        assert.strictEqual(yield* outbox.size(base), 2)
        const entries = yield* outbox.read(base, 10)
        assert.deepStrictEqual(
          entries.map((e) => [e.stream, e.shard, e.key, e.fields.n]),
          [
            [out, 3, "k", "0"],
            [out, 3, "k", "1"],
          ],
        )
        assert.strictEqual(yield* outbox.deliver(base, entries[0]!), "appended")
        assert.strictEqual(yield* outbox.deliver(base, entries[0]!), "duplicate")
        assert.strictEqual(yield* outbox.deliver(base, entries[1]!), "appended")
        // a slow relayer still holding the first entry: a duplicate, never a second copy
        assert.strictEqual(yield* outbox.deliver(base, entries[0]!), "duplicate")
        assert.deepStrictEqual(
          (yield* s.range(shardKey(out, 3))).map((e) => [e.fields.n, e.fields["shardline-key"]]),
          [
            ["0", "k"],
            ["1", "k"],
          ],
        )
        yield* outbox.remove(
          base,
          entries.map((e) => e.id),
        )
        assert.strictEqual(yield* outbox.size(base), 0)
        assert.deepStrictEqual(yield* outbox.read(base, 10), [])
      }),
  )

  it.live(
    "retireShard deletes a group's relayed (empty) outbox and keeps one that still holds an entry",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { out, base, ids, tx, keys } = yield* setUp(s, 1)
        const outbox = tx.outbox!
        // group g: one send, relayed; group h: one send, not relayed
        const other = { ...base, group: "h" }
        yield* s.setOwnerToken({ ...other, token: 5 })
        const [forH] = yield* s.read({ ...other, token: 5, consumer: "c1", count: 1 })
        for (const [address, id] of [
          [base, ids[0]!],
          [other, forH!.id],
        ] as const)
          yield* tx.commit({
            ...address,
            token: 5,
            ids: [id],
            mode: "ack",
            writes: [],
            sends: [{ stream: out, shard: 0, key: "k", fields: { v: address.group } }],
          })
        const [sent] = yield* outbox.read(base, 10)
        yield* outbox.deliver(base, sent!)
        yield* outbox.remove(base, [sent!.id])
        // the outbox keys, as the data keys are named (the same prefix and slot)
        const outboxOf = (group: string) => keys.key("x").replace(/:data:x$/, `:outbox:${group}`)
        const exists = (key: string) =>
          Effect.map(
            Effect.result(tx.read(key)),
            (r) => !(r._tag === "Success" && r.success === undefined),
          )
        assert.isTrue(yield* exists(outboxOf("g")))
        yield* s.seal(base.stream, base.shard)
        yield* s.retireShard(base.stream, base.shard, ["g", "h"])
        yield* s.retireShard(base.stream, base.shard, ["g", "h"])
        assert.isFalse(yield* exists(outboxOf("g")))
        assert.deepStrictEqual(
          (yield* outbox.read(other, 10)).map((e) => e.fields.v),
          ["h"],
        )
      }),
  )

  it.live(
    "a sealed target: delivered before the seal is a duplicate; undelivered is re-routed once, for every relayer",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { out, base, ids, tx } = yield* setUp(s, 2)
        const outbox = tx.outbox!
        for (const [i, id] of ids.entries())
          yield* tx.commit({
            ...base,
            token: 5,
            ids: [id],
            mode: "ack",
            writes: [],
            sends: [{ stream: out, shard: 0, key: `k${i}`, fields: { n: String(i) } }],
          })
        const [e0, e1] = yield* outbox.read(base, 10)
        assert.strictEqual(yield* outbox.deliver(base, e0!), "appended")
        yield* s.seal(out, 0)
        // the mark before the seal: the delivered entry is not re-routed
        assert.strictEqual(yield* outbox.deliver(base, e0!), "duplicate")
        const sealed = yield* Effect.flip(outbox.deliver(base, e1!))
        assert.strictEqual(sealed._tag, "ShardSealed")
        // two relayers re-route it: the first wins, the second learns the winner's shard
        assert.strictEqual(yield* outbox.reroute(base, e1!.id, 0, 5), 5)
        assert.strictEqual(yield* outbox.reroute(base, e1!.id, 0, 6), 5)
        const [again] = (yield* outbox.read(base, 10)).filter((e) => e.id === e1!.id)
        assert.strictEqual(again!.shard, 5)
        assert.strictEqual(yield* outbox.deliver(base, again!), "appended")
        assert.strictEqual(yield* outbox.deliver(base, again!), "duplicate")
        assert.deepStrictEqual(yield* s.range(shardKey(out, 6)), [])
        assert.deepStrictEqual(
          (yield* s.range(shardKey(out, 5))).map((e) => e.fields.n),
          ["1"],
        )
        yield* outbox.remove(base, [e0!.id, e1!.id])
        // a relayer that re-routes a removed (delivered) entry learns it is gone
        assert.strictEqual(yield* outbox.reroute(base, e1!.id, 5, 7), "gone")
      }),
  )
}

/**
 * docs/protocol.md rule 26: a commit under a missing owner token, or whose
 * group (or stream) vanished, is refused and writes nothing: never
 * "already committed", which would drop the handler's writes in silence.
 */
export const transactionsVanishContract = (subject: () => Streams, vanish: () => Vanish) => {
  const attempt = (s: Streams, what: "token" | "group" | "stream") =>
    Effect.gen(function* () {
      const { out, base, ids, tx, keys } = yield* setUp(s, 1)
      const counter = keys.key("counter")
      if (what === "token") yield* vanish().deleteOwnerToken(base.stream, base.shard, base.group)
      if (what === "group") yield* vanish().destroyGroup(base.stream, base.shard, base.group)
      if (what === "stream") yield* vanish().deleteStream(base.stream, base.shard)
      const error = yield* Effect.flip(
        tx.commit({
          ...base,
          token: 5,
          ids,
          mode: "ack",
          writes: [w("INCR", counter)],
          sends: [{ stream: out, shard: 0, key: "k", fields: { v: "1" } }],
        }),
      )
      assert.isUndefined(yield* tx.read(counter))
      assert.deepStrictEqual(yield* sentEntries(s, base, out, 0), [])
      return error
    })

  it.live("a commit under a missing owner token: OwnerTokenMissing, nothing written", () =>
    Effect.gen(function* () {
      const error = yield* attempt(subject(), "token")
      assert.strictEqual(error._tag, "OwnerTokenMissing")
    }),
  )

  it.live(
    "a commit whose group or stream vanished: DataLost, never AlreadyCommitted; nothing written",
    () =>
      Effect.gen(function* () {
        for (const what of ["group", "stream"] as const) {
          const error = yield* attempt(subject(), what)
          assert.strictEqual(error._tag, "DataLost", what)
          assert.strictEqual((error as unknown as { readonly what: string }).what, what)
        }
      }),
  )
}

/**
 * A group commit that carries the shard's next read (`commitGroupThenRead`,
 * docs/exactly-once.md "The commit rides the read"): the read runs only when
 * every part committed; a group that stops, or a stale owner's, delivers
 * nothing new. A port without it is tested through core's `commitThenReadOf`.
 */
export const commitThenReadContract = (subject: () => Streams) => {
  const part = (id: string, ...writes: Array<Transaction.Write>): Transaction.CommitPart => ({
    ids: [id],
    writes,
    sends: [],
  })
  const rideOf = (s: Streams) =>
    s.transactions!.commitGroupThenRead ??
    Transaction.commitThenReadOf(s.transactions!.commitGroup, (o) => s.read(o))
  /** setUp's 3 pending messages, and 2 appended after them (not read yet). */
  const withNext = (s: Streams) =>
    Effect.gen(function* () {
      const set = yield* setUp(s, 3)
      const next = [
        yield* s.append(set.stream, 2, { n: "3" }),
        yield* s.append(set.stream, 2, { n: "4" }),
      ]
      const read = { ...set.base, token: 5, consumer: "c1", count: 10 }
      return { ...set, next, read }
    })
  const pendingIds = (s: Streams, base: ShardStreams.GroupAddress) =>
    Effect.map(s.pending(base), (ps) => ps.map((p) => p.id))

  it.live("every part committed: the read it carries delivers the next entries", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base, ids, next, read, tx, keys } = yield* withNext(s)
      const n = keys.key("n")
      const done = yield* rideOf(s)(
        { ...base, token: 5, mode: "ack", parts: ids.map((id) => part(id, w("INCR", n))) },
        read,
      )
      assert.deepStrictEqual(done.outcome, { committed: ["Committed", "Committed", "Committed"] })
      assert.deepStrictEqual(
        done.entries?.map((e) => [e.id, e.fields.n]),
        [
          [next[0], "3"],
          [next[1], "4"],
        ],
      )
      assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "3" })
      assert.deepStrictEqual(yield* pendingIds(s, base), next)
      // the stream is back under its own key, whole
      assert.strictEqual((yield* s.range(shardKey(stream, 2))).length, 5)
    }),
  )

  it.live("a group that stops at a part reads nothing: the next entries stay undelivered", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, next, read, tx, keys } = yield* withNext(s)
      const text = keys.key("text")
      const done = yield* rideOf(s)(
        {
          ...base,
          token: 5,
          mode: "ack",
          parts: [
            part(ids[0]!, w("SET", text, "x")),
            part(ids[1]!, w("INCR", text)),
            part(ids[2]!),
          ],
        },
        read,
      )
      assert.deepStrictEqual(done.outcome.committed, ["Committed"])
      assert.strictEqual(done.outcome.stopped?._tag, "Refused")
      assert.isUndefined(done.entries)
      assert.deepStrictEqual(yield* tx.read(text), { type: "string", value: "x" })
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!, ids[2]!])
      // the group did not move: a read now delivers them
      const later = yield* s.read(read)
      assert.deepStrictEqual(
        later.map((e) => e.id),
        next,
      )
    }),
  )

  // the script's reply after a stop carries the stop's detail where a
  // whole commit carries the gate: a refused write at index 1 is not "gate 1"
  it.live("a stop whose detail reads as 1 (the part's second write refused) reads nothing", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, next, read, tx, keys } = yield* withNext(s)
      const text = keys.key("text")
      const other = keys.key("other")
      yield* tx.commit({
        ...base,
        token: 5,
        mode: "ack",
        ids: [ids[0]!],
        writes: [w("SET", text, "x")],
        sends: [],
      })
      const done = yield* rideOf(s)(
        {
          ...base,
          token: 5,
          mode: "ack",
          parts: [part(ids[1]!, w("SET", other, "1"), w("INCR", text))],
        },
        read,
      )
      assert.deepStrictEqual(done.outcome.committed, [])
      assert.strictEqual(done.outcome.stopped?._tag, "Refused")
      if (done.outcome.stopped?._tag === "Refused")
        assert.strictEqual((done.outcome.stopped.error as TransactionRefused).index, 1)
      assert.isUndefined(done.entries)
      assert.isUndefined(yield* tx.read(other))
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!, ids[2]!])
      const later = yield* s.read(read)
      assert.deepStrictEqual(
        later.map((e) => e.id),
        next,
      )
    }),
  )

  it.live("a part no longer pending stops the group, and nothing is read", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, read } = yield* withNext(s)
      yield* s.ack({ ...base, token: 5, ids: [ids[0]!], mode: "ack" })
      const done = yield* rideOf(s)(
        {
          ...base,
          token: 5,
          mode: "ack",
          parts: [{ ids: [ids[0]!, ids[1]!], writes: [], sends: [] }],
        },
        read,
      )
      assert.deepStrictEqual(done.outcome, {
        committed: [],
        stopped: { _tag: "NotPending", ids: [ids[0]!] },
      })
      assert.isUndefined(done.entries)
      assert.deepStrictEqual(yield* pendingIds(s, base), [ids[1]!, ids[2]!])
    }),
  )

  it.live("a stale owner's commit writes nothing and reads nothing", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, read, tx, keys } = yield* withNext(s)
      const n = keys.key("n")
      const failed = yield* Effect.flip(
        rideOf(s)(
          { ...base, token: 4, mode: "ack", parts: ids.map((id) => part(id, w("INCR", n))) },
          { ...read, token: 4 },
        ),
      )
      assert.strictEqual(failed._tag, "StaleOwner")
      assert.isUndefined(yield* tx.read(n))
      assert.deepStrictEqual(yield* pendingIds(s, base), ids)
    }),
  )

  it.live("a group sent again (its reply lost) writes nothing again; its read reads on", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base, ids, next, read, tx, keys } = yield* withNext(s)
      const n = keys.key("n")
      const group: Transaction.GroupCommitOptions = {
        ...base,
        token: 5,
        mode: "ack",
        parts: ids.map((id) => part(id, w("INCR", n))),
      }
      const first = yield* rideOf(s)(group, { ...read, count: 1 })
      assert.deepStrictEqual(
        first.entries?.map((e) => e.id),
        [next[0]],
      )
      const again = yield* rideOf(s)(group, { ...read, count: 1 })
      assert.deepStrictEqual(again.outcome.committed, [
        "AlreadyCommitted",
        "AlreadyCommitted",
        "AlreadyCommitted",
      ])
      assert.deepStrictEqual(
        again.entries?.map((e) => e.id),
        [next[1]],
      )
      assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "3" })
    }),
  )
}
