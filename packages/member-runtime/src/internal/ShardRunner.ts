/**
 * One owned shard of one logical member: its state in the polling adapter
 * and its turn, i.e. one batch (docs/runtime.md, "Polling adapter"):
 *
 * 1. first turn only: wait (bounded) for a previous loop of the same shard
 *    in this member to end, then run `onAssigned`;
 * 2. apply queued seeks (fenced `setGroupPosition`);
 * 3. read: the previous owner's pending entries first (takeover:
 *    `claimPending` until its cursor is done), then this consumer's own
 *    pending entries after a failure (retry), then new entries;
 * 4. handle in stream order and acknowledge by policy; a failure acks what
 *    succeeded before it, then nacks the message (retry after a backoff) or,
 *    at `maxDeliveries`, dead-letters it atomically with its ack and goes on.
 *
 * A fully handled batch is acknowledged by the shard's next read, in the
 * same fenced call (`ReadOptions.ack`): one round trip per batch instead of
 * two. What a turn handled stays in `unacked` until then; anything else the
 * shard does next (a claim, a seek, a pause, a revoke) acknowledges it first
 * (`flushAcks`), so a shard never gives up entries it handled without acking them.
 * A batch whose handlers used their transactions commits instead, and its
 * commit carries the shard's next read when nothing else is due first
 * (docs/exactly-once.md, "The commit rides the read"): the next turn handles
 * what it read (`prefetched`) without reading.
 *
 * Every storage call first checks that the runner is alive (not stopped,
 * fenced or abandoned) and that the member's lease is valid; the storage's
 * owner token is the final guard (`StaleOwner`). Data of the shard that
 * vanished (its owner token, its stream, the group on it) is a `dataLost`
 * event, never read as empty (docs/protocol.md rule 26): a shard without its
 * token waits for a coordinator to write one again; a vanished group (or
 * stream) is created again at the stream's start, by a fenced seek.
 */
import type { DataLost, OwnerTokenMissing, ShardProgress, ShardStreams } from "@shardline/core"

type DataPlaneFailure = ShardStreams.FencedError

import { Deferred, Effect, type Fiber, Result } from "effect"
import type { ConsumerSettings } from "../Config.js"
import { isNonRetryable, type NonRetryableError, SeekFailed } from "../Errors.js"
import type { DeadLetterCause, RuntimeEvent } from "../Events.js"
import { describeError } from "../Logging.js"
import { type Batch, type BatchContext, KEY_FIELD, type Message, toMessage } from "../Message.js"
import type { CircuitBreaker } from "./CircuitBreaker.js"
import {
  awaitUser,
  type CallAborted,
  callUserEffect,
  isPromiseLike,
  type UserCodeFailed,
} from "./invoke.js"
import { PerBatchContext, PerMessageContext } from "./MessageContexts.js"
import type { RateLimiter } from "./RateLimiter.js"
import type { InternalHandler, InternalHooks } from "./spec.js"
import {
  type CommitResult,
  commit,
  commitGroup,
  type GroupPart,
  type GroupResult,
  relay,
  type TransactionEnv,
} from "./TransactionCommit.js"
import { type HandleEnv, TransactionHandle } from "./TransactionHandle.js"
import type { HandleOutcome, Traced, TurnTelemetry } from "./telemetry/Telemetry.js"

/** One user call in flight: its signal's controller and when it times out. */
export interface CallSlot {
  readonly controller: AbortController
  readonly deadline: number
  readonly timeoutMessage: string
}

/** Abort the calls of `r` whose deadline passed (the poller's watchdog calls it). */
export const abortLateCalls = (r: Runner, now: number): void => {
  for (const call of r.calls)
    if (now >= call.deadline && !call.controller.signal.aborted)
      call.controller.abort(new Error(call.timeoutMessage))
}

export type RunnerState =
  | "ready"
  | "running"
  | "idle"
  | "backoff"
  | "paused"
  | "exhausted"
  | "stopped"

export interface PendingSeek {
  readonly position: string
  readonly done: Deferred.Deferred<void, SeekFailed>
}

export interface Runner {
  readonly shard: number
  readonly token: number
  state: RunnerState
  /** In the ready queue (at most once). */
  queued: boolean
  /** May read and ack; false once stopped, fenced or abandoned. */
  alive: boolean
  /** StopShard or StopAllShards: no new turn. */
  stopping: boolean
  /** The takeover scan of pending entries (`claimPending`) is complete. */
  claimDone: boolean
  claimCursor: string
  /** Re-read this consumer's own pending entries before new ones (after a failure). */
  retrying: boolean
  /** onAssigned ran and the predecessor ended. */
  started: boolean
  /** Idle wait or backoff sleep; `wakeGen` invalidates a superseded one. */
  waiter: Fiber.Fiber<void> | undefined
  wakeGen: number
  /** Completed when the running turn ends. */
  turnDone: Deferred.Deferred<void> | undefined
  /** Completed when the runner is abandoned: in-flight handlers stop being awaited. */
  readonly abandoned: Deferred.Deferred<void>
  /** User calls in flight with their deadlines (the poller's watchdog aborts late ones). */
  readonly calls: Set<CallSlot>
  /** The signal handler calls of this turn share until one aborts (then a new one). */
  controller: AbortController | undefined
  readonly seeks: Array<PendingSeek>
  /** A previous loop of this shard in this member whose user code may still run. */
  readonly predecessor: Runner | undefined
  /** User calls (handlers, hooks) not settled yet, including abandoned ones still running. */
  userCalls: number
  readonly userIdle: Array<Deferred.Deferred<void>>
  /** Turns taken (fairness tests and benchmarks count them). */
  turns: number
  /** Handled, not yet acknowledged: the next read acknowledges them (or `flushAcks`). */
  unacked: Array<string>
  /**
   * A commit acknowledged entries since the last read: the next read follows
   * that ack (`ReadOptions.afterAck`) and so takes the gate a read carrying
   * an ack takes (docs/exactly-once.md, "Cost").
   */
  committed: boolean
  /**
   * The next batch, read by the commit that ended the last one
   * (docs/exactly-once.md, "The commit rides the read"): the next turn
   * handles it instead of reading. Its entries are pending with this
   * consumer: dropped with the runner, they are claimed by the next owner.
   */
  prefetched: ReadonlyArray<ShardStreams.StreamMessage> | undefined
  /**
   * The group's last-delivered id on the shard as this grant knows it: the
   * last entry its own reads of new entries returned (within one grant only
   * this loop moves it: the fence refuses any other reader), or what the
   * idle wait looked up; undefined when unknown (a new grant, after a seek).
   * The idle wait blocks from it without looking it up again.
   */
  lastDelivered: string | undefined
  /** The idle wait ended because entries followed `lastDelivered` (its next read should find them). */
  wokenByEntries: boolean
  /**
   * The group's outbox on this shard may hold entries to relay (Redis
   * Cluster; docs/exactly-once.md, "The outbox"): true at the start of a
   * grant (a predecessor's commits may be waiting) and after a commit with
   * sends, false once a relay found it empty.
   */
  outboxDirty: boolean
  /** Relays of the outbox that failed in a row: the backoff of the next (reset by one that empties it). */
  relayFailures: number
  /** `outboxStranded` was emitted for this grant (said once, not at every idle wait). */
  strandedSaid: boolean
  /**
   * What vanished and was said (`dataLost`), until the shard reads again:
   * a loss is said once, not at every retry (docs/protocol.md rule 26).
   */
  lost: "token" | "stream" | "group" | undefined
  /** The group (or the stream) vanished: create it again at the stream's start before the next read. */
  recreate: boolean
  readonly progress: {
    lastId: string | undefined
    acked: number
    inFlight: number
    lag: number | undefined
  }
}

