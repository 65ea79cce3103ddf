/**
 * Runtime events (docs/runtime.md, "Events"). Listeners subscribe with
 * `runtime.on(listener)`; each listener has its own buffer and is called in
 * order, one event at a time (a returned promise is awaited before its next
 * event), away from the member's fibers: a slow, throwing or never-resolving
 * listener never blocks a member. A buffer holds at most `capacity` events
 * (default 10,000); beyond that the oldest are dropped and counted.
 */
import type {
  DataLost,
  DataLostWhat,
  ErrorCode,
  HeartbeatRejected,
  LeaseUnusable,
  MemberMachine,
  MemberSuperseded,
  OwnerTokenMissing,
  PendingHolder,
  ShardLayout,
  TransportError,
} from "@shardline/core"
import type { HandlerStuck, NoCoordinator } from "./Errors.js"

/** Why a heartbeat got no answer: the transport's error, or no coordinator serves the group. */
export type HeartbeatFailure = TransportError | NoCoordinator

interface Base {
  readonly stream: string
  readonly group: string
  /** Wall-clock time of the event (ms since the epoch). */
  readonly at: number
}

interface MemberBase extends Base {
  readonly memberId: string
}

/** What a runtime tells its listeners (`runtime.on`, `onEvent`), one type per case (docs/runtime.md, "Events"). */
export type RuntimeEvent =
  /** The member (re)joined: the coordinator answered its epoch-0 heartbeat. */
  | (MemberBase & { readonly type: "joined"; readonly memberEpoch: number })
  /** The member may read this shard now (after `onAssigned`). */
  | (MemberBase & { readonly type: "assigned"; readonly shard: number; readonly token: number })
  /** The coordinator took the shard away: no new reads; its in-flight batch drains. */
  | (MemberBase & { readonly type: "revoking"; readonly shard: number })
  /** The shard was drained and is being released (after `onRevoked`). */
  | (MemberBase & { readonly type: "revoked"; readonly shard: number; readonly abandoned: boolean })
  /** Ownership was dropped at once (fence, unknown member, lease lost, superseded). */
  | (MemberBase & {
      readonly type: "lost"
      readonly shards: ReadonlyArray<number>
      readonly reason: MemberMachine.StopReason
    })
  /** The member applied a new assignment epoch. */
  | (MemberBase & {
      readonly type: "rebalance"
      readonly assignmentEpoch: number
      readonly owned: ReadonlyArray<number>
    })
  /** A heartbeat ended: the coordinator's error code, or `TRANSPORT_ERROR` with its cause (`error`). */
  | (MemberBase & {
      readonly type: "heartbeat"
      readonly errorCode: ErrorCode | "TRANSPORT_ERROR"
      readonly latencyMs: number
      /** With `TRANSPORT_ERROR`: why no answer came (`NoCoordinator` when none serves a standalone group). */
      readonly error?: HeartbeatFailure
    })
  | (MemberBase & {
      readonly type: "batchStart"
      readonly shard: number
      readonly count: number
      /** Entries of the shard not yet delivered to the group, when known. */
      readonly lag: number | undefined
    })
  | (MemberBase & {
      readonly type: "batchEnd"
      readonly shard: number
      readonly count: number
      readonly acked: number
      readonly failed: number
      readonly durationMs: number
    })
  | (MemberBase & {
      readonly type: "handlerError"
      readonly shard: number
      readonly messageId: string
      readonly deliveryCount: number
      readonly error: unknown
    })
  | (MemberBase & {
      readonly type: "deadLettered"
      readonly shard: number
      readonly messageId: string
      readonly deadLetterId: string
      readonly deliveryCount: number
      readonly reason: string
      /** Why it went: see `DeadLetterCause`. */
      readonly cause: DeadLetterCause
    })
  /**
   * No answer granted the member a lease in time: it stopped reading every
   * shard, keeps its epoch, and resumes with the same shards and tokens on
   * the next answer (`leaseRegained`) unless the coordinator expired it
   * (docs/protocol.md rule 22).
   */
  | (MemberBase & { readonly type: "leaseLost"; readonly shards: ReadonlyArray<number> })
  /** The member's lease came back after `leaseLost`: it reads its shards again, no rejoin. */
  | (MemberBase & { readonly type: "leaseRegained"; readonly memberEpoch: number })
  /**
   * A handler (or hook) of a stopped loop still runs `budgetMs` after it was
   * told to stop (its signal aborted): the shard is not reported REVOKED, nor
   * handed over, until it returns (docs/runtime.md, "A handler past its drain").
   */
  | (MemberBase & {
      readonly type: "handlerStuck"
      readonly shard: number
      readonly why: "revoked" | "stopped"
      readonly budgetMs: number
      readonly error: HandlerStuck
    })
  | (MemberBase & { readonly type: "leaseUnusable"; readonly error: LeaseUnusable })
  /** A newer process joined with this member id; this one is a standby now. */
  | (MemberBase & { readonly type: "superseded"; readonly error: MemberSuperseded })
  | (MemberBase & { readonly type: "requestRejected"; readonly error: HeartbeatRejected })
  /**
   * Shards targeted to this member wait for another member that holds them
   * (docs/protocol.md rule 29): `revoking`, it was asked to give them up
   * and has not confirmed it; `fenced` / `replaced` / `rewind`, they are
   * held for a process that may still read them. A process restarted with a
   * new member id waits so for its old self, whose session has not ended
   * (`memberBase` keeps the id across restarts: docs/runtime.md,
   * "Identity"). Said when the member joins or what it waits for changes,
   * not on every heartbeat; logged as a warning once `holderSilent`.
   */
  | (MemberBase & {
      readonly type: "shardsWaiting"
      readonly shards: ReadonlyArray<number>
      /** The member id holding them (for `replaced`: this member's own id, an earlier process). */
      readonly holder: string
      readonly reason: PendingHolder["reason"]
      /**
       * Wall-clock time (ms) when the holder's session ends if it sends
       * nothing more: the shards come then at the latest (earlier if it
       * confirms or rejoins).
       */
      readonly until: number
      /** The holder has not heartbeated for more than two heartbeat intervals: likely a process that is gone. */
      readonly holderSilent: boolean
    })
  /** The shard is sealed by a reshard and drained for the group: reported, no more reads. */
  | (MemberBase & { readonly type: "exhausted"; readonly shard: number })
  /**
   * The shard is sealed and drained but for its outbox, which holds sends
   * this runtime cannot relay (its storage has no outbox: one Redis node,
   * memory; the sends were committed on a Redis Cluster). The shard is not
   * reported drained, so the reshard waits; said once per grant
   * (docs/exactly-once.md, "Resharding and the outbox").
   */
  | (MemberBase & { readonly type: "outboxStranded"; readonly shard: number })
  /** The storage refused the member's owner token: the shard moved; its loop stopped. */
  | (MemberBase & { readonly type: "staleOwner"; readonly shard: number })
  /**
   * Something Shardline stored for the group on the shard vanished: deleted,
   * or evicted by a server that evicts keys (docs/protocol.md rule 26;
   * docs/redis.md, "Eviction"). Not a `dataPlaneError`: that one is a call
   * that failed and is retried, this one is data that is gone, to alert on.
   * - `token`: the group's owner token. Every read and ack of the shard is
   *   refused (`OwnerTokenMissing`), whatever its token, until a coordinator
   *   writes one again (its next grant of the shard, or a coordinator
   *   failover or restart, which re-fences every owner); the shard waits,
   *   trying again every `idleWaitMs`.
   * - `stream` / `group`: the shard's stream, or the group's consumer group
   *   in it, with its position and pending entries (`DataLost`). The member
   *   creates the group again at the stream's start (a fenced seek) and reads
   *   on: what the stream still holds is delivered again (at least once);
   *   what vanished with it is lost.
   * Said once per loss (again only after the shard read normally in
   * between); counted by `shardline_data_lost_total{what}`.
   */
  | (MemberBase & {
      readonly type: "dataLost"
      readonly shard: number
      readonly what: "token" | DataLostWhat
      readonly error: OwnerTokenMissing | DataLost
    })
  /** A data-plane call failed (backend unavailable, ...); the shard retries after a backoff. */
  | (MemberBase & {
      readonly type: "dataPlaneError"
      readonly shard: number
      readonly error: unknown
    })
  | (MemberBase & { readonly type: "layoutChanged"; readonly layout: ShardLayout })
  /**
   * A circuit breaker opened (`failures` handler failures in a row, or a
   * failed trial): its scope (the member, or `shard`) reads nothing until
   * `retryInMs`, then tries one message; failed messages stay pending.
   */
  | (MemberBase & {
      readonly type: "circuitOpened"
      readonly scope: "member" | "shard"
      /** The shard whose failure opened it. */
      readonly shard: number
      readonly failures: number
      readonly retryInMs: number
      readonly error: unknown
    })
  /** A circuit breaker closed: its trial succeeded, or `resetCircuit` closed it. */
  | (MemberBase & {
      readonly type: "circuitClosed"
      readonly scope: "member" | "shard"
      /** The shard of a shard-scoped breaker. */
      readonly shard: number | undefined
      readonly reason: "a trial succeeded" | "reset by hand"
    })
  | (MemberBase & { readonly type: "paused" | "resumed"; readonly shard: number })
  | (MemberBase & { readonly type: "seeked"; readonly shard: number; readonly position: string })
  /** The member left the group (or gave up leaving at its leave timeout). */
  | (MemberBase & { readonly type: "left"; readonly reason: MemberMachine.StopReason })
  /** This process became the group's coordinator and serves its heartbeats. */
  | (Base & { readonly type: "coordinatorElected"; readonly holder: string })
  /**
   * This process stopped being the group's coordinator (`reason`: why it gave
   * the lease up itself, when it did: docs/protocol.md rule 25).
   */
  | (Base & {
      readonly type: "coordinatorResigned"
      readonly holder: string
      readonly reason?: string
    })
  /**
   * This process still holds the group's coordinator lease but its serve had
   * stopped answering (another candidate's serve replaced it, or the lease was
   * taken again under a new token): it serves again (docs/protocol.md rule 25).
   */
  | (Base & {
      readonly type: "coordinatorServeRestarted"
      readonly holder: string
      readonly leaseToken: number
    })
  /**
   * No coordinator has answered this member for `forMs` (its heartbeats fail,
   * or are answered NOT_COORDINATOR): the group has live members and nobody
   * serves it. Emitted once per such period (docs/observability.md).
   */
  | (MemberBase & {
      readonly type: "coordinatorUnavailable"
      /** Wall-clock time of the first unanswered heartbeat of the period. */
      readonly since: number
      readonly forMs: number
      /** The latest heartbeat's failure. */
      readonly error: string
    })
  /** A coordinator answers this member again, after `unavailableMs` without one. */
  | (MemberBase & { readonly type: "coordinatorAvailable"; readonly unavailableMs: number })

