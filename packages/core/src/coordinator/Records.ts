/**
 * Records: the unit the coordinator persists. A handler returns records; the
 * host commits them through `Store` and applies them with `replay`. Each
 * record is a small delta (one member, or the shards that changed), so a
 * storage-backed Store can persist a commit with cost proportional to the
 * change, never to the group size.
 *
 * Redis mapping (suggested): GroupCreated -> config/layout/epoch hash fields;
 * MemberUpserted/MemberRemoved -> HSET/HDEL members; GroupEpochBumped -> HSET;
 * TargetAssignmentChanged -> HSET target + assignmentEpoch; ShardOwnersChanged
 * -> HSET/HDEL current + HSET tokens (max); RevocationsChanged -> HSET/HDEL
 * revocations; CoordinatorElected -> HSET meta coordinator; Audit -> XADD to
 * the group's audit stream (append-only).
 */
import { Schema } from "effect"
import {
  Incarnation,
  Instance,
  MemberInfo,
  MemberWeight,
  ShardLayout,
} from "../protocol/Heartbeat.js"
import { GroupConfig } from "./GroupConfig.js"

const Int0 = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const Shard = Int0

export const MemberState = Schema.Literals([
  /** Owns exactly its target shards; nothing pending. */
  "STABLE",
  /** Some of its shards are being revoked (waiting for its REVOKED report). */
  "UNREVOKED_SHARDS",
  /** Some of its target shards are still being revoked elsewhere. */
  "UNRELEASED_SHARDS",
  /**
   * Leaving gracefully (it sent `leaving`): excluded from the target, its
   * shards move as each is reported REVOKED; removed on its epoch -1.
   */
  "LEAVING",
])
export type MemberState = typeof MemberState.Type

/** The persisted part of one member (volatile deadlines and progress are not here). */
export const MemberSnapshot = Schema.Struct({
  memberId: Schema.String,
  /** Epoch of the current lifecycle; every join, rejoin or replacement gets a fresh one. */
  memberEpoch: Int0,
  /** The process start that owns this member id (docs/protocol.md rule 9). */
  incarnation: Incarnation,
  /** That process's random identity (absent in snapshots of earlier versions: ""). */
  instance: Schema.optional(Instance),
  /** `seq` of the join that started this lifecycle: an older join of the same incarnation is stale. */
  joinSeq: Int0,
  /**
   * `seq` of the newest request of this lifecycle that changed the state
   * (written with that change): an older request is answered without being
   * acted on, across a failover too (docs/protocol.md rule 18). Absent: `joinSeq`.
   */
  lastSeq: Schema.optional(Int0),
  state: MemberState,
  weight: MemberWeight,
  memberInfo: MemberInfo,
})
export type MemberSnapshot = typeof MemberSnapshot.Type

/** Accepted owner of a shard: granted with `token`, `confirmed` once the member reported it. */
export const ShardOwner = Schema.Struct({
  memberId: Schema.String,
  memberEpoch: Int0,
  token: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  confirmed: Schema.Boolean,
})
export type ShardOwner = typeof ShardOwner.Type

/**
 * A pending revocation (seed step 1): the shard is being taken from
 * `memberId`, which must drain it and report REVOKED with the shard's current
 * owner token (docs/protocol.md rule 10). Its deadline is volatile.
 */
export const Revocation = Schema.Struct({
  memberId: Schema.String,
  memberEpoch: Int0,
})
export type Revocation = typeof Revocation.Type

/**
 * A shard whose previous holder may still be reading it: it was fenced, or
 * replaced by a newer process, or storage holds a token the stored state does
 * not know (the metadata was rewound). Nobody is granted it until the
 * holder's lease has provably ended (its session deadline, volatile) or the
 * holder proved it stopped (a newer join, a leave or a superseded join of that
 * very process): docs/protocol.md rule 19. `token` is the holder's grant (for
 * a rewind: the token storage holds, which the next grant must exceed).
 */
export const Held = Schema.Struct({
  memberId: Schema.String,
  memberEpoch: Int0,
  incarnation: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  instance: Schema.String,
  /** The held lifecycle's join: a join of the same process with a higher seq proves it stopped. */
  joinSeq: Int0,
  token: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  reason: Schema.Literals(["fenced", "replaced", "rewind"]),
})
export type Held = typeof Held.Type

/**
 * The group's side of a layout migration (docs/resharding.md). `Idle`: one
 * generation. `Migrating`: `generations` are the earlier generations whose
 * shards the group is still draining (oldest first), `drained` their shards
 * it has drained; a shard may be read only when every shard of an earlier
 * generation overlapping its hash range is drained.
 */
