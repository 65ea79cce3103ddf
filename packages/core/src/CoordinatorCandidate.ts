/**
 * A coordinator candidate (docs/protocol.md rule 20; docs/runtime.md,
 * "Coordinator placement"): one process's bid to coordinate one group. It
 * runs a `CoordinatorHost` and serves the group's heartbeats on the
 * transport only while it holds the lease: a standby that served would take
 * requests (on Redis, pop them from the group's request list) only to answer
 * NOT_COORDINATOR. The member runtime's embedded coordinator, its
 * `startCoordinator` and the `shardline coordinator` command all run this.
 *
 * Failover moves nothing: the coordinator lease is short (twice the heartbeat
 * interval by default), a standby tries again the moment the holder's lease
 * runs out (`standbyUntil`) or the holder announces a graceful handover, and
 * the successor loads members with their epochs, shards and tokens, long
 * before any member's lease could run out. A candidate that stops while it
 * leads first stops serving (answering what it already took), then releases
 * the lease, then announces the handover.
 *
 * @example
 * const candidate = yield* CoordinatorCandidate.run({ config, holder: "pod-1", transport })
 * candidate.isServing() // holds the lease and serves the group now
 */
import { Effect, Exit, Fiber, Option, Scope, Stream } from "effect"
import { type CoordinatorHost, makeCoordinatorHost } from "./CoordinatorHost.js"
import type { GroupConfig } from "./coordinator/GroupConfig.js"
import type { CoordinatorLease } from "./ports/CoordinatorLease.js"
import type { CoordinatorTransportShape } from "./ports/CoordinatorTransport.js"
import type { OwnerFence } from "./ports/OwnerFence.js"
import type { Store } from "./ports/Store.js"
import { monotonicMillis } from "./time/Instant.js"

export interface CandidateOptions {
  readonly config: GroupConfig
  /** The lease holder's name: unique per process start. */
  readonly holder: string
  readonly transport: CoordinatorTransportShape
  /** Coordinator lease TTL (default: `defaultCoordinatorLeaseMs(config)`). */
  readonly leaseTtlMs?: number
  /**
   * How often a candidate re-checks its lease at most (default: a third of
   * the lease TTL); a standby also wakes when the holder's lease runs out
   * and on a handover.
   */
  readonly checkEveryMs?: number
  /** Called when this candidate starts or stops serving the group. */
  readonly onRole?: (role: "coordinator" | "standby") => Effect.Effect<void>
}

export interface Candidate {
  readonly host: CoordinatorHost
  /** This candidate holds the lease and serves the group's heartbeats. */
  readonly isServing: () => boolean
}

/** A standby wakes this long after the holder's lease should have run out (clock drift). */
const STANDBY_SLACK_MS = 5

/** Run a candidate until the scope closes (then hand over gracefully if it leads). */
export const run = (
  options: CandidateOptions,
): Effect.Effect<Candidate, never, Scope.Scope | Store | CoordinatorLease | OwnerFence> =>
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
    const role = (r: "coordinator" | "standby") =>
      options.onRole === undefined ? Effect.void : options.onRole(r)

    const check = Effect.gen(function* () {
      const leader = yield* host.elect
      if (leader && serving === undefined) {
        const s = yield* Scope.fork(scope)
        serving = s
        wasLeader = true
        yield* transport.serve(key, host.heartbeat).pipe(Scope.provide(s))
        yield* role("coordinator")
      } else if (!leader && serving !== undefined) {
        const s = serving
        serving = undefined
        wasLeader = false
        yield* Scope.close(s, Exit.void)
        yield* role("standby")
      }
    })

    const every = options.checkEveryMs ?? Math.max(10, Math.floor(host.leaseTtlMs / 3))
    /** How long to sleep: a standby wakes right when the holder's lease runs out. */
    const nextWait = Effect.gen(function* () {
      if (serving !== undefined) return every
      const until = yield* host.standbyUntil
      if (Option.isNone(until)) return every
      const now = yield* monotonicMillis
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
