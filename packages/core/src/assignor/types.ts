/** Smallest assignment weight the assignor (and the protocol schemas) accept. */
export const MIN_MEMBER_WEIGHT = 1e-6
/** Largest assignment weight: bounded so the quota arithmetic can never overflow. */
export const MAX_MEMBER_WEIGHT = 1e6

/** A live member of the group. `weight` defaults to 1, within [MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT]. */
export interface AssignorMember {
  readonly id: string
  readonly weight?: number
}

/**
 * Input of the assignor.
 *
 * - `shardCount`: number of shards, a non-negative integer.
 * - `members`: the live members; their order does not matter.
 * - `previous`: previous owner of each shard (index = shard), or `null`.
 *   It may be shorter than `shardCount` (an older, smaller shard layout): the
 *   missing shards count as unowned. Ids that are not in `members` are
 *   departed owners.
 */
export interface AssignorInput {
  readonly shardCount: number
  readonly members: ReadonlyArray<AssignorMember>
  readonly previous?: ReadonlyArray<string | null>
}