export const makeRunner = (
  shard: number,
  token: number,
  predecessor: Runner | undefined,
): Runner => ({
  shard,
  token,
  state: "stopped",
  queued: false,
  alive: true,
  stopping: false,
  claimDone: false,
  claimCursor: "0-0",
  retrying: false,
  started: false,
  waiter: undefined,
  wakeGen: 0,
  turnDone: undefined,
  abandoned: Deferred.makeUnsafe<void>(),
  calls: new Set(),
  controller: undefined,
  seeks: [],
  predecessor,
  userCalls: 0,
  userIdle: [],
  turns: 0,
  unacked: [],
  committed: false,
  prefetched: undefined,
  lastDelivered: undefined,
  wokenByEntries: false,
  outboxDirty: true,
  relayFailures: 0,
  strandedSaid: false,
  lost: undefined,
  recreate: false,
  progress: { lastId: undefined, acked: 0, inFlight: 0, lag: undefined },
})

/** Stop awaiting the runner's handlers: abort their signals; no storage call follows. */
export const abandon = (r: Runner, reason: string): void => {
  r.alive = false
  r.stopping = true
  const error = new Error(reason)
  r.controller?.abort(error)
  for (const call of r.calls) call.controller.abort(error)
  r.calls.clear()
  Deferred.doneUnsafe(r.abandoned, Effect.void)
  for (const seek of r.seeks.splice(0))
    Deferred.doneUnsafe(
      seek.done,
      Effect.fail(
        new SeekFailed({
          stream: "",
          group: "",
          shard: r.shard,
          message: `the shard was released before the seek ran (${reason})`,
        }),
      ),
    )
}

/** Count a user call in; the returned function counts it out (once). */
const enterUser = (r: Runner): (() => void) => {
  r.userCalls++
  let done = false
  return () => {
    if (done) return
    done = true
    r.userCalls--
    if (r.userCalls === 0) for (const d of r.userIdle.splice(0)) Deferred.doneUnsafe(d, Effect.void)
  }
}

/** Completes once the runner's turn ended and none of its user code runs any more. */
export const awaitQuiet = (r: Runner): Effect.Effect<void> =>
  Effect.suspend(() => {
    const turn = r.turnDone === undefined ? Effect.void : Deferred.await(r.turnDone)
    if (r.userCalls === 0) return turn
    const idle = Deferred.makeUnsafe<void>()
    r.userIdle.push(idle)
    return Effect.andThen(turn, Deferred.await(idle))
  })

export const progressOf = (r: Runner): ShardProgress => ({
  shard: r.shard,
  ...(r.progress.lastId !== undefined ? { lastId: r.progress.lastId } : {}),
  acked: r.progress.acked,
  pending: r.progress.inFlight,
  ...(r.progress.lag !== undefined ? { lag: r.progress.lag } : {}),
})

// ---------------------------------------------------------------------------
// the turn

/** What a turn ended with; the poller schedules the runner's next turn from it. */
export type Outcome =
  | { readonly _tag: "More" } // read something: back to the ready queue's tail
  | { readonly _tag: "Empty" } // nothing to read: wait for entries
  | { readonly _tag: "Paused" }
  | { readonly _tag: "Wait"; readonly ms: number } // retry backoff, data-plane error, no lease
  | { readonly _tag: "Stale" } // the storage refused the token: the shard moved
  | { readonly _tag: "Abandoned" }
  /** Sealed by a reshard, everything delivered and acked: report it, read no more. */
  | { readonly _tag: "Exhausted" }

const More: Outcome = { _tag: "More" }
const Empty: Outcome = { _tag: "Empty" }
const Stale: Outcome = { _tag: "Stale" }
const Abandoned: Outcome = { _tag: "Abandoned" }
const Paused: Outcome = { _tag: "Paused" }
const Exhausted: Outcome = { _tag: "Exhausted" }
const wait = (ms: number): Outcome => ({ _tag: "Wait", ms })

export interface TurnEnv {
  readonly streams: ShardStreams.ShardStreamsShape
  readonly settings: ConsumerSettings
  readonly handler: InternalHandler
  readonly hooks: InternalHooks
  readonly memberId: string
  readonly consumerName: string
  /** Monotonic ms: handler deadlines and durations (docs/protocol.md rule 21). */
  readonly now: () => number
  /** Wall-clock ms: the `at` of events. */
  readonly wallNow: () => number
  /** The member's lease is valid now (MemberMachine.leaseValid). */
  readonly mayAct: () => boolean
  readonly isPaused: (shard: number) => boolean
  /** Drain budget of the group (ms), also bounds hooks and waiting for a predecessor. */
  readonly drainBudgetMs: () => number
  readonly emit: (event: RuntimeEvent) => void
  /** Count it in the member's metrics (synchronous: it runs on the per-batch path). */
  readonly record: (what: TurnRecord) => void
  /**
   * Storage refused the runner's token because the shard's owner token is
   * missing (`missing` true), or its calls pass again (false): the member
   * asks the coordinator to write the token again (docs/protocol.md rule 30).
   */
  readonly onTokenMissing?: (shard: number, token: number, missing: boolean) => void
  /** The circuit breaker of the shard's scope, when one is configured (opt-in). */
  readonly breakerFor?: (shard: number) => CircuitBreaker | undefined
  /** The member's rate limit, when one is configured (opt-in). */
  readonly limiter?: RateLimiter
  /** A breaker opened (by a failure on `shard`) or closed: events, and wake what it held. */
  readonly onBreaker?: (
    breaker: CircuitBreaker,
    change: "opened" | "closed",
    shard: number,
    error?: unknown,
  ) => void
  /** Spans and OpenTelemetry metrics of handler calls; undefined when off (docs/observability.md). */
  readonly telemetry?: TurnTelemetry | undefined
  /** Handlers' transactions (docs/exactly-once.md); undefined: every transaction is refused. */
  readonly transactions?: TransactionEnv | undefined
  /**
   * Run a wait that involves no user code (the turn's read, the wait for a
   * predecessor loop) without the turn's handler slot, and take one again
   * after it (the poller's lanes, docs/runtime.md "The polling adapter");
   * undefined: the turn holds no slot.
   */
  readonly offSlot?: <A, E>(wait: Effect.Effect<A, E>) => Effect.Effect<A, E>
}

/** Counters a turn reports (metrics). */
export type TurnRecord =
  | { readonly _tag: "Handled"; readonly count: number }
  | { readonly _tag: "Acked"; readonly count: number }
  | { readonly _tag: "HandlerError" }
  | { readonly _tag: "DeadLettered" }
  /** Dead-lettered without a handler call: it could not be decoded, or its schema refused it. */
  | { readonly _tag: "Rejected"; readonly cause: "undecodable" | "invalid" }
  | { readonly _tag: "Batch"; readonly durationMs: number }
  | { readonly _tag: "StaleOwner" }
  | { readonly _tag: "DataLost"; readonly what: "token" | "stream" | "group" }

type Call = { readonly ok: true } | { readonly ok: false; readonly error: unknown } | "abandoned"

/** The controller the turn's user calls share; a new one once it aborted. */
const turnController = (r: Runner): AbortController => {
  if (r.controller === undefined || r.controller.signal.aborted)
    r.controller = new AbortController()
  return r.controller
}

/**
 * A handler or hook call: it gets the turn's signal, times out at `ms` (the
 * poller's watchdog aborts the signal, with no timer per call) and ends at
 * once when the runner is abandoned (the signal aborts too).
 */
const bounded = (
  env: TurnEnv,
  r: Runner,
  ms: number,
  body: (
    signal: AbortSignal,
    settled: () => void,
  ) => Effect.Effect<void, UserCodeFailed | CallAborted>,
  timeoutMessage: string,
): Effect.Effect<Call> =>
  Effect.suspend(() => {
    if (!r.alive) return Effect.succeed<Call>("abandoned")
    const controller = turnController(r)
    const slot: CallSlot = { controller, deadline: env.now() + ms, timeoutMessage }
    r.calls.add(slot)
    return body(controller.signal, enterUser(r)).pipe(
      Effect.match({
        onSuccess: (): Call => ({ ok: true }),
        onFailure: (e): Call =>
          e._tag === "UserCodeFailed"
            ? { ok: false, error: e.error }
            : r.alive
              ? { ok: false, error: e.reason }
              : "abandoned",
      }),
      Effect.ensuring(Effect.sync(() => r.calls.delete(slot))),
    )
  })

export const backoffMs = (settings: ConsumerSettings, deliveryCount: number): number =>
  Math.min(settings.retryMaxMs, settings.retryInitialMs * 2 ** Math.min(deliveryCount - 1, 30))

