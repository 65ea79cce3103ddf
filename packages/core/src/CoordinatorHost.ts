/**
 * CoordinatorHost: the Effect runtime around the pure coordinator. It holds
 * the group's CoordinatorLease, loads the snapshot from Store and commits its
 * election before serving anything, checks the lease before every commit
 * and every deadline, serves
 * heartbeats one at a time, commits records BEFORE answering, writes fences
 * before granting, runs deadlines with effect's Clock, reloads and retries
 * on StaleRevision, and steps down (NOT_COORDINATOR) when the lease or the
 * compare-and-set is lost.
 */
import {
  Clock,
  Effect,
  Exit,
  Fiber,
  Layer,
  ManagedRuntime,
  Option,
  PubSub,
  Result,
  Schema,
  Scope,
  Semaphore,
  Stream,
} from "effect"
import { CoordinatorLease, type LeaseGrant } from "./CoordinatorLease.js"
import * as Coordinator from "./coordinator/Coordinator.js"
import {
  applyVolatile,
  type CoordinatorState,
  initialState,
  replayAll,
  type Timer,
  type TimerKey,
  timerId,
} from "./coordinator/CoordinatorState.js"
import { decodeGroupConfig, type GroupConfig } from "./coordinator/GroupConfig.js"
import { type GroupMonitor, monitor } from "./coordinator/Monitoring.js"
import type { CoordinatorRecord } from "./coordinator/Records.js"
import { ElectionRefused, FenceWriteFailed, type InvalidGroupConfig } from "./Errors.js"
import { HeartbeatRequest, type HeartbeatResponse } from "./protocol/Heartbeat.js"
import { Store } from "./Store.js"

export interface CoordinatorHostOptions {
  /** Group configuration (validated; used when the group does not exist yet). */
  readonly config: GroupConfig | unknown
  /** Identity of this coordinator candidate (lease holder). */
  readonly holder: string
  /** Lease TTL; defaults to the group's session timeout. Renewed every TTL/3. */
  readonly leaseTtlMs?: number
  /** Write per-shard owner tokens to storage; runs after the commit, before the response. */
  readonly fence?: (
    fences: ReadonlyArray<Coordinator.Fence>,
  ) => Effect.Effect<void, FenceWriteFailed>
  /** Called for every "look again" notice (also published on `notices`). */
  readonly onNotice?: (memberId: string) => Effect.Effect<void>
  /** Commit attempts after StaleRevision (reload + re-run) before stepping down. Default 3. */
  readonly maxCommitAttempts?: number
}

export interface CoordinatorHost {
  /** Decode an untrusted request and answer it. Never fails: errors are error codes. */
  readonly heartbeat: (req: unknown) => Effect.Effect<HeartbeatResponse>
  /** "Look again" notices: member ids whose assignment grew. */
  readonly notices: Stream.Stream<string>
  readonly isCoordinator: Effect.Effect<boolean>
  /** The live state (read-only use), if this host is the coordinator. */
  readonly state: Effect.Effect<Option.Option<CoordinatorState>>
  readonly monitor: Effect.Effect<Option.Option<GroupMonitor>>
  /** Last reason this host could not serve (corrupt snapshot, lost lease, ...). */
  readonly lastError: Effect.Effect<Option.Option<string>>
  /** Try to become coordinator now (otherwise done lazily and by the renew loop). */
  readonly elect: Effect.Effect<boolean>
}

interface Leader {
  lease: LeaseGrant
  state: CoordinatorState
}

const decodeRequest = Schema.decodeUnknownResult(HeartbeatRequest)

class NotServing {
  constructor(readonly reason: string) {}
}

