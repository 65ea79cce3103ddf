/**
 * The polling adapter of one logical member (docs/runtime.md, "Polling
 * adapter"; docs/requirements.md, "Ownership and consumer concurrency"):
 *
 * - at most one read loop per shard, ever: a shard is a `Runner` in exactly
 *   one state (ready, running, idle, backoff, paused, stopped); only a worker
 *   that takes a ready runner runs its turn (one batch);
 * - lanes rotate: a shard that read something goes back to the TAIL of one
 *   FIFO ready queue, so with N ready shards and L lanes every backlogged
 *   shard gets a turn before any shard gets two more: no starvation, the
 *   highest shard indexes included, whatever the number of shards per lane;
 * - `workers` (runtimeMaxConcurrency) bounds handler executions: a turn holds
 *   one of `workers` handler slots (HandlerSlots.ts) except while it waits on
 *   its read, and there are READS_PER_WORKER lanes per slot, so the reads of
 *   other shards are on the wire while the handlers run (and leave together);
 * - an idle shard waits with `ShardStreams.waitForEntries` (woken by an
 *   append), never a busy loop, and reads only once it has entries the
 *   group has not read: a wait that times out (`idleWaitMs`) waits again,
 *   from the group's last-delivered id the grant knows, without a read
 *   (on Redis a read is a MULTI that modifies the shard's key; docs/redis.md,
 *   "Idle shards"); its lag is 0 while it waits. A shard of an earlier
 *   layout generation takes a full turn after each timeout instead (its
 *   read and `drainState` find it sealed and drained);
 * - a failed message makes its shard sleep a backoff; other shards go on.
 */
import type { ShardProgress } from "@shardline/core"
import { Deferred, Effect, Queue, type Scope } from "effect"
import { SeekFailed, ShardNotOwned } from "../Errors.js"
import { type BreakerView, CircuitBreaker } from "./CircuitBreaker.js"
import { makeHandlerSlots } from "./HandlerSlots.js"
import { RateLimiter } from "./RateLimiter.js"
import {
  abandon,
  abortLateCalls,
  awaitQuiet,
  flushAcks,
  makeRunner,
  type Outcome,
  progressOf,
  type Runner,
  type TurnEnv,
  turn,
} from "./ShardRunner.js"

/**
 * Idle waits in a row that block from the last-delivered id the grant knows
 * before one lets the port look it up (one extra command on Redis: at the
 * default `idleWaitMs`, once a minute).
 */
const RECHECK_WAITS = 12

/**
 * Turns in flight per handler slot (`workers`): the lanes that take ready
 * shards. A turn waiting on its read holds no slot, so with W workers up to
 * W x READS_PER_WORKER shards' reads are on the wire while W handlers run,
 * and the reads queued behind one another leave in one transaction on Redis
 * (docs/runtime.md, "Where the time goes"). More lanes than ready shards
 * just wait on the queue.
 */
export const READS_PER_WORKER = 4

export interface PollerOptions extends TurnEnv {
  /** Handler executions at once (`runtimeMaxConcurrency`); READS_PER_WORKER lanes each. */
  readonly workers: number
  /** The member's scope: workers, idle waits and backoff sleeps live in it. */
  readonly scope: Scope.Scope
  /** The storage refused this member's token for the shard: heartbeat now. */
  readonly onStaleOwner: (shard: number) => void
  /** The shard is sealed and drained for the group: report `ShardExhausted`. */
  readonly onExhausted: (shard: number) => void
  /** The stream's shard count now (a group-scoped rate limit's share); default the declared one. */
  readonly groupShardCount?: () => number
  /**
   * The first shard of the group's current layout generation (undefined
   * before the member knows one): a shard below it is of an earlier
   * generation, which a reshard seals, so its idle loop takes a full turn
   * after every idle timeout to find it drained.
   */
  readonly currentFirstShard?: () => number | undefined
  /**
   * A stopped loop's user code (handler, hook) still runs `budgetMs` after it
   * was told to stop: reported once; the loop is reported ended only when it
   * returns (docs/runtime.md, "A handler past its drain").
   */
  readonly onStuck: (shard: number, why: "revoked" | "stopped", budgetMs: number) => void
}

export interface DrainResult {
  readonly runner: Runner | undefined
  /**
   * The in-flight batch did not finish within the drain budget: its signal
   * was aborted, and the drain waited until its user code returned anyway.
   */
  readonly abandoned: boolean
}

