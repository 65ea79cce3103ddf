/**
 * The small internal boundary between the simulator and the protocol state
 * machines it drives. The simulator owns time, the network, the store, the
 * data plane and faults; everything the protocol decides comes through these
 * two interfaces, implemented with the real coordinator and member state
 * machines of `@shardline/core` in `machines.ts`.
 *
 * All times passed in are the caller's *local* clock in milliseconds: the
 * coordinator's clock for `SimCoordinator`, the member's for `SimMember`.
 *
 * @module
 */
import type { HeartbeatRequest, HeartbeatResponse } from "@shardline/core"

export interface ShardFence {
  readonly shard: number
  readonly token: number
}

/** What one coordinator step wants done. Nothing is applied until `apply`. */
export interface CoordinatorStep {
  /** Records; non-empty means a store commit (CAS on storeRevision) comes first. */
  readonly records: ReadonlyArray<unknown>
  /** Reply to send once the records are committed (absent for timer steps). */
  readonly response?: HeartbeatResponse | undefined
  /** Members to nudge ("look again") after the commit. */
  readonly notices: ReadonlyArray<string>
  /** Per-shard owner tokens to write to storage before the response is sent. */
  readonly fences: ReadonlyArray<ShardFence>
}

export interface SimCoordinator {
  /** The revision of the store this instance's state is based on. */
  revision(): number
  /** Handles one heartbeat at local time `now`. Pure: state changes only on `apply`. */
  heartbeat(request: HeartbeatRequest, now: number): CoordinatorStep
  /** Runs the earliest timer due at `now`, if any (call until undefined). */
  dueTimer(now: number): CoordinatorStep | undefined
  /** Earliest local time at which a timer is due. */
  nextTimer(): number | undefined
  /** After a successful commit (`revision` = the new store revision) or a record-less step. */
  apply(step: CoordinatorStep, revision: number | undefined): void
  /** The group epoch (for statistics only). */
  groupEpoch(): number
  /** Member ids in the registry, sorted (for statistics only). */
  members(): ReadonlyArray<string>
  /** The committed state as a snapshot (what a failover loads). */
  snapshot(): unknown
}

export interface CoordinatorConfig {
  readonly group: string
  readonly shardCount: number
  readonly heartbeatIntervalMs: number
  readonly sessionTimeoutMs: number
  readonly revokeTimeoutMs: number
}

/** The lease acquisition a new leader takes over with (its fencing token). */
export interface Candidate {
  readonly holder: string
  readonly leaseToken: number
}

export interface Created {
  readonly coordinator: SimCoordinator
  /**
   * Records creating the group (and electing the creator); commit them with
   * expected revision 0, then `apply`.
   */
  readonly step: CoordinatorStep
}

export interface Loaded {
  readonly coordinator: SimCoordinator
  /** Tokens to re-assert in storage after a load. */
  readonly fences: ReadonlyArray<ShardFence>
  /**
   * The election the new leader must commit (CAS on the loaded revision) and
   * `apply` before it serves anything; `undefined` when the election was
   * refused (a newer lease is already recorded): the candidate must not serve.
   */
  readonly election: CoordinatorStep | undefined
}

export interface CoordinatorFactory {
  create(config: CoordinatorConfig, now: number, candidate: Candidate): Created
  load(snapshot: unknown, revision: number, now: number, candidate: Candidate): Loaded
}

export type MemberCommand =
  | { readonly _tag: "StartShard"; readonly shard: number; readonly token: number }
  | { readonly _tag: "StopShard"; readonly shard: number }
  | { readonly _tag: "StopAll" }
  /** Send a heartbeat now: the runtime calls `takeRequest` when it actually sends. */
  | { readonly _tag: "SendHeartbeat" }
  /** The member has left the group: the process may stop. */
  | { readonly _tag: "Left" }

export interface SimMember {
  readonly id: string
  /** Process start: the first heartbeat (epoch 0) is due now. */
  start(now: number): ReadonlyArray<MemberCommand>
  /** The request to send now, numbered. */
  takeRequest(now: number): { readonly seq: number; readonly request: HeartbeatRequest }
  onResponse(seq: number, response: HeartbeatResponse, now: number): ReadonlyArray<MemberCommand>
  /** The request `seq` got no answer (timeout, unreachable coordinator). */
  onRequestFailed(seq: number, now: number): ReadonlyArray<MemberCommand>
  /** The coordinator pushed a "look again" notice. */
  onNotice(now: number): ReadonlyArray<MemberCommand>
  /** Time passes (the runtime's tick): due heartbeats and self-fencing. */
  onTimer(now: number): ReadonlyArray<MemberCommand>
  /** A shard stopped by StopShard finished draining its in-flight work. */
  onShardDrained(shard: number, now: number): ReadonlyArray<MemberCommand>
  /** Graceful leave: drain, then epoch -1. */
  leave(now: number): ReadonlyArray<MemberCommand>
  /** Earliest local time at which `onTimer` must run. */
  nextTimer(): number | undefined
  /** May the member's workers read and process now (its self-fence is not due)? */
  leaseValid(now: number): boolean
}

export interface MemberConfig {
  readonly group: string
  readonly memberId: string
  readonly workers: number
  readonly heartbeatIntervalMs: number
  readonly sessionTimeoutMs: number
  /** Self-fence this long before the session timeout (covers the clock bound). */
  readonly safetyMarginMs: number
}

export interface MemberFactory {
  make(config: MemberConfig, now: number): SimMember
}

export interface Machines {
  readonly name: string
  readonly coordinator: CoordinatorFactory
  readonly member: MemberFactory
}
