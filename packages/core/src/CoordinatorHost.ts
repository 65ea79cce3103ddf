/**
 * CoordinatorHost: the Effect runtime around one group's `CoordinatorShell`.
 * It holds the group's CoordinatorLease, loads the snapshot from Store and
 * commits its election before serving anything, serves heartbeats one at a
 * time, checks the lease before every commit, commits records BEFORE
 * answering, writes owner fences through `OwnerFence` before the response,
 * runs deadlines with effect's Clock (one sleeping fiber for the shell's
 * earliest deadline), reloads and retries on StaleRevision, and steps down
 * (NOT_COORDINATOR) when the lease or the compare-and-set is lost.
 *
 * The group is (config.stream, config.groupId): the host's lease, snapshot
 * and fences are that key's, so same-named groups on two streams never meet.
 *
 * On every takeover it applies the config it was given as an explicit,
 * audited change (docs/protocol.md rule 12). With a `StreamLayouts` service
 * it follows the stream's layout (docs/resharding.md): it creates the layout
 * with the group, registers the group on it, adopts newer generations (on
 * takeover and at every lease renewal), seals earlier generations' shards
 * (with a `ShardStreams` service) and records, once the group's migration
 * completed, that it drained them, retiring generations every group drained.
 */
import {
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
import * as Coordinator from "./coordinator/Coordinator.js"
import { CoordinatorShell, type Step, type Takeover } from "./coordinator/CoordinatorShell.js"
import type { CoordinatorState } from "./coordinator/CoordinatorState.js"
import { decodeGroupConfig, type GroupConfig } from "./coordinator/GroupConfig.js"
import { type GroupMonitor, monitor } from "./coordinator/Monitoring.js"
import { ElectionRefused, FenceWriteFailed, type InvalidGroupConfig } from "./Errors.js"
import * as Reshard from "./layout/Reshard.js"
import * as StreamLayout from "./layout/StreamLayout.js"
import {
  CoordinatorLease,
  type LeaseGrant,
  layerMemory as leaseMemory,
} from "./ports/CoordinatorLease.js"
import { type GroupKey, groupKeyOf } from "./ports/GroupKey.js"
import { layerNoop as fenceNoop, OwnerFence } from "./ports/OwnerFence.js"
import { ShardStreams } from "./ports/ShardStreams.js"
import { Store, layerMemory as storeMemory } from "./ports/Store.js"
import { StreamLayouts } from "./ports/StreamLayouts.js"
import {
  HeartbeatRequest,
  type HeartbeatResponse,
  withGrantsPending,
} from "./protocol/Heartbeat.js"
import { instant, monotonicMillis } from "./time/Instant.js"

export interface CoordinatorHostOptions {
  /** Group configuration (validated; used when the group does not exist yet). */
  readonly config: GroupConfig | unknown
  /** Identity of this coordinator candidate (lease holder). */
  readonly holder: string
  /**
   * Coordinator lease TTL, renewed every TTL/3 (counted from each renewal's
   * start, on a fiber of its own that no commit holds up). Default
   * `defaultCoordinatorLeaseMs(config)`: twice the heartbeat interval (at
   * most a quarter of the session), so a successor serves long before any
   * member's lease runs out (docs/protocol.md rule 20).
   */
  readonly leaseTtlMs?: number
  /** Called for every "look again" notice (also published on `notices`). */
  readonly onNotice?: (memberId: string) => Effect.Effect<void>
  /** Commit attempts after StaleRevision (reload + re-run) before stepping down. Default 3. */
  readonly maxCommitAttempts?: number
  /**
   * With a `StreamLayouts` service, how often the leader reads its stream's
   * layout record (on a fiber of its own), so a reshard takes effect within
   * this long (one read; a write only when something changed). Default
   * 1,000 ms, or the renewal period (TTL/3) when that is shorter.
   */
  readonly layoutPollMs?: number
  /**
   * How long an answer waits for its own grants' owner-token fence writes,
   * and a takeover for each shard's token read and re-fence, before it goes
   * on without them: a grant not written by then is answered `pending`
   * (its owner is noticed once written), a token not read is left out of
   * the rewind check. A hung node's command otherwise holds them for its
   * whole deadline (`commandTimeoutMs`, 5 s by default), as long as a
   * member's heartbeat timeout (docs/protocol.md rules 27 and 31). Default
   * `defaultFenceWaitMs(config)`.
   *
   * @example
   * makeCoordinatorHost({ config, holder: "pod-1", fenceWaitMs: 500 })
   */
  readonly fenceWaitMs?: number
}

export interface CoordinatorHost {
  /** The group this host coordinates: (config.stream, config.groupId). */
  readonly key: GroupKey
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
  /**
   * While another holder has the lease: when its lease runs out (monotonic
   * ms, as last seen), so a standby can try again right then.
   */
  readonly standbyUntil: Effect.Effect<Option.Option<number>>
  /** The coordinator lease TTL in use (ms). */
  readonly leaseTtlMs: number
  /**
   * The token of the lease this host leads under, if it leads: a new token is
   * a new term, taken again by the renewal loop or a heartbeat as well as by
   * `elect` (docs/protocol.md rule 25).
   */
  readonly leaseToken: Effect.Effect<Option.Option<number>>
  /**
   * Give the lease up: step down, release it, and take it again no sooner
   * than one lease TTL from now, so a standby takes over (docs/protocol.md
   * rule 25: a holder that cannot serve resigns).
   */
  readonly resign: (reason: string) => Effect.Effect<void>
}

/**
 * The default coordinator lease: twice the heartbeat interval, at most a
 * quarter of the session timeout, at least a second. A coordinator that dies
 * is replaced within about this long (plus a standby's wake-up), far inside
 * every member's lease (the session minus its safety margin), so members keep
 * their shards, epochs and tokens (docs/protocol.md rule 20).
 */
export const defaultCoordinatorLeaseMs = (
  config: Pick<GroupConfig, "heartbeatIntervalMs" | "sessionTimeoutMs">,
): number =>
  Math.max(1_000, Math.min(2 * config.heartbeatIntervalMs, Math.floor(config.sessionTimeoutMs / 4)))

/**
 * The default of `CoordinatorHostOptions.fenceWaitMs`: 1 s, at most a sixth
 * of the session, so an answer that waited for it still comes well within
 * a member's heartbeat timeout (a third of the session by default). A
 * healthy fence write takes a round trip; one that outlasts the wait only
 * delays its grant to the notice that follows the write.
 *
 * @example
 * defaultFenceWaitMs({ sessionTimeoutMs: 30_000 }) // 1_000
 * defaultFenceWaitMs({ sessionTimeoutMs: 3_000 }) // 500
 */
export const defaultFenceWaitMs = (config: Pick<GroupConfig, "sessionTimeoutMs">): number =>
  Math.max(1, Math.min(1_000, Math.floor(config.sessionTimeoutMs / 6)))

interface Leader {
  lease: LeaseGrant
  readonly shell: CoordinatorShell
}

const decodeRequest = Schema.decodeUnknownResult(HeartbeatRequest)

/** A grant whose owner-token fence is not written yet (docs/protocol.md rule 31). */
interface Unfenced {
  readonly token: number
  readonly memberId: string
  readonly fence: Coordinator.Fence
  /** A write of it is under way. */
  inFlight: boolean
  /** An answer left it out: its owner is noticed once it is written. */
  withheld: boolean
}

/** A step's answer, with the fences to write once `lock` is released. */
interface Served<A> {
  readonly value: A
  readonly grants: ReadonlyArray<Coordinator.Fence>
  readonly restores: ReadonlyArray<Coordinator.Fence>
}

class NotServing {
  constructor(readonly reason: string) {}
}

export const makeCoordinatorHost = Effect.fnUntraced(function* (options: CoordinatorHostOptions) {
  const config = yield* decodeGroupConfig(options.config)
  const store = yield* Store
  const leases = yield* CoordinatorLease
  const fence = yield* OwnerFence
  const scope = yield* Scope.Scope
  const key = groupKeyOf(config)
  const streamLayouts = yield* Effect.serviceOption(StreamLayouts)
  const dataPlane = yield* Effect.serviceOption(ShardStreams)
  const ttl = options.leaseTtlMs ?? defaultCoordinatorLeaseMs(config)
  const maxAttempts = options.maxCommitAttempts ?? 3
  const fenceWait = options.fenceWaitMs ?? defaultFenceWaitMs(config)
  const lock = yield* Semaphore.make(1)
  const pubsub = yield* PubSub.unbounded<string>()
  let leader: Leader | null = null
  /**
   * The lease of this host's term, from its acquisition (before the
   * takeover's loads) until it steps down: what the renewal loop renews, so
   * a takeover slowed by latency keeps the lease it is taking over under.
   */
  let term: LeaseGrant | null = null
  /** A renewal's grant: the term's and the leader's lease, if it is theirs and later. */
  const extend = (grant: LeaseGrant) => {
    if (term !== null && term.token === grant.token && grant.expiresAt > term.expiresAt)
      term = grant
    if (leader !== null && leader.lease.token === grant.token)
      if (grant.expiresAt > leader.lease.expiresAt) leader.lease = grant
  }
  let lastError: string | null = null
  /** When the other holder's lease runs out (monotonic ms), from the last LeaseHeld. */
  let heldUntil: number | undefined
  /** After a resignation: no acquisition before this (monotonic ms), a standby's turn. */
  let resignedUntil = Number.NEGATIVE_INFINITY
  /** The one sleeping fiber, due at the leader's earliest deadline (`shell.nextTimer()`). */
  let timer: { readonly at: number; readonly fiber: Fiber.Fiber<void> } | undefined

  const writeFences = (fences: ReadonlyArray<Coordinator.Fence>) =>
    fences.length === 0 ? Effect.void : fence.write(key, fences)

  /**
   * Grants whose owner-token fence is not written yet, by shard: an answer
   * never lists such a grant in `assigned` (it is `pending` there) until its
   * write succeeded (docs/protocol.md rule 1 step 6, rule 31). The writes run
   * outside `lock`, one per shard, each with its storage's own deadline, so
   * a shard whose node is down or hung holds up no other member's answer.
   */
  const unfenced = new Map<number, Unfenced>()
  /** Withhold `f`'s grant until its fence is written (rule 31). */
  const withholdUntilWritten = (f: Coordinator.Fence) =>
    unfenced.set(f.shard, {
      token: f.token,
      memberId: f.memberId,
      fence: f,
      inFlight: false,
      withheld: false,
    })

  /**
   * The grants of `shards` cannot be confirmed before their member is told
   * (their fence written): their confirmation deadline (rule 10) counts
   * from now, so a node that stays hung past the rebalance timeout does not
   * fence their healthy member (docs/protocol.md rule 31). Under `lock`.
   */
  const deferDeadlines = (shards: Iterable<number>) =>
    Effect.gen(function* () {
      if (leader === null) return
      const now = yield* instant
      leader.shell.apply(leader.shell.deferGrantDeadlines(shards, now))
    })

  /** The shards of `unfenced` whose entry is the current grant. */
  const unfencedGrants = () =>
    [...unfenced].flatMap(([shard, entry]) =>
      leader?.shell.state.current[shard]?.token === entry.token ? [shard] : [],
    )

  /**
   * Write grants' fences, one write per shard, concurrently; outside `lock`.
   * A written grant leaves `unfenced` (its owner is noticed if an answer
   * withheld it meanwhile); the shards whose write failed are returned and
   * stay withheld until a later answer retries them. `done`, if given,
   * collects the shards written so far (for an answer that stops waiting).
   */
  const settle = (grants: ReadonlyArray<Coordinator.Fence>, done?: Set<number>) =>
    Effect.gen(function* () {
      const noticed = new Set<string>()
      const told: Array<number> = []
      const failed = yield* Effect.forEach(
        grants,
        (grant) =>
          Effect.map(
            Effect.suspend(() => {
              const entry = unfenced.get(grant.shard)
              const mine = entry !== undefined && entry.token === grant.token ? entry : undefined
              if (mine !== undefined) mine.inFlight = true
              return Effect.map(Effect.result(writeFences([grant])), (written) => ({
                mine,
                written,
              }))
            }),
            ({ mine, written }) => {
              if (mine !== undefined) mine.inFlight = false
              if (Result.isFailure(written)) return [grant.shard]
              done?.add(grant.shard)
              if (mine !== undefined && unfenced.get(grant.shard) === mine) {
                unfenced.delete(grant.shard)
                if (mine.withheld) {
                  noticed.add(mine.memberId)
                  told.push(grant.shard)
                }
              }
              return []
            },
          ),
        { concurrency: "unbounded" },
      )
      // a withheld grant can be told only now: its confirmation deadline
      // counts from here (docs/protocol.md rule 31)
      if (told.length > 0) yield* Effect.forkIn(lock.withPermit(deferDeadlines(told)), scope)
      if (noticed.size > 0) yield* publish([...noticed])
      return new Set(failed.flat())
    })

  /**
   * An answer without the grants whose fence is not written: they move to
   * `pending` (the member must not read yet, docs/protocol.md rule 31) and
   * are marked withheld, so their owner is noticed once written; one whose
   * write is not under way is retried now, in the background. `own`: the
   * shards whose first write the caller is about to make. Under `lock`.
   */
  const withhold = (
    response: HeartbeatResponse,
    own: ReadonlySet<number>,
  ): Effect.Effect<HeartbeatResponse> =>
    Effect.suspend(() => {
      if (unfenced.size === 0 || response.assigned.length === 0) return Effect.succeed(response)
      const held: Array<number> = []
      const retries: Array<Coordinator.Fence> = []
      for (const g of response.assigned) {
        const entry = unfenced.get(g.shard)
        if (own.has(g.shard) || entry === undefined || entry.token !== g.token) continue
        const owner = leader?.shell.state.current[g.shard]
        if (owner?.confirmed === true && owner.token === entry.token) {
          // its member reports it owned: it was told (by an earlier leader,
          // after that leader's write), so its token was written then; a
          // `pending` answer now would read as a revocation to it
          unfenced.delete(g.shard)
          continue
        }
        held.push(g.shard)
        entry.withheld = true
        if (!entry.inFlight) {
          entry.inFlight = true
          retries.push(entry.fence)
        }
      }
      if (held.length === 0) return Effect.succeed(response)
      return Effect.as(
        retries.length === 0 ? Effect.void : Effect.forkIn(settle(retries), scope),
        withGrantsPending(response, held),
      )
    })

  /**
   * The owner tokens of `shards` storage answers for now, one read per
   * shard: a shard whose storage node is down or hung is left out (its
   * rewind is not checked at this takeover) rather than failing the
   * election. One node's failure must not keep the whole group from having a
   * coordinator: its owner cannot read there either (docs/protocol.md rule 27).
   */
  const readReachable = (shards: ReadonlyArray<number>) =>
    Effect.map(
      Effect.forEach(
        shards,
        // a hung node answers nothing until its command deadline: wait
        // `fenceWait`, not that long (docs/protocol.md rule 27)
        (shard) => Effect.timeoutOption(Effect.result(fence.read(key, [shard])), fenceWait),
        { concurrency: 64 },
      ),
      (results) =>
        results.flatMap((r) =>
          Option.isSome(r) && Result.isSuccess(r.value) ? r.value.success : [],
        ),
    )

  /**
   * A takeover's re-assertion of every owner's token (a fence write may have
   * been lost), one write per shard: a shard whose storage node fails keeps
   * the token it has (the grant's own write, made before its owner was told)
   * and does not fail the election (docs/protocol.md rule 27). Returns the
   * fences whose write failed or did not end within `fenceWait`.
   */
  const reassert = (owners: ReadonlyArray<Coordinator.Fence>) =>
    Effect.map(
      Effect.forEach(
        owners,
        (owner) =>
          Effect.map(Effect.timeoutOption(Effect.result(writeFences([owner])), fenceWait), (r) => ({
            owner,
            written: Option.isSome(r) && Result.isSuccess(r.value),
          })),
        { concurrency: 64 },
      ),
      (results) => results.flatMap(({ owner, written }) => (written ? [] : [owner])),
    )

  const disarm = Effect.suspend(() => {
    const armed = timer
    timer = undefined
    return armed === undefined ? Effect.void : Fiber.interrupt(armed.fiber)
  })

  const stepDown = (reason: string) =>
    Effect.suspend(() => {
      lastError = reason
      const was = leader
      leader = null
      term = null
      // a later term re-fences every owner at its takeover
      unfenced.clear()
      return Effect.andThen(disarm, was === null ? Effect.void : leases.release(was.lease))
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

  /**
   * A step that answers nobody (a deadline, a config change): its fences
   * are written in the background, never under `lock`.
   */
  const inBackground = (served: Served<unknown>): Effect.Effect<void> =>
    served.grants.length === 0 && served.restores.length === 0
      ? Effect.void
      : Effect.asVoid(
          Effect.forkIn(
            Effect.andThen(settle(served.grants), Effect.ignore(writeFences(served.restores))),
            scope,
          ),
        )

  // Deadlines -----------------------------------------------------------------
  /** Point the sleeping fiber at the leader's earliest deadline; runs under `lock`. */
  const rearm: Effect.Effect<void> = Effect.suspend(() => {
    const next = leader?.shell.nextTimer()
    if (timer?.at === next) return Effect.void
    return Effect.gen(function* () {
      yield* disarm
      if (next === undefined) return
      const now = yield* monotonicMillis
      const fiber = yield* Effect.forkIn(
        Effect.andThen(Effect.sleep(Math.max(0, next - now)), lock.withPermit(fireDue)),
        scope,
      )
      timer = { at: next, fiber }
    })
  })

  /**
   * Run every deadline due now, then re-aim the timer once; a host that lost
   * its lease commits nothing and steps down instead.
   */
  const fireDue: Effect.Effect<void> = Effect.gen(function* () {
    timer = undefined // this fiber is the armed one: never interrupt it from here
    while (leader !== null) {
      // a withheld grant's deadline never passes while it is withheld
      if (unfenced.size > 0) yield* deferDeadlines(unfencedGrants())
      const now = yield* instant
      const ran = yield* execute((shell) => shell.dueTimer(now), "a deadline ran").pipe(
        Effect.catch((e: NotServing) => Effect.as(stepDown(e.reason), Option.none())),
      )
      if (Option.isNone(ran)) break
      yield* inBackground(ran.value)
    }
    yield* rearm
  })

  // Load + election -----------------------------------------------------------
  /**
   * Take over: load (or create) the group and commit this lease's election
   * (`CoordinatorElected`) BEFORE serving anything. That commit moves
   * `storeRevision` past every revision a paused ex-leader may still hold in
   * memory, so the ex-leader's next commit fails the compare-and-set even if
   * this host never commits anything else. The lease is renewed right before
   * the commit (a load may take a while); a StaleRevision reloads and retries.
   * Then the owner tokens storage holds are compared with the state's: tokens
   * the state never issued mean the metadata was rewound, and those shards
   * are held one session before anything else is written (docs/protocol.md
   * rule 23); then every remaining owner is re-fenced.
   */
  const takeOver = (lease: LeaseGrant) =>
    Effect.gen(function* () {
      const candidate = { holder: options.holder, leaseToken: lease.token }
      let held = lease
      for (let attempt = 1; ; attempt++) {
        const now = yield* instant
        const snapshot = yield* store.load(key)
        // a new group starts on the stream's oldest live generation
        const origin = Option.isSome(snapshot) ? undefined : yield* streamOrigin
        held = yield* leases.renew(held, ttl)
        extend(held)
        const start: Takeover = Option.isNone(snapshot)
          ? {
              _tag: "Elected",
              ...CoordinatorShell.create(config, now, candidate, origin),
              fences: [],
            }
          : CoordinatorShell.load(snapshot.value, now, candidate)
        if (start._tag === "Refused")
          return yield* new ElectionRefused({
            stream: key.stream,
            group: key.group,
            holder: candidate.holder,
            leaseToken: candidate.leaseToken,
            electedHolder: start.current.holder,
            electedLeaseToken: start.current.leaseToken,
          })
        const { shell, step } = start
        if (step.records.length > 0) {
          const committed = yield* Effect.result(
            store.commit(key, shell.revision, step.records, held),
          )
          if (Result.isFailure(committed)) {
            if (committed.failure._tag === "StaleRevision" && attempt < maxAttempts) continue
            return yield* Effect.fail(committed.failure)
          }
          shell.apply(step, committed.success)
        }
        const shards = shell.state.tokens.map((_, shard) => shard)
        const stored = yield* readReachable(shards)
        const rewind = shell.rewound(stored, now)
        if (rewind !== undefined) {
          const committed = yield* Effect.result(
            store.commit(key, shell.revision, rewind.records, held),
          )
          if (Result.isFailure(committed)) {
            if (committed.failure._tag === "StaleRevision" && attempt < maxAttempts) continue
            return yield* Effect.fail(committed.failure)
          }
          shell.apply(rewind, committed.success)
        }
        // every owner left after the rewind check, re-asserted (a fence write may have been lost)
        const owners = shell.state.current.flatMap((o, shard) =>
          o === null ? [] : [{ shard, token: o.token, memberId: o.memberId }],
        )
        const failed = yield* reassert(owners)
        // a grant its owner never confirmed may never have been told, nor
        // fenced (its leader failed before writing it): it is withheld
        // until written, as a new grant is (rule 31); a confirmed grant's
        // owner was told, so its fence was written then
        const storedToken = new Map(stored.map((t) => [t.shard, t.token]))
        for (const f of failed) {
          const o = shell.state.current[f.shard]
          if (o == null || o.confirmed || (storedToken.get(f.shard) ?? 0) >= f.token) continue
          withholdUntilWritten(f)
        }
        return { lease: held, shell } satisfies Leader
      }
    })

  /** The stream's oldest live generation (creating the stream's layout), if layouts are kept. */
  const streamOrigin = Option.match(streamLayouts, {
    onNone: () => Effect.succeed(undefined),
    onSome: (layouts) =>
      Reshard.loadOrCreate(key.stream, config.shardCount).pipe(
        Effect.provideService(StreamLayouts, layouts),
        Effect.map((stored) => stored.record.generations[0]),
      ),
  })

  /**
   * Bring the leader in line with what it was given and with its stream:
   * the config (an audited change when it differs), the stream's layout
   * generations, seals of earlier generations after adopting one, and the
   * report that the group drained them once its migration completed. A
   * failure is reported in `lastError`; the host keeps serving. Under `lock`.
   */
  const reconcileLeader = (first: boolean): Effect.Effect<void> =>
    Effect.gen(function* () {
      if (first)
        yield* runStep((shell, now) => {
          const r = shell.configure(config, now)
          if (r !== undefined && typeof r !== "string" && r.refused !== undefined)
            refusedConfig = `config refused: ${r.refused}`
          return r
        }, "a config change")
      if (Option.isNone(streamLayouts)) return
      yield* adoptLayout(yield* Effect.result(readLayout(streamLayouts.value)), first)
    })

  /**
   * The stream's layout record, with this group registered on it: I/O on
   * the layout record only, none on the host's state, so the periodic
   * follow-up reads it outside `lock` and holds the lock only to adopt it
   * (docs/protocol.md rule 20: a round trip under the lock delays every
   * answer).
   */
  const readLayout = (layouts: StreamLayouts["Service"]) =>
    Reshard.registerGroup(key.stream, key.group).pipe(Effect.provideService(StreamLayouts, layouts))

  /** Follow the layout read (`readLayout`): adopt, seal, report drained. Under `lock`. */
  const adoptLayout = (
    stored: Result.Result<
      Effect.Success<ReturnType<typeof readLayout>>,
      Effect.Error<ReturnType<typeof readLayout>>
    >,
    first: boolean,
  ): Effect.Effect<void> =>
    Effect.gen(function* () {
      if (Option.isNone(streamLayouts) || leader === null) return
      const provide = Effect.provideService(StreamLayouts, streamLayouts.value)
      if (Result.isFailure(stored)) {
        lastError = `stream layout: ${stored.failure._tag}: ${stored.failure.message}`
        return
      }
      const record = stored.success.record
      const adopted = yield* runStep(
        (shell, now) => shell.followLayout(record.generations, now),
        "following the stream layout",
      )
      if ((adopted || first) && Option.isSome(dataPlane) && record.generations.length > 1) {
        const sealed = yield* Effect.result(
          Reshard.sealEarlier(record).pipe(Effect.provideService(ShardStreams, dataPlane.value)),
        )
        if (Result.isFailure(sealed)) lastError = `sealing: ${sealed.failure.message}`
      }
      const state = leader?.shell.state
      if (
        state !== undefined &&
        state.resharding._tag === "Idle" &&
        (record.groups[key.group]?.drainedBelow ?? 0) < state.layout.generation
      ) {
        const reported = yield* Effect.result(
          Option.isSome(dataPlane)
            ? Reshard.groupDrainedBelow(key.stream, key.group, state.layout.generation).pipe(
                provide,
                Effect.provideService(ShardStreams, dataPlane.value),
              )
            : provide(
                Reshard.update(key.stream, (r) =>
                  Result.succeed(
                    StreamLayout.groupDrainedBelow(r, key.group, state.layout.generation),
                  ),
                ),
              ),
        )
        if (Result.isFailure(reported))
          lastError = `stream layout: ${reported.failure._tag}: ${reported.failure.message}`
      }
    })

  /** A part of the config the group refused (audited; docs/protocol.md rule 12). */
  let refusedConfig: string | null = null

  /** Run one record-producing shell computation; true if it changed anything. Under `lock`. */
  const runStep = (
    compute: (shell: CoordinatorShell, now: Coordinator.Instant) => Step<void> | undefined | string,
    what: string,
  ): Effect.Effect<boolean> =>
    Effect.gen(function* () {
      const now = yield* instant
      let refusal: string | undefined
      const ran = yield* execute((shell) => {
        const r = compute(shell, now)
        if (typeof r === "string") {
          refusal = r
          return undefined
        }
        return r
      }, what).pipe(
        Effect.tap(() => rearm),
        Effect.catch((e: NotServing) => Effect.as(stepDown(e.reason), Option.none())),
      )
      if (refusal !== undefined) lastError = `${what} refused: ${refusal}`
      if (Option.isSome(ran)) yield* inBackground(ran.value)
      return Option.isSome(ran)
    })

  /** Set first by the host's close: nothing takes the lease again (rule 20). */
  let closed = false

  /** Become (or stay) the coordinator; must run under `lock`. */
  const ensureLeader: Effect.Effect<Leader | null> = Effect.gen(function* () {
    if (closed) {
      lastError = "host closed"
      return null
    }
    const now = yield* monotonicMillis
    if (leader !== null) {
      // rule 20: a leader answers only within its lease, by its own monotonic clock
      if (leader.lease.expiresAt > now) return leader
      yield* stepDown("lease expired before it could be renewed")
    }
    if (now < resignedUntil) return null
    const acquired = yield* Effect.result(leases.acquire(key, options.holder, ttl))
    if (Result.isFailure(acquired)) {
      const e = acquired.failure
      lastError = e._tag === "LeaseHeld" ? `lease held by ${e.holder}` : `${e._tag}: ${e.message}`
      heldUntil = e._tag === "LeaseHeld" ? e.expiresAt : undefined
      return null
    }
    heldUntil = undefined
    term = acquired.success
    const loaded = yield* Effect.result(takeOver(acquired.success))
    if (Result.isFailure(loaded)) {
      const e = loaded.failure
      term = null
      yield* leases.release(acquired.success)
      lastError = `${e._tag}: ${e.message}`
      return null
    }
    leader = loaded.success
    // renewed meanwhile by the renewal loop: the later grant counts
    if (term !== null) extend(term)
    lastError = null
    refusedConfig = null
    yield* rearm
    yield* reconcileLeader(true)
    return leader
  })

  /**
   * Carry out one shell step on the leader: lease check, commit (CAS), apply,
   * notices; returns its response with the fences to write once the lock is
   * released (none: nothing was due). Its grants are `unfenced` until
   * written. The caller re-aims the timer (`rearm`) once it is done
   * stepping. On StaleRevision renew the lease, reload and re-run
   * (`maxCommitAttempts`); a lost lease or CAS is `NotServing`. Must run
   * under `lock`.
   */
  const execute = <A>(
    compute: (shell: CoordinatorShell) => Step<A> | undefined,
    what: string,
  ): Effect.Effect<Option.Option<Served<A>>, NotServing> =>
    Effect.gen(function* () {
      for (let attempt = 1; ; attempt++) {
        const l = leader
        if (l === null) return yield* Effect.fail(new NotServing("not the coordinator"))
        const step = compute(l.shell)
        if (step === undefined) return Option.none()
        if (step.records.length === 0) l.shell.apply(step)
        else {
          // Still the lease holder? (The CAS below is the final guard; the renew loop extends it.)
          const held = yield* Effect.result(leases.check(l.lease))
          if (Result.isFailure(held))
            return yield* Effect.fail(new NotServing(`lease lost before ${what}`))
          // fenced by the lease term too: after a Store rewind to this
          // revision the CAS alone lets a paused ex-leader through
          // (docs/protocol.md rule 32); LeaseLost steps down below
          const committed = yield* Effect.result(
            store.commit(key, l.shell.revision, step.records, l.lease),
          )
          if (Result.isFailure(committed)) {
            const e = committed.failure
            if (e._tag !== "StaleRevision" || attempt >= maxAttempts)
              return yield* Effect.fail(new NotServing(`commit failed: ${e._tag}`))
            // CAS lost: still the lease holder? Then reload and re-run; else step down.
            const renewed = yield* Effect.result(leases.renew(l.lease, ttl))
            if (Result.isFailure(renewed))
              return yield* Effect.fail(new NotServing("lease lost after a stale commit"))
            const reloaded = yield* Effect.result(takeOver(renewed.success))
            if (Result.isFailure(reloaded))
              return yield* Effect.fail(new NotServing(`reload failed: ${reloaded.failure._tag}`))
            leader = reloaded.success
            continue
          }
          l.shell.apply(step, committed.success)
        }
        // a grant's fence is written before its member is told (rule 1 step
        // 6), outside the lock (rule 31): until then every answer withholds
        // it. A restored token (rule 30) grants nothing: best effort
        const grants = step.fences.filter((f) => f.restore !== true)
        for (const f of grants) withholdUntilWritten(f)
        yield* publish(step.notices)
        return Option.some({
          value: step.response,
          grants,
          restores: step.fences.filter((f) => f.restore === true),
        })
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
          assignmentEpoch: leader?.shell.state.assignmentEpoch ?? 0,
          assigned: [],
          pending: [],
          ...Coordinator.timing(config),
        })
      }
      const req = decoded.success
      const answer = (response: HeartbeatResponse): Served<HeartbeatResponse> => ({
        value: response,
        grants: [],
        restores: [],
      })
      return Effect.gen(function* () {
        // under the lock: the step, its commit and the answer's withholding
        const served = yield* lock.withPermit(
          Effect.gen(function* () {
            const l = yield* ensureLeader
            if (l === null)
              return answer(notCoordinator(req.memberId, lastError ?? "not the coordinator"))
            const now = yield* instant
            return yield* execute((shell) => shell.heartbeat(req, now), "a commit").pipe(
              Effect.tap(() => rearm),
              Effect.flatMap(
                Option.match({
                  onNone: () => Effect.succeed(answer(notCoordinator(req.memberId, "no answer"))),
                  onSome: (s) =>
                    Effect.map(
                      withhold(s.value, new Set(s.grants.map((g) => g.shard))),
                      (value): Served<HeartbeatResponse> => ({ ...s, value }),
                    ),
                }),
              ),
              Effect.catch((e: NotServing) =>
                Effect.as(stepDown(e.reason), answer(notCoordinator(req.memberId, e.reason))),
              ),
            )
          }),
        )
        if (served.grants.length === 0 && served.restores.length === 0) return served.value
        // outside the lock (rule 31): this answer waits for its own fences
        // only, and at most `fenceWait` (a hung node's write would hold it
        // for the command deadline, past the member's heartbeat timeout); a
        // grant not written by then is withheld (pending), retried by a
        // later answer if its write failed, and its owner noticed once it
        // is written. The writes go on in the background.
        const written = new Set<number>()
        const writes = yield* Effect.forkIn(
          Effect.all(
            [settle(served.grants, written), Effect.ignore(writeFences(served.restores))],
            {
              concurrency: "unbounded",
            },
          ),
          scope,
        )
        yield* Effect.timeoutOption(Fiber.join(writes), fenceWait)
        const unwritten = served.grants.filter((g) => !written.has(g.shard))
        if (unwritten.length === 0) return served.value
        for (const g of unwritten) {
          const entry = unfenced.get(g.shard)
          if (entry !== undefined && entry.token === g.token) entry.withheld = true
        }
        return withGrantsPending(
          served.value,
          unwritten.map((g) => g.shard),
        )
      })
    })

  // Lease renewal (and standby election) loop ----------------------------------
  /**
   * One renewal of the term's lease, outside `lock` (docs/protocol.md rule
   * 20, "Lease length against pauses and latency"): a commit, a takeover's
   * loads or the layout follow-up hold the lock for several round trips,
   * and a renewal that waited for them let the lease run out on this
   * host's clock (it then stepped down and took the lease again under a new
   * token, or lost it to a standby: a failover nobody asked for). Only a
   * lost lease takes the lock, to step down. Without a term it tries to
   * take one, if the lock is free.
   */
  const renewOnce = Effect.gen(function* () {
    const held = term
    if (held === null) {
      // never queue behind the lock: whoever holds it may be taking the lease
      // right now, and this loop must be free to renew it once it has
      yield* lock.withPermitsIfAvailable(1)(ensureLeader)
      return
    }
    const renewed = yield* Effect.result(leases.renew(held, ttl))
    if (Result.isFailure(renewed)) {
      // a takeover under way fails on its own (its renewal, its commit's CAS)
      yield* lock.withPermit(
        Effect.suspend(() =>
          leader !== null && leader.lease.token === held.token
            ? stepDown("lease lost")
            : Effect.void,
        ),
      )
      return
    }
    extend(renewed.success)
  })
  const renewEvery = Math.max(1, Math.floor(ttl / 3))
  /**
   * Renewals start `renewEvery` apart, counted from each one's start, not
   * from its end: the lease (valid for `ttl` from a renewal's send) then
   * holds while a renewal's round trip stays below ttl - renewEvery (two
   * thirds of the lease), instead of ttl - renewEvery - the previous one's
   * round trip.
   */
  const renewLoop = Effect.gen(function* () {
    let startedAt = yield* monotonicMillis
    for (;;) {
      const elapsed = (yield* monotonicMillis) - startedAt
      yield* Effect.sleep(Math.max(0, renewEvery - elapsed))
      startedAt = yield* monotonicMillis
      yield* renewOnce
    }
  })
  const renewFiber = yield* Effect.forkIn(renewLoop, scope)
  // the stream's layout, followed on a fiber of its own (never in a renewal's
  // way); a reshard must not wait long (sessionTimeoutMs / 3, 10 s by
  // default, was the renewal's period): keys pause until the leader follows
  // the new layout (docs/resharding.md, "Measured")
  const loops: Array<Fiber.Fiber<unknown, unknown>> = [renewFiber]
  const layoutPoll = Math.max(1, Math.floor(options.layoutPollMs ?? 1_000))
  if (Option.isSome(streamLayouts)) {
    const layouts = streamLayouts.value
    // the read outside the lock, the adoption under it
    const followOnce = Effect.gen(function* () {
      if (leader === null) return
      const stored = yield* Effect.result(readLayout(layouts))
      yield* lock.withPermit(adoptLayout(stored, false))
    })
    loops.push(
      yield* Effect.forkIn(
        Effect.forever(Effect.andThen(Effect.sleep(Math.min(layoutPoll, renewEvery)), followOnce)),
        scope,
      ),
    )
  }
  // Close: no acquisition from here on, the loops stopped, THEN the lease
  // released. The release is a round trip; a renewal due meanwhile found no
  // term and took the lease again, for a host that serves nobody until it
  // ran out (docs/protocol.md rule 20). A loop stopped inside an acquisition
  // leaves a term without a leader: that lease is released too.
  yield* Scope.addFinalizer(
    scope,
    Effect.gen(function* () {
      closed = true
      yield* Fiber.interruptAll(loops)
      if (leader !== null) return yield* stepDown("host closed")
      const held = term
      term = null
      if (held !== null) yield* leases.release(held)
    }),
  )

  const host: CoordinatorHost = {
    key,
    heartbeat,
    notices: Stream.fromPubSub(pubsub),
    isCoordinator: Effect.sync(() => leader !== null),
    state: Effect.sync(() => Option.fromNullishOr(leader?.shell.state)),
    monitor: Effect.sync(() => Option.map(Option.fromNullishOr(leader?.shell.state), monitor)),
    lastError: Effect.sync(() => Option.fromNullishOr(lastError ?? refusedConfig)),
    elect: lock.withPermit(Effect.map(ensureLeader, (l) => l !== null)),
    standbyUntil: Effect.sync(() => Option.fromUndefinedOr(heldUntil)),
    leaseTtlMs: ttl,
    leaseToken: Effect.sync(() => Option.fromNullishOr(leader?.lease.token)),
    resign: (reason) =>
      lock.withPermit(
        Effect.gen(function* () {
          resignedUntil = (yield* monotonicMillis) + ttl
          if (leader !== null) yield* stepDown(`resigned: ${reason}`)
        }),
      ),
  }
  return host
}) as (
  options: CoordinatorHostOptions,
) => Effect.Effect<
  CoordinatorHost,
  InvalidGroupConfig,
  Store | CoordinatorLease | OwnerFence | Scope.Scope
>

// ---------------------------------------------------------------------------
// Promise API for non-Effect users
// ---------------------------------------------------------------------------

export interface CoordinatorHostAsyncOptions {
  readonly config: unknown
  readonly holder: string
  readonly leaseTtlMs?: number
  /** Write owner tokens to storage (after the commit, before the response); default: none. */
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

/** An OwnerFence over a promise callback. */
const fenceLayer = (
  write: ((fences: ReadonlyArray<Coordinator.Fence>) => Promise<void>) | undefined,
): Layer.Layer<OwnerFence> =>
  write === undefined
    ? fenceNoop
    : Layer.succeed(OwnerFence, {
        // no storage to read: a rewind is found only where tokens can be read
        read: () => Effect.succeed([]),
        write: (key, fences) =>
          Effect.tryPromise({
            try: () => write(fences),
            catch: (cause) =>
              new FenceWriteFailed({
                stream: key.stream,
                group: key.group,
                message: String(cause),
                cause,
              }),
          }),
      })

export const makeCoordinatorHostAsync = async (
  options: CoordinatorHostAsyncOptions,
): Promise<CoordinatorHostAsync> => {
  const runtime = ManagedRuntime.make(
    Layer.merge(options.layer ?? Layer.merge(storeMemory, leaseMemory), fenceLayer(options.fence)),
  )
  const scope = await runtime.runPromise(Scope.make())
  const { onNotice } = options
  try {
    const host = await runtime.runPromise(
      Scope.provide(
        makeCoordinatorHost({
          config: options.config,
          holder: options.holder,
          ...(options.leaseTtlMs !== undefined ? { leaseTtlMs: options.leaseTtlMs } : {}),
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