/**
 * Why a message was dead-lettered: its handler failed `maxDeliveries`
 * times, it threw a `NonRetryableError`, or it never reached a handler
 * because it could not be decoded (`undecodable`) or its schema refused it
 * (`invalid`; docs/runtime.md, "Typed messages"). The last three are not
 * retried.
 */
export type DeadLetterCause = "maxDeliveries" | "nonRetryable" | "undecodable" | "invalid"

/** The `type` of a `RuntimeEvent`: `"joined"`, `"assigned"`, `"deadLettered"`, ... */
export type RuntimeEventType = RuntimeEvent["type"]

/** A listener of runtime events; called one event at a time, away from the members' fibers. */
export type EventListener = (event: RuntimeEvent) => void | Promise<void>

/** What an event hub dropped or saw fail, summed over its listeners. */
export interface EventHubStats {
  /** Events dropped because a listener's buffer was full. */
  readonly dropped: number
  /** Listener calls that threw or rejected. */
  readonly listenerErrors: number
}

/** One stream of runtime events in emission order, shared by runtimes given the same hub (`eventHub`). */
export interface EventHub {
  readonly emit: (event: RuntimeEvent) => void
  /** Subscribe; returns the unsubscribe function. */
  readonly on: (listener: EventListener) => () => void
  readonly stats: () => EventHubStats
}