/** The wait before the next relay of an outbox whose relay failed: doubling, at most an idle wait. */
const relayBackoff = (settings: ConsumerSettings, r: Runner): number =>
  Math.min(backoffMs(settings, Math.max(1, r.relayFailures)), settings.idleWaitMs)

const describe = describeError

/** Wait `ms` without reading: what the last turn handled is acknowledged first. */
/** Tells the runtime's events that a data-plane call of `shard` failed (it is retried). */
const emitDataPlaneError = (env: TurnEnv, shard: number, error: unknown): void =>
  env.emit({
    stream: env.settings.stream,
    group: env.settings.group,
    memberId: env.memberId,
    at: env.wallNow(),
    type: "dataPlaneError",
    shard,
    error,
  })

/**
 * A fenced call's refusal (`StaleOwner`: the shard moved) or vanished data
 * (`OwnerTokenMissing`, `DataLost`: docs/protocol.md rule 26), as the turn's
 * outcome; undefined for any other failure (the caller's to handle).
 */
const fenceOutcome = (env: TurnEnv, r: Runner, error: unknown): Outcome | undefined => {
  const tag = typeof error === "object" && error !== null ? (error as { _tag?: unknown })._tag : ""
  if (tag === "StaleOwner") {
    env.record({ _tag: "StaleOwner" })
    return Stale
  }
  if (tag === "OwnerTokenMissing" || tag === "DataLost")
    return dataLost(env, r, error as OwnerTokenMissing | DataLost)
  return undefined
}

/**
 * Something Shardline stored for the group on the shard vanished (deleted,
 * evicted): said once (event and metric), never read as empty. Without its
 * owner token the shard waits (every token is refused) and tries again
 * every heartbeat interval (at most an idle wait), until a coordinator
 * writes one again: its member reports it and the leader writes the same
 * token (docs/protocol.md rule 30), or a grant, a failover. A vanished group or stream: the next turn creates the group
 * again at the stream's start (a fenced seek), so what the stream still
 * holds is delivered again; its pending entries went with it.
 */
const dataLost = (env: TurnEnv, r: Runner, error: OwnerTokenMissing | DataLost): Outcome => {
  const what = error._tag === "OwnerTokenMissing" ? "token" : error.what
  if (r.lost !== what) {
    r.lost = what
    // rule 30: the coordinator writes the same token again once told
    if (what === "token") env.onTokenMissing?.(r.shard, r.token, true)
    env.record({ _tag: "DataLost", what })
    env.emit({
      stream: env.settings.stream,
      group: env.settings.group,
      memberId: env.memberId,
      at: env.wallNow(),
      type: "dataLost",
      shard: r.shard,
      what,
      error,
    })
  }
  if (!r.alive) return Abandoned
  if (what === "token") {
    // the group's entries are as they were: read again, own pending first,
    // once it is back. The member's next heartbeat (sent now) gets it written
    // again (rule 30), so look again a heartbeat interval on, not an idle wait.
    r.retrying = true
    return wait(Math.min(env.settings.idleWaitMs, env.settings.heartbeatIntervalMs))
  }
  // the group's pending entries and position are gone: nothing to claim or
  // acknowledge; the group is created again, then read from the start
  r.recreate = true
  r.unacked = []
  r.claimDone = true
  r.retrying = false
  r.lastDelivered = undefined
  return wait(env.settings.retryInitialMs)
}

const holdOff = (env: TurnEnv, r: Runner, ms: number): Effect.Effect<Outcome> =>
  Effect.map(flushAcks(env, r), (flushed) => (typeof flushed === "number" ? wait(ms) : flushed))

/** One turn of runner `r`. Never fails: every failure is an `Outcome`. */
export const turn = (env: TurnEnv, r: Runner): Effect.Effect<Outcome> => {
  if (env.breakerFor === undefined) return turnOf(env, r, undefined)
  // a half-open breaker's trial ends with its turn, whatever ended it
  const trial: { id: number } = { id: 0 }
  return Effect.ensuring(
    turnOf(env, r, trial),
    Effect.sync(() => {
      if (trial.id !== 0) env.breakerFor?.(r.shard)?.endTrial(trial.id)
    }),
  )
}

/**
 * One turn's body: a generator function made once, not a closure per turn.
 * `Effect.gen(function* () {...})` inside a function called per turn makes
 * a new generator closure each call, and V8 a new map and prototype for it
 * (docs/runtime.md, "Throughput: Node's young generation"); so this
 * module's per-turn functions are `Effect.fnUntraced` generators.
 */
