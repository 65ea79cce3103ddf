import { assert, it as effectIt } from "@effect/vitest"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type { AssignorInput, AssignorInputErrorReason } from "../../src/index.js"
import {
  AssignorInputError,
  assignWithStats,
  movementLowerBound,
  stickyAssign,
  stickyAssignEffect,
} from "../../src/index.js"

const cases: ReadonlyArray<readonly [string, AssignorInput, AssignorInputErrorReason]> = [
  ["negative shardCount", { shardCount: -1, members: [] }, "InvalidShardCount"],
  ["fractional shardCount", { shardCount: 2.5, members: [] }, "InvalidShardCount"],
  ["NaN shardCount", { shardCount: Number.NaN, members: [] }, "InvalidShardCount"],
  [
    "infinite shardCount",
    { shardCount: Number.POSITIVE_INFINITY, members: [] },
    "InvalidShardCount",
  ],
  [
    "duplicate member id",
    { shardCount: 2, members: [{ id: "a" }, { id: "a" }] },
    "DuplicateMemberId",
  ],
  ["empty member id", { shardCount: 2, members: [{ id: "" }] }, "EmptyMemberId"],
  ["zero weight", { shardCount: 2, members: [{ id: "a", weight: 0 }] }, "InvalidWeight"],
  ["negative weight", { shardCount: 2, members: [{ id: "a", weight: -1 }] }, "InvalidWeight"],
  ["NaN weight", { shardCount: 2, members: [{ id: "a", weight: Number.NaN }] }, "InvalidWeight"],
  [
    "infinite weight",
    { shardCount: 2, members: [{ id: "a", weight: Number.POSITIVE_INFINITY }] },
    "InvalidWeight",
  ],
  [
    "previous longer than shardCount",
    { shardCount: 1, members: [{ id: "a" }], previous: ["a", "a"] },
    "PreviousTooLong",
  ],
]

const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (e) {
    return e
  }
  return undefined
}

describe("invalid input", () => {
  for (const [name, input, reason] of cases) {
    it(`${name}: throws AssignorInputError(${reason})`, () => {
      for (const f of [stickyAssign, assignWithStats, movementLowerBound]) {
        const error = thrown(() => f(input))
        expect(error).toBeInstanceOf(AssignorInputError)
        expect(error).toMatchObject({ _tag: "AssignorInputError", reason })
      }
    })

    effectIt.effect(`${name}: stickyAssignEffect fails with ${reason}`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(stickyAssignEffect(input))
        assert.strictEqual(error._tag, "AssignorInputError")
        assert.strictEqual(error.reason, reason)
      }),
    )
  }

  effectIt.effect("valid input succeeds through the Effect variant", () =>
    Effect.gen(function* () {
      const owners = yield* stickyAssignEffect({ shardCount: 3, members: [{ id: "a" }] })
      assert.deepStrictEqual(owners, ["a", "a", "a"])
    }),
  )
})