export interface Poller {
  /** Start the shard's read loop (after its predecessor in this member, if any, ends). */
  readonly start: (shard: number, token: number) => void
  /**
   * Stop new reads of the shard, let the in-flight batch finish (its signal
   * aborted past `budgetMs`), run `onRevoked`, and return only once none of
   * the loop's user code runs any more. The caller then reports ShardDrained.
   */
  readonly drain: (shard: number, budgetMs: number) => Effect.Effect<DrainResult>
  /**
   * Stop every loop now: signals abort, nothing more is read or acked.
   * Returns the stopped loops; `quiet` completes once one's user code ended.
   */
  readonly stopAll: (reason: string) => ReadonlyArray<Runner>
  /** Completes once the runner's user code has ended (reports it stuck past `budgetMs`). */
  readonly quiet: (r: Runner, why: "revoked" | "stopped", budgetMs: number) => Effect.Effect<void>
  /** The runner the shard has now (for matching a drain to the loop it drained). */
  readonly current: (shard: number) => Runner | undefined
  readonly remove: (shard: number, runner: Runner) => void
  /** Make a paused shard ready again (after its pause flag was cleared). */
  readonly resume: (shard: number) => boolean
  /** Queue a seek; it runs between batches, before the next read. */
  readonly seek: (
    shard: number,
    position: string,
  ) => Effect.Effect<void, SeekFailed | ShardNotOwned>
  readonly owned: () => ReadonlyArray<number>
  readonly progress: () => ReadonlyArray<ShardProgress>
  /** Refresh each owned shard's lag (entries not yet delivered to the group). */
  readonly refreshLag: Effect.Effect<void>
  /** Live runners by shard (read-only use: tests and benchmarks count turns). */
  readonly runners: ReadonlyMap<number, Runner>
  /** The circuit breakers (opt-in): the member's, or one per shard that has one. */
  readonly circuits: () => ReadonlyArray<BreakerView>
  /** Close the member's breaker (or the shard's; all of them without `shard`); true when one was open. */
  readonly resetCircuit: (shard?: number) => boolean
}

