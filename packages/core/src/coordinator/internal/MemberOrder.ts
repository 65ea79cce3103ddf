/**
 * The members the assignor may give shards to, in its order: ascending id
 * (code units, docs/assignor.md). Every target recomputation needs them, and
 * sorting thousands of ids anew at each join, leave or expiry was the largest
 * cost of a membership change in a big group (docs/simulator.md, Speed). So
 * the sorted ids of a registry are kept per registry map and brought up to
 * date in O(members) map lookups, without string comparisons, when it
 * changed; only ids added since the last call are sorted.
 *
 * The cache checks itself on every call (same size, every cached id still
 * registered), so it needs no hook in `replay` and can never be stale.
 */
import { compareIds } from "../../assignor/internal/validate.js"
import type { AssignorMember } from "../../assignor/types.js"
import type { MemberEntry } from "../CoordinatorState.js"
import type { Draft } from "./Draft.js"

interface Order {
  readonly sorted: Array<string>
  readonly ids: Set<string>
}

const orders = new WeakMap<ReadonlyMap<string, unknown>, Order>()

/** The ids of `members` in ascending order. */
export const sortedIds = (members: ReadonlyMap<string, unknown>): ReadonlyArray<string> => {
  const order = orders.get(members)
  if (order === undefined) {
    const sorted = [...members.keys()].sort(compareIds)
    orders.set(members, { sorted, ids: new Set(sorted) })
    return sorted
  }
  const { sorted, ids } = order
  let removed = 0
  for (const id of sorted) if (!members.has(id)) removed++
  if (removed === 0 && sorted.length === members.size) return sorted
  if (removed > 0) {
    let j = 0
    for (const id of sorted) {
      if (members.has(id)) sorted[j++] = id
      else ids.delete(id)
    }
    sorted.length = j
  }
  if (sorted.length < members.size) {
    const added: Array<string> = []
    for (const id of members.keys()) if (!ids.has(id)) added.push(id)
    added.sort(compareIds)
    for (const id of added) ids.add(id)
    mergeInto(sorted, added)
  }
  return sorted
}

/** Merges the ascending `added` into the ascending `sorted`, in place. */
const mergeInto = (sorted: Array<string>, added: ReadonlyArray<string>): void => {
  let i = sorted.length - 1
  let j = added.length - 1
  let k = sorted.length + added.length - 1
  sorted.length = k + 1
  while (j >= 0) {
    if (i >= 0 && compareIds(sorted[i]!, added[j]!) > 0) sorted[k--] = sorted[i--]!
    else sorted[k--] = added[j--]!
  }
}

/**
 * The draft's assignable members (registered, not leaving, the draft's own
 * changes applied), in ascending id order, as the assignor takes them.
 */
export const assignorMembers = (draft: Draft): Array<AssignorMember> => {
  const registered = draft.state.members
  const joined: Array<string> = []
  for (const [id, m] of draft.members) if (m !== null && !registered.has(id)) joined.push(id)
  joined.sort(compareIds)
  const out: Array<AssignorMember> = []
  const push = (m: MemberEntry | undefined) => {
    if (m !== undefined && m.state !== "LEAVING") out.push({ id: m.memberId, weight: m.weight })
  }
  let j = 0
  for (const id of sortedIds(registered)) {
    while (j < joined.length && compareIds(joined[j]!, id) < 0) push(draft.member(joined[j++]!))
    push(draft.member(id))
  }
  while (j < joined.length) push(draft.member(joined[j++]!))
  return out
}
