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
import { MAX_MEMBER_WEIGHT, MIN_MEMBER_WEIGHT } from "../assignor/types.js"

/**
 * A shard id. Every layout generation numbers its shards from its own
 * `firstShard` on, and ids are never reused, so an id alone names the shard's
 * stream key `{<stream>:<id>}` (docs/resharding.md).
 */
export const ShardId = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
export type ShardId = typeof ShardId.Type

const Epoch = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const NonEmptyId = Schema.NonEmptyString.check(Schema.isMaxLength(256))
const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

/** A configured assignment weight, in [MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT]. */
export const MemberWeight = Schema.Finite.check(
  Schema.isGreaterThanOrEqualTo(MIN_MEMBER_WEIGHT),
  Schema.isLessThanOrEqualTo(MAX_MEMBER_WEIGHT),
)

/**
 * One process start of a member id, ordered: a later start carries a larger
 * number (the runtime uses its start time in ms x 1024 plus 10 random bits).
 * docs/protocol.md rule 9: a join from a larger incarnation replaces the
 * registered one; requests from a smaller one change nothing. Two starts in
 * one millisecond can draw the same number, so a process is identified by
 * its incarnation AND its `instance` (below), never by the number alone.
 */
export const Incarnation = Schema.Int.check(
  Schema.isGreaterThanOrEqualTo(1),
  Schema.isLessThanOrEqualTo(Number.MAX_SAFE_INTEGER),
)

/**
 * A process's own random identity: at least 64 random bits (16 hex digits or
 * more), drawn once per process start. Processes are ordered by
 * (incarnation, instance); a request whose instance differs from the
 * registered one is another process, never a resend (docs/protocol.md rule 9).
 * Absent on requests of earlier versions (read as "").
 */
export const Instance = Schema.String.check(Schema.isMaxLength(128))

/** Most shards one layout generation may have. */
export const MAX_SHARD_COUNT = 65_536

/**
 * Versioned shard layout: a generation of `shardCount` contiguous hash ranges
 * whose shard ids start at `firstShard` (docs/resharding.md). `generation` is
 * the metadata version members and producers track.
 */
export const ShardLayout = Schema.Struct({
  shardCount: Schema.Int.check(
    Schema.isGreaterThanOrEqualTo(1),
    Schema.isLessThanOrEqualTo(MAX_SHARD_COUNT),
  ),
  generation: Epoch,
  firstShard: Epoch,
})
export type ShardLayout = typeof ShardLayout.Type

export const ErrorCode = Schema.Literals([
  "NONE",
  /** The coordinator does not know this member: drop all ownership, rejoin with epoch 0. */
  "UNKNOWN_MEMBER_ID",
  /** The member's epoch is stale or its ownership report was invalid: drop all ownership, rejoin with epoch 0. */
  "FENCED_MEMBER_EPOCH",
  /**
   * A newer process (incarnation) of this member id has joined: this process
   * must stop consuming and must not rejoin (fatal, as Kafka's FENCED_INSTANCE_ID).
   */
  "FENCED_INSTANCE_ID",
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

/**
 * A shard the member is giving up, with the owner token of the grant it is
 * giving up: a report about an older grant can never complete a newer
 * revocation (docs/protocol.md rule 10).
 */
export const RevokingShard = Schema.Struct({
  shard: ShardId,
  state: RevokeState,
  token: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
})
export type RevokingShard = typeof RevokingShard.Type

/** Per-shard local progress, reported for monitoring; never used for safety decisions. */
export const ShardProgress = Schema.Struct({
  shard: ShardId,
  /** Last stream entry id the member handled. */
  lastId: Schema.optional(Schema.String),
  acked: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  pending: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** Entries in the shard not yet delivered to the group, when the member knows it. */
  lag: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
})
export type ShardProgress = typeof ShardProgress.Type

/** Static member information, sent on every full heartbeat (join / rejoin). */
export const MemberInfo = Schema.Struct({
  /** Redis consumer name; defaults to the memberId. */
  consumerName: NonEmptyId,
  host: Schema.String,
  /** Configured assignment weight (default 1). Never the runtime's worker capacity. */
  weight: Schema.optional(MemberWeight),
  /** Local worker capacity, reported for monitoring only (seed: does not cap ownership). */
  runtimeMaxConcurrency: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
})
export type MemberInfo = typeof MemberInfo.Type

export const HeartbeatRequest = Schema.Struct({
  /** Consumer group name; a group is identified by (stream, group). */
  group: NonEmptyId,
  /** The logical stream the group consumes. */
  stream: NonEmptyId,
  memberId: NonEmptyId,
  /** The process start that sends this request (see `Incarnation`). */
  incarnation: Incarnation,
  /** The sending process's random identity (see `Instance`). */
  instance: Schema.optional(Instance),
  /** Per-incarnation request number, increasing: makes a delayed duplicate join harmless. */
  seq: PositiveInt,
  memberEpoch: Schema.Int.check(Schema.isGreaterThanOrEqualTo(-1)),
  /** Last assignmentEpoch the member applied. */
  assignmentEpoch: Epoch,
  /** Layout generation the member knows; a stale one makes the response carry `layout`. */
  metadataVersion: Epoch,
  /** Shards the member is reading now. */
  ownedShards: Schema.Array(ShardId),
  /** Shards the member is giving up, and whether it has finished draining them. */
  revokingShards: Schema.Array(RevokingShard),
  /**
   * Shards of an earlier layout generation the member found drained for the
   * group (sealed, everything delivered and acknowledged), with the owner
   * token it holds them with (docs/resharding.md).
   */
  drainedShards: Schema.optional(
    Schema.Array(
      Schema.Struct({ shard: ShardId, token: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)) }),
    ),
  ),
  /**
   * Owned shards whose owner token storage reported missing (deleted or
   * evicted: every fenced call is refused, docs/protocol.md rule 26), with
   * the token the member reads under. The coordinator writes that same
   * token again for the shard's current owner, before it answers
   * (docs/protocol.md rule 30); a report about another grant changes nothing.
   */
  missingTokens: Schema.optional(
    Schema.Array(
      Schema.Struct({ shard: ShardId, token: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)) }),
    ),
  ),
  /**
   * The member is leaving gracefully and still draining: its shards move to
   * others as soon as each is reported REVOKED; epoch -1 follows once drained.
   */
  leaving: Schema.optional(Schema.Boolean),
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

