/**
 * The movement oracle: the fewest shards any valid assignment must move.
 * Written independently of the assignor (it shares only input validation), so
 * that tests can hold the assignor to it.
 *
 * @module
 */
import { compareIds, validateAssignorInput } from "./internal/validate.js"
import type { AssignorInput } from "./types.js"

/**
 * Minimum, over every assignment that is valid for `input`, of the number of
 * shards whose previous owner is non-null and differs from the new owner.
 *
 * `departed + min over valid c of Σ_i max(0, prev_i - c_i)`, where `departed`
 * counts shards whose previous owner is not a live member and `c` ranges over
 * the target vectors with `c_i ∈ {floor(q_i), ceil(q_i)}`, `Σ c_i = shardCount`
 * (quotas as in `stickyAssign`: `q_i = shardCount * w_i / W`, `W` summed in
 * ascending id order).
 *
 * Why this is a lower bound: a departed owner's shards must all move, and a
 * live member ending with `c_i` shards keeps at most `c_i` of its `prev_i`.
 * It is attained: keep `min(prev_i, c_i)` shards of each member and hand the
 * rest out; only the released and departed shards change owner.
 *
 * Closed form of the minimum: write `c_i = f_i + x_i` with `f_i = floor(q_i)`,
 * `x_i ∈ {0, 1}`, `x_i = 1` only for fractional quotas and `Σ x_i = R =
 * shardCount - Σ f_i`. Then `Σ max(0, prev_i - c_i) = Σ max(0, prev_i - f_i) -
 * #{i : x_i = 1 and prev_i > f_i}`, minimised by spending the `R` ones on
 * fractional members with `prev_i > f_i` first: the minimum is
 * `Σ max(0, prev_i - f_i) - min(R, #{fractional i : prev_i > f_i})`.
 *
 * @throws AssignorInputError on invalid input.
 */
export const movementLowerBound = (input: AssignorInput): number => {
  const error = validateAssignorInput(input)
  if (error !== undefined) throw error

  const previousCount = new Map<string, number>()
  for (const owner of input.previous ?? []) {
    if (owner != null) previousCount.set(owner, (previousCount.get(owner) ?? 0) + 1)
  }

  const members = [...input.members].sort((a, b) => compareIds(a.id, b.id))
  let departed = 0
  const live = new Set(members.map((m) => m.id))
  for (const [owner, count] of previousCount) if (!live.has(owner)) departed += count
  if (members.length === 0) return departed

  const totalWeight = members.reduce((sum, m) => sum + (m.weight ?? 1), 0)
  let excessOverFloor = 0
  let floorSum = 0
  let fractionalWithExcess = 0
  for (const member of members) {
    const quota = (input.shardCount * (member.weight ?? 1)) / totalWeight
    const floor = Math.floor(quota)
    const prev = previousCount.get(member.id) ?? 0
    floorSum += floor
    excessOverFloor += Math.max(0, prev - floor)
    if (quota !== floor && prev > floor) fractionalWithExcess++
  }
  const ceilSlots = input.shardCount - floorSum
  return departed + excessOverFloor - Math.min(ceilSlots, fractionalWithExcess)
}
