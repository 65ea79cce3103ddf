/**
 * `Transaction.isReservedKey` and `isDataKey` test a key against one
 * regular expression each, with no match (a commit checks each write's keys
 * several times, and a match allocates). They must name exactly the keys
 * the patterns of docs/redis.md, "Keys", name: checked here against those
 * patterns as a match states them, on keys built from the characters that
 * matter (braces, colons, digits) and the suffixes Shardline uses.
 */
import fc from "fast-check"
import { assert, describe, it } from "vitest"
import { Transaction } from "../src/index.js"
import { numRuns } from "./assignor/arbitraries.js"

// the patterns as docs/redis.md states them (a shard's hash tag holds no brace)
const TAG = /^\{([^{}]*:\d+)\}(.*)$/s
const reservedByPattern = (key: string): boolean => {
  if (key.startsWith("{shardline:")) return true
  const m = TAG.exec(key)
  if (m === null) return false
  const rest = m[2]!
  return (
    rest === "" ||
    rest === ":dlq" ||
    rest === ":sealed" ||
    rest === ":gate" ||
    rest.startsWith(":owner:") ||
    rest.startsWith(":idmp:") ||
    rest.startsWith(":outbox") ||
    rest.startsWith(":relayed:")
  )
}
const dataByPattern = (key: string, from: number): boolean =>
  /^\{[^{}]*:\d+\}:data:/s.test(key.slice(from))

const piece = fc.constantFrom(
  "{",
  "}",
  ":",
  "0",
  "7",
  "12",
  "a",
  "orders",
  "shardline",
  "{shardline:",
  ":data:",
  ":dlq",
  ":sealed",
  ":gate",
  ":owner:",
  ":idmp:",
  ":outbox",
  ":relayed:",
  "\n",
  "é",
)
const key = fc.array(piece, { maxLength: 8 }).map((ps) => ps.join(""))
// keys shaped like Shardline's, so the interesting branches are reached often
const shaped = fc
  .tuple(
    fc.constantFrom("", "p:", "{"),
    fc.array(piece, { maxLength: 3 }),
    fc.constantFrom(":", "", "::"),
    fc.constantFrom("3", "", "x", "10"),
    fc.constantFrom("}", "", "}}"),
    fc.array(piece, { maxLength: 3 }),
  )
  .map(([pre, a, colon, n, close, b]) => `${pre}{${a.join("")}${colon}${n}${close}${b.join("")}`)

describe("Transaction key shapes, tested without a match", () => {
  it("isReservedKey names exactly the keys its pattern names", () => {
    fc.assert(
      fc.property(fc.oneof(key, shaped, fc.string()), (k) => {
        assert.strictEqual(Transaction.isReservedKey(k), reservedByPattern(k), JSON.stringify(k))
      }),
      { numRuns: numRuns(2_000) },
    )
  })

  it("isDataKey names exactly the data keys, from any offset", () => {
    fc.assert(
      fc.property(fc.oneof(key, shaped, fc.string()), fc.nat(4), (k, at) => {
        const from = Math.min(at, k.length)
        assert.strictEqual(
          Transaction.isDataKey(k, from),
          dataByPattern(k, from),
          `${JSON.stringify(k)} from ${from}`,
        )
      }),
      { numRuns: numRuns(2_000) },
    )
  })

  it("examples: the data key of dataKey, a prefix before it, and near misses", () => {
    assert.isTrue(Transaction.isDataKey(Transaction.dataKey("orders", 3, "n")))
    assert.isTrue(Transaction.isDataKey("tenant:{orders:3}:data:n", "tenant:".length))
    assert.isFalse(Transaction.isDataKey("tenant:{orders:3}:data:n"))
    for (const k of [
      "{orders:}:data:n",
      "{orders3}:data:n",
      "{or{ders:3}:data:n",
      "{orders:3}:dat",
    ])
      assert.isFalse(Transaction.isDataKey(k), k)
    assert.isTrue(Transaction.isReservedKey("{:3}"))
    assert.isFalse(Transaction.isReservedKey("{3}"))
    assert.isFalse(Transaction.isReservedKey("{orders:3}:dlq:x"))
  })
})