const turnBody = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  trial: { id: number } | undefined,
) {
  const { settings, streams } = env
  const address = {
    stream: settings.stream,
    shard: r.shard,
    group: settings.group,
    token: r.token,
  }
  const base = () => ({
    stream: settings.stream,
    group: settings.group,
    memberId: env.memberId,
    at: env.wallNow(),
  })
  const canAct = () => r.alive && env.mayAct()
  const seekFailed = (seek: PendingSeek, message: string, cause?: unknown) =>
    Deferred.doneUnsafe(
      seek.done,
      Effect.fail(
        new SeekFailed({
          stream: settings.stream,
          group: settings.group,
          shard: r.shard,
          message,
          ...(cause === undefined ? {} : { cause }),
        }),
      ),
    )

  if (!r.started) {
    const budget = env.drainBudgetMs()
    // one loop per shard: a previous loop's handlers (abandoned on a fence,
    // but a promise cannot be cancelled) finish first, within the drain budget
    // (without a handler slot: the predecessor's turn may wait for one to finish)
    if (r.predecessor !== undefined) {
      const quiet = Effect.raceFirst(
        Effect.timeoutOption(awaitQuiet(r.predecessor), budget),
        Deferred.await(r.abandoned),
      )
      yield* env.offSlot === undefined ? quiet : env.offSlot(quiet)
    }
    const hook = env.hooks.onAssigned
    if (hook !== undefined && r.alive)
      yield* bounded(
        env,
        r,
        budget,
        (_signal, settled) =>
          Effect.ensuring(
            hook({
              stream: settings.stream,
              group: settings.group,
              memberId: env.memberId,
              shard: r.shard,
            }),
            Effect.sync(settled),
          ),
        "onAssigned timed out",
      )
    r.started = true
  }
  if (!r.alive || r.stopping) return Abandoned

  // the next batch, read by the commit that ended the last one
  // (docs/exactly-once.md, "The commit rides the read"): handled first, as
  // this turn's read (a seek waits for it as for a batch being handled; a
  // pause keeps it)
  const prefetched = r.prefetched
  if (prefetched !== undefined) {
    if (env.isPaused(r.shard)) {
      const flushed = canAct() ? yield* flushAcks(env, r) : 0
      return typeof flushed === "number" ? Paused : flushed
    }
    if (!canAct()) return r.alive ? wait(50) : Abandoned
    r.prefetched = undefined
  }
  let ackFirst: ReadonlyArray<string> = []
  let fromPending = false
  let got: Result.Result<ReadonlyArray<ShardStreams.StreamMessage>, DataPlaneFailure>
  if (prefetched !== undefined) got = Result.succeed(prefetched)
  else {
    // seeks, between batches only (never while a batch is handled), after the
    // handled entries are acknowledged: a seek never re-delivers what was handled
    if (r.seeks.length > 0 && r.unacked.length > 0 && canAct()) {
      const flushed = yield* flushAcks(env, r)
      if (typeof flushed !== "number") return flushed
    }
    while (r.seeks.length > 0) {
      const seek = r.seeks.shift()!
      if (!canAct()) {
        r.seeks.unshift(seek)
        return r.alive ? wait(50) : Abandoned
      }
      const setPosition = streams.setGroupPosition
      if (setPosition === undefined) {
        seekFailed(
          seek,
          "these ports cannot move a group's position (no ShardStreams.setGroupPosition)",
        )
        continue
      }
      // the group's position moves (or may have, if the reply is lost): the idle wait looks it up again
      r.lastDelivered = undefined
      const moved = yield* Effect.result(setPosition({ ...address, position: seek.position }))
      if (moved._tag === "Failure") {
        const error = moved.failure
        seekFailed(seek, describe(error), error)
        const refused = fenceOutcome(env, r, error)
        if (refused !== undefined) return refused
        continue
      }
      env.emit({ ...base(), type: "seeked", shard: r.shard, position: seek.position })
      Deferred.doneUnsafe(seek.done, Effect.void)
    }
    if (env.isPaused(r.shard)) {
      // a paused shard holds no handled entry unacknowledged (when it may act)
      const flushed = canAct() ? yield* flushAcks(env, r) : 0
      return typeof flushed === "number" ? Paused : flushed
    }
    if (!canAct()) return r.alive ? wait(50) : Abandoned

    // the group (or the shard's stream) vanished (docs/protocol.md rule 26):
    // create it again at the stream's start, fenced, before reading
    if (r.recreate) {
      const setPosition = streams.setGroupPosition
      // these ports cannot: the shard stays as it is (its loss was said)
      if (setPosition === undefined) return wait(settings.idleWaitMs)
      const made = yield* Effect.result(setPosition({ ...address, position: "start" }))
      if (made._tag === "Failure") {
        const refused = fenceOutcome(env, r, made.failure)
        if (refused !== undefined) return refused
        emitDataPlaneError(env, r.shard, made.failure)
        return wait(settings.retryInitialMs)
      }
      r.recreate = false
    }

    // opt-in limits (docs/runtime.md, "Circuit breaker and rate limit"): an
    // open breaker reads nothing, a half-open one reads one message (its
    // trial); the rate limit caps what this turn reads
    let count = settings.batchSize
    const breaker = env.breakerFor?.(r.shard)
    if (breaker !== undefined && trial !== undefined) {
      const admission = breaker.admit(env.now())
      if (admission._tag === "Wait") return yield* holdOff(env, r, admission.ms)
      if (admission._tag === "Trial") {
        trial.id = admission.id
        count = 1
      }
    }
    const limiter = env.limiter
    let reserved = 0
    if (limiter !== undefined) {
      reserved = limiter.reserve(env.now(), count)
      if (reserved === 0) return yield* holdOff(env, r, limiter.waitMs(env.now()))
      count = reserved
    }

    // relay the group's outbox on the shard first (Redis Cluster): what
    // earlier commits sent lands before this turn's commits send more
    if (r.outboxDirty && env.transactions?.port?.outbox !== undefined) {
      const relayed = yield* Effect.result(relay(env.transactions, address))
      if (relayed._tag === "Success") {
        r.outboxDirty = !relayed.success
        r.relayFailures = 0
      } else {
        // left in the outbox: the next turn relays it (reads go on meanwhile)
        r.relayFailures++
        emitDataPlaneError(env, r.shard, relayed.failure)
      }
    }

    // read: takeover first, then own pending (retry), then new entries; a
    // read acknowledges what the previous turn handled (the claim does not)
    if (!r.claimDone) {
      const flushed = yield* flushAcks(env, r)
      if (typeof flushed !== "number") return flushed
    }
    ackFirst = r.unacked
    r.unacked = []
    // object literals of one shape, no spread on the read of new entries: this
    // runs once per batch (spreads cost more than the rest of the turn)
    const readOptions: ShardStreams.ReadOptions = {
      stream: settings.stream,
      shard: r.shard,
      group: settings.group,
      token: r.token,
      consumer: env.consumerName,
      count,
      ack: ackFirst.length > 0 ? { ids: ackFirst, mode: settings.ack } : undefined,
      afterAck: r.committed,
      keyField: KEY_FIELD,
    }
    r.committed = false
    const read: Effect.Effect<
      ReadonlyArray<ShardStreams.StreamMessage>,
      DataPlaneFailure
    > = !r.claimDone
      ? Effect.map(
          streams.claimPending({
            ...address,
            consumer: env.consumerName,
            minIdleMs: 0,
            count,
            start: r.claimCursor,
          }),
          (claimed) => {
            r.claimCursor = claimed.next
            if (claimed.next === "0-0") r.claimDone = true
            fromPending = true
            return claimed.messages
          },
        )
      : r.retrying
        ? Effect.map(streams.read({ ...readOptions, from: "pending" }), (entries) => {
            fromPending = true
            if (entries.length === 0) r.retrying = false
            return entries
          })
        : streams.read(readOptions)
    // the read waits on the storage without a handler slot: other turns'
    // reads and handlers go on meanwhile (and their reads leave together)
    got = yield* Effect.result(env.offSlot === undefined ? read : env.offSlot(read))
    if (limiter !== undefined) {
      const used = got._tag === "Success" ? got.success.length : 0
      if (reserved > used) limiter.release(reserved - used)
    }
  }
  if (got._tag === "Failure") {
    const refused = fenceOutcome(env, r, got.failure)
    if (refused !== undefined) return refused
    emitDataPlaneError(env, r.shard, got.failure)
    // the read may have run and its reply been lost: whatever it delivered,
    // and the batch its ack carried (not known to be acknowledged), is
    // pending with this consumer; the retry read handles it again. Without
    // this, a lost reply of a read that carried no ack stranded its batch
    // in the pending entries until the shard changed owner.
    r.retrying = true
    return wait(settings.retryInitialMs)
  }
  // the shard reads: a later loss is said again
  if (r.lost === "token") env.onTokenMissing?.(r.shard, r.token, false)
  r.lost = undefined
  const ackedFirst = ackFirst.length
  if (ackedFirst > 0) ackedRecord(env, r, ackFirst)
  const entries = got.success
  // a read of new entries (XREADGROUP >) moved the group's last-delivered id to its last entry
  if (!fromPending && entries.length > 0) {
    r.lastDelivered = entries[entries.length - 1]!.id
    r.wokenByEntries = false
  }
  if (entries.length === 0) {
    if (fromPending) return More
    const outbox = env.transactions?.port?.outbox
    // the relay failed: try again after a backoff, not at the next append
    // (a quiet shard would keep its sends waiting), and never report the
    // shard drained meanwhile (below)
    if (outbox !== undefined && r.outboxDirty) return wait(relayBackoff(settings, r))
    // nothing new: is the shard sealed by a reshard and drained for this
    // group? Then the member reports it (docs/resharding.md) and reads no more.
    const drain = yield* Effect.result(
      streams.drainState({ stream: settings.stream, shard: r.shard, group: settings.group }),
    )
    if (drain._tag !== "Success") return Empty
    // drained but for its outbox (the storage's `relaying`): the check below relays it
    const state = drain.success
    const drainedButRelay =
      state.sealed && state.undelivered === 0 && state.pending === 0 && state.relaying === true
    // a runtime whose storage has no outbox (one node, memory) cannot relay
    // it: not drained, as inspect shows; the operator is told once
    if (drainedButRelay && outbox === undefined && !r.strandedSaid) {
      r.strandedSaid = true
      env.emit({
        stream: settings.stream,
        group: settings.group,
        memberId: env.memberId,
        at: env.wallNow(),
        type: "outboxStranded",
        shard: r.shard,
      })
    }
    if (!state.drained && !(drainedButRelay && outbox !== undefined)) return Empty
    // ... and its outbox relayed (docs/exactly-once.md, "Resharding and the
    // outbox"): a drained shard is retired and never relayed again, so one
    // whose outbox holds a send is not drained yet. Asked of the storage,
    // not only of this loop's last relay.
    if (outbox !== undefined) {
      const waiting = yield* Effect.result(outbox.read(address, 1))
      if (waiting._tag === "Failure" || waiting.success.length > 0) {
        r.outboxDirty = true
        return wait(settings.retryInitialMs)
      }
    }
    return Exhausted
  }
  if (!r.alive) return Abandoned
  if (!env.mayAct()) {
    // the lease lapsed while the read was in flight (a paused process, a
    // slow answer): handle nothing; the entries stay in this consumer's
    // pending list, read again once the lease is valid, or claimed by the next owner
    r.retrying = true
    return wait(50)
  }

  const delivered = entries.map((e) => toMessage(address, e))
  // replays for other groups acknowledged unseen, undecodable or invalid
  // messages dead-lettered: what is left goes to the handler
  const screened = yield* screen(env, r, address, delivered)
  if (!Array.isArray(screened)) return screened as Outcome
  const messages = screened as ReadonlyArray<Message>
  if (messages.length === 0) return More
  const started = env.now()
  r.progress.inFlight = messages.length
  env.emit({
    stream: settings.stream,
    group: settings.group,
    memberId: env.memberId,
    at: started,
    type: "batchStart",
    shard: r.shard,
    count: messages.length,
    lag: r.progress.lag,
  })
  const result =
    env.handler.kind === "message"
      ? yield* handleEach(env, r, address, messages, env.handler.run, env.handler.direct)
      : yield* handleBatch(env, r, address, messages, env.handler)
  r.progress.inFlight = 0
  // paused meanwhile: no read follows soon to carry the ack, so ack now
  let outcome = result.outcome
  let ackedNow = 0
  if (outcome._tag === "More" && env.isPaused(r.shard) && canAct()) {
    const flushed = yield* flushAcks(env, r)
    if (typeof flushed === "number") ackedNow = flushed
    else outcome = flushed
  }
  const durationMs = env.now() - started
  env.record({ _tag: "Batch", durationMs })
  env.emit({
    stream: settings.stream,
    group: settings.group,
    memberId: env.memberId,
    at: started + durationMs,
    type: "batchEnd",
    shard: r.shard,
    count: messages.length,
    acked: ackedFirst + result.acked + ackedNow,
    failed: result.failed,
    durationMs,
  })
  return outcome
})

