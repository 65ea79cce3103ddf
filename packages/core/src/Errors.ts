import { Schema } from "effect"

/**
 * Why an {@link AssignorInputError} was raised.
 *
 * - `InvalidShardCount`: `shardCount` is negative, fractional or not finite.
 * - `EmptyMemberId`: a member id is the empty string.
 * - `DuplicateMemberId`: two members share an id.
 * - `InvalidWeight`: a weight is zero, negative or not finite.
 * - `PreviousTooLong`: `previous` has more entries than `shardCount`.
 */
export const AssignorInputErrorReason = Schema.Literals([
  "InvalidShardCount",
  "EmptyMemberId",
  "DuplicateMemberId",
  "InvalidWeight",
  "PreviousTooLong",
])
export type AssignorInputErrorReason = typeof AssignorInputErrorReason.Type

/** The assignor was called with input it cannot assign. */
export class AssignorInputError extends Schema.TaggedError<AssignorInputError>()(
  "AssignorInputError",
  {
    reason: AssignorInputErrorReason,
    detail: Schema.String,
  },
) {
  override get message(): string {
    return `${this.reason}: ${this.detail}`
  }
}
