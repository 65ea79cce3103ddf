/**
 * Stream ids as the group commit orders them (src/internal/streamId.ts):
 * `compareCanonical`, which orders canonical ids without parsing them,
 * agrees with the parsing `compare` on every pair of a grid of ids around
 * the edges (digit counts, 15 and 16 digits, zero); `canonicalOf`, one test
 * for an id a read returned, agrees with `isValid` and `canonical`.
 */
import { assert, describe, it } from "vitest"
import {
  canonical,
  canonicalOf,
  compare,
  compareCanonical,
  isValid,
} from "../src/internal/streamId.js"

const parts = [
  "0",
  "1",
  "9",
  "10",
  "11",
  "99",
  "100",
  "1733529600000",
  "1733529600001",
  "999999999999999",
  "1000000000000000",
  "9007199254740990",
  "9007199254740991",
]
const ids = parts.flatMap((ms) => parts.map((seq) => `${ms}-${seq}`))

describe("compareCanonical", () => {
  it("orders canonical ids as compare does", () => {
    for (const a of ids)
      for (const b of ids)
        assert.strictEqual(Math.sign(compareCanonical(a, b)), Math.sign(compare(a, b)), `${a} ${b}`)
  })

  it("orders ids given with leading zeros once made canonical", () => {
    const given = ["007-1", "7-01", "0-0", "00-000", "10-0", "010-0"]
    for (const a of given)
      for (const b of given) {
        assert.isTrue(isValid(a) && isValid(b))
        assert.strictEqual(
          Math.sign(compareCanonical(canonical(a), canonical(b))),
          Math.sign(compare(a, b)),
          `${a} ${b}`,
        )
      }
  })
})

describe("canonicalOf", () => {
  it("is canonical(id) for a valid id, undefined for any other text", () => {
    const texts = [
      ...ids,
      "007-1",
      "7-01",
      "00-000",
      "0123456789012345-0",
      "9007199254740992-0",
      "99999999999999999-0",
      "1-",
      "-1",
      "1-2-3",
      "1.5-0",
      " 1-0",
      "",
      "a-b",
    ]
    for (const t of texts)
      assert.strictEqual(canonicalOf(t), isValid(t) ? canonical(t) : undefined, JSON.stringify(t))
  })
})
