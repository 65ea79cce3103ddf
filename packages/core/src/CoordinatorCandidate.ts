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
 * A holder serves, or gives the lease up (docs/protocol.md rule 25): each
 * check compares the host's lease token with the term its serve started
 * under and asks the serve whether it still answers (a newer serve of the
 * group, from a candidate that held the lease meanwhile, replaces it). A
 * serve that stopped wakes its candidate at once; the decision itself is
 * core's pure `CandidateRole.decide`, which the simulator runs too.
 *
 * @example
 * const candidate = yield* CoordinatorCandidate.run({ config, holder: "pod-1", transport })
 * candidate.isServing() // holds the lease and serves the group now
 */
import { Effect, Exit, Fiber, Option, Scope, Stream } from "effect"
import { type CoordinatorHost, makeCoordinatorHost } from "./CoordinatorHost.js"
import * as CandidateRole from "./coordinator/CandidateRole.js"
import type { GroupConfig } from "./coordinator/GroupConfig.js"
import type { CoordinatorLease } from "./ports/CoordinatorLease.js"
import type { CoordinatorTransportShape, Serving } from "./ports/CoordinatorTransport.js"
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
  readonly onRole?: (role: "coordinator" | "standby", reason?: string) => Effect.Effect<void>
  /**
   * Called when it starts a new serve while it keeps the lease: its serve
   * was replaced or ended, or the lease was taken again under a new token.
   */
  readonly onRestart?: (leaseToken: number) => Effect.Effect<void>
}

export interface Candidate {
  readonly host: CoordinatorHost
  /** This candidate holds the lease and serves the group's heartbeats. */
  readonly isServing: () => boolean
}

const RESIGN_REASON = "its serve stopped answering twice in one lease term"

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
    /** The serve this candidate runs: its scope, its term, its own view of itself. */
    let serving:
      | {
          readonly scope: Scope.Closeable
          readonly leaseToken: number
          readonly serve: Serving
          readonly restarts: number
        }
      | undefined
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
    const stopServing = Effect.suspend(() => {
      const s = serving
      serving = undefined
      return s === undefined ? Effect.void : Scope.close(s.scope, Exit.void)
    })
    // Registered after the host, so it runs before the host releases its lease.
    yield* Scope.addFinalizer(scope, stopServing)
    const handovers = yield* transport.handovers(key)
    const role = (r: "coordinator" | "standby", reason?: string) =>
      options.onRole === undefined ? Effect.void : options.onRole(r, reason)

    /** Start a serve under lease `leaseToken` (`restarts`: serves before it in this term). */
    const startServing = (leaseToken: number, restarts: number) =>
      Effect.gen(function* () {
        const s = yield* Scope.fork(scope)
        const serve = yield* transport.serve(key, host.heartbeat).pipe(Scope.provide(s))
        serving = { scope: s, leaseToken, serve, restarts }
        wasLeader = true
      })

    /**
     * One look at the lease and the serve (docs/protocol.md rule 25): a
     * holder serves under its current term, or resigns; a non-holder stops.
     */
    const check = Effect.gen(function* () {
      yield* host.elect
      const token = Option.getOrUndefined(yield* host.leaseToken)
      const s = serving
      const action = CandidateRole.decide({
        leaseToken: token,
        serving:
          s === undefined
            ? undefined
            : { leaseToken: s.leaseToken, active: s.serve.active(), restarts: s.restarts },
      })
      switch (action) {
        case "idle":
        case "keep":
          return
        case "serve":
          yield* startServing(token!, 0)
          yield* role("coordinator")
          return
        case "restart":
          yield* stopServing
          yield* startServing(token!, s!.leaseToken === token ? s!.restarts + 1 : 0)
          if (options.onRestart !== undefined) yield* options.onRestart(token!)
          return
        case "resign":
          yield* stopServing
          yield* host.resign(RESIGN_REASON)
          wasLeader = false
          yield* role("standby", RESIGN_REASON)
          yield* transport.handover(key)
          return
        case "stop":
          yield* stopServing
          wasLeader = false
          // why the host stopped leading (lease expired or lost, a commit or fence write failed)
          yield* role("standby", Option.getOrUndefined(yield* host.lastError))
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
        // a handover wakes a standby at once; a serve that stopped on its own, its holder
        const woken = yield* Effect.forkChild(Stream.runHead(handovers))
        const ended = serving?.serve.ended ?? Effect.never
        yield* Effect.raceAll([Effect.sleep(wait), Fiber.join(woken), ended])
        yield* Fiber.interrupt(woken)
        yield* check
      }),
    )
    yield* Effect.forkIn(loop, scope)
    return { host, isServing: () => serving?.serve.active() === true }
  })
