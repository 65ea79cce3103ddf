/**
 * Typed errors of `@shardline/core`, one module per package.
 * Every error is a `Schema.TaggedError`, so it can cross a process boundary and
 * be matched with `Effect.catchTag`.
 */
import { Schema } from "effect"

// assignor

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

// coordinator, store and lease

/** A GroupConfig failed validation (positive ints, heartbeat < session timeout, ...). */
export class InvalidGroupConfig extends Schema.TaggedError<InvalidGroupConfig>()(
  "InvalidGroupConfig",
  { message: Schema.String },
) {}

/**
 * The stored snapshot (or a stored record batch) of the group (stream, group)
 * could not be decoded or is inconsistent; it is left untouched.
 */
export class CorruptSnapshot extends Schema.TaggedError<CorruptSnapshot>()("CorruptSnapshot", {
  stream: Schema.String,
  group: Schema.String,
  message: Schema.String,
}) {}

/** The backing storage (of the store or the lease) could not be reached or failed unexpectedly. */
export class StoreUnavailable extends Schema.TaggedError<StoreUnavailable>()("StoreUnavailable", {
  stream: Schema.String,
  group: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/** A commit's compare-and-set on `storeRevision` failed: someone else committed first. */
export class StaleRevision extends Schema.TaggedError<StaleRevision>()("StaleRevision", {
  stream: Schema.String,
  group: Schema.String,
  expectedRevision: Schema.Int,
  actualRevision: Schema.Int,
}) {}

/** The coordinator lease of a group is held by another holder. */
export class LeaseHeld extends Schema.TaggedError<LeaseHeld>()("LeaseHeld", {
  stream: Schema.String,
  group: Schema.String,
  holder: Schema.String,
  expiresAt: Schema.Number,
}) {}

/** The caller no longer holds the lease (expired, taken over, or a stale fencing token). */
export class LeaseLost extends Schema.TaggedError<LeaseLost>()("LeaseLost", {
  stream: Schema.String,
  group: Schema.String,
  holder: Schema.String,
  token: Schema.Int,
}) {}

/**
 * A coordinator candidate's election was refused: the store records an
 * election with a lease token at least as high (another, newer lease).
 */
export class ElectionRefused extends Schema.TaggedError<ElectionRefused>()("ElectionRefused", {
  stream: Schema.String,
  group: Schema.String,
  holder: Schema.String,
  leaseToken: Schema.Int,
  electedHolder: Schema.String,
  electedLeaseToken: Schema.Int,
}) {
  override get message(): string {
    return `lease token ${this.leaseToken} of ${this.holder} is not above the elected ${this.electedLeaseToken} of ${this.electedHolder}`
  }
}

/** Writing per-shard owner fences to storage failed. */
export class FenceWriteFailed extends Schema.TaggedError<FenceWriteFailed>()("FenceWriteFailed", {
  stream: Schema.String,
  group: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

// data plane and transport

/**
 * A read, ack, claim or dead-letter carried an owner token lower than the
 * shard's current one for its group: another member of that group owns the
 * shard now. Nothing was changed.
 */
export class StaleOwner extends Schema.TaggedError<StaleOwner>()("StaleOwner", {
  stream: Schema.String,
  shard: Schema.Number,
  group: Schema.String,
  token: Schema.Number,
  currentToken: Schema.Number,
}) {}

/**
 * A fenced operation (read, ack, nack, claim, dead-letter, seek, a
 * transaction's commit) found no owner token for its (shard, group). The
 * coordinator writes a grant's token before it tells the member, so a
 * missing one was deleted or evicted (or no coordinator ever granted the
 * shard): every token is refused until a coordinator writes one again, at
 * its next grant of the shard or when a coordinator takes the group over
 * (docs/protocol.md rule 26). Nothing was changed.
 */
export class OwnerTokenMissing extends Schema.TaggedError<OwnerTokenMissing>()(
  "OwnerTokenMissing",
  {
    stream: Schema.String,
    shard: Schema.Number,
    group: Schema.String,
    token: Schema.Number,
  },
) {
  override get message(): string {
    return `the owner token of group ${this.group} on shard ${this.shard} of stream ${this.stream} is missing (deleted or evicted): every token is refused, ${this.token} too, until a coordinator writes one again`
  }
}

/**
 * What vanished from a shard: `stream`, the shard's stream key (its
 * entries, every consumer group and pending list with it), or `group`, the
 * group's consumer group in it (its position and pending list).
 */
export const DataLostWhat = Schema.Literals(["stream", "group"])
export type DataLostWhat = typeof DataLostWhat.Type

/**
 * A fenced operation found that data Shardline stored on the shard
 * vanished while the group's owner token is still there (the token's first
 * write created the group on the stream, so both existed): deleted by hand
 * (DEL, XGROUP DESTROY) or evicted by a server that evicts keys. Never read
 * as empty and never re-created in silence: nothing was changed; a fenced
 * seek (`setGroupPosition`) creates the group again where it says
 * (docs/protocol.md rule 26).
 */
export class DataLost extends Schema.TaggedError<DataLost>()("DataLost", {
  stream: Schema.String,
  shard: Schema.Number,
  group: Schema.String,
  what: DataLostWhat,
}) {
  override get message(): string {
    return this.what === "stream"
      ? `the stream of shard ${this.shard} of stream ${this.stream} vanished (deleted or evicted) while group ${this.group} owned it: its entries, consumer groups and pending entries are gone`
      : `the consumer group ${this.group} vanished from shard ${this.shard} of stream ${this.stream} (XGROUP DESTROY, or the stream was deleted or evicted and a later append created it again): its position and pending entries are gone`
  }
}

/** Why a fenced operation refused its caller's owner token: a newer owner, or no token at all. */
export type FenceRefused = StaleOwner | OwnerTokenMissing

/** `setOwnerToken` was asked to lower a (shard, group) owner token; tokens only grow. */
export class OwnerTokenRegression extends Schema.TaggedError<OwnerTokenRegression>()(
  "OwnerTokenRegression",
  {
    stream: Schema.String,
    shard: Schema.Number,
    group: Schema.String,
    token: Schema.Number,
    currentToken: Schema.Number,
  },
) {}

/** An operation named an entry id that is not a valid `ms-seq` stream id. */
export class InvalidEntryId extends Schema.TaggedError<InvalidEntryId>()("InvalidEntryId", {
  id: Schema.String,
}) {}

/** A heartbeat did not get an answer: connection failure, timeout, or a lost response. */
export class TransportError extends Schema.TaggedError<TransportError>()("TransportError", {
  reason: Schema.Literals(["Timeout", "Unavailable", "Dropped", "Decode"]),
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/**
 * The coordinator answered INVALID_REQUEST: the member sent something the
 * coordinator could not accept. Ownership is left unchanged.
 */
export class HeartbeatRejected extends Schema.TaggedError<HeartbeatRejected>()(
  "HeartbeatRejected",
  {
    memberId: Schema.String,
    errorCode: Schema.String,
    message: Schema.String,
  },
) {}

// member

/** A member's configuration failed validation; `field` names the offending option. */
export class InvalidMemberConfig extends Schema.TaggedError<InvalidMemberConfig>()(
  "InvalidMemberConfig",
  {
    field: Schema.String,
    message: Schema.String,
  },
) {}

/**
 * The member cannot keep a lease on its shards:
 * - `MarginTooLarge`: the group's session timeout minus the member's safety
 *   margin leaves no more than one heartbeat interval (fatal: the member leaves);
 * - `AnswersTooSlow`: answers keep arriving after the lease they would grant
 *   ran out, so every grant counts as lost (surfaced once per streak).
 */
export class LeaseUnusable extends Schema.TaggedError<LeaseUnusable>()("LeaseUnusable", {
  memberId: Schema.String,
  reason: Schema.Literals(["MarginTooLarge", "AnswersTooSlow"]),
  message: Schema.String,
}) {}

/**
 * A newer process (incarnation) joined with this member id: this process
 * lost every shard and waits as a standby, retrying its join slowly.
 */
export class MemberSuperseded extends Schema.TaggedError<MemberSuperseded>()("MemberSuperseded", {
  memberId: Schema.String,
  incarnation: Schema.Number,
  message: Schema.String,
}) {}

// backends (Redis and other real stores)

/**
 * The backend of a port (Redis, ...) could not be reached, or refused a
 * command for a reason that is not about our data (connection closed,
 * NOPERM, OOM, an unexpected reply). Whether the command ran is unknown:
 * callers retry idempotent operations only. The memory backends never fail so.
 */
export class BackendUnavailable extends Schema.TaggedError<BackendUnavailable>()(
  "BackendUnavailable",
  {
    operation: Schema.String,
    message: Schema.String,
    cause: Schema.optional(Schema.Defect()),
  },
) {}

/**
 * A key Shardline owns holds a value Shardline did not write (a string where
 * a stream belongs, a non-integer owner token, ...). Nothing was changed: it
 * is checked before anything is written, and never overwritten.
 */
export class ForeignValue extends Schema.TaggedError<ForeignValue>()("ForeignValue", {
  key: Schema.String,
  message: Schema.String,
}) {}

/** An argument the backend cannot represent (an entry without fields, a fractional token, ...). */
export class InvalidArgument extends Schema.TaggedError<InvalidArgument>()("InvalidArgument", {
  message: Schema.String,
}) {}

/**
 * A write ran on the master but fewer than `replicas` replicas confirmed it
 * within `timeoutMs` (`durability`, docs/redis.md "Durability"): it is not
 * confirmed, and it may still exist (the master kept it; a failover before
 * it replicated loses it). Retry an idempotent send; a transactional commit
 * that failed so is not acknowledged and its message is handled again.
 */
export class NotReplicated extends Schema.TaggedError<NotReplicated>()("NotReplicated", {
  operation: Schema.String,
  key: Schema.String,
  replicas: Schema.Number,
  acknowledged: Schema.Number,
  timeoutMs: Schema.Number,
  message: Schema.String,
}) {}

/**
 * The master refused a write because fewer replicas than its
 * `min-replicas-to-write` are connected within `min-replicas-max-lag`
 * (Redis' NOREPLICAS; docs/redis.md, "`min-replicas-to-write`"): nothing
 * was written, so a retry cannot duplicate it. It succeeds once the
 * replicas are back (or after a failover to a master that has them).
 *
 * @example
 * // a send refused so: `SendFailed` with this as its cause
 * if (error._tag === "SendFailed" && error.cause?._tag === "NotEnoughReplicas") retryLater()
 */
export class NotEnoughReplicas extends Schema.TaggedError<NotEnoughReplicas>()(
  "NotEnoughReplicas",
  {
    operation: Schema.String,
    key: Schema.String,
    message: Schema.String,
  },
) {}

/** What any data-plane operation may fail with besides its own errors. */
export type DataPlaneError =
  | BackendUnavailable
  | ForeignValue
  | InvalidArgument
  | NotReplicated
  | NotEnoughReplicas

/**
 * An append to a shard of an earlier layout generation, sealed by a reshard
 * (docs/resharding.md): refresh the stream's layout and route the key again.
 */
export class ShardSealed extends Schema.TaggedError<ShardSealed>()("ShardSealed", {
  stream: Schema.String,
  shard: Schema.Number,
}) {}

// stream layouts (resharding)

/** A layout change (`reshard`, `rollback`) was refused; the stream's layout is unchanged. */
export class ReshardRefused extends Schema.TaggedError<ReshardRefused>()("ReshardRefused", {
  stream: Schema.String,
  reason: Schema.Literals([
    "InvalidShardCount",
    "SameShardCount",
    "MigrationRunning",
    "NoMigration",
    "RollbackRunning",
    "UnknownStream",
  ]),
  message: Schema.String,
}) {}

/** The stream's layout changed since it was read (compare-and-set on its revision). */
export class StaleLayout extends Schema.TaggedError<StaleLayout>()("StaleLayout", {
  stream: Schema.String,
  expectedRevision: Schema.Int,
  actualRevision: Schema.Int,
}) {}

/** The stored layout of a stream does not decode; it is left untouched. */
export class CorruptLayout extends Schema.TaggedError<CorruptLayout>()("CorruptLayout", {
  stream: Schema.String,
  message: Schema.String,
}) {}

// transactions (docs/exactly-once.md)

/**
 * Why a transaction was refused (docs/exactly-once.md, "Refusals"). Refused
 * while the handler runs, by the transaction handle:
 * - `CommandNotAllowed`: the command is not in the allow-list (`Transaction.COMMANDS`);
 * - `InvalidArguments`: the arguments do not fit the command (arity, a number, a ttl);
 * - `ReservedKey`: the key is one of Shardline's own (a shard stream, an owner token, ...);
 * - `KeyOutsideSlot`: in a Redis Cluster, the key is not in the shard's hash slot
 *   (build keys with the handle's `key(name)`);
 * - `TooLarge`: more operations or bytes than the consumer's limit;
 * - `Closed`: the handler already returned (or failed, or was abandoned);
 * - `Unsupported`: the runtime's ports have no transactions (`ShardStreams.transactions`).
 * Refused by the storage at commit, before anything is written:
 * - `WrongType`: the key holds another type than the command works on;
 * - `NotANumber`: a counter's current value is not a number;
 * - `OutOfRange`: a counter's current value or result is outside ±(2^53 - 1)
 *   (or not finite, for floats).
 */
export const TransactionRefusedReason = Schema.Literals([
  "CommandNotAllowed",
  "InvalidArguments",
  "ReservedKey",
  "KeyOutsideSlot",
  "TooLarge",
  "Closed",
  "Unsupported",
  "WrongType",
  "NotANumber",
  "OutOfRange",
])
export type TransactionRefusedReason = typeof TransactionRefusedReason.Type

/**
 * A transaction's write or send was refused: nothing of the transaction is
 * committed (a transaction with a refusal never commits; its handler counts as
 * failed and its message is retried, then dead-lettered). `index` is the
 * write's position in the transaction when the storage refused it at commit.
 */
export class TransactionRefused extends Schema.TaggedError<TransactionRefused>()(
  "TransactionRefused",
  {
    reason: TransactionRefusedReason,
    message: Schema.String,
    command: Schema.optional(Schema.String),
    key: Schema.optional(Schema.String),
    index: Schema.optional(Schema.Number),
  },
) {}