export const makePoller = (options: PollerOptions): Effect.Effect<Poller> =>
  Effect.gen(function* () {
    const ready = yield* Queue.unbounded<Runner>()
    const runners = new Map<number, Runner>()

    // opt-in limits (docs/runtime.md, "Circuit breaker and rate limit")
    const breakerSettings = options.settings.circuitBreaker
    const memberBreaker =
      breakerSettings?.scope === "member"
        ? new CircuitBreaker(breakerSettings, undefined)
        : undefined
    const shardBreakers = new Map<number, CircuitBreaker>()
    const breakerFor = (shard: number): CircuitBreaker | undefined => {
      if (breakerSettings === undefined) return undefined
      if (memberBreaker !== undefined) return memberBreaker
      let b = shardBreakers.get(shard)
      if (b === undefined) {
        b = new CircuitBreaker(breakerSettings, shard)
        shardBreakers.set(shard, b)
      }
      return b
    }
    const limiter =
      options.settings.rateLimit === undefined
        ? undefined
        : new RateLimiter(options.settings.rateLimit, () => {
            let owned = 0
            for (const r of runners.values()) if (r.alive && !r.stopping) owned++
            return owned / (options.groupShardCount?.() ?? options.settings.shardCount)
          })
    /** Make the runners a breaker held read again (after it closed). */
    const wakeHeld = (breaker: CircuitBreaker) => {
      for (const r of runners.values())
        if (breaker.shard === undefined || breaker.shard === r.shard) wake(r)
    }
    const onBreaker = (
      breaker: CircuitBreaker,
      change: "opened" | "closed",
      shard: number,
      error?: unknown,
    ) => {
      const base = {
        stream: options.settings.stream,
        group: options.settings.group,
        memberId: options.memberId,
        at: options.now(),
      }
      if (change === "opened")
        options.emit({
          ...base,
          type: "circuitOpened",
          scope: breaker.settings.scope,
          shard,
          failures: breaker.consecutive,
          retryInMs: breaker.waitMs(options.now()),
          error,
        })
      else {
        options.emit({
          ...base,
          type: "circuitClosed",
          scope: breaker.settings.scope,
          shard: breaker.shard,
          reason: "a trial succeeded",
        })
        wakeHeld(breaker)
      }
    }
    const env: PollerOptions =
      breakerSettings === undefined && limiter === undefined
        ? options
        : {
            ...options,
            ...(breakerSettings === undefined ? {} : { breakerFor, onBreaker }),
            ...(limiter === undefined ? {} : { limiter }),
          }
    /** Loops stopped at once (StopAllShards) whose user code may still run, by shard. */
    const leftovers = new Map<number, Runner>()

    const makeReady = (r: Runner): void => {
      if (!r.alive || r.stopping) {
        r.state = "stopped"
        return
      }
      if (env.isPaused(r.shard) && r.seeks.length === 0) {
        r.state = "paused"
        return
      }
      r.state = "ready"
      if (!r.queued) {
        r.queued = true
        Queue.offerUnsafe(ready, r)
      }
    }

    const cancelWaiter = (r: Runner): void => {
      r.wakeGen++
      const waiter = r.waiter
      r.waiter = undefined
      waiter?.interruptUnsafe()
    }

    /** An idle or backing-off runner takes its next turn now. */
    function wake(r: Runner): void {
      if (r.state !== "idle" && r.state !== "backoff") return
      cancelWaiter(r)
      makeReady(r)
    }

    /** Sleep (or wait for entries), then make the runner ready, unless superseded meanwhile. */
    const park = (
      r: Runner,
      state: "idle" | "backoff",
      body: Effect.Effect<unknown, unknown>,
    ): Effect.Effect<void> =>
      Effect.gen(function* () {
        r.state = state
        const gen = ++r.wakeGen
        const fiber = yield* Effect.forkIn(
          Effect.andThen(
            Effect.ignore(body),
            Effect.sync(() => {
              if (r.wakeGen !== gen) return
              r.waiter = undefined
              if (r.state === state) makeReady(r)
            }),
          ),
          env.scope,
        )
        if (r.wakeGen === gen && r.state === state) r.waiter = fiber
      })

    /** May the shard be sealed (a shard of an earlier generation, or no layout known yet)? */
    const maySeal = (shard: number): boolean => {
      const first = options.currentFirstShard?.()
      return first === undefined || shard < first
    }

    /**
     * An idle shard's wait: until it has entries the group has not read
     * (then its next turn reads them), waiting again after each timeout
     * without a read; a shard that may be sealed ends the wait at a timeout
     * (its turn's read and `drainState` tell whether it is drained). A
     * failure ends it too: the turn that follows meets the error.
     */
    const idleWait = (r: Runner): Effect.Effect<void, unknown> =>
      Effect.gen(function* () {
        const { stream, group, idleWaitMs } = env.settings
        for (let wait = 1; ; wait++) {
          // the group's position, looked up once per grant when its reads have not told it
          // (and once per idle period at most: a group not on the shard yet has none)
          if (r.lastDelivered === undefined && wait === 1) {
            const info = yield* env.streams.info(stream, r.shard)
            r.lastDelivered = info.groups.find((g) => g.name === group)?.lastDeliveredId
          }
          // every RECHECK_WAITS-th wait the port looks the position up itself, so
          // a position moved by hand (XGROUP SETID, the group made again) cannot
          // keep the loop waiting past entries the group has not read
          const afterId = wait % RECHECK_WAITS === 0 ? undefined : r.lastDelivered
          const woke = yield* env.streams.waitForEntries(
            afterId === undefined
              ? { stream, shard: r.shard, group, timeoutMs: idleWaitMs }
              : { stream, shard: r.shard, group, timeoutMs: idleWaitMs, afterId },
          )
          r.wokenByEntries = woke
          if (woke || maySeal(r.shard)) return
        }
      })

    const schedule = (r: Runner, outcome: Outcome): Effect.Effect<void> => {
      if (!r.alive || r.stopping) {
        r.state = "stopped"
        return Effect.void
      }
      // a seek queued while the turn ran (after its seek step, e.g. during its
      // read) runs now: an idle wait would hold it until new entries came
      if (r.seeks.length > 0 && (outcome._tag === "Empty" || outcome._tag === "Paused"))
        return Effect.sync(() => makeReady(r))
      switch (outcome._tag) {
        case "More":
          return Effect.sync(() => makeReady(r))
        case "Paused":
          r.state = "paused"
          return Effect.void
        case "Empty":
          // woken for entries the read then did not find: the position it waited
          // from was behind the group's, so look it up again rather than wake at once forever
          if (r.wokenByEntries) r.lastDelivered = undefined
          r.wokenByEntries = false
          return park(r, "idle", idleWait(r))
        case "Wait":
          return park(r, "backoff", Effect.sleep(outcome.ms))
        case "Stale":
          r.alive = false
          r.state = "stopped"
          env.onStaleOwner(r.shard)
          return Effect.void
        case "Abandoned":
          r.state = "stopped"
          return Effect.void
        case "Exhausted":
          // no more reads: a sealed shard gets no new entries; the coordinator revokes it
          r.state = "exhausted"
          env.onExhausted(r.shard)
          return Effect.void
      }
    }

    // `workers` handler slots, READS_PER_WORKER lanes per slot: a lane takes
    // the ready queue's head and runs its turn holding a slot, except while
    // the turn waits on its read (HandlerSlots.ts)
    const slots = makeHandlerSlots(env.workers)
    const lane = Effect.suspend(() => {
      let held = false
      const take = Effect.map(slots.acquire, () => {
        held = true
      })
      const give = (): void => {
        if (!held) return
        held = false
        slots.release()
      }
      const laneEnv: PollerOptions = {
        ...env,
        offSlot: (wait) =>
          Effect.suspend(() => {
            give()
            return Effect.flatMap(Effect.exit(wait), (exit) => Effect.andThen(take, exit))
          }),
      }
      const loop = Effect.gen(function* () {
        while (true) {
          const r = yield* Queue.take(ready)
          r.queued = false
          if (r.state !== "ready") continue
          if (!r.alive || r.stopping) {
            r.state = "stopped"
            continue
          }
          r.state = "running"
          const done = Deferred.makeUnsafe<void>()
          r.turnDone = done
          yield* take
          const outcome = yield* turn(laneEnv, r)
          give()
          r.turns++
          Deferred.doneUnsafe(done, Effect.void)
          // the common case, a batch read: back to the queue's tail with no Effect
          if (outcome._tag === "More") makeReady(r)
          else yield* schedule(r, outcome)
        }
      })
      return Effect.ensuring(loop, Effect.sync(give))
    })
    for (let i = 0; i < env.workers * READS_PER_WORKER; i++) yield* Effect.forkIn(lane, env.scope)

    // One watchdog aborts user calls past their deadline (handler timeout,
    // hook budget): no timer per call. It looks every tenth of the handler
    // timeout (5 ms to 1 s), so a call is aborted within that much of its deadline.
    const watchEvery = Math.min(1_000, Math.max(5, Math.floor(env.settings.handlerTimeoutMs / 10)))
    const watchdog = Effect.forever(
      Effect.andThen(
        Effect.sleep(watchEvery),
        Effect.sync(() => {
          const now = env.now()
          for (const r of runners.values()) abortLateCalls(r, now)
          for (const r of leftovers.values()) abortLateCalls(r, now)
        }),
      ),
    )
    yield* Effect.forkIn(watchdog, env.scope)

    /**
     * Wait until the runner's user code has ended; report it once if that
     * takes past `budgetMs` (`waited`: the budget is already spent).
     */
    const quiet = (
      r: Runner,
      why: "revoked" | "stopped",
      budgetMs: number,
      waited = false,
    ): Effect.Effect<void> =>
      Effect.gen(function* () {
        const done = yield* Effect.timeoutOption(awaitQuiet(r), waited ? 0 : budgetMs)
        if (done._tag === "Some") return
        env.onStuck(r.shard, why, budgetMs)
        yield* awaitQuiet(r)
      })

    const poller: Poller = {
      start: (shard, token) => {
        const previous = runners.get(shard)
        if (previous?.alive) abandon(previous, "restarted")
        const predecessor = leftovers.get(shard) ?? previous
        leftovers.delete(shard)
        const r = makeRunner(shard, token, predecessor)
        runners.set(shard, r)
        makeReady(r)
      },

      drain: (shard, budgetMs) =>
        Effect.gen(function* () {
          const r = runners.get(shard)
          if (r === undefined) return { runner: undefined, abandoned: false }
          r.stopping = true
          cancelWaiter(r)
          let abandoned = false
          if (r.state === "running" && r.turnDone !== undefined) {
            const finished = yield* Effect.timeoutOption(Deferred.await(r.turnDone), budgetMs)
            if (finished._tag === "None") {
              abandon(r, `revoked: the in-flight batch did not finish within ${budgetMs} ms`)
              abandoned = true
            }
          }
          // what the last turn handled is acknowledged before the shard is reported drained
          if (!abandoned && r.alive && env.mayAct()) yield* flushAcks(env, r)
          abandon(r, "revoked")
          r.state = "stopped"
          // a handler that ignores its signal still runs: the shard is not
          // reported drained (so not REVOKED, nor handed over) until it returns
          yield* quiet(r, "revoked", budgetMs, abandoned)
          const hook = env.hooks.onRevoked
          if (hook !== undefined)
            yield* Effect.ignore(
              Effect.timeoutOption(
                hook({
                  stream: env.settings.stream,
                  group: env.settings.group,
                  memberId: env.memberId,
                  shard,
                }),
                budgetMs,
              ),
            )
          return { runner: r, abandoned }
        }),

      stopAll: (reason) => {
        const stopped = [...runners.values()].sort((a, b) => a.shard - b.shard)
        for (const r of stopped) {
          if (r.state === "running" || r.userCalls > 0) leftovers.set(r.shard, r)
          abandon(r, reason)
          cancelWaiter(r)
          r.state = "stopped"
        }
        runners.clear()
        return stopped
      },

      quiet,

      current: (shard) => runners.get(shard),

      remove: (shard, runner) => {
        if (runners.get(shard) === runner) runners.delete(shard)
      },

      resume: (shard) => {
        const r = runners.get(shard)
        if (r === undefined || !r.alive || r.stopping) return false
        if (r.state === "paused") makeReady(r)
        return true
      },

      seek: (shard, position) =>
        Effect.suspend((): Effect.Effect<void, SeekFailed | ShardNotOwned> => {
          const r = runners.get(shard)
          if (r === undefined || !r.alive || r.stopping)
            return Effect.fail(
              new ShardNotOwned({ stream: env.settings.stream, group: env.settings.group, shard }),
            )
          const done = Deferred.makeUnsafe<void, SeekFailed>()
          r.seeks.push({ position, done })
          if (r.state === "idle" || r.state === "backoff" || r.state === "paused") {
            cancelWaiter(r)
            r.state = "ready"
            if (!r.queued) {
              r.queued = true
              Queue.offerUnsafe(ready, r)
            }
          }
          return Deferred.await(done).pipe(
            Effect.mapError(
              (e) =>
                new SeekFailed({
                  stream: env.settings.stream,
                  group: env.settings.group,
                  shard,
                  message: e.message,
                  cause: e.cause,
                }),
            ),
          )
        }),

      owned: () =>
        [...runners.values()]
          .filter((r) => r.alive && !r.stopping)
          .map((r) => r.shard)
          .sort((a, b) => a - b),

      progress: () =>
        [...runners.values()]
          .filter((r) => r.alive && !r.stopping)
          .sort((a, b) => a.shard - b.shard)
          .map(progressOf),

      refreshLag: Effect.suspend(() =>
        Effect.forEach(
          [...runners.values()].filter((r) => {
            if (!r.alive || r.stopping) return false
            // an idle shard waits for entries the group has not read: its lag is 0, no call needed
            if (r.state === "idle") {
              r.progress.lag = 0
              return false
            }
            return true
          }),
          (r) =>
            Effect.ignore(
              Effect.map(
                env.streams.drainState({
                  stream: env.settings.stream,
                  shard: r.shard,
                  group: env.settings.group,
                }),
                (state) => {
                  r.progress.lag = state.undelivered
                },
              ),
            ),
          // each shard on its own: one hung node holds up only its shards' lags
          { discard: true, concurrency: 8 },
        ),
      ),

      runners,

      circuits: () =>
        memberBreaker !== undefined
          ? [memberBreaker.view()]
          : [...shardBreakers.values()].sort((a, b) => a.shard! - b.shard!).map((b) => b.view()),

      resetCircuit: (shard) => {
        const chosen =
          memberBreaker !== undefined
            ? [memberBreaker]
            : [...shardBreakers.values()].filter((b) => shard === undefined || b.shard === shard)
        let closed = false
        for (const b of chosen)
          if (b.reset()) {
            closed = true
            options.emit({
              stream: options.settings.stream,
              group: options.settings.group,
              memberId: options.memberId,
              at: options.now(),
              type: "circuitClosed",
              scope: b.settings.scope,
              shard: b.shard,
              reason: "reset by hand",
            })
            wakeHeld(b)
          }
        return closed
      },
    }
    return poller
  })
