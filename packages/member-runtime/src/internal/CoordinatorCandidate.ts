/**
 * The embedded coordinator (docs/runtime.md, "Coordinator placement"): every
 * process is a lease-elected candidate for each group it consumes. A
 * candidate runs core's `makeCoordinatorHost` and serves the group's
 * heartbeats on the transport only while it holds the lease: a standby that
 * served would take requests (on Redis, pop them from the group's request
 * list) only to answer NOT_COORDINATOR. It re-checks its lease every sixth of
 * the lease TTL, so when the leader stops (its host releases the lease) or
 * dies (the lease expires), another process takes over within about one TTL.
 */
import {
  type CoordinatorHost,
  type CoordinatorLease,
  type CoordinatorTransport,
  type GroupConfig,
  makeCoordinatorHost,
  type OwnerFence,
  type Store,
} from "@shardline/core"
import { Clock, Effect, Exit, Scope } from "effect"
import type { EventHub } from "../Events.js"

export interface CandidateOptions {
  readonly config: GroupConfig
  /** The lease holder's name: unique per process start. */
  readonly holder: string
  readonly transport: CoordinatorTransport.CoordinatorTransportShape
  readonly events?: EventHub
  /** How often a candidate re-checks its lease (default: a sixth of the session timeout). */
  readonly checkEveryMs?: number
}

export interface Candidate {
  readonly host: CoordinatorHost
  /** This candidate holds the lease and serves the group's heartbeats. */
  readonly isServing: () => boolean
}

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
    const host = yield* makeCoordinatorHost({
      config,
      holder: options.holder,
      onNotice: (memberId) => transport.notify(key, memberId),
    }).pipe(Effect.orDie)
    let serving: Scope.Closeable | undefined

    const emit = (type: "coordinatorElected" | "coordinatorResigned") =>
      Effect.map(Clock.currentTimeMillis, (at) =>
        options.events?.emit({ ...key, at, type, holder: options.holder }),
      )

    const check = Effect.gen(function* () {
      const leader = yield* host.elect
      if (leader && serving === undefined) {
        const s = yield* Scope.fork(scope)
        serving = s
        yield* transport.serve(key, host.heartbeat).pipe(Scope.provide(s))
        yield* emit("coordinatorElected")
      } else if (!leader && serving !== undefined) {
        const s = serving
        serving = undefined
        yield* Scope.close(s, Exit.void)
        yield* emit("coordinatorResigned")
      }
    })

    yield* check
    const every = options.checkEveryMs ?? Math.max(10, Math.floor(config.sessionTimeoutMs / 6))
    yield* Effect.forkIn(Effect.forever(Effect.andThen(Effect.sleep(every), check)), scope)
    return { host, isServing: () => serving !== undefined }
  })