interface Subscriber {
  readonly listener: EventListener
  readonly buffer: Array<RuntimeEvent>
  running: boolean
  active: boolean
}

const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

/** A hub whose `emit` never waits for a listener. */
export const makeEventHub = (options: { readonly capacity?: number } = {}): EventHub => {
  const capacity = options.capacity ?? 10_000
  const subscribers = new Set<Subscriber>()
  let dropped = 0
  let listenerErrors = 0

  /** Deliver a subscriber's buffer in order, off the emitter's stack. */
  const pump = (s: Subscriber): void => {
    if (s.running) return
    s.running = true
    const next = (): void => {
      const event = s.buffer.shift()
      if (event === undefined || !s.active) {
        s.running = false
        return
      }
      let result: unknown
      try {
        result = s.listener(event)
      } catch {
        listenerErrors++
      }
      if (isPromiseLike(result))
        result.then(
          () => setImmediate(next),
          () => {
            listenerErrors++
            setImmediate(next)
          },
        )
      else setImmediate(next)
    }
    setImmediate(next)
  }

  return {
    emit: (event) => {
      for (const s of subscribers) {
        s.buffer.push(event)
        if (s.buffer.length > capacity) {
          s.buffer.shift()
          dropped++
        }
        pump(s)
      }
    },
    on: (listener) => {
      const s: Subscriber = { listener, buffer: [], running: false, active: true }
      subscribers.add(s)
      return () => {
        s.active = false
        s.buffer.length = 0
        subscribers.delete(s)
      }
    },
    stats: () => ({ dropped, listenerErrors }),
  }
}
