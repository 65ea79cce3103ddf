/**
 * The embedded coordinator (docs/runtime.md, "Coordinator placement"): every
 * process is a lease-elected candidate for each group it consumes. A
 * candidate runs core's `makeCoordinatorHost` and serves the group's
 * heartbeats on the transport only while it holds the lease: a standby that
 * served would take requests (on Redis, pop them from the group's request
 * list) only to answer NOT_COORDINATOR.
 *
 * Failover moves nothing (docs/protocol.md rule 20): the coordinator lease is
 * short (twice the heartbeat interval by default), a standby tries again the
 * moment the holder's lease runs out (`standbyUntil`) or the holder announces
 * a graceful handover, and the successor loads members with their epochs,
 * shards and tokens, long before any member's lease could run out. A
 * candidate that stops while it leads first stops serving (answering what it
 * already took), then releases the lease, then announces the handover.
 */
import {
  type CoordinatorHost,
  type CoordinatorLease,
  type CoordinatorTransport,
  type GroupConfig,
  makeCoordinatorHost,
  type OwnerFence,
  type Store,
  Time,
} from "@shardline/core"
import { Clock, Effect, Exit, Fiber, Option, Scope, Stream } from "effect"
import type { EventHub } from "../Events.js"

export interface CandidateOptions {
  readonly config: GroupConfig
  /** The lease holder's name: unique per process start. */
  readonly holder: string
  readonly transport: CoordinatorTransport.CoordinatorTransportShape
  readonly events?: EventHub
  /** Coordinator lease TTL (default: core's `defaultCoordinatorLeaseMs`). */
  readonly leaseTtlMs?: number
  /**
   * How often a candidate re-checks its lease at most (default: a third of
   * the lease TTL); a standby also wakes when the holder's lease runs out
   * and on a handover.
   */
  readonly checkEveryMs?: number
}

export interface Candidate {
  readonly host: CoordinatorHost
  /** This candidate holds the lease and serves the group's heartbeats. */
  readonly isServing: () => boolean
}

/** A standby wakes this long after the holder's lease should have run out (clock drift). */
const STANDBY_SLACK_MS = 5

export const runCandidate = (
  options: CandidateOptions,
): Effect.Effect<
  Candidate,
  never,
  Scope.Scope | Store.Store | CoordinatorLease.CoordinatorLease | OwnerFence.OwnerFence
> =>
  Effect.gen(function* () {
    const scope = yield* Scope.Scope
    const { transport, config } = options
    const key = { stream: config.stream, group: config.groupId }
    let serving: Scope.Closeable | undefined
    let wasLeader = false
    // Registered first, so it runs last: once serving stopped (answering what
    // it took) and the host released its lease, tell the standbys at once.
    yield* Scope.addFinalizer(
      scope,
      Effect.suspend(() => (wasLeader ? transport.handover(key) : Effect.void)),
    )
    const host = yield* makeCoordinatorHost({
      config,
      holder: options.holder,
      ...(options.leaseTtlMs !== undefined ? { leaseTtlMs: options.leaseTtlMs } : {}),
      onNotice: (memberId) => transport.notify(key, memberId),
    }).pipe(Effect.orDie)
    // Registered after the host, so it runs before the host releases its lease.
    yield* Scope.addFinalizer(
      scope,
      Effect.suspend(() => {
        const s = serving
        serving = undefined
        return s === undefined ? Effect.void : Scope.close(s, Exit.void)
      }),
    )
    const handovers = yield* transport.handovers(key)

    const emit = (type: "coordinatorElected" | "coordinatorResigned") =>
      Effect.map(Clock.currentTimeMillis, (at) =>
        options.events?.emit({ ...key, at, type, holder: options.holder }),
      )

    const check = Effect.gen(function* () {
      const leader = yield* host.elect
      if (leader && serving === undefined) {
        const s = yield* Scope.fork(scope)
        serving = s
        wasLeader = true
        yield* transport.serve(key, host.heartbeat).pipe(Scope.provide(s))
        yield* emit("coordinatorElected")
      } else if (!leader && serving !== undefined) {
        const s = serving
        serving = undefined
        wasLeader = false
        yield* Scope.close(s, Exit.void)
        yield* emit("coordinatorResigned")
      }
    })

    const every = options.checkEveryMs ?? Math.max(10, Math.floor(host.leaseTtlMs / 3))
    /** How long to sleep: a standby wakes right when the holder's lease runs out. */
    const nextWait = Effect.gen(function* () {
      if (serving !== undefined) return every
      const until = yield* host.standbyUntil
      if (Option.isNone(until)) return every
      const now = yield* Time.monotonicMillis
      return Math.max(1, Math.min(every, until.value - now + STANDBY_SLACK_MS))
    })

    yield* check
    const loop = Effect.forever(
      Effect.gen(function* () {
        const wait = yield* nextWait
        // a handover wakes a standby at once
        const woken = yield* Effect.forkChild(Stream.runHead(handovers))
        yield* Effect.raceFirst(Effect.sleep(wait), Fiber.join(woken))
        yield* Fiber.interrupt(woken)
        yield* check
      }),
    )
    yield* Effect.forkIn(loop, scope)
    return { host, isServing: () => serving !== undefined }
  })
