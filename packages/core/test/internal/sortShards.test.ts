import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { sortByShard, sortShards } from "../../src/internal/sortShards.js"
import { numRuns } from "../assignor/arbitraries.js"

const runs = { numRuns: numRuns() }

describe("sortShards / sortByShard (short lists without Array.prototype.sort)", () => {
  it("sortShards equals the built-in numeric sort, short and long lists, in place", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 40 }), { maxLength: 40 }), (xs) => {
        const expected = [...xs].sort((a, b) => a - b)
        const copy = [...xs]
        expect(sortShards(copy)).toBe(copy)
        expect(copy).toEqual(expected)
      }),
      runs,
    )
  })

  it("sortByShard equals the built-in sort by shard, stable", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 10 }), { maxLength: 40 }), (shards) => {
        const items = shards.map((shard, i) => ({ shard, i }))
        const expected = [...items].sort((a, b) => a.shard - b.shard)
        expect(sortByShard([...items])).toEqual(expected)
      }),
      runs,
    )
  })
})