export const makeCoordinatorHost = Effect.fnUntraced(function* (options: CoordinatorHostOptions) {
  const config = yield* decodeGroupConfig(options.config)
  const store = yield* Store
  const leases = yield* CoordinatorLease
  const scope = yield* Scope.Scope
  const group = config.groupId
  const ttl = options.leaseTtlMs ?? config.sessionTimeoutMs
  const maxAttempts = options.maxCommitAttempts ?? 3
  const lock = yield* Semaphore.make(1)
  const pubsub = yield* PubSub.unbounded<string>()
  const armed = new Map<string, { at: number; fiber: Fiber.Fiber<void> }>()
  let leader: Leader | null = null
  let lastError: string | null = null

  const fenceWrite = (fences: ReadonlyArray<Coordinator.Fence>) =>
    fences.length === 0 || options.fence === undefined ? Effect.void : options.fence(fences)

  const disarmAll = Effect.suspend(() => {
    const fibers = [...armed.values()].map((a) => a.fiber)
    armed.clear()
    return Effect.forEach(fibers, Fiber.interrupt, { discard: true })
  })

  const stepDown = (reason: string) =>
    Effect.suspend(() => {
      lastError = reason
      const was = leader
      leader = null
      return Effect.andThen(disarmAll, was === null ? Effect.void : leases.release(was.lease))
    })

  const publish = (notices: ReadonlyArray<string>) =>
    Effect.forEach(
      notices,
      (id) =>
        Effect.andThen(
          PubSub.publish(pubsub, id),
          options.onNotice === undefined ? Effect.void : options.onNotice(id),
        ),
      { discard: true },
    )

  // Timers ------------------------------------------------------------------
  const arm = (timers: ReadonlyArray<Timer>): Effect.Effect<void> =>
    Effect.forEach(
      timers,
      (t) =>
        Effect.gen(function* () {
          const id = timerId(t.key)
          const existing = armed.get(id)
          // Lazy re-arm: an earlier timer fires, sees the later deadline, re-arms.
          if (existing !== undefined && existing.at <= t.at) return
          if (existing !== undefined) yield* Fiber.interrupt(existing.fiber)
          const now = yield* Clock.currentTimeMillis
          const fiber = yield* Effect.forkIn(
            Effect.andThen(Effect.sleep(Math.max(0, t.at - now)), fire(t.key, t.at)),
            scope,
          )
          armed.set(id, { at: t.at, fiber })
        }),
      { discard: true },
    )

  const fire = (key: TimerKey, at: number): Effect.Effect<void> =>
    lock.withPermit(
      Effect.gen(function* () {
        const id = timerId(key)
        if (armed.get(id)?.at === at) armed.delete(id)
        const l = leader
        if (l === null) return
        // A host that lost its lease runs no deadline: it steps down instead.
        const held = yield* Effect.result(leases.renew(l.lease, ttl))
        if (Result.isFailure(held)) return yield* stepDown("lease lost before a deadline ran")
        l.lease = held.success
        const now = yield* Clock.currentTimeMillis
        yield* run(l, (state) => Coordinator.onTimer(state, key, now)).pipe(
          Effect.catch((e: NotServing) => stepDown(e.reason)),
        )
      }),
    )

  // Load + election -----------------------------------------------------------
  /**
   * Take over: load (or create) the group and commit this lease's election
   * (`CoordinatorElected`) BEFORE serving anything. That commit moves
   * `storeRevision` past every revision a paused ex-leader may still hold in
   * memory, so the ex-leader's next commit fails the compare-and-set even if
   * this host never commits anything else. The lease is checked (renewed)
   * right before the commit; a StaleRevision reloads and retries.
   */
  const loadState = (lease: LeaseGrant) =>
    Effect.gen(function* () {
      const candidate = { holder: options.holder, leaseToken: lease.token }
      let held = lease
      for (let attempt = 1; ; attempt++) {
        const now = yield* Clock.currentTimeMillis
        const snapshot = yield* store.load(group)
        held = yield* leases.renew(held, ttl)
        if (Option.isNone(snapshot)) {
          const records = Coordinator.createGroup(config, now, candidate)
          const committed = yield* Effect.result(store.commit(group, 0, records))
          if (Result.isFailure(committed)) {
            if (committed.failure._tag === "StaleRevision" && attempt < maxAttempts) continue
            return yield* Effect.fail(committed.failure)
          }
          const state = initialState(config)
          replayAll(state, records)
          state.storeRevision = committed.success
          return { lease: held, state } satisfies Leader
        }
        const loaded = Coordinator.load(snapshot.value, now)
        const election = Coordinator.elect(loaded.state, candidate, now)
        if (election._tag === "Refused")
          return yield* Effect.fail(
            new ElectionRefused({
              group,
              holder: candidate.holder,
              leaseToken: candidate.leaseToken,
              electedHolder: election.current.holder,
              electedLeaseToken: election.current.leaseToken,
            }),
          )
        if (election.records.length > 0) {
          const committed = yield* Effect.result(
            store.commit(group, loaded.state.storeRevision, election.records),
          )
          if (Result.isFailure(committed)) {
            if (committed.failure._tag === "StaleRevision" && attempt < maxAttempts) continue
            return yield* Effect.fail(committed.failure)
          }
          replayAll(loaded.state, election.records)
          loaded.state.storeRevision = committed.success
        }
        yield* fenceWrite(loaded.fences)
        yield* arm(loaded.timers)
        return { lease: held, state: loaded.state } satisfies Leader
      }
    })

  /** Become (or stay) the coordinator; must run under `lock`. */
  const ensureLeader: Effect.Effect<Leader | null> = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    if (leader !== null) {
      if (leader.lease.expiresAt > now) return leader
      yield* stepDown("lease expired before it could be renewed")
    }
    const acquired = yield* Effect.result(leases.acquire(group, options.holder, ttl))
    if (Result.isFailure(acquired)) {
      lastError = `lease held by ${acquired.failure.holder}`
      return null
    }
    const loaded = yield* Effect.result(loadState(acquired.success))
    if (Result.isFailure(loaded)) {
      const e = loaded.failure
      yield* disarmAll
      yield* leases.release(acquired.success)
      lastError = `${e._tag}: ${"message" in e ? e.message : ""}`
      return null
    }
    leader = loaded.success
    lastError = null
    return leader
  })

  /**
   * Run a handler against the leader's state: commit its records (CAS), then
   * replay, volatile updates, fences, timers, notices. On StaleRevision
   * reload and re-run; give up (step down) when the lease or CAS is lost.
   */
  const run = <A>(
    initial: Leader,
    handler: (state: CoordinatorState) => Coordinator.CoordinatorResult<A>,
  ): Effect.Effect<A, NotServing> =>
    Effect.gen(function* () {
      let l = initial
      for (let attempt = 1; ; attempt++) {
        const result = handler(l.state)
        if (result.records.length > 0) {
          // Still the lease holder? (The CAS below is the final guard.)
          const held = yield* Effect.result(leases.renew(l.lease, ttl))
          if (Result.isFailure(held))
            return yield* Effect.fail(new NotServing("lease lost before a commit"))
          l.lease = held.success
          const committed = yield* Effect.result(
            store.commit(group, l.state.storeRevision, result.records as Array<CoordinatorRecord>),
          )
          if (Result.isFailure(committed)) {
            const e = committed.failure
            if (e._tag !== "StaleRevision" || attempt >= maxAttempts)
              return yield* Effect.fail(new NotServing(`commit failed: ${e._tag}`))
            // CAS lost: still the lease holder? Then reload and re-run; else step down.
            const renewed = yield* Effect.result(leases.renew(l.lease, ttl))
            if (Result.isFailure(renewed))
              return yield* Effect.fail(new NotServing("lease lost after a stale commit"))
            yield* disarmAll
            const reloaded = yield* Effect.result(loadState(renewed.success))
            if (Result.isFailure(reloaded))
              return yield* Effect.fail(new NotServing(`reload failed: ${reloaded.failure._tag}`))
            l = reloaded.success
            leader = l
            continue
          }
          replayAll(l.state, result.records)
          l.state.storeRevision = committed.success
        }
        applyVolatile(l.state, result)
        const fenced = yield* Effect.result(fenceWrite(result.fences))
        if (Result.isFailure(fenced))
          return yield* Effect.fail(new NotServing(`fence write failed: ${fenced.failure.message}`))
        yield* arm(result.timers)
        yield* publish(result.notices)
        return result.response
      }
    })

  const notCoordinator = (memberId: string, message: string): HeartbeatResponse => ({
    errorCode: "NOT_COORDINATOR",
    errorMessage: message,
    memberId,
    memberEpoch: -1,
    assignmentEpoch: 0,
    assigned: [],
    pending: [],
    ...Coordinator.timing(config),
  })

  const heartbeat = (raw: unknown): Effect.Effect<HeartbeatResponse> =>
    Effect.suspend(() => {
      const decoded = decodeRequest(raw)
      if (Result.isFailure(decoded)) {
        const r = raw as { memberId?: unknown; memberEpoch?: unknown } | null
        return Effect.succeed<HeartbeatResponse>({
          errorCode: "INVALID_REQUEST",
          errorMessage: decoded.failure.message,
          memberId: typeof r?.memberId === "string" ? r.memberId : "",
          memberEpoch:
            typeof r?.memberEpoch === "number" && Number.isInteger(r.memberEpoch)
              ? r.memberEpoch
              : -1,
          assignmentEpoch: leader?.state.assignmentEpoch ?? 0,
          assigned: [],
          pending: [],
          ...Coordinator.timing(config),
        })
      }
      const req = decoded.success
      return lock.withPermit(
        Effect.gen(function* () {
          const l = yield* ensureLeader
          if (l === null) return notCoordinator(req.memberId, lastError ?? "not the coordinator")
          const now = yield* Clock.currentTimeMillis
          return yield* run(l, (state) => Coordinator.heartbeat(state, req, now)).pipe(
            Effect.catch((e: NotServing) =>
              Effect.as(stepDown(e.reason), notCoordinator(req.memberId, e.reason)),
            ),
          )
        }),
      )
    })

  // Lease renewal (and standby election) loop ----------------------------------
  const renewOnce = lock.withPermit(
    Effect.gen(function* () {
      const l = leader
      if (l === null) {
        yield* ensureLeader
        return
      }
      const renewed = yield* Effect.result(leases.renew(l.lease, ttl))
      if (Result.isFailure(renewed)) yield* stepDown("lease lost")
      else l.lease = renewed.success
    }),
  )
  yield* Effect.forkIn(
    Effect.forever(Effect.andThen(Effect.sleep(Math.max(1, Math.floor(ttl / 3))), renewOnce)),
    scope,
  )
  yield* Scope.addFinalizer(
    scope,
    Effect.suspend(() => (leader === null ? Effect.void : stepDown("host closed"))),
  )

  const host: CoordinatorHost = {
    heartbeat,
    notices: Stream.fromPubSub(pubsub),
    isCoordinator: Effect.sync(() => leader !== null),
    state: Effect.sync(() => Option.fromNullishOr(leader?.state)),
    monitor: Effect.sync(() => Option.map(Option.fromNullishOr(leader?.state), monitor)),
    lastError: Effect.sync(() => Option.fromNullishOr(lastError)),
    elect: lock.withPermit(Effect.map(ensureLeader, (l) => l !== null)),
  }
  return host
}) as (
  options: CoordinatorHostOptions,
) => Effect.Effect<CoordinatorHost, InvalidGroupConfig, Store | CoordinatorLease | Scope.Scope>

