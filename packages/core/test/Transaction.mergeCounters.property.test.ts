/**
 * `Transaction.mergeCounters` and `joinParts` (docs/exactly-once.md, "The
 * group as one part"): the merged writes leave every key as the originals
 * do, and are refused exactly when the originals are, on the memory key
 * space (the mirror of redis-store's commit script). A storage commits the
 * merged writes only when they are not refused, so this is what makes the
 * merge invisible.
 */
import fc from "fast-check"
import { assert, describe, it } from "vitest"
import { Transaction, TransactionRefused } from "../src/index.js"
import { MemoryKeyspace } from "../src/ports/internal/memoryKeyspace.js"
import { numRuns } from "./assignor/arbitraries.js"

const { mergeCounters, joinParts, validateWrite, MAX_COUNTER } = Transaction
type Write = Transaction.Write

const w = (command: string, ...args: Array<string | number>): Write => {
  const checked = validateWrite(command, args)
  if (checked instanceof TransactionRefused) throw new Error(checked.message)
  return checked
}

const KEYS = ["a", "b"] as const
const FIELDS = ["f", "g"] as const
const key = fc.constantFrom(...KEYS)
const field = fc.constantFrom(...FIELDS)
// small steps, and steps that reach the counters' edges
const amount = fc.oneof(
  fc.integer({ min: -3, max: 3 }),
  fc.constantFrom(MAX_COUNTER, -MAX_COUNTER, MAX_COUNTER - 1, 2 ** 52, -(2 ** 52)),
)
const value = fc.constantFrom("0", "5", "-5", String(MAX_COUNTER), String(-MAX_COUNTER), "x", "1.5")

const write: fc.Arbitrary<Write> = fc.oneof(
  { weight: 4, arbitrary: key.map((k) => w("INCR", k)) },
  { weight: 3, arbitrary: key.map((k) => w("DECR", k)) },
  { weight: 3, arbitrary: fc.tuple(key, amount).map(([k, n]) => w("INCRBY", k, n)) },
  { weight: 2, arbitrary: fc.tuple(key, amount).map(([k, n]) => w("DECRBY", k, n)) },
  { weight: 3, arbitrary: fc.tuple(key, field, amount).map(([k, f, n]) => w("HINCRBY", k, f, n)) },
  { weight: 1, arbitrary: key.map((k) => w("INCRBYFLOAT", k, "0.5")) },
  { weight: 1, arbitrary: fc.tuple(key, value).map(([k, v]) => w("SET", k, v)) },
  { weight: 1, arbitrary: fc.tuple(key, field, value).map(([k, f, v]) => w("HSET", k, f, v)) },
  { weight: 1, arbitrary: key.map((k) => w("DEL", k)) },
  { weight: 1, arbitrary: key.map((k) => w("EXPIRE", k, 10)) },
  { weight: 1, arbitrary: key.map((k) => w("SADD", k, "m")) },
)

/** A key space after `setup`, each write applied alone (a refused one is skipped). */
const keyspaceAfter = (setup: ReadonlyArray<Write>): MemoryKeyspace => {
  const ks = new MemoryKeyspace()
  for (const s of setup) ks.apply([s], 0)
  return ks
}

const everyKey = (ks: MemoryKeyspace, now: number) => KEYS.map((k) => ks.read(k, now))

