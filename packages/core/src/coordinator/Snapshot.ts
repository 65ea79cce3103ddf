/**
 * The persisted coordinator state. Everything read back from storage is
 * decoded through `Snapshot`; a snapshot that does not decode, or whose parts
 * disagree (array lengths, unknown owners), is a `CorruptSnapshot`.
 */
import { Schema } from "effect"
import { ShardLayout } from "../protocol/Heartbeat.js"
import { GroupConfig } from "./GroupConfig.js"
import {
  CoordinatorEpoch,
  Held,
  MemberSnapshot,
  ReshardingState,
  Revocation,
  ShardOwner,
} from "./Records.js"

const Int0 = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

export const Snapshot = Schema.Struct({
  /**
   * 3: held shards, member instances and last request seqs (docs/protocol.md
   * rules 18, 19, 24); 2 (before them) still loads: nothing held, instance "",
   * lastSeq = joinSeq. 1 is refused (written before incarnations).
   */
  version: Schema.Literals([2, 3]),
  config: GroupConfig,
  layout: ShardLayout,
  resharding: ReshardingState,
  groupEpoch: Int0,
  assignmentEpoch: Int0,
  storeRevision: Int0,
  /** Highest memberEpoch ever issued; a new member lifecycle starts above it. */
  maxMemberEpoch: Int0,
  members: Schema.Array(MemberSnapshot),
  /** shard -> target member (declarative). */
  target: Schema.Array(Schema.NullOr(Schema.String)),
  /** shard -> accepted owner (observed). */
  current: Schema.Array(Schema.NullOr(ShardOwner)),
  /** shard -> pending revocation. */
  revocations: Schema.Array(Schema.NullOr(Revocation)),
  /** shard -> last fencing token issued. */
  tokens: Schema.Array(Int0),
  /** shard -> its held previous holder (absent in version 2: none held). */
  held: Schema.optional(Schema.Array(Schema.NullOr(Held))),
  /** The last elected coordinator (absent before the first election). */
  coordinator: Schema.optional(CoordinatorEpoch),
})
export type Snapshot = typeof Snapshot.Type

/** Snapshot <-> JSON string, for stores that keep bytes. */
export const SnapshotJson = Schema.fromJsonString(Snapshot)
