import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { repairTotal } from "../../src/assignor/internal/repairTotal.js"
import type { AssignorInput } from "../../src/index.js"
import {
  assignWithStats,
  MAX_MEMBER_WEIGHT,
  MIN_MEMBER_WEIGHT,
  movementLowerBound,
  stickyAssign,
} from "../../src/index.js"
import { anyInput, equalWeightInput, numRuns, weightedInput } from "./arbitraries.js"
import { countMoved, countsOf, quotaOf } from "./helpers.js"

const runs = { numRuns: numRuns() }

const permute = <A>(items: ReadonlyArray<A>, keys: ReadonlyArray<number>): Array<A> =>
  items
    .map((item, i) => ({ item, key: keys[i % Math.max(1, keys.length)] ?? 0, i }))
    .sort((a, b) => a.key - b.key || b.i - a.i)
    .map(({ item }) => item)

describe("stickyAssign properties", () => {
  it("owns every shard iff some member is live, and only live members own", () => {
    fc.assert(
      fc.property(anyInput, (input) => {
        const owners = stickyAssign(input)
        expect(owners.length).toBe(input.shardCount)
        const live = new Set(input.members.map((m) => m.id))
        for (const owner of owners) {
          if (live.size === 0) expect(owner).toBeNull()
          else expect(owner !== null && live.has(owner)).toBe(true)
        }
      }),
      runs,
    )
  })

  it("equal weights: max - min <= 1", () => {
    fc.assert(
      fc.property(equalWeightInput, (input) => {
        const counts = [...countsOf(input, stickyAssign(input)).values()]
        if (counts.length > 0)
          expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1)
      }),
      runs,
    )
  })

  it("weighted: every count is floor or ceil of its quota", () => {
    fc.assert(
      fc.property(weightedInput, (input) => {
        const owners = stickyAssign(input)
        for (const [id, count] of countsOf(input, owners)) {
          const q = quotaOf(input, id)
          expect([Math.floor(q), Math.ceil(q)]).toContain(count)
        }
      }),
      runs,
    )
  })

  it("moves exactly movementLowerBound shards, and reports it", () => {
    fc.assert(
      fc.property(anyInput, (input) => {
        const result = assignWithStats(input)
        const moved = countMoved(input.previous, result.owners)
        expect(moved).toBe(movementLowerBound(input))
        expect(result.moved).toBe(moved)
        expect(new Map(result.counts)).toEqual(countsOf(input, result.owners))
      }),
      runs,
    )
  })

  it("sticky: each live member keeps min(previous count, new count) of its shards", () => {
    fc.assert(
      fc.property(anyInput, (input) => {
        const owners = stickyAssign(input)
        const counts = countsOf(input, owners)
        const previousCount = new Map<string, number>()
        const keptCount = new Map<string, number>()
        input.previous?.forEach((p, s) => {
          if (p === null || !counts.has(p)) return
          previousCount.set(p, (previousCount.get(p) ?? 0) + 1)
          if (owners[s] === p) keptCount.set(p, (keptCount.get(p) ?? 0) + 1)
        })
        for (const [id, count] of counts) {
          expect(keptCount.get(id) ?? 0).toBe(Math.min(previousCount.get(id) ?? 0, count))
        }
      }),
      runs,
    )
  })

  it("idempotent: reassigning with unchanged membership moves nothing", () => {
    fc.assert(
      fc.property(anyInput, (input) => {
        const first = stickyAssign(input)
        const second = assignWithStats({ ...input, previous: first })
        expect(second.moved).toBe(0)
        expect(second.owners).toEqual(first)
      }),
      runs,
    )
  })

  it("deterministic: any order of members gives the same output", () => {
    fc.assert(
      fc.property(
        anyInput,
        fc.array(fc.double({ noNaN: true }), { minLength: 1 }),
        (input, keys) => {
          const shuffled: AssignorInput = { ...input, members: permute(input.members, keys) }
          expect(stickyAssign(shuffled)).toEqual(stickyAssign(input))
        },
      ),
      runs,
    )
  })
})

describe("stickyAssign with non-integer weights (floating-point quotas)", () => {
  it("still owns every shard, sums to shardCount and is stable", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2000 }),
        fc.uniqueArray(fc.string({ minLength: 1, maxLength: 3 }), { maxLength: 50 }),
        fc.array(
          fc.oneof(
            fc.constantFrom(MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT, 1),
            fc.double({
              min: MIN_MEMBER_WEIGHT,
              max: MAX_MEMBER_WEIGHT,
              noNaN: true,
              noDefaultInfinity: true,
            }),
          ),
          { minLength: 50, maxLength: 50 },
        ),
        (shardCount, ids, weights) => {
          const input = { shardCount, members: ids.map((id, i) => ({ id, weight: weights[i]! })) }
          const result = assignWithStats(input)
          // Count by index: `filter` skips the holes of a sparse array (issue finding 5).
          let unowned = 0
          for (let s = 0; s < result.owners.length; s++)
            if (typeof result.owners[s] !== "string") unowned++
          expect(result.owners.length).toBe(shardCount)
          expect(unowned).toBe(ids.length > 0 ? 0 : shardCount)
          expect([...result.counts.values()].reduce((a, b) => a + b, 0)).toBe(
            ids.length > 0 ? shardCount : 0,
          )
          const again = assignWithStats({ ...input, previous: result.owners })
          expect(again.moved).toBe(0)
          expect(movementLowerBound({ ...input, previous: result.owners })).toBe(0)
        },
      ),
      runs,
    )
  })
})