const turnOf = (
  env: TurnEnv,
  r: Runner,
  trial: { id: number } | undefined,
): Effect.Effect<Outcome> =>
  turnBody(env, r, trial).pipe(
    // A defect mid-batch (a bug, never a handler's failure): what was read stays
    // pending, so read this consumer's pending entries again after a backoff.
    Effect.catchCause((cause) =>
      Effect.sync((): Outcome => {
        r.retrying = true
        r.progress.inFlight = 0
        return r.alive ? wait(env.settings.retryInitialMs) : Abandoned
      }).pipe(Effect.tap(() => Effect.sync(() => emitDataPlaneError(env, r.shard, cause)))),
    ),
  )

interface Handled {
  readonly outcome: Outcome
  readonly acked: number
  readonly failed: number
}

type Address = ShardStreams.FencedAddress

/** Acknowledge `ids` by policy; Stale / Abandoned when it may not or was refused. */
const ackIds = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  address: Address,
  ids: ReadonlyArray<string>,
) {
  if (ids.length === 0) return 0
  if (!r.alive || !env.mayAct()) return Abandoned
  const acked = yield* Effect.result(env.streams.ack({ ...address, ids, mode: env.settings.ack }))
  if (acked._tag === "Failure") {
    const refused = fenceOutcome(env, r, acked.failure)
    if (refused !== undefined) return refused
    emitDataPlaneError(env, r.shard, acked.failure)
    // not acknowledged: still pending, handled again on the retry read
    r.retrying = true
    return wait(env.settings.retryInitialMs)
  }
  ackedRecord(env, r, ids)
  return ids.length
})

/** Progress and metrics of acknowledged `ids` (in stream order). */
const ackedRecord = (env: TurnEnv, r: Runner, ids: ReadonlyArray<string>): void => {
  r.progress.acked += ids.length
  r.progress.lastId = ids[ids.length - 1]
  env.record({ _tag: "Acked", count: ids.length })
}

/**
 * Acknowledge now what the last turn handled (`unacked`), when the shard's
 * next step is not a read that would carry it: a claim, a seek, a pause, a
 * revoke (the poller's drain). A number: how many were acknowledged.
 */
export const flushAcks = (env: TurnEnv, r: Runner): Effect.Effect<Outcome | number> =>
  Effect.suspend(() => {
    if (r.unacked.length === 0) return Effect.succeed(0)
    const ids = r.unacked
    r.unacked = []
    return ackIds(
      env,
      r,
      { stream: env.settings.stream, shard: r.shard, group: env.settings.group, token: r.token },
      ids,
    )
  })

/**
 * A failed message: dead-letter it at `maxDeliveries` (then go on), else
 * nack it and retry this shard from it after a backoff.
 */
const fail = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  address: Address,
  m: Message,
  error: unknown,
) {
  env.record({ _tag: "HandlerError" })
  env.emit({
    stream: address.stream,
    group: address.group,
    memberId: env.memberId,
    at: env.wallNow(),
    type: "handlerError",
    shard: r.shard,
    messageId: m.id,
    deliveryCount: m.deliveryCount,
    error,
  })
  if (!r.alive || !env.mayAct()) return Abandoned
  // not worth retrying (docs/runtime.md, "Errors not worth retrying"): to
  // the dead letters at once; a breaker holds back retries, not this
  const nonRetryable = isNonRetryable(error)
  const breaker = nonRetryable ? undefined : env.breakerFor?.(r.shard)
  if (breaker !== undefined) {
    const verdict = breaker.failure(env.now())
    if (verdict !== "closed") {
      // open: the message stays pending (never dead-lettered) until a trial succeeds
      if (verdict === "opened") env.onBreaker?.(breaker, "opened", r.shard, error)
      const nacked = yield* Effect.result(env.streams.nack({ ...address, id: m.id }))
      const refused = nacked._tag === "Failure" ? fenceOutcome(env, r, nacked.failure) : undefined
      if (refused !== undefined) return refused
      r.retrying = true
      return wait(breaker.waitMs(env.now()))
    }
  }
  if (nonRetryable || m.deliveryCount >= env.settings.maxDeliveries)
    return yield* deadLetterNow(
      env,
      r,
      address,
      m,
      nonRetryable ? "nonRetryable" : "maxDeliveries",
      nonRetryable
        ? `non-retryable: ${(error as NonRetryableError).message}`
        : `failed ${m.deliveryCount} deliveries; last error: ${describe(error)}`,
    )
  const nacked = yield* Effect.result(env.streams.nack({ ...address, id: m.id }))
  const refused = nacked._tag === "Failure" ? fenceOutcome(env, r, nacked.failure) : undefined
  if (refused !== undefined) return refused
  r.retrying = true
  return wait(backoffMs(env.settings, m.deliveryCount))
})

/**
 * Move `m` to the shard's dead letters now, atomically with its ack, with
 * `reason` (at most 1,000 characters) and why (`cause`): "continue" once it
 * moved (or was no longer pending), else the turn's outcome.
 */
const deadLetterNow = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  address: Address,
  m: Message,
  cause: DeadLetterCause,
  reason: string,
) {
  const text = reason.slice(0, 1_000)
  const moved = yield* Effect.result(env.streams.deadLetter({ ...address, id: m.id, reason: text }))
  if (moved._tag === "Failure") {
    const refused = fenceOutcome(env, r, moved.failure)
    if (refused !== undefined) return refused
    r.retrying = true
    return wait(env.settings.retryInitialMs)
  }
  if (moved.success !== undefined) {
    env.record({ _tag: "DeadLettered" })
    if (cause === "undecodable" || cause === "invalid") env.record({ _tag: "Rejected", cause })
    r.progress.acked++
    r.progress.lastId = m.id
    env.emit({
      stream: address.stream,
      group: address.group,
      memberId: env.memberId,
      at: env.wallNow(),
      type: "deadLettered",
      shard: r.shard,
      messageId: m.id,
      deadLetterId: moved.success,
      deliveryCount: m.deliveryCount,
      reason: text,
      cause,
    })
  }
  return "continue"
})

/**
 * What of a batch goes to the handler (docs/runtime.md, "Typed messages"
 * and "Dead letters"): a dead letter replayed to another group is
 * acknowledged unseen; with a codec or schema each message is decoded, and
 * one that cannot be, or is invalid, is dead-lettered at once with the
 * reason (no handler call, no retry: it would fail the same way; not a
 * handler failure, so no breaker counts it). The messages left, decoded, in
 * stream order; or the turn's outcome when the storage refused a step.
 */
