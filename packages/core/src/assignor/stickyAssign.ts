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
import { repairTotal } from "./internal/repairTotal.js"
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

/** Index of `id` in the ascending `ids`, or -1. */
const binarySearch = (ids: ReadonlyArray<string>, id: string): number => {
  let lo = 0
  let hi = ids.length - 1
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1
    const probe = ids[mid]!
    if (probe === id) return mid
    if (probe < id) lo = mid + 1
    else hi = mid - 1
  }
  return -1
}

/** Raw result: `counts` as ids + typed array (a Map per call costs more than the assignment). */
interface RawResult {
  readonly owners: ReadonlyArray<string | null>
  readonly moved: number
  readonly departed: number
  readonly ids: ReadonlyArray<string>
  readonly target: Int32Array
}

const withCounts = (raw: RawResult): AssignmentResult => {
  const counts = new Map<string, number>()
  for (let i = 0; i < raw.ids.length; i++) counts.set(raw.ids[i]!, raw.target[i]!)
  return { owners: raw.owners, moved: raw.moved, departed: raw.departed, counts }
}

const assignValid = (input: AssignorInput, sorted: ReadonlyArray<AssignorMember>): RawResult => {
  const n = input.shardCount
  const m = input.members.length
  const previous = input.previous ?? []
  const prevLength = previous.length
  const owners = new Array<string | null>(n)

  if (m === 0) {
    let departed = 0
    for (let s = 0; s < prevLength; s++) if (previous[s] != null) departed++
    owners.fill(null)
    return { owners, moved: departed, departed, ids: [], target: new Int32Array(0) }
  }

  // Members in id order; index i refers to this order from here on.
  const ids = new Array<string>(m)
  const weights = new Float64Array(m)
  let totalWeight = 0
  for (let i = 0; i < m; i++) {
    const member = sorted[i]!
    ids[i] = member.id
    const w = member.weight ?? 1
    weights[i] = w
    totalWeight += w
  }

  // Previous owner index per shard (-1: unowned or departed) and prev_i.
  // Owners come in runs, usually in id order: try the same member, then the
  // next one, before a binary search (cheaper than building a Map per call).
  const ownerOf = new Int32Array(n).fill(-1)
  const prevCount = new Int32Array(m)
  let departed = 0
  let lastId: string | null = null
  let lastIndex = -1
  for (let s = 0; s < prevLength; s++) {
    const id = previous[s]
    if (id == null) continue
    if (id !== lastId) {
      lastIndex =
        lastIndex >= 0 && ids[lastIndex + 1] === id ? lastIndex + 1 : binarySearch(ids, id)
      lastId = id
    }
    if (lastIndex < 0) {
      departed++
    } else {
      ownerOf[s] = lastIndex
      prevCount[lastIndex]!++
    }
  }

  // Targets: floors, then R ceil slots among fractional-quota members.
  const target = new Int32Array(m)
  const quota = new Float64Array(m)
  const fractional: Array<number> = []
  let floorSum = 0
  for (let i = 0; i < m; i++) {
    const q = (n * weights[i]!) / totalWeight
    const f = Math.floor(q)
    quota[i] = q
    target[i] = f
    floorSum += f
    if (q > f) fractional.push(i)
  }
  // 0 <= R <= fractional.length: Σ q_i = n up to rounding far below 1 for
  // any realistic n * m, and every fractional part is < 1.
  const ceilSlots = n - floorSum
  if (ceilSlots >= fractional.length) {
    for (const i of fractional) target[i]!++
  } else if (ceilSlots > 0) {
    giveCeilSlots(ceilSlots, fractional, prevCount, target)
  }
  repairTotal(n, quota, target)

  // Keep: lowest indexes first, so over-target members release their highest.
  const kept = new Int32Array(m)
  const free = new Int32Array(n)
  let freeCount = 0
  let released = 0
  for (let s = 0; s < n; s++) {
    const i = ownerOf[s]!
    if (i >= 0 && kept[i]! < target[i]!) {
      kept[i]!++
      owners[s] = ids[i]!
    } else {
      if (i >= 0) released++
      free[freeCount++] = s
    }
  }

  // Fill: free shards in ascending index to under-target members in id order.
  let next = 0
  for (let i = 0; i < m; i++) {
    const id = ids[i]!
    for (let need = target[i]! - kept[i]!; need > 0; need--) owners[free[next++]!] = id
  }

  return { owners, moved: departed + released, departed, ids, target }
}

/**
 * Adds 1 to the target of the `slots` fractional members with the largest
 * `prev_i - target_i` (target = floor here), ties by ascending index (= id).
 * Counting selection over the key range (<= n + max floor), no sort: O(m + n).
 */
const giveCeilSlots = (
  slots: number,
  fractional: ReadonlyArray<number>,
  prevCount: Int32Array,
  target: Int32Array,
): void => {
  let minKey = Number.POSITIVE_INFINITY
  let maxKey = Number.NEGATIVE_INFINITY
  for (const i of fractional) {
    const key = prevCount[i]! - target[i]!
    if (key < minKey) minKey = key
    if (key > maxKey) maxKey = key
  }
  const histogram = new Int32Array(maxKey - minKey + 1)
  for (const i of fractional) histogram[prevCount[i]! - target[i]! - minKey]!++
  // Threshold key t: every key > t gets a slot, the first `atThreshold` with key t do.
  let t = maxKey
  let above = 0
  while (above + histogram[t - minKey]! < slots) above += histogram[t-- - minKey]!
  let atThreshold = slots - above
  for (const i of fractional) {
    const key = prevCount[i]! - target[i]!
    if (key > t) target[i]!++
    else if (key === t && atThreshold > 0) {
      target[i]!++
      atThreshold--
    }
  }
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
