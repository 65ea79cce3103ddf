/**
 * The sticky assignor: shard count + live members (+ optional weights) +
 * previous owners -> new owners.
 *
 * ## Definitions
 *
 * - Members are ordered by id (ascending UTF-16 code units); `W` is the sum of
 *   the weights (default 1) added up in that order.
 * - Quota of member i: `q_i = shardCount * w_i / W` (IEEE double).
 * - A target count vector `c` is valid when `c_i ∈ {floor(q_i), ceil(q_i)}` and
 *   `Σ c_i = shardCount`. With equal weights this is exactly `max - min <= 1`.
 *   Write `R = shardCount - Σ floor(q_i)`: exactly `R` members with a
 *   fractional quota get `floor + 1`.
 * - `prev_i` = shards whose previous owner is member i. Shards whose previous
 *   owner is not a live member are "departed"; `null` entries and indexes at or
 *   beyond `previous.length` are "unowned".
 * - `moved` = shards whose previous owner is non-null and differs from the new
 *   owner (a departed owner's shards count; `null -> X` does not).
 *
 * ## Algorithm (O(N + M log M), no per-shard allocation besides the result)
 *
 * The only O(M log M) step is sorting members by id; previous owners are
 * resolved by runs (same or next member) with a binary-search fallback.
 *
 * 1. Targets: the `R` "ceil" slots go to the fractional-quota members with the
 *    largest `prev_i - floor(q_i)`, ties broken by ascending id. A ceil slot
 *    saves one move exactly when `prev_i > floor(q_i)`, so this choice
 *    minimises `Σ max(0, prev_i - c_i)` over all valid `c`. (Choosing by
 *    `prev_i` alone is not optimal with weights: a heavy member can hold more
 *    shards than a light one yet sit at its floor.) Selection is a counting
 *    pass over the key range, not a sort.
 * 2. Keep: scanning shards in ascending index, a shard keeps its previous owner
 *    while that owner is live and has kept fewer than its target. An
 *    over-target member therefore releases its highest shard indexes.
 * 3. Fill: released, departed and unowned shards, in ascending index, are
 *    handed out to the under-target members in ascending id order, each taking
 *    a contiguous run of the free list until it reaches its target.
 *
 * Hence `moved = departed + Σ max(0, prev_i - c_i)`, which with the choice of
 * step 1 equals {@link movementLowerBound} (proven in its doc comment, checked by
 * property tests). Everything is a function of the id-sorted member list, so
 * the output does not depend on the order of `members`.
 *
 * @module
 */
import { Effect } from "effect"
import type { AssignorInputError } from "../Errors.js"
import { assignSorted, type RawResult } from "./internal/assignSorted.js"
import { checkScalars, sortMembers } from "./internal/validate.js"
import type { AssignorInput, AssignorMember } from "./types.js"

export { validateAssignorInput } from "./internal/validate.js"
export type { AssignorInput, AssignorMember } from "./types.js"
export { MAX_MEMBER_WEIGHT, MIN_MEMBER_WEIGHT } from "./types.js"

/** Result of {@link assignWithStats}. */
export interface AssignmentResult {
  /** New owner per shard (index = shard); all `null` when there is no member. */
  readonly owners: ReadonlyArray<string | null>
  /** Shards whose previous owner is non-null and differs from the new owner. */
  readonly moved: number
  /** Of `moved`, the shards whose previous owner is not a live member. */
  readonly departed: number
  /** Shard count per live member, keys in ascending id order. */
  readonly counts: ReadonlyMap<string, number>
}

/** Validated members in id order, or the first input error. */
const prepare = (input: AssignorInput): Array<AssignorMember> | AssignorInputError => {
  const error = checkScalars(input)
  return error !== undefined ? error : sortMembers(input.members)
}

const withCounts = (raw: RawResult): AssignmentResult => {
  const counts = new Map<string, number>()
  for (let i = 0; i < raw.ids.length; i++) counts.set(raw.ids[i]!, raw.target[i]!)
  return { owners: raw.owners, moved: raw.moved, departed: raw.departed, counts }
}

const assignValid = (input: AssignorInput, sorted: ReadonlyArray<AssignorMember>): RawResult => {
  const m = sorted.length
  const ids = new Array<string>(m)
  const weights = new Float64Array(m)
  for (let i = 0; i < m; i++) {
    const member = sorted[i]!
    ids[i] = member.id
    weights[i] = member.weight ?? 1
  }
  return assignSorted(input.shardCount, ids, weights, input.previous ?? [])
}

/**
 * Like {@link stickyAssign}, also returning how many shards moved and the
 * per-member counts.
 *
 * @throws AssignorInputError on invalid input (see {@link validateAssignorInput}).
 */
export const assignWithStats = (input: AssignorInput): AssignmentResult =>
  withCounts(assignRaw(input))

const assignRaw = (input: AssignorInput): RawResult => {
  const sorted = prepare(input)
  if (!Array.isArray(sorted)) throw sorted
  return assignValid(input, sorted)
}

/**
 * Sticky, balanced, minimal-movement assignment of `shardCount` shards to the
 * live `members` (see the module comment for the exact rules).
 *
 * @example
 * ```ts
 * stickyAssign({ shardCount: 4, members: [{ id: "a" }, { id: "b" }], previous: ["a", "a", "a", "a"] })
 * // => ["a", "a", "b", "b"]  (a keeps its lowest shards, 2 moved)
 * ```
 *
 * @throws AssignorInputError on invalid input (see {@link validateAssignorInput}).
 */
export const stickyAssign = (input: AssignorInput): ReadonlyArray<string | null> =>
  assignRaw(input).owners

/** {@link assignWithStats} as an Effect failing with the typed error. */
export const assignWithStatsEffect = (
  input: AssignorInput,
): Effect.Effect<AssignmentResult, AssignorInputError> =>
  Effect.suspend(() => {
    const sorted = prepare(input)
    return Array.isArray(sorted)
      ? Effect.succeed(withCounts(assignValid(input, sorted)))
      : Effect.fail(sorted)
  })

/** {@link stickyAssign} as an Effect failing with the typed error. */
export const stickyAssignEffect = (
  input: AssignorInput,
): Effect.Effect<ReadonlyArray<string | null>, AssignorInputError> =>
  Effect.suspend(() => {
    const sorted = prepare(input)
    return Array.isArray(sorted)
      ? Effect.succeed(assignValid(input, sorted).owners)
      : Effect.fail(sorted)
  })
