import { AssignorInputError } from "../../Errors.js"
import {
  type AssignorInput,
  type AssignorMember,
  MAX_MEMBER_WEIGHT,
  MIN_MEMBER_WEIGHT,
} from "../types.js"

/** Ascending code-unit order of ids (not locale order): stable across hosts. */
export const compareIds = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

const byId = (a: AssignorMember, b: AssignorMember): number => compareIds(a.id, b.id)

/**
 * Checks everything but duplicate ids, in this order: shard count, each
 * member's id and weight, the length of `previous`.
 */
export const checkScalars = (input: AssignorInput): AssignorInputError | undefined => {
  const n = input.shardCount
  if (!Number.isInteger(n) || n < 0) {
    return new AssignorInputError({
      reason: "InvalidShardCount",
      detail: `shardCount must be a non-negative integer, got ${n}`,
    })
  }
  for (const member of input.members) {
    if (member.id === "") {
      return new AssignorInputError({ reason: "EmptyMemberId", detail: "member id is empty" })
    }
    const w = member.weight
    if (w !== undefined && !(w >= MIN_MEMBER_WEIGHT && w <= MAX_MEMBER_WEIGHT)) {
      return new AssignorInputError({
        reason: "InvalidWeight",
        detail: `weight of member ${member.id} must be within [${MIN_MEMBER_WEIGHT}, ${MAX_MEMBER_WEIGHT}], got ${w}`,
      })
    }
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

/**
 * The members sorted by id, or a `DuplicateMemberId` error. Sorting makes
 * duplicates adjacent, so no Set is needed.
 */
export const sortMembers = (
  members: ReadonlyArray<AssignorMember>,
): Array<AssignorMember> | AssignorInputError => {
  const sorted = members.slice().sort(byId)
  for (let i = 1; i < sorted.length; i++) {
    const id = sorted[i]!.id
    if (id === sorted[i - 1]!.id) {
      return new AssignorInputError({
        reason: "DuplicateMemberId",
        detail: `member id ${id} appears more than once`,
      })
    }
  }
  return sorted
}

/**
 * Checks an {@link AssignorInput}; returns the first problem found, or
 * `undefined` when the input is valid. Checks run in this order: shard count,
 * each member's id and weight, length of `previous`, then duplicate ids.
 */
export const validateAssignorInput = (input: AssignorInput): AssignorInputError | undefined => {
  const error = checkScalars(input)
  if (error !== undefined) return error
  const sorted = sortMembers(input.members)
  return Array.isArray(sorted) ? undefined : sorted
}