const screen = (
  env: TurnEnv,
  r: Runner,
  address: Address,
  messages: ReadonlyArray<Message>,
): Effect.Effect<ReadonlyArray<Message> | Outcome> => {
  const decode = env.settings.decode
  let foreign = false
  for (const m of messages)
    if (m.replay !== undefined && m.replay.group !== env.settings.group) {
      foreign = true
      break
    }
  if (decode === undefined && !foreign) return Effect.succeed(messages)
  return Effect.gen(function* () {
    const mine = foreign
      ? messages.filter((m) => m.replay === undefined || m.replay.group === env.settings.group)
      : messages
    if (foreign) {
      const others = messages.filter((m) => !mine.includes(m)).map((m) => m.id)
      const acked = yield* ackIds(env, r, address, others)
      if (typeof acked !== "number") return acked
    }
    if (decode === undefined) return mine
    const out: Array<Message> = []
    for (const m of mine) {
      const attempt = decode(m.fields)
      const decoded = isPromiseLike(attempt) ? yield* Effect.promise(() => attempt) : attempt
      if (decoded.ok) {
        out.push({ ...m, value: decoded.value as Message["value"] })
        continue
      }
      if (!r.alive || !env.mayAct()) {
        r.retrying = true
        return r.alive ? wait(50) : Abandoned
      }
      const next = yield* deadLetterNow(env, r, address, m, decoded.cause, decoded.reason)
      if (next !== "continue") return next
    }
    return out
  })
}

/** A promise or an Effect a plain handler returned: awaited through `bounded`, as the slow path would. */
const awaitDirect = (
  env: TurnEnv,
  r: Runner,
  result: unknown,
  timeoutMessage: string,
): Effect.Effect<Call> =>
  bounded(
    env,
    r,
    env.settings.handlerTimeoutMs,
    (signal, settled) =>
      isPromiseLike(result)
        ? awaitUser(result, settled, signal)
        : callUserEffect(() => result as Effect.Effect<void, unknown>, settled, signal),
    timeoutMessage,
  )

type Context = PerMessageContext

/** Makes a message's (or batch's) transaction handle, on the handler's first read of it. */
const handleMaker = (env: TurnEnv, r: Runner): (() => TransactionHandle) => {
  // the shard's key rules and the limits, made once per turn (not per message) when first needed
  let handleEnv: HandleEnv | undefined
  return () => {
    handleEnv ??= {
      rules: env.transactions?.port?.keys(env.settings.stream, r.shard),
      maxOperations: env.settings.transaction.maxOperations,
      maxBytes: env.settings.transaction.maxBytes,
    }
    return new TransactionHandle(handleEnv)
  }
}

/**
 * Commit a handler's transaction with the ack of `ids` (docs/exactly-once.md,
 * "The commit"); acknowledged ids are recorded as an ack's are.
 */
const commitHandled = (
  env: TurnEnv,
  r: Runner,
  address: Address,
  tx: TransactionHandle,
  ids: ReadonlyArray<string>,
  ride: boolean,
): Effect.Effect<CommitResult> =>
  Effect.suspend(() => {
    if (!r.alive || !env.mayAct())
      return Effect.succeed({ _tag: "Retry", error: undefined } as const)
    // the whole batch resolved, nothing sent: a group of one that carries the next read
    if (ride && tx.sends.length === 0 && nextRead(env, r) !== undefined)
      return Effect.map(
        commitGroupHandled(env, r, address, [{ ids, handle: tx }], true),
        (done): CommitResult => done.stop ?? { _tag: "Acked", count: ids.length },
      )
    const run = commit(
      env.transactions ?? { port: undefined, router: NO_ROUTER },
      address,
      env.settings.ack,
      tx,
      ids,
    )
    // off the handler slot, as the group commit
    return Effect.map(env.offSlot === undefined ? run : env.offSlot(run), (done) => {
      if (done._tag === "Acked") {
        ackedRecord(env, r, ids)
        r.committed = true
        if (tx.sends.length > 0) r.outboxDirty = true
      }
      return done
    })
  })

/**
 * Commit a batch's group (docs/exactly-once.md, "Group commit"); the ids of
 * the parts that committed are recorded as an ack's are.
 */
const commitGroupHandled = (
  env: TurnEnv,
  r: Runner,
  address: Address,
  parts: ReadonlyArray<GroupPart>,
  ride: boolean,
): Effect.Effect<GroupResult> =>
  Effect.suspend(() => {
    if (!r.alive || !env.mayAct())
      return Effect.succeed({ committed: 0, stop: { _tag: "Retry", error: undefined } } as const)
    const next = ride ? nextRead(env, r) : undefined
    const run = commitGroup(
      env.transactions ?? { port: undefined, router: NO_ROUTER },
      address,
      env.settings.ack,
      parts,
      next,
    )
    // the commit waits on the storage without a handler slot, as a read does:
    // other shards' handlers run meanwhile (docs/exactly-once.md, "Cost")
    return Effect.map(env.offSlot === undefined ? run : env.offSlot(run), (done) => {
      if (done.committed > 0) {
        const ids: Array<string> = []
        for (let i = 0; i < done.committed; i++) {
          const part = parts[i]!
          for (const id of part.ids) ids.push(id)
          if ((part.handle?.sends.length ?? 0) > 0) r.outboxDirty = true
        }
        ackedRecord(env, r, ids)
        // the read it carried ran (the next read does not follow this ack)
        // and its entries are the next turn's batch
        r.committed = done.entries === undefined
        if (done.entries !== undefined && done.entries.length > 0) r.prefetched = done.entries
      }
      return done
    })
  })

/**
 * The read a batch's commit carries (docs/exactly-once.md, "The commit
 * rides the read"), when the shard's next step is surely a plain read of
 * new entries: nothing else is due first (a takeover claim, a retry, a
 * group to create again, a seek, a pause, a stop, an outbox to relay), no
 * breaker or rate limit sizes the read, and the port can carry it.
 */
const nextRead = (env: TurnEnv, r: Runner): ShardStreams.ReadOptions | undefined => {
  const { settings } = env
  if (
    env.transactions?.port?.commitGroupThenRead === undefined ||
    !r.alive ||
    r.stopping ||
    !r.claimDone ||
    r.retrying ||
    r.recreate ||
    r.seeks.length > 0 ||
    r.unacked.length > 0 ||
    r.prefetched !== undefined ||
    env.isPaused(r.shard) ||
    env.breakerFor?.(r.shard) !== undefined ||
    env.limiter !== undefined ||
    (r.outboxDirty && env.transactions.port.outbox !== undefined)
  )
    return undefined
  return {
    stream: settings.stream,
    shard: r.shard,
    group: settings.group,
    token: r.token,
    consumer: env.consumerName,
    count: settings.batchSize,
    ack: undefined,
    keyField: KEY_FIELD,
  }
}

const NO_ROUTER: TransactionEnv["router"] = {
  route: () => Effect.die("no transactions"),
  refresh: () => Effect.die("no transactions"),
}

/** A commit that committed nothing and refused nothing: what the shard does next. */
const settleCommit = (
  env: TurnEnv,
  r: Runner,
  done: Exclude<CommitResult, { readonly _tag: "Acked" | "Refused" }>,
): Outcome => {
  if (done._tag === "Stale") {
    env.record({ _tag: "StaleOwner" })
    return Stale
  }
  if (!r.alive) return Abandoned
  // the group's token, group or stream vanished: said, as a read would (docs/protocol.md rule 26)
  const refused = fenceOutcome(env, r, done.error)
  if (refused !== undefined) return refused
  if (done.error !== undefined) emitDataPlaneError(env, r.shard, done.error)
  // the messages are still pending unless the commit ran (then they are not
  // delivered again): the retry read finds out
  r.retrying = true
  return wait(env.settings.retryInitialMs)
}

/**
 * The batch of a per-message handler, in stream order, with one context per
 * message (PerMessageContext: its `signal` and `transaction` made when the
 * handler reads them, closed when the message ends, so a callback that keeps
 * it never reaches the next message's).
 * The fast path of a plain handler (`InternalHandler.direct`) calls it
 * directly: a synchronous return or throw settles at once, with no Effect,
 * fiber or timer per message (a synchronous call cannot be interrupted
 * anyway); only a promise or an Effect it returns is awaited through `bounded`.
 */
