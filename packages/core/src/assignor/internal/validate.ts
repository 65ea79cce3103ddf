import { AssignorInputError } from "../../Errors.js"
import type { AssignorInput } from "../types.js"

/**
 * Checks an {@link AssignorInput}; returns the first problem found, or
 * `undefined` when the input is valid. Checks run in this order: shard count,
 * then each member (empty id, weight, duplicate id), then `previous`.
 */
export const validateAssignorInput = (input: AssignorInput): AssignorInputError | undefined => {
  const n = input.shardCount
  if (!Number.isInteger(n) || n < 0) {
    return new AssignorInputError({
      reason: "InvalidShardCount",
      detail: `shardCount must be a non-negative integer, got ${n}`,
    })
  }
  const seen = new Set<string>()
  for (const member of input.members) {
    if (member.id === "") {
      return new AssignorInputError({ reason: "EmptyMemberId", detail: "member id is empty" })
    }
    const w = member.weight
    if (w !== undefined && !(Number.isFinite(w) && w > 0)) {
      return new AssignorInputError({
        reason: "InvalidWeight",
        detail: `weight of member ${member.id} must be positive and finite, got ${w}`,
      })
    }
    if (seen.has(member.id)) {
      return new AssignorInputError({
        reason: "DuplicateMemberId",
        detail: `member id ${member.id} appears more than once`,
      })
    }
    seen.add(member.id)
  }
  const previousLength = input.previous?.length ?? 0
  if (previousLength > n) {
    return new AssignorInputError({
      reason: "PreviousTooLong",
      detail: `previous has ${previousLength} entries but shardCount is ${n}`,
    })
  }
  return undefined
}

/** Ascending code-unit order of ids (not locale order): stable across hosts. */
export const compareIds = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)
