/**
 * The heartbeat protocol between a member and its group coordinator.
 *
 * Every request and response crosses a process boundary, so both are Effect
 * Schemas: the coordinator decodes untrusted requests with
 * `Schema.decodeUnknownEffect(HeartbeatRequest)` and answers INVALID_REQUEST on
 * failure; members decode responses the same way.
 *
 * Epoch conventions (seed, "Epochs"):
 * - `memberEpoch = 0`  join, or rejoin after UNKNOWN_MEMBER_ID / fencing (full heartbeat)
 * - `memberEpoch = -1` graceful leave
 * - `memberEpoch > 0`  steady heartbeat with the epoch the coordinator last gave
 */
import { Schema } from "effect"

/** Index of a shard within the current layout: 0 .. shardCount-1. */
export const ShardId = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
export type ShardId = typeof ShardId.Type

const Epoch = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const NonEmptyId = Schema.NonEmptyString.check(Schema.isMaxLength(256))

/** Versioned shard layout; `generation` is the metadata version members track. */
export const ShardLayout = Schema.Struct({
  shardCount: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  generation: Epoch,
})
export type ShardLayout = typeof ShardLayout.Type

export const ErrorCode = Schema.Literals([
  "NONE",
  /** The coordinator does not know this member: drop all ownership, rejoin with epoch 0. */
  "UNKNOWN_MEMBER_ID",
  /** The member's epoch is stale or its ownership report was invalid: drop all ownership, rejoin with epoch 0. */
  "FENCED_MEMBER_EPOCH",
  /** This process is not (or no longer) the group's coordinator: retry, possibly elsewhere. */
  "NOT_COORDINATOR",
  /** The coordinator is loading the group snapshot: retry after a short backoff. */
  "COORDINATOR_LOAD_IN_PROGRESS",
  /** The request failed schema or range validation; nothing was changed. */
  "INVALID_REQUEST",
])
export type ErrorCode = typeof ErrorCode.Type

export const RevokeState = Schema.Literals(["REVOKING", "REVOKED"])
export type RevokeState = typeof RevokeState.Type

export const RevokingShard = Schema.Struct({ shard: ShardId, state: RevokeState })
export type RevokingShard = typeof RevokingShard.Type

/** Per-shard local progress, reported for monitoring; never used for safety decisions. */
export const ShardProgress = Schema.Struct({
  shard: ShardId,
  /** Last stream entry id the member handled. */
  lastId: Schema.optional(Schema.String),
  acked: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  pending: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
})
export type ShardProgress = typeof ShardProgress.Type

/** Static member information, sent on every full heartbeat (join / rejoin). */
export const MemberInfo = Schema.Struct({
  /** Redis consumer name; defaults to the memberId. */
  consumerName: NonEmptyId,
  host: Schema.String,
  /** Configured assignment weight (default 1). Never the runtime's worker capacity. */
  weight: Schema.optional(Schema.Finite.check(Schema.isGreaterThan(0))),
  /** Local worker capacity, reported for monitoring only (seed: does not cap ownership). */
  runtimeMaxConcurrency: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
})
export type MemberInfo = typeof MemberInfo.Type

export const HeartbeatRequest = Schema.Struct({
  group: NonEmptyId,
  memberId: NonEmptyId,
  memberEpoch: Schema.Int.check(Schema.isGreaterThanOrEqualTo(-1)),
  /** Last assignmentEpoch the member applied. */
  assignmentEpoch: Epoch,
  /** Layout generation the member knows; a stale one makes the response carry `layout`. */
  metadataVersion: Epoch,
  /** Shards the member is reading now. */
  ownedShards: Schema.Array(ShardId),
  /** Shards the member is giving up, and whether it has finished draining them. */
  revokingShards: Schema.Array(RevokingShard),
  progress: Schema.optional(Schema.Array(ShardProgress)),
  /** Present on a full heartbeat; required when memberEpoch = 0. */
  memberInfo: Schema.optional(MemberInfo),
})
export type HeartbeatRequest = typeof HeartbeatRequest.Type

/**
 * A shard the member may read now, with the per-shard fencing token the
 * coordinator wrote to storage before answering. Reads and acks carry the
 * token; storage refuses a token lower than the shard's current one.
 */
export const ShardGrant = Schema.Struct({
  shard: ShardId,
  token: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
})
export type ShardGrant = typeof ShardGrant.Type

export const HeartbeatResponse = Schema.Struct({
  errorCode: ErrorCode,
  errorMessage: Schema.optional(Schema.String),
  memberId: Schema.String,
  memberEpoch: Schema.Int,
  assignmentEpoch: Epoch,
  /** Shards the member owns and may read now. */
  assigned: Schema.Array(ShardGrant),
  /** Shards targeted to the member but still being revoked elsewhere: must not read yet. */
  pending: Schema.Array(ShardId),
  /** Present when the request's metadataVersion is stale. */
  layout: Schema.optional(ShardLayout),
  heartbeatIntervalMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
})
export type HeartbeatResponse = typeof HeartbeatResponse.Type