const handleEach = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  address: Address,
  messages: ReadonlyArray<Message>,
  run: (
    m: Message,
    ctx: Context,
    settled: () => void,
  ) => Effect.Effect<void, UserCodeFailed | CallAborted>,
  direct: ((m: Message, ctx: Context) => unknown) | undefined,
) {
  let toAck: Array<string> = []
  let handled = 0
  let acked = 0
  let failed = 0
  const finish = (outcome: Outcome): Effect.Effect<Handled> => {
    if (handled > 0) env.record({ _tag: "Handled", count: handled })
    return Effect.succeed({ outcome, acked, failed })
  }
  const timeoutMessage = `handler timed out after ${env.settings.handlerTimeoutMs} ms`
  const makeTransaction = handleMaker(env, r)
  const breaker = env.breakerFor?.(r.shard)
  /** Successes since the last failure (the breaker counts failures in a row). */
  let okRun = 0
  const t = env.telemetry
  /**
   * The batch's group commit (docs/exactly-once.md, "Group commit"): from
   * the first message whose handler used its transaction, every handled
   * message in stream order (those handled before it as one part of acks
   * only), committed in one fenced step when the batch ends or a message
   * fails, never later than a failed message's nack.
   */
  let group: Array<GroupPart & { readonly traced: Traced | undefined; readonly m?: Message }> = []
  /** Commit `group`: undefined when every part committed, else the turn's outcome. */
  const flushGroup = (ride = false): Effect.Effect<Outcome | undefined> =>
    Effect.gen(function* () {
      const parts = group
      group = []
      const done = yield* commitGroupHandled(env, r, address, parts, ride)
      for (let i = 0; i < done.committed; i++) {
        const part = parts[i]!
        acked += part.ids.length
        if (part.traced !== undefined) t!.end(part.traced, r.shard, "acked")
      }
      const stop = done.stop
      if (stop === undefined) return undefined
      const at = parts[done.committed]!
      let outcome: Outcome
      if (stop._tag === "Refused" && at.m !== undefined) {
        // its effects are dropped, its ack withheld: it fails as a handler would
        // (retry, then dead-letter); the parts after it are read again
        failed++
        if (breaker !== undefined && okRun > 0) succeeded(env, breaker, r.shard)
        okRun = 0
        const ackedBefore = r.progress.acked
        const next = yield* fail(env, r, address, at.m, stop.error)
        if (at.traced !== undefined)
          t!.end(at.traced, r.shard, outcomeOf(next, r.progress.acked > ackedBefore), stop.error)
        r.retrying = true
        outcome = next === "continue" ? More : next
      } else {
        // nothing more committed: the shard's pending entries are read again (or it moved)
        outcome = settleCommit(
          env,
          r,
          stop._tag === "Refused" ? { _tag: "Retry", error: stop.error } : stop,
        )
        if (at.traced !== undefined) t!.end(at.traced, r.shard, outcomeOf(outcome), stop)
      }
      for (let i = done.committed + 1; i < parts.length; i++) {
        const traced = parts[i]!.traced
        if (traced !== undefined) t!.end(traced, r.shard, "retried")
      }
      return outcome
    })
  /** Spans of a group given up uncommitted (its messages stay pending). */
  const dropGroup = (how: HandleOutcome): void => {
    for (const part of group) if (part.traced !== undefined) t!.end(part.traced, r.shard, how)
    group = []
  }
  for (const m of messages) {
    if (breaker !== undefined && breaker.state === "open") {
      // opened meanwhile (by another shard of the member): what was handled
      // commits, the rest stays pending
      if (okRun > 0) succeeded(env, breaker, r.shard)
      if (group.length > 0) {
        const stopped = yield* flushGroup()
        if (stopped !== undefined) return yield* finish(stopped)
      }
      r.unacked = toAck
      r.retrying = true
      return yield* finish(wait(breaker.waitMs(env.now())))
    }
    if (!env.mayAct()) {
      // no message starts without a valid lease: the rest of the batch stays
      // pending (read again once the lease is valid, or claimed by the next
      // owner), and so does an uncommitted group (it cannot commit now)
      dropGroup("retried")
      r.unacked = toAck
      r.retrying = true
      return yield* finish(r.alive ? wait(50) : Abandoned)
    }
    if (!r.alive) {
      dropGroup("abandoned")
      return yield* finish(Abandoned)
    }
    // the message's own: a callback that keeps it never reaches the next message's
    const c = new PerMessageContext(
      env.settings.stream,
      env.settings.group,
      r.shard,
      env.memberId,
      turnController(r).signal,
      makeTransaction,
    )
    const traced = t === undefined ? undefined : t.startMessage(r.shard, m)
    let call: Call
    if (direct === undefined)
      call = yield* bounded(
        env,
        r,
        env.settings.handlerTimeoutMs,
        traced === undefined
          ? (_signal, settled) => run(m, c, settled)
          : tracedCall(t!, traced, (_signal, settled) => run(m, c, settled)),
        timeoutMessage,
      )
    else {
      const called =
        traced === undefined
          ? callDirect(direct, m, c)
          : t!.within(traced, callDirect, direct, m, c)
      call =
        called instanceof Pending
          ? yield* awaitDirect(env, r, called.result, timeoutMessage)
          : called
    }
    // the message ended: its transaction is closed, its signal follows the turn no more
    const tx = c.end()
    if (call === "abandoned" || !r.alive) {
      if (traced !== undefined) t!.end(traced, r.shard, "abandoned")
      dropGroup("abandoned")
      return yield* finish(Abandoned)
    }
    let error: unknown
    if (call.ok && (tx === undefined || !tx.used)) {
      handled++
      okRun++
      if (group.length === 0) {
        toAck.push(m.id)
        if (traced !== undefined) t!.end(traced, r.shard, "acked")
      } else group.push({ ids: [m.id], handle: undefined, traced, m })
      continue
    }
    if (!call.ok) error = call.error
    else if (tx!.refusal !== undefined) error = tx!.refusal
    else {
      // the transaction joins the batch's group commit (docs/exactly-once.md,
      // "Group commit"), after the messages handled before it without one
      if (group.length === 0 && toAck.length > 0) {
        group.push({ ids: toAck, handle: undefined, traced: undefined })
        toAck = []
      }
      group.push({ ids: [m.id], handle: tx, traced, m })
      handled++
      okRun++
      continue
    }
    // a failed message: what succeeded before it commits first (its nack
    // must not overtake them), and its own effects are dropped
    if (group.length > 0) {
      const stopped = yield* flushGroup()
      if (stopped !== undefined) {
        // an earlier message stopped the group: this one is read again after it
        if (traced !== undefined) t!.end(traced, r.shard, "retried", error)
        return yield* finish(stopped)
      }
    }
    failed++
    if (breaker !== undefined && okRun > 0) succeeded(env, breaker, r.shard)
    okRun = 0
    // keep per-shard order: acknowledge what succeeded before the failure first
    const flushed = yield* ackIds(env, r, address, toAck)
    toAck = []
    if (typeof flushed !== "number") {
      if (traced !== undefined) t!.end(traced, r.shard, outcomeOf(flushed), error)
      return yield* finish(flushed)
    }
    acked += flushed
    const ackedBefore = r.progress.acked
    const next = yield* fail(env, r, address, m, error)
    if (traced !== undefined)
      t!.end(traced, r.shard, outcomeOf(next, r.progress.acked > ackedBefore), error)
    if (next !== "continue") return yield* finish(next)
  }
  if (breaker !== undefined && okRun > 0) succeeded(env, breaker, r.shard)
  if (group.length > 0) {
    // the batch ended: its commit carries the shard's next read
    const stopped = yield* flushGroup(true)
    if (stopped !== undefined) return yield* finish(stopped)
  }
  // acknowledged by the shard's next read (or flushAcks)
  r.unacked = toAck
  return yield* finish(More)
})

/** Handler calls succeeded: a half-open breaker closes (an event, and what it held reads again). */
const succeeded = (env: TurnEnv, breaker: CircuitBreaker, shard: number): void => {
  if (breaker.success()) env.onBreaker?.(breaker, "closed", shard)
}

const OK: Call = { ok: true }

