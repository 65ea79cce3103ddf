/**
 * The port shapes this package implements, as core is changing them to
 * (per-group owner tokens, `GroupKey`, `check`, `waitForEntries`). They
 * mirror core's types where core has them, so switching to core's new
 * services is an import change. `E` is what a real store adds to every
 * operation's error channel (`RedisUnavailable | ForeignValue |
 * InvalidArgument` here; `never` in memory).
 */
import type {
  HeartbeatRequest,
  HeartbeatResponse,
  InvalidEntryId,
  LeaseHeld,
  LeaseLost,
  OwnerTokenRegression,
  ShardStreams,
  StaleOwner,
  TransportError,
} from "@shardline/core"
import type { Effect, Scope, Stream } from "effect"

/** A consumer group: Redis consumer-group names are per stream. */
export interface GroupKey {
  readonly stream: string
  readonly group: string
}

// ---------------------------------------------------------------------------
// ShardStreams

export type Fields = ShardStreams.Fields
export type StreamMessage = ShardStreams.StreamMessage
export type GroupAddress = ShardStreams.GroupAddress
export type FencedAddress = ShardStreams.FencedAddress
export type AckOptions = ShardStreams.AckOptions
export type NackOptions = ShardStreams.NackOptions
export type ClaimOptions = ShardStreams.ClaimOptions
export type ClaimResult = ShardStreams.ClaimResult
export type DeadLetterOptions = ShardStreams.DeadLetterOptions
export type PendingEntry = ShardStreams.PendingEntry

export interface ReadOptions extends ShardStreams.ReadOptions {
  /**
   * Takeover read (with `from: "new"`): first re-deliver pending entries of
   * any consumer idle at least this long (delivery count +1), then new ones.
   * XREADGROUP ... CLAIM on Redis >= 8.4, XAUTOCLAIM + XREADGROUP otherwise.
   */
  readonly claimIdleMs?: number
}

export interface OwnerTokenOptions extends GroupAddress {
  readonly token: number
}

export interface GroupInfo extends ShardStreams.GroupInfo {
  /** The group's owner token on this shard (0 when never set). */
  readonly ownerToken: number
}

export interface ShardInfo {
  readonly length: number
  readonly lastId: string
  readonly groups: ReadonlyArray<GroupInfo>
}

export interface WaitOptions {
  readonly stream: string
  readonly shard: number
  readonly group: string
  /** Wait at most this long (the blocking XREAD's BLOCK). */
  readonly timeoutMs: number
  /** Wait for entries after this id; default: the group's last-delivered id. */
  readonly afterId?: string
}

export interface ShardStreamsShape<E = never> {
  readonly append: (stream: string, shard: number, fields: Fields) => Effect.Effect<string, E>
  /** Raise the group's owner token on a shard (equal: no-op; lower: OwnerTokenRegression). */
  readonly setOwnerToken: (
    options: OwnerTokenOptions,
  ) => Effect.Effect<void, OwnerTokenRegression | E>
  readonly ownerToken: (options: GroupAddress) => Effect.Effect<number, E>
  readonly read: (
    options: ReadOptions,
  ) => Effect.Effect<ReadonlyArray<StreamMessage>, StaleOwner | E>
  readonly ack: (options: AckOptions) => Effect.Effect<number, StaleOwner | InvalidEntryId | E>
  readonly nack: (options: NackOptions) => Effect.Effect<boolean, StaleOwner | InvalidEntryId | E>
  readonly claimPending: (
    options: ClaimOptions,
  ) => Effect.Effect<ClaimResult, StaleOwner | InvalidEntryId | E>
  readonly deadLetter: (
    options: DeadLetterOptions,
  ) => Effect.Effect<string | undefined, StaleOwner | InvalidEntryId | E>
  readonly pending: (
    options: GroupAddress & { readonly consumer?: string },
  ) => Effect.Effect<ReadonlyArray<PendingEntry>, E>
  readonly info: (stream: string, shard: number) => Effect.Effect<ShardInfo, E>
  readonly range: (key: string) => Effect.Effect<ReadonlyArray<{ id: string; fields: Fields }>, E>
  /**
   * The idle shard's wake-up: true as soon as the shard has entries after
   * the group's last-delivered id (or `afterId`), false after `timeoutMs`.
   * Then do the fenced `read`. Never a busy loop, never a long sleep.
   */
  readonly waitForEntries: (options: WaitOptions) => Effect.Effect<boolean, E>
}

// ---------------------------------------------------------------------------
// CoordinatorLease

export interface LeaseGrant {
  readonly key: GroupKey
  readonly holder: string
  /** Fencing token; strictly increasing per group across acquisitions. */
  readonly token: number
  /** Local clock time (send time + ttl): never later than the store's expiry. */
  readonly expiresAt: number
}

export interface CoordinatorLeaseShape<E = never> {
  readonly acquire: (
    key: GroupKey,
    holder: string,
    ttlMs: number,
  ) => Effect.Effect<LeaseGrant, LeaseHeld | E>
  readonly renew: (grant: LeaseGrant, ttlMs: number) => Effect.Effect<LeaseGrant, LeaseLost | E>
  /** Release if still held with this token; otherwise a no-op. */
  readonly release: (grant: LeaseGrant) => Effect.Effect<void, E>
  /** Is the lease still held with this token? Does not extend it. */
  readonly check: (grant: LeaseGrant) => Effect.Effect<boolean, E>
}

// ---------------------------------------------------------------------------
// CoordinatorTransport

/** The heartbeat request with the stream it is about (core adds `stream`). */
export type StreamHeartbeatRequest = HeartbeatRequest & { readonly stream: string }

export type HeartbeatHandler = (request: unknown) => Effect.Effect<HeartbeatResponse>

export interface CoordinatorTransportShape {
  readonly heartbeat: (
    request: StreamHeartbeatRequest,
  ) => Effect.Effect<HeartbeatResponse, TransportError>
  /** Subscribe now (within the scope) to a member's notices; they coalesce. */
  readonly notices: (
    key: GroupKey,
    memberId: string,
  ) => Effect.Effect<Stream.Stream<void>, never, Scope.Scope>
  /** Answer the group's heartbeats until the scope closes (a newer `serve` replaces it). */
  readonly serve: (
    key: GroupKey,
    handler: HeartbeatHandler,
  ) => Effect.Effect<void, never, Scope.Scope>
  readonly notify: (key: GroupKey, memberId: string) => Effect.Effect<void>
}
