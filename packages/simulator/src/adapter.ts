/**
 * The small internal boundary between the simulator and the protocol state
 * machines it drives. The simulator owns time, the network, the store, the
 * data plane and faults; everything the protocol decides comes through these
 * two interfaces, implemented with the real coordinator and member state
 * machines from `@shardline/core` (see `machines.ts`).
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
  /** Opaque records; non-empty means a store commit is needed before anything else. */
  readonly records: ReadonlyArray<unknown>
  /** Reply to send once the records are committed (absent for timer steps). */
  readonly response?: HeartbeatResponse | undefined
  /** Members to nudge ("look again") after the commit. */
  readonly notices: ReadonlyArray<string>
  /** Per-shard owner tokens to write to storage before the response is sent. */
  readonly fences: ReadonlyArray<ShardFence>
}

export interface SimCoordinator {
  /** Handles one heartbeat at local time `now`. Pure: state changes only on `apply`. */
  heartbeat(request: HeartbeatRequest, now: number): CoordinatorStep
  /** Runs due timers (expiry, revoke timeouts) at local time `now`. */
  timers(now: number): CoordinatorStep
  /** Replays the step's records into this instance's state (after a successful commit). */
  apply(step: CoordinatorStep): void
  /** Earliest local time at which `timers` has work, if any. */
  nextTimer(): number | undefined
  /** The state to store as the group snapshot (after `apply`). */
  snapshot(): unknown
  /** For checkers and reports: current target owner per shard. */
  targetOwners(): ReadonlyArray<string | null>
}

export interface CoordinatorConfig {
  readonly group: string
  readonly shardCount: number
  readonly heartbeatIntervalMs: number
  readonly sessionTimeoutMs: number
  readonly revokeTimeoutMs: number
}

export interface CoordinatorFactory {
  /** A fresh coordinator over a snapshot read from the store (undefined: new group). */
  load(config: CoordinatorConfig, snapshot: unknown, now: number): SimCoordinator
}

export type MemberCommand =
  | { readonly _tag: "StartShard"; readonly shard: number; readonly token: number }
  | { readonly _tag: "StopShard"; readonly shard: number }
  | { readonly _tag: "StopAll" }
  | { readonly _tag: "SendHeartbeat"; readonly request: HeartbeatRequest }

export interface SimMember {
  readonly id: string
  /** Process start (join with epoch 0). */
  start(now: number): ReadonlyArray<MemberCommand>
  onResponse(response: HeartbeatResponse, now: number): ReadonlyArray<MemberCommand>
  /** The in-flight heartbeat got no answer (timeout, unreachable coordinator). */
  onRequestFailed(now: number): ReadonlyArray<MemberCommand>
  /** The coordinator pushed a "look again" notice. */
  onNotice(now: number): ReadonlyArray<MemberCommand>
  /** A timer set through `nextTimer` fired. */
  onTimer(now: number): ReadonlyArray<MemberCommand>
  /** A shard stopped by StopShard finished draining its in-flight work. */
  onShardDrained(shard: number, now: number): ReadonlyArray<MemberCommand>
  /** Graceful leave (epoch -1). */
  leave(now: number): ReadonlyArray<MemberCommand>
  /** Earliest local time at which `onTimer` must run. */
  nextTimer(): number | undefined
  /** May the member's workers read and process now (not self-fenced)? */
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
  readonly requestTimeoutMs: number
}

export interface MemberFactory {
  make(config: MemberConfig): SimMember
}

export interface Machines {
  readonly name: string
  readonly coordinator: CoordinatorFactory
  readonly member: MemberFactory
}