describe("Transaction.mergeCounters", () => {
  it("merges a run of counter writes into one write of their sum", () => {
    const incr = w("INCR", "n")
    assert.deepStrictEqual(mergeCounters(Array.from({ length: 32 }, () => incr)), [
      w("INCRBY", "n", 32),
    ])
    assert.deepStrictEqual(
      mergeCounters([w("INCRBY", "n", 5), w("DECR", "x"), w("INCR", "n"), w("DECRBY", "x", 2)]),
      [w("INCRBY", "n", 6), w("INCRBY", "x", -3)],
    )
    assert.deepStrictEqual(
      mergeCounters([
        w("HINCRBY", "h", "a", 1),
        w("HINCRBY", "h", "b", 1),
        w("HINCRBY", "h", "a", 2),
      ]),
      [w("HINCRBY", "h", "a", 3), w("HINCRBY", "h", "b", 1)],
    )
  })

  it("keeps a run open across writes to other keys, counters or not", () => {
    assert.deepStrictEqual(
      mergeCounters([w("INCR", "n"), w("SET", "m", "1"), w("INCR", "n"), w("DEL", "x")]),
      [w("INCRBY", "n", 2), w("SET", "m", "1"), w("DEL", "x")],
    )
    assert.deepStrictEqual(
      mergeCounters([
        w("INCR", "n"),
        w("HINCRBY", "h", "a", 1),
        w("INCR", "n"),
        w("HINCRBY", "h", "a", 1),
      ]),
      [w("INCRBY", "n", 2), w("HINCRBY", "h", "a", 2)],
    )
    // a run of the other sign on one key: the newer run is the one that grows
    assert.deepStrictEqual(
      mergeCounters([w("INCR", "n"), w("DECR", "n"), w("SET", "m", "1"), w("DECR", "n")]),
      [w("INCR", "n"), w("INCRBY", "n", -2), w("SET", "m", "1")],
    )
  })

  it("ends a run at another write to its key, a step of the other sign, or the counters' edge", () => {
    const kept = [
      [w("INCR", "n"), w("SET", "n", "1"), w("INCR", "n")],
      [w("INCR", "n"), w("EXPIRE", "n", 10), w("INCR", "n")],
      [w("INCR", "n"), w("DEL", "m", "n"), w("INCR", "n")],
      [w("INCR", "n"), w("DECR", "n")],
      [w("INCRBY", "n", MAX_COUNTER), w("INCR", "n")],
      [w("INCRBYFLOAT", "n", "0.1"), w("INCRBYFLOAT", "n", "0.2")],
    ]
    for (const writes of kept) assert.strictEqual(mergeCounters(writes), writes)
  })

  it("the merged writes leave the keys as the originals, and are refused exactly when they are", () => {
    fc.assert(
      fc.property(
        fc.array(write, { maxLength: 6 }),
        fc.array(write, { minLength: 1, maxLength: 24 }),
        (setup, writes) => {
          const merged = mergeCounters(writes)
          assert.isAtMost(merged.length, writes.length)
          const original = keyspaceAfter(setup)
          const joined = keyspaceAfter(setup)
          const refusedOriginal = original.apply(writes, 0) !== undefined
          const refusedMerged = joined.apply(merged, 0) !== undefined
          assert.strictEqual(refusedMerged, refusedOriginal)
          assert.deepStrictEqual(everyKey(joined, 0), everyKey(original, 0))
          assert.deepStrictEqual(everyKey(joined, 20_000), everyKey(original, 20_000))
        },
      ),
      { numRuns: numRuns(2_000) },
    )
  })
})

describe("Transaction.joinParts", () => {
  const send = { stream: "out", shard: 0, key: "k", fields: { v: "1" } }
  it("joins a group's parts: every id, every write (merged), every send, in order", () => {
    const one = joinParts([
      { ids: ["1-0"], writes: [w("INCR", "n")], sends: [send] },
      { ids: ["2-0", "3-0"], writes: [w("INCR", "n"), w("SET", "s", "v")], sends: [] },
      { ids: ["4-0"], writes: [], sends: [{ ...send, key: "j" }] },
    ])
    assert.deepStrictEqual(one, {
      ids: ["1-0", "2-0", "3-0", "4-0"],
      writes: [w("INCRBY", "n", 2), w("SET", "s", "v")],
      sends: [send, { ...send, key: "j" }],
    })
  })

  it("one part: joined only when its writes merge", () => {
    const part = { ids: ["1-0"], writes: [w("INCR", "n"), w("INCR", "m")], sends: [] }
    assert.isUndefined(joinParts([part]))
    assert.deepStrictEqual(joinParts([{ ...part, writes: [w("INCR", "n"), w("INCR", "n")] }]), {
      ...part,
      writes: [w("INCRBY", "n", 2)],
    })
  })
})
