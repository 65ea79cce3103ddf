/**
 * The sticky assignor's core, shared by `stickyAssign` (validated, sorted
 * input) and the coordinator (its members already in order).
 */
import { repairTotal } from "./repairTotal.js"

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
export interface RawResult {
  readonly owners: ReadonlyArray<string | null>
  readonly moved: number
  readonly departed: number
  readonly ids: ReadonlyArray<string>
  readonly target: Int32Array
}

/**
 * The sticky assignor's algorithm (the rules are in stickyAssign.ts), on valid
 * members given as parallel arrays in ascending id order: `ids` distinct and
 * non-empty, `weights` within [MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT]. The
 * coordinator keeps its members in this order (coordinator/internal/
 * MemberOrder.ts) and calls this directly, without copying, sorting and
 * checking thousands of members again at every membership change
 * (docs/simulator.md, Speed).
 */
export const assignSorted = (
  n: number,
  ids: ReadonlyArray<string>,
  weights: ArrayLike<number>,
  previous: ReadonlyArray<string | null>,
): RawResult => {
  const m = ids.length
  const prevLength = previous.length
  const owners = new Array<string | null>(n)

  if (m === 0) {
    let departed = 0
    for (let s = 0; s < prevLength; s++) if (previous[s] != null) departed++
    owners.fill(null)
    return { owners, moved: departed, departed, ids: [], target: new Int32Array(0) }
  }

  // Members in id order; index i refers to this order from here on.
  let totalWeight = 0
  for (let i = 0; i < m; i++) totalWeight += weights[i]!

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
