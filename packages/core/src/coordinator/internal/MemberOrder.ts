/**
 * The members the assignor may give shards to, in its order: ascending id
 * (code units, docs/assignor.md). Every target recomputation needs them, and
 * sorting, copying and checking thousands of members anew at each join,
 * leave or expiry was the largest cost of a membership change in a big group
 * (docs/simulator.md, Speed). So the order of a registry map is kept beside
 * it and brought up to date at each call by one walk over the map in its
 * iteration order (insertion order: removed ids drop out, new ids come last),
 * comparing ids by identity, no hashing; only ids added since the last call
 * are placed by comparison.
 *
 * The walk runs on every call, so the order needs no hook in `replay` and is
 * never stale.
 */
import { compareIds } from "../../assignor/internal/validate.js"
import type { MemberEntry } from "../CoordinatorState.js"
import type { Draft } from "./Draft.js"

interface Order {
  /** The registry's ids and entries in its iteration order, as of the last call. */
  readonly keys: Array<string>
  readonly entries: Array<MemberEntry>
  /**
   * Per position, what the assignor reads of its entry (the weight; NaN for
   * a leaving member, which gets no shards), copied when the entry object
   * changes: reading thousands of entries at every membership change was a
   * cache miss per member (docs/simulator.md, Speed).
   */
  readonly weights: Array<number>
  /** Positions in `keys` in ascending id order. */
  sorted: Array<number>
}

/** What the assignor reads of an entry: its weight, NaN when it is leaving. */
const weightOf = (m: MemberEntry): number => (m.state === "LEAVING" ? Number.NaN : m.weight)

const orders = new WeakMap<ReadonlyMap<string, MemberEntry>, Order>()

/** The ids of `members` in ascending order (a fresh array). */
export const sortedIds = (members: ReadonlyMap<string, MemberEntry>): Array<string> => {
  const { keys, sorted } = orderOf(members)
  return sorted.map((at) => keys[at]!)
}

const orderOf = (members: ReadonlyMap<string, MemberEntry>): Order => {
  let order = orders.get(members)
  if (order === undefined) {
    order = { keys: [], entries: [], weights: [], sorted: [] }
    orders.set(members, order)
  }
  const { keys, entries, weights } = order
  const before = keys.length
  // Compacted in place (a kept id's new position is never after its old one);
  // old positions that dropped out are listed, ascending.
  const removed: Array<number> = []
  const added: Array<number> = []
  let i = 0
  let n = 0
  for (const [id, m] of members) {
    while (i < before && keys[i] !== id) removed.push(i++)
    // (a kept id moves from i to n <= i: read its old slot before writing the new one)
    if (i < before) weights[n] = entries[i] === m ? weights[i]! : weightOf(m)
    else weights[n] = weightOf(m)
    if (i < before) i++
    else added.push(n)
    keys[n] = id
    entries[n] = m
    n++
  }
  while (i < before) removed.push(i++)
  keys.length = n
  entries.length = n
  weights.length = n
  if (removed.length === 0 && added.length === 0) return order
  const kept: Array<number> = []
  for (const old of order.sorted) {
    // its new position: minus the removed positions before it
    let lo = 0
    let hi = removed.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (removed[mid]! < old) lo = mid + 1
      else hi = mid
    }
    if (lo < removed.length && removed[lo] === old) continue
    kept.push(old - lo)
  }
  added.sort((a, b) => compareIds(keys[a]!, keys[b]!))
  order.sorted = merge(kept, added, keys)
  return order
}

/** Merges two position lists, each in ascending id order. */
const merge = (
  a: ReadonlyArray<number>,
  b: ReadonlyArray<number>,
  keys: ReadonlyArray<string>,
): Array<number> => {
  if (b.length === 0) return a as Array<number>
  const out = new Array<number>(a.length + b.length)
  let i = 0
  let j = 0
  let k = 0
  while (j < b.length) {
    // the next added id's place among the kept ones: a binary search from i
    const id = keys[b[j]!]!
    let lo = i
    let hi = a.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (compareIds(keys[a[mid]!]!, id) < 0) lo = mid + 1
      else hi = mid
    }
    while (i < lo) out[k++] = a[i++]!
    out[k++] = b[j++]!
  }
  while (i < a.length) out[k++] = a[i++]!
  return out
}

/** The assignor's input: member ids in ascending order and their weights. */
export interface AssignorMembers {
  readonly ids: Array<string>
  readonly weights: Array<number>
}

/**
 * The draft's assignable members (registered, not leaving, the draft's own
 * changes applied), in ascending id order.
 */
export const assignorMembers = (draft: Draft): AssignorMembers => {
  const registered = draft.state.members
  const order = orderOf(registered)
  const { keys, sorted } = order
  const ids: Array<string> = []
  const weights: Array<number> = []
  const take = (m: MemberEntry | null) => {
    if (m === null) return
    const w = weightOf(m)
    if (!Number.isNaN(w)) {
      ids.push(m.memberId)
      weights.push(w)
    }
  }
  const drafted = draft.drafted()
  // The draft's changes (a handful), each placed by binary search: it
  // replaces (or removes) the registered entry of its id, or adds one.
  const overlay = drafted === undefined ? [] : [...drafted.keys()].sort(compareIds)
  const place = overlay.map((id) => lowerBound(keys, sorted, id))
  const cached = order.weights
  let j = 0
  for (let t = 0; t < sorted.length; t++) {
    const at = sorted[t]!
    let replaced = false
    while (j < overlay.length && place[j] === t) {
      const id = overlay[j++]!
      if (id === keys[at]) replaced = true
      take(drafted!.get(id)!)
    }
    if (replaced) continue
    // the registered entry: its id and cached weight (NaN: leaving)
    const w = cached[at]!
    if (!Number.isNaN(w)) {
      ids.push(keys[at]!)
      weights.push(w)
    }
  }
  while (j < overlay.length) take(drafted!.get(overlay[j++]!)!)
  return { ids, weights }
}

/** The first position in `sorted` whose id is not below `id`. */
const lowerBound = (
  keys: ReadonlyArray<string>,
  sorted: ReadonlyArray<number>,
  id: string,
): number => {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (compareIds(keys[sorted[mid]!]!, id) < 0) lo = mid + 1
    else hi = mid
  }
  return lo
}
