/** Pure helpers shared by the benchmarks: membership scenarios and quality metrics. */

/** Member ids `member-0000` .. in ascending order (zero-padded so id order = numeric order). */
export const memberIds = (count: number, from = 0): Array<string> =>
  Array.from({ length: count }, (_, i) => `member-${String(from + i).padStart(6, "0")}`)

/** Shards whose previous owner is non-null and differs from the new owner. */
export const countMoved = (
  previous: ReadonlyArray<string | null>,
  owners: ReadonlyArray<string | null>,
): number => {
  let moved = 0
  for (let s = 0; s < previous.length; s++) {
    const p = previous[s]
    if (p != null && owners[s] !== p) moved++
  }
  return moved
}

/** max - min of the shard counts over `memberIdsLive` (a member owning nothing counts 0). */
export const balance = (
  memberIdsLive: ReadonlyArray<string>,
  owners: ReadonlyArray<string | null>,
): number => {
  if (memberIdsLive.length === 0) return 0
  const counts = new Map<string, number>()
  for (const id of memberIdsLive) counts.set(id, 0)
  for (const owner of owners) {
    if (owner !== null) counts.set(owner, (counts.get(owner) ?? 0) + 1)
  }
  let max = Number.NEGATIVE_INFINITY
  let min = Number.POSITIVE_INFINITY
  for (const c of counts.values()) {
    if (c > max) max = c
    if (c < min) min = c
  }
  return max - min
}

/** The membership change a benchmark case measures. */
export type Operation = "initial" | "join" | "leave"

export interface Scenario {
  /** Members before the change (empty for `initial`). */
  readonly before: ReadonlyArray<string>
  /** Members after the change. */
  readonly after: ReadonlyArray<string>
}

/**
 * `initial`: `members` join an empty group. `join`: one new member joins a group of
 * `members`. `leave`: the middle member (in id order) of `members` leaves.
 */
export const scenario = (operation: Operation, members: number): Scenario => {
  const ids = memberIds(members)
  switch (operation) {
    case "initial":
      return { before: [], after: ids }
    case "join":
      return { before: ids, after: [...ids, ...memberIds(1, members)] }
    case "leave": {
      const gone = Math.floor(members / 2)
      return { before: ids, after: ids.filter((_, i) => i !== gone) }
    }
  }
}