export const ReshardingState = Schema.Union([
  Schema.TaggedStruct("Idle", {}),
  Schema.TaggedStruct("Migrating", {
    generations: Schema.Array(ShardLayout),
    drained: Schema.Array(Shard),
  }),
])
export type ReshardingState = typeof ReshardingState.Type

/**
 * The coordinator epoch: the lease acquisition that last won an election.
 * A new leader commits `CoordinatorElected` before serving anything, so the
 * commit moves `storeRevision` past every revision an ex-leader may still
 * hold in memory; its lease token must be higher than the stored one.
 */
export const CoordinatorEpoch = Schema.Struct({
  holder: Schema.String,
  leaseToken: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
})
export type CoordinatorEpoch = typeof CoordinatorEpoch.Type

const Epochs = Schema.Struct({
  groupEpoch: Int0,
  assignmentEpoch: Int0,
  memberEpoch: Schema.optional(Schema.Int),
})

export const AuditKind = Schema.Literals([
  "GroupCreated",
  "MemberJoined",
  "MemberRejoined",
  "MemberReplaced",
  "MemberLeaving",
  "MemberLeft",
  "MemberExpired",
  "MemberFenced",
  "TargetAssignmentChanged",
  "ShardsGranted",
  "OwnershipConfirmed",
  "RevokeRequested",
  "RevokeAccepted",
  "CoordinatorElected",
  "GroupConfigChanged",
  "ReshardStarted",
  "ShardsDrained",
  "ReshardCompleted",
  "ShardsHeld",
  "ShardsReleased",
  "MetadataRewindDetected",
  "GroupConfigRefused",
])
export type AuditKind = typeof AuditKind.Type

/** One audit event: who, what, why, epochs before/after. Append-only. */
export const AuditEvent = Schema.Struct({
  at: Schema.Number,
  kind: AuditKind,
  memberId: Schema.optional(Schema.String),
  shards: Schema.optional(Schema.Array(Shard)),
  reason: Schema.String,
  before: Epochs,
  after: Epochs,
})
export type AuditEvent = typeof AuditEvent.Type

export const CoordinatorRecord = Schema.Union([
  /** First commit of a group: config and initial layout. */
  Schema.TaggedStruct("GroupCreated", { config: GroupConfig, layout: ShardLayout }),
  /** Insert or replace one member (join, rejoin, fence, state change). */
  Schema.TaggedStruct("MemberUpserted", { member: MemberSnapshot }),
  /** Remove one member (leave, expiry). Its shards are released by explicit records. */
  Schema.TaggedStruct("MemberRemoved", { memberId: Schema.String }),
  Schema.TaggedStruct("GroupEpochBumped", { groupEpoch: Int0 }),
  /** Delta of the target assignment and the new assignmentEpoch. */
  Schema.TaggedStruct("TargetAssignmentChanged", {
    assignmentEpoch: Int0,
    shards: Schema.Array(Schema.Struct({ shard: Shard, memberId: Schema.NullOr(Schema.String) })),
  }),
  /** Delta of the accepted current assignment; a new owner's token also raises the shard's token counter. */
  Schema.TaggedStruct("ShardOwnersChanged", {
    shards: Schema.Array(Schema.Struct({ shard: Shard, owner: Schema.NullOr(ShardOwner) })),
  }),
  /** Delta of pending revocations: shard -> revocation (null = done). */
  Schema.TaggedStruct("RevocationsChanged", {
    shards: Schema.Array(Schema.Struct({ shard: Shard, revocation: Schema.NullOr(Revocation) })),
  }),
  /** Delta of held shards (docs/protocol.md rule 19): shard -> holder (null = released). */
  Schema.TaggedStruct("HeldChanged", {
    shards: Schema.Array(Schema.Struct({ shard: Shard, held: Schema.NullOr(Held) })),
  }),
  /** An explicit change of the group's timing or weights (never of its layout). */
  Schema.TaggedStruct("GroupConfigChanged", { config: GroupConfig }),
  /**
   * The group follows the stream to a newer layout generation (a reshard or
   * a rollback): the current layout joins the generations being drained.
   */
  Schema.TaggedStruct("MigrationStarted", { layout: ShardLayout }),
  /** Shards of earlier generations the group has drained (reported by their owners). */
  Schema.TaggedStruct("ShardsDrained", { shards: Schema.Array(Shard) }),
  /** Every earlier generation is drained: the group reads the current layout only. */
  Schema.TaggedStruct("MigrationCompleted", {}),
  /** A new leader took over (its first commit); changes no group epoch. */
  Schema.TaggedStruct("CoordinatorElected", {
    holder: Schema.String,
    leaseToken: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  }),
  /** Append-only audit event; does not change coordinator state. */
  Schema.TaggedStruct("Audit", { event: AuditEvent }),
])
export type CoordinatorRecord = typeof CoordinatorRecord.Type