/**
 * Why some of a member's `pending` shards wait (docs/protocol.md rule 29):
 * another member holds them. `revoking`: a live member was asked to give
 * them up and has not confirmed it; `fenced` / `replaced` / `rewind`: they
 * are held for a process that may still read them (rule 19).
 * `sessionEndsInMs`: how long until the holder's session ends if it sends
 * nothing more (a crashed process): the shards come then at the latest. For
 * display only: a member never acts on it.
 */
export const PendingHolder = Schema.Struct({
  memberId: Schema.String,
  reason: Schema.Literals(["revoking", "fenced", "replaced", "rewind"]),
  shards: Schema.Array(ShardId),
  sessionEndsInMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
})
export type PendingHolder = typeof PendingHolder.Type

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
  /**
   * The member's grants being revoked, each with its owner token (absent:
   * none). A member not reading the shard under that grant reports it REVOKED
   * at once, so a grant whose answer was lost can still be revoked
   * (docs/protocol.md rule 17).
   */
  revoking: Schema.optional(Schema.Array(ShardGrant)),
  /** Present when the request's metadataVersion is stale. */
  layout: Schema.optional(ShardLayout),
  heartbeatIntervalMs: PositiveInt,
  /**
   * The group's session timeout: the member's own lease derives from it
   * (docs/protocol.md rule 6), so a member never needs to be configured with it.
   */
  sessionTimeoutMs: PositiveInt,
  /** The group's revoke timeout: a revocation not reported REVOKED within it fences the member. */
  rebalanceTimeoutMs: PositiveInt,
  /**
   * Who the `pending` shards wait for, per holder (absent: none waits on a
   * member, e.g. only on a reshard's drain); docs/protocol.md rule 29.
   */
  waitingOn: Schema.optional(Schema.Array(PendingHolder)),
})
export type HeartbeatResponse = typeof HeartbeatResponse.Type

/**
 * `response` with `shards` moved from `assigned` to `pending`: the member
 * must not read them yet (a grant whose owner-token fence is not written,
 * docs/protocol.md rule 31).
 *
 * @example
 * withGrantsPending(response, [3]) // shard 3 is pending, no longer assigned
 */
export const withGrantsPending = (
  response: HeartbeatResponse,
  shards: ReadonlyArray<number>,
): HeartbeatResponse => {
  const held = new Set(shards)
  return {
    ...response,
    assigned: response.assigned.filter((g) => !held.has(g.shard)),
    pending: [...new Set([...response.pending, ...shards])].sort((a, b) => a - b),
  }
}
