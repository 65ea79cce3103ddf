import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { AssignorInput, AssignorMember } from "../../src/index.js"
import { movementLowerBound, stickyAssign } from "../../src/index.js"
import { numRuns } from "./arbitraries.js"
import { countMoved } from "./helpers.js"

const members = (...ids: ReadonlyArray<string>): Array<AssignorMember> => ids.map((id) => ({ id }))

describe("movementLowerBound: hand-computed examples", () => {
  it("one member held everything, a second joins: half must move", () => {
    expect(
      movementLowerBound({
        shardCount: 4,
        members: members("a", "b"),
        previous: ["a", "a", "a", "a"],
      }),
    ).toBe(2)
  })

  it("odd count: the ceil slot saves one move", () => {
    // quotas 2.5: a keeps 3 of 5 -> 2 move
    expect(
      movementLowerBound({
        shardCount: 5,
        members: members("a", "b"),
        previous: Array(5).fill("a"),
      }),
    ).toBe(2)
  })

  it("one ceil slot, two over-quota members", () => {
    // 7 shards, 3 members: floors 2, R = 1; excess a 2, b 1; one of them keeps a 3rd -> 3 - 1
    const previous = ["a", "a", "a", "a", "b", "b", "b"]
    expect(movementLowerBound({ shardCount: 7, members: members("a", "b", "c"), previous })).toBe(2)
  })

  it("weighted: the heavy member joins a group where the light one owned all", () => {
    // quotas a = 6 * 2/3 = 4, b = 2
    const input: AssignorInput = {
      shardCount: 6,
      members: [{ id: "a", weight: 2 }, { id: "b" }],
      previous: Array(6).fill("b"),
    }
    expect(movementLowerBound(input)).toBe(4)
  })

  it("weighted: the ceil slot helps only a member above its floor", () => {
    // quotas a = 5 * 3/4 = 3.75, b = 1.25; R = 1. a has 2 (below floor 3), b has 3 (2 over floor 1)
    const input: AssignorInput = {
      shardCount: 5,
      members: [{ id: "a", weight: 3 }, { id: "b" }],
      previous: ["b", "a", "b", "a", "b"],
    }
    expect(movementLowerBound(input)).toBe(1)
  })

  it("departed owners' shards always count, nulls never", () => {
    expect(
      movementLowerBound({ shardCount: 3, members: members("a"), previous: ["x", "a", null] }),
    ).toBe(1)
    expect(movementLowerBound({ shardCount: 3, members: [], previous: ["x", null, "y"] })).toBe(2)
  })

  it("shorter previous array (older shard count): the new shards are free", () => {
    expect(
      movementLowerBound({ shardCount: 4, members: members("a", "b"), previous: ["a", "a"] }),
    ).toBe(0)
  })

  it("balanced and unchanged: zero", () => {
    expect(
      movementLowerBound({
        shardCount: 4,
        members: members("a", "b"),
        previous: ["a", "b", "a", "b"],
      }),
    ).toBe(0)
  })
})

/** Every owner vector of `n` shards over `ids` (ids.length ** n of them). */
function* allAssignments(n: number, ids: ReadonlyArray<string>): Generator<Array<string>> {
  if (n === 0) {
    yield []
    return
  }
  for (const rest of allAssignments(n - 1, ids)) for (const id of ids) yield [...rest, id]
}

const isValidCounts = (input: AssignorInput, owners: ReadonlyArray<string>): boolean => {
  const total = input.members.reduce((sum, m) => sum + (m.weight ?? 1), 0)
  return input.members.every((m) => {
    const q = (input.shardCount * (m.weight ?? 1)) / total
    const c = owners.filter((o) => o === m.id).length
    return c === Math.floor(q) || c === Math.ceil(q)
  })
}

const tinyInput: fc.Arbitrary<AssignorInput> = fc
  .record({
    shardCount: fc.integer({ min: 0, max: 6 }),
    members: fc.uniqueArray(fc.constantFrom("a", "b", "c"), { maxLength: 3 }),
    weights: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 3, maxLength: 3 }),
  })
  .chain(({ shardCount, members, weights }) =>
    fc
      .array(fc.option(fc.constantFrom("a", "b", "c", "x"), { nil: null }), {
        maxLength: shardCount,
      })
      .map((previous) => ({
        shardCount,
        members: members.map((id, i) => ({ id, weight: weights[i]! })),
        previous,
      })),
  )

describe("movementLowerBound: exhaustive check on tiny groups", () => {
  it("equals the fewest moves over every balanced assignment, and the assignor attains it", () => {
    fc.assert(
      fc.property(tinyInput, (input) => {
        const ids = input.members.map((m) => m.id)
        let best = Number.POSITIVE_INFINITY
        if (ids.length === 0) best = countMoved(input.previous, Array(input.shardCount).fill(null))
        else
          for (const owners of allAssignments(input.shardCount, ids))
            if (isValidCounts(input, owners))
              best = Math.min(best, countMoved(input.previous, owners))
        expect(movementLowerBound(input)).toBe(best)
        expect(countMoved(input.previous, stickyAssign(input))).toBe(best)
      }),
      { numRuns: Math.max(50, Math.floor(numRuns() / 2)) },
    )
  })
})
