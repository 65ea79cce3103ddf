// PLACEHOLDER (replaced by the real sticky assignor in issue #2's assignor work).
export interface AssignorMember {
  readonly id: string
  readonly weight?: number
}

export interface AssignorInput {
  readonly shardCount: number
  readonly members: ReadonlyArray<AssignorMember>
  readonly previous?: ReadonlyArray<string | null>
}

export const stickyAssign = (input: AssignorInput): ReadonlyArray<string | null> => {
  const ids = input.members.map((m) => m.id).sort()
  const out: Array<string | null> = []
  for (let s = 0; s < input.shardCount; s++)
    out.push(ids.length === 0 ? null : ids[s % ids.length]!)
  return out
}