// ---------------------------------------------------------------------------
// Promise API for non-Effect users
// ---------------------------------------------------------------------------

export interface CoordinatorHostAsyncOptions {
  readonly config: unknown
  readonly holder: string
  readonly leaseTtlMs?: number
  readonly fence?: (fences: ReadonlyArray<Coordinator.Fence>) => Promise<void>
  readonly onNotice?: (memberId: string) => void
  /** Store and lease implementations; defaults to the memory ones. */
  readonly layer?: Layer.Layer<Store | CoordinatorLease>
}

export interface CoordinatorHostAsync {
  readonly heartbeat: (req: unknown) => Promise<HeartbeatResponse>
  readonly monitor: () => Promise<GroupMonitor | undefined>
  readonly isCoordinator: () => Promise<boolean>
  readonly close: () => Promise<void>
}

export const makeCoordinatorHostAsync = async (
  options: CoordinatorHostAsyncOptions,
): Promise<CoordinatorHostAsync> => {
  const runtime = ManagedRuntime.make(
    options.layer ?? Layer.merge(Store.layerMemory, CoordinatorLease.layerMemory),
  )
  const scope = await runtime.runPromise(Scope.make())
  const { fence, onNotice } = options
  try {
    const host = await runtime.runPromise(
      Scope.provide(
        makeCoordinatorHost({
          config: options.config,
          holder: options.holder,
          ...(options.leaseTtlMs !== undefined ? { leaseTtlMs: options.leaseTtlMs } : {}),
          ...(fence !== undefined
            ? {
                fence: (fences: ReadonlyArray<Coordinator.Fence>) =>
                  Effect.tryPromise({
                    try: () => fence(fences),
                    catch: (cause) =>
                      new FenceWriteFailed({ group: "", message: String(cause), cause }),
                  }),
              }
            : {}),
          ...(onNotice !== undefined
            ? { onNotice: (id: string) => Effect.sync(() => onNotice(id)) }
            : {}),
        }),
        scope,
      ),
    )
    return {
      heartbeat: (req) => runtime.runPromise(host.heartbeat(req)),
      monitor: () => runtime.runPromise(Effect.map(host.monitor, Option.getOrUndefined)),
      isCoordinator: () => runtime.runPromise(host.isCoordinator),
      close: async () => {
        await runtime.runPromise(Scope.close(scope, Exit.void))
        await runtime.dispose()
      },
    }
  } catch (e) {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
    throw e
  }
}