/** A `bounded` body run inside a traced call's span. */
const tracedCall =
  (
    t: TurnTelemetry,
    traced: Traced,
    body: (
      signal: AbortSignal,
      settled: () => void,
    ) => Effect.Effect<void, UserCodeFailed | CallAborted>,
  ) =>
  (signal: AbortSignal, settled: () => void) =>
    t.wrap(traced, body(signal, settled))

/**
 * A failed call's outcome on its span: `continue` after `fail` is a
 * dead-letter when it acknowledged the message (else the entry was no
 * longer pending: someone else has it); a wait retries; anything else
 * (stale owner, abandoned) gave the message up here.
 */
const outcomeOf = (next: Outcome | "continue", movedToDlq = false): HandleOutcome =>
  next === "continue"
    ? movedToDlq
      ? "dead_lettered"
      : "abandoned"
    : next._tag === "Wait"
      ? "retried"
      : "abandoned"

/** What a plain handler returned to be awaited: a promise or an Effect. */
class Pending {
  constructor(readonly result: unknown) {}
}

/**
 * The fast path of a plain handler (`InternalHandler.direct`): a synchronous
 * return or throw is its `Call` at once, with no Effect, fiber or timer (a
 * synchronous call cannot be interrupted anyway); only a promise or an
 * Effect it returns is `Pending`, awaited through `bounded` (`awaitDirect`).
 */
const callDirect = <I, C>(f: (input: I, ctx: C) => unknown, input: I, ctx: C): Call | Pending => {
  try {
    const result = f(input, ctx)
    // inside the try: reading `then` of what it returned is user code too (a getter may throw)
    return isPromiseLike(result) || Effect.isEffect(result) ? new Pending(result) : OK
  } catch (error) {
    return { ok: false, error }
  }
}

const handleBatch = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  address: Address,
  messages: ReadonlyArray<Message>,
  handler: Extract<InternalHandler, { kind: "batch" }>,
) {
  let resolvedUpTo = -1
  const batch: Batch = {
    stream: address.stream,
    group: address.group,
    shard: r.shard,
    messages,
  }
  const resolve = (message: Message | string) => {
    const id = typeof message === "string" ? message : message.id
    const index = messages.findIndex((m) => m.id === id)
    if (index > resolvedUpTo) resolvedUpTo = index
  }
  // the batch's transaction, made when the handler first reads it; closed
  // when the handler ends, also if a callback first reads it only after that
  const makeTx = handleMaker(env, r)
  let context: PerBatchContext | undefined
  const contextWith = (signal: AbortSignal): BatchContext => {
    context = new PerBatchContext(
      env.settings.stream,
      env.settings.group,
      r.shard,
      env.memberId,
      signal,
      resolve,
      makeTx,
    )
    return context
  }
  const timeoutMessage = `batch handler timed out after ${env.settings.handlerTimeoutMs} ms`
  const t = env.telemetry
  const traced = t === undefined ? undefined : t.startBatch(r.shard, messages)
  let call: Call
  if (handler.direct === undefined)
    call = yield* bounded(
      env,
      r,
      env.settings.handlerTimeoutMs,
      traced === undefined
        ? (signal, settled) => handler.run(batch, contextWith(signal), settled)
        : tracedCall(t!, traced, (signal, settled) =>
            handler.run(batch, contextWith(signal), settled),
          ),
      timeoutMessage,
    )
  else {
    const made = contextWith(turnController(r).signal)
    const called =
      traced === undefined
        ? callDirect(handler.direct, batch, made)
        : t!.within(traced, callDirect, handler.direct, batch, made)
    call =
      called instanceof Pending ? yield* awaitDirect(env, r, called.result, timeoutMessage) : called
  }
  const tx = context?.end()
  if (call === "abandoned" || !r.alive) {
    if (traced !== undefined) t!.end(traced, r.shard, "abandoned")
    return { outcome: Abandoned, acked: 0, failed: 0 }
  }
  if (tx?.used)
    return yield* commitBatch(env, r, address, messages, handler, call, tx, resolvedUpTo, traced)
  const upTo = call.ok && handler.autoResolve ? messages.length - 1 : resolvedUpTo
  const breaker = env.breakerFor?.(r.shard)
  if (breaker !== undefined && upTo >= 0) succeeded(env, breaker, r.shard)
  if (upTo >= 0) env.record({ _tag: "Handled", count: upTo + 1 })
  const doneIds = (upTo === messages.length - 1 ? messages : messages.slice(0, upTo + 1)).map(
    (m) => m.id,
  )
  if (upTo === messages.length - 1) {
    // acknowledged by the shard's next read (or flushAcks)
    r.unacked = doneIds
    if (traced !== undefined) t!.end(traced, r.shard, "acked")
    return { outcome: More, acked: 0, failed: 0 }
  }
  const flushed = yield* ackIds(env, r, address, doneIds)
  const error = call.ok
    ? new Error("the batch handler returned without resolving every message")
    : call.error
  if (typeof flushed !== "number") {
    if (traced !== undefined) t!.end(traced, r.shard, outcomeOf(flushed), error)
    return { outcome: flushed, acked: 0, failed: 0 }
  }
  const first = messages[upTo + 1]!
  const ackedBefore = r.progress.acked
  const next = yield* fail(env, r, address, first, error)
  if (traced !== undefined)
    t!.end(traced, r.shard, outcomeOf(next, r.progress.acked > ackedBefore), error)
  // the rest of the batch is still pending: read it again from this consumer's PEL
  r.retrying = true
  return { outcome: next === "continue" ? More : next, acked: flushed, failed: 1 }
})

/**
 * A batch whose handler used its transaction (docs/exactly-once.md,
 * "Batches"): all or nothing. A handler that failed (or whose transaction
 * was refused) commits nothing and acknowledges nothing, `resolve` or not:
 * its first message fails (retry, then dead-letter) and the rest is read
 * again. A handler that returned commits its transaction with the messages
 * it resolved (all of them with `autoResolve`) in one fenced step; the
 * first unresolved one then fails as without a transaction.
 */
const commitBatch = Effect.fnUntraced(function* (
  env: TurnEnv,
  r: Runner,
  address: Address,
  messages: ReadonlyArray<Message>,
  handler: Extract<InternalHandler, { kind: "batch" }>,
  call: Exclude<Call, "abandoned">,
  tx: TransactionHandle,
  resolvedUpTo: number,
  traced: Traced | undefined,
) {
  const t = env.telemetry
  const failFirst = (at: number, error: unknown, acked: number) =>
    Effect.gen(function* () {
      const ackedBefore = r.progress.acked
      const next = yield* fail(env, r, address, messages[at]!, error)
      if (traced !== undefined)
        t!.end(traced, r.shard, outcomeOf(next, r.progress.acked > ackedBefore), error)
      r.retrying = true
      return { outcome: next === "continue" ? More : next, acked, failed: 1 } satisfies Handled
    })
  if (!call.ok || tx.refusal !== undefined)
    return yield* failFirst(0, call.ok ? tx.refusal : call.error, 0)
  const upTo = handler.autoResolve ? messages.length - 1 : resolvedUpTo
  // made only when needed: an Error captures its stack, per batch
  const unresolved = () => new Error("the batch handler returned without resolving every message")
  if (upTo < 0) return yield* failFirst(0, unresolved(), 0)
  const ids = messages.slice(0, upTo + 1).map((m) => m.id)
  const done = yield* commitHandled(env, r, address, tx, ids, upTo === messages.length - 1)
  if (done._tag === "Refused") return yield* failFirst(0, done.error, 0)
  if (done._tag !== "Acked") {
    const outcome = settleCommit(env, r, done)
    if (traced !== undefined) t!.end(traced, r.shard, outcomeOf(outcome), done)
    return { outcome, acked: 0, failed: 0 }
  }
  const breaker = env.breakerFor?.(r.shard)
  if (breaker !== undefined) succeeded(env, breaker, r.shard)
  env.record({ _tag: "Handled", count: ids.length })
  if (upTo === messages.length - 1) {
    if (traced !== undefined) t!.end(traced, r.shard, "acked")
    return { outcome: More, acked: done.count, failed: 0 }
  }
  return yield* failFirst(upTo + 1, unresolved(), done.count)
})
