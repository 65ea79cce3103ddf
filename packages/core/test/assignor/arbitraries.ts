import fc from "fast-check"
import type { AssignorInput, AssignorMember } from "../../src/index.js"
import { stickyAssign } from "../../src/index.js"

/** numRuns for every property: `FC_NUM_RUNS` overrides the default. */
export const numRuns = (fallback = 500): number => {
  const fromEnv = Number(process.env.FC_NUM_RUNS)
  return Number.isInteger(fromEnv) && fromEnv > 0 ? fromEnv : fallback
}

/** 60 possible ids, so that previous owners include departed members. */
export const idPool: ReadonlyArray<string> = Array.from({ length: 60 }, (_, i) => `m${i}`)

const membersArb = (weighted: boolean): fc.Arbitrary<ReadonlyArray<AssignorMember>> =>
  fc.uniqueArray(fc.constantFrom(...idPool), { maxLength: 40 }).chain((ids) =>
    weighted
      ? fc
          .array(fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }), {
            minLength: ids.length,
            maxLength: ids.length,
          })
          .map((ws) => ids.map((id, i) => (ws[i] === undefined ? { id } : { id, weight: ws[i]! })))
      : fc.constant(ids.map((id) => ({ id }))),
  )

/** Random previous array: owners from the pool (live or departed) and nulls, any length <= n. */
const randomPrevious = (n: number): fc.Arbitrary<ReadonlyArray<string | null>> =>
  fc.array(fc.option(fc.constantFrom(...idPool), { nil: null, freq: 4 }), { maxLength: n })

/**
 * Realistic previous array: the assignment of an older group (possibly an
 * older, smaller shard count), then lightly perturbed. The older group is
 * either unrelated, or the current members with a few joins, leaves and
 * weight changes (the common rebalance).
 */
const historicalPrevious = (
  n: number,
  current: ReadonlyArray<AssignorMember>,
): fc.Arbitrary<ReadonlyArray<string | null>> =>
  fc
    .record({
      olderCount: fc.oneof(fc.constant(n), fc.integer({ min: 0, max: n })),
      olderMembers: fc.oneof(
        membersArb(true),
        fc
          .record({
            keep: fc.array(fc.boolean(), { minLength: current.length, maxLength: current.length }),
            reweight: fc.array(fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }), {
              minLength: current.length,
              maxLength: current.length,
            }),
            extra: fc.uniqueArray(fc.constantFrom(...idPool), { maxLength: 3 }),
          })
          .map(({ keep, reweight, extra }) => {
            const kept = current
              .filter((_, i) => keep[i] !== false)
              .map((m, i) => (reweight[i] === undefined ? m : { id: m.id, weight: reweight[i]! }))
            const ids = new Set(kept.map((m) => m.id))
            return [...kept, ...extra.filter((id) => !ids.has(id)).map((id) => ({ id }))]
          }),
      ),
      edits: fc.array(fc.tuple(fc.nat(), fc.option(fc.constantFrom(...idPool), { nil: null })), {
        maxLength: 5,
      }),
    })
    .map(({ olderCount, olderMembers, edits }) => {
      const prev = [...stickyAssign({ shardCount: olderCount, members: olderMembers })]
      for (const [at, owner] of edits) if (prev.length > 0) prev[at % prev.length] = owner
      return prev
    })

const inputArb = (weighted: boolean, maxShards = 300): fc.Arbitrary<AssignorInput> =>
  fc
    .record({
      shardCount: fc.integer({ min: 0, max: maxShards }),
      members: membersArb(weighted),
    })
    .chain(({ shardCount, members }) =>
      fc
        .oneof(
          fc.constant(undefined),
          randomPrevious(shardCount),
          historicalPrevious(shardCount, members),
          historicalPrevious(shardCount, members),
        )
        .map((previous) =>
          previous === undefined ? { shardCount, members } : { shardCount, members, previous },
        ),
    )

export const equalWeightInput = inputArb(false)
export const weightedInput = inputArb(true)
export const anyInput = fc.oneof(equalWeightInput, weightedInput)
