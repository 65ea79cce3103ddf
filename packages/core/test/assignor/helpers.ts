import type { AssignorInput } from "../../src/index.js"

/** Moved shards recomputed from the output alone (not from the assignor's stats). */
export const countMoved = (
  previous: ReadonlyArray<string | null> | undefined,
  owners: ReadonlyArray<string | null>,
): number => {
  let moved = 0
  for (let s = 0; s < (previous?.length ?? 0); s++) {
    const p = previous![s]
    if (p != null && owners[s] !== p) moved++
  }
  return moved
}

/** Shard count per live member (0 for members that own nothing). */
export const countsOf = (
  input: AssignorInput,
  owners: ReadonlyArray<string | null>,
): Map<string, number> => {
  const counts = new Map(input.members.map((m) => [m.id, 0]))
  for (const owner of owners) if (owner !== null) counts.set(owner, (counts.get(owner) ?? 0) + 1)
  return counts
}

/** Quota q_i with integer weights (exact in doubles for these sizes). */
export const quotaOf = (input: AssignorInput, id: string): number => {
  const total = input.members.reduce((sum, m) => sum + (m.weight ?? 1), 0)
  const member = input.members.find((m) => m.id === id)!
  return (input.shardCount * (member.weight ?? 1)) / total
}