describe("stickyAssign with weights at the bounds (issue finding 5)", () => {
  it("one member at the largest weight among many at the smallest: no hole, balance by quota", () => {
    const members = [
      { id: "heavy", weight: MAX_MEMBER_WEIGHT },
      ...Array.from({ length: 999 }, (_, i) => ({ id: `light${i}`, weight: MIN_MEMBER_WEIGHT })),
    ]
    for (const shardCount of [1, 7, 1_000, 65_536]) {
      const result = assignWithStats({ shardCount, members })
      for (let s = 0; s < shardCount; s++) expect(typeof result.owners[s]).toBe("string")
      const quota = (shardCount * MAX_MEMBER_WEIGHT) / (MAX_MEMBER_WEIGHT + 999 * MIN_MEMBER_WEIGHT)
      expect([Math.floor(quota), Math.ceil(quota)]).toContain(result.counts.get("heavy"))
    }
  })

  it("weights outside the bounds are an InvalidWeight error, never a hole", () => {
    for (const weight of [1e308, MAX_MEMBER_WEIGHT * 2, 1e-9, 0])
      expect(() => stickyAssign({ shardCount: 4, members: [{ id: "a", weight }] })).toThrow(
        /InvalidWeight/,
      )
  })
})

describe("stickyAssign examples", () => {
  it("over-quota member releases its highest shards to the newcomer", () => {
    expect(
      stickyAssign({
        shardCount: 4,
        members: [{ id: "a" }, { id: "b" }],
        previous: ["a", "a", "a", "a"],
      }),
    ).toEqual(["a", "a", "b", "b"])
  })

  it("ceil slot goes to the member with more previous shards", () => {
    // 5 shards, 2 members: b had 4, so b gets the ceil slot and keeps 3 (1 move, not 2).
    const result = assignWithStats({
      shardCount: 5,
      members: [{ id: "a" }, { id: "b" }],
      previous: ["b", "b", "a", "b", "b"],
    })
    expect(result.owners).toEqual(["b", "b", "a", "b", "a"])
    expect(result.moved).toBe(1)
  })

  it("weighted: the ceil slot goes to the member above its floor, not the one with most shards", () => {
    // quotas a = 3.75, b = 1.25: a (3 shards) is at its floor, b (2) is above its floor 1.
    const result = assignWithStats({
      shardCount: 5,
      members: [{ id: "a", weight: 3 }, { id: "b" }],
      previous: ["a", "a", "a", "b", "b"],
    })
    expect(result.owners).toEqual(["a", "a", "a", "b", "b"])
    expect(result.moved).toBe(0)
  })

  it("shards beyond a shorter previous array are unowned and do not count as moved", () => {
    const result = assignWithStats({
      shardCount: 6,
      members: [{ id: "a" }, { id: "b" }],
      previous: ["b", "b", "a"],
    })
    expect(result.owners).toEqual(["b", "b", "a", "a", "a", "b"])
    expect(result.moved).toBe(0)
  })

  it("no members: every shard unowned, previous owners count as moved", () => {
    const result = assignWithStats({ shardCount: 3, members: [], previous: ["a", null, "b"] })
    expect(result.owners).toEqual([null, null, null])
    expect(result.moved).toBe(2)
  })
})

describe("repairTotal: the targets always sum to shardCount (no hole while a member lives)", () => {
  it("adds the missing shard to the member furthest below its quota", () => {
    const target = Int32Array.from([2, 2, 3])
    repairTotal(8, Float64Array.from([2.2, 2.9, 2.9]), target)
    expect([...target]).toEqual([2, 3, 3])
  })
  it("takes the extra shard from the member furthest above its quota", () => {
    const target = Int32Array.from([3, 3, 0])
    repairTotal(5, Float64Array.from([2.9, 2.05, 0.05]), target)
    expect([...target]).toEqual([3, 2, 0])
  })
  it("changes nothing when the targets already sum to shardCount", () => {
    const target = Int32Array.from([1, 2])
    repairTotal(3, Float64Array.from([1.4, 1.6]), target)
    expect([...target]).toEqual([1, 2])
  })
})
