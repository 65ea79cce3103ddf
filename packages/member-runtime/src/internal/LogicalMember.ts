/**
 * One logical member: core's `MemberMachine` driven over the
 * `CoordinatorTransport` and `ShardStreams` ports (docs/member.md, "Runtime
 * obligations"; docs/runtime.md, "Logical members"). The machine decides;
 * this module only executes its commands:
 *
 * - one actor fiber owns the machine: it takes inputs (heartbeat results,
 *   notices, drained shards, leave) from one queue, steps the machine, ticks
 *   it, and sleeps until `MemberMachine.nextDeadline` (a member that cannot
 *   reach its coordinator is woken at its lease deadline, never later);
 * - `SendHeartbeat` sends exactly the request `nextRequest` built (plus this
 *   member's progress) and reports its end, answered or failed on timeout;
 * - `StartShard` starts the shard's loop in the poller, `StopShard` drains it
 *   (in-flight batch, then `onRevoked`) and reports `ShardDrained` for that
 *   very loop once none of its user code runs, `StopAllShards` stops every
 *   loop at once (signals abort, no more reads or acks) and reports
 *   `ShardDrained` for each once its user code has ended (a handler that
 *   ignores its signal is reported `handlerStuck`, and its shard waits);
 * - the machine runs on the monotonic clock (docs/protocol.md rule 21);
 *   events carry wall-clock times;
 * - a `StaleOwner` from the storage stops that loop and asks for a heartbeat.
 */
import {
  type CoordinatorTransport,
  defaultCoordinatorLeaseMs,
  type HeartbeatResponse,
  MemberMachine,
  type ShardStreams,
  Time,
  TransportError,
} from "@shardline/core"
import { Clock, Deferred, Effect, Exit, Metric, Option, Queue, Result, Scope, Stream } from "effect"
import { HandlerStuck, InvalidRuntimeConfig } from "../Errors.js"
import type { EventHub, HeartbeatFailure, RuntimeEvent } from "../Events.js"
import * as Metrics from "../Metrics.js"
import type { MemberError } from "./Observer.js"
import { makePoller, type Poller } from "./Poller.js"
import type { Runner, TurnRecord } from "./ShardRunner.js"
import type { ConsumerSpec } from "./spec.js"
import type { TransactionEnv } from "./TransactionCommit.js"
import { type Telemetry, turnTelemetry } from "./telemetry/Telemetry.js"

type Input =
  | {
      readonly _tag: "Response"
      readonly seq: number
      readonly result: Result.Result<HeartbeatResponse, TransportError>
      readonly latencyMs: number
    }
  | { readonly _tag: "Notice" }
  | {
      readonly _tag: "Drained"
      readonly shard: number
      readonly runner: Runner | undefined
      readonly abandoned: boolean
    }
  | { readonly _tag: "Leave" }
  /** A loop StopAllShards stopped has ended (none of its user code runs). */
  | { readonly _tag: "Stopped"; readonly shard: number }
  | { readonly _tag: "Exhausted"; readonly shard: number }
  /** A loop's owner token is missing (or back): docs/protocol.md rule 30. */
  | {
      readonly _tag: "TokenMissing"
      readonly shard: number
      readonly token: number
      readonly missing: boolean
    }
  | { readonly _tag: "Wake" }

export interface MemberEnv {
  readonly spec: ConsumerSpec
  readonly memberId: string
  readonly incarnation: number
  /** The process's random identity (docs/protocol.md rule 24). */
  readonly instance: string
  /** Reported in memberInfo.host. */
  readonly host: string
  readonly streams: ShardStreams.ShardStreamsShape
  readonly transport: CoordinatorTransport.CoordinatorTransportShape
  readonly events: EventHub
  /** The consumer's pause flags (shared by its logical members). */
  readonly isPaused: (shard: number) => boolean
  /** A leave that cannot finish ends after this long. */
  readonly leaveTimeoutMs: number
  /** Names a failed heartbeat's cause for events and `lastError` (e.g. `NoCoordinator`). */
  readonly describeHeartbeatFailure?: (error: TransportError) => HeartbeatFailure
  /** Spans and OpenTelemetry metrics (docs/observability.md); undefined when off. */
  readonly telemetry?: Telemetry | undefined
  /** Handlers' transactions (docs/exactly-once.md): the ports' and the runtime's send router. */
  readonly transactions?: TransactionEnv | undefined
}

export interface LogicalMember {
  readonly memberId: string
  readonly incarnation: number
  /** The machine's state (read-only use). */
  readonly machine: MemberMachine.MemberState
  readonly poller: Poller
  /** Ask the member to leave the group (drain, `leaving` heartbeats, epoch -1). */
  readonly requestLeave: Effect.Effect<void>
  /** Completes when the member has left (or was stopped). */
  readonly left: Effect.Effect<void>
  readonly hasLeft: () => boolean
  /** Stop at once: abort every handler, read and ack nothing more, end the member. */
  readonly stopNow: (reason: string) => Effect.Effect<void>
  /** Ask for a heartbeat now (as a coordinator notice would). */
  readonly nudge: Effect.Effect<void>
  /** The last error the coordinator, the lease or a stuck handler surfaced. */
  readonly lastError: () => MemberError | undefined
  /**
   * When its last heartbeat ended, answered or not (monotonic ms; its start
   * before the first): the progress of its heartbeat loop (docs/runtime.md, "Health").
   */
  readonly heartbeatEndedAt: () => number
  /**
   * Since when no coordinator has answered it (monotonic ms), once that is
   * past twice the coordinator lease and reported (`coordinatorUnavailable`,
   * docs/protocol.md rule 25); undefined while one answers.
   */
  readonly coordinatorUnavailableSince: () => number | undefined
}

/** Build and start a logical member in the scope in context (its own child scope). */
export const makeLogicalMember = (
  env: MemberEnv,
): Effect.Effect<LogicalMember, InvalidRuntimeConfig, Scope.Scope> =>
  Effect.gen(function* () {
    const parent = yield* Scope.Scope
    const scope = yield* Scope.fork(parent)
    const clock = yield* Clock.Clock
    // the machine, leases and timeouts: monotonic (rule 21); events: wall clock
    const now = () => Time.monotonicMillisOf(clock)
    const wallNow = () => clock.currentTimeMillisUnsafe()
    const { settings } = env.spec
    const key = { stream: settings.stream, group: settings.group }
    const attributes = { stream: settings.stream, group: settings.group }
    const memberAttributes = { ...attributes, member: env.memberId }

    const machine = yield* Effect.try({
      try: () =>
        MemberMachine.make(
          {
            group: settings.group,
            stream: settings.stream,
            memberId: env.memberId,
            incarnation: env.incarnation,
            instance: env.instance,
            memberInfo: {
              consumerName: env.memberId,
              host: env.host,
              runtimeMaxConcurrency: env.spec.workersPerMember,
              ...(settings.weight !== undefined ? { weight: settings.weight } : {}),
            },
            heartbeatIntervalMs: settings.heartbeatIntervalMs,
            // retries at most a heartbeat interval apart: after an outage shorter
            // than the session the member is answered before the coordinator
            // could expire it, and resumes with its epoch (docs/protocol.md rule 22)
            retryBackoffMaxMs: Math.max(100, settings.heartbeatIntervalMs),
            leaveTimeoutMs: env.leaveTimeoutMs,
            ...(settings.safetyMarginMs !== undefined
              ? { safetyMarginMs: settings.safetyMarginMs }
              : {}),
          },
          now(),
        ),
      catch: (e) => {
        const field = (e as { field?: string }).field ?? "memberId"
        return new InvalidRuntimeConfig({
          field: `${env.spec.label}.${field}`,
          message: `${env.spec.label}.${field}: ${(e as Error).message}`,
        })
      },
    })

    const inbox = yield* Queue.unbounded<Input>()
    const leftSignal = yield* Deferred.make<void>()
    let finished = false
    let rebalanceTimeoutMs = settings.rebalanceTimeoutMs
    let lastStopReason: MemberMachine.StopReason = "left"
    let lagRefreshing = false
    let lastLagAt = Number.NEGATIVE_INFINITY
    let lastError: MemberError | undefined

    const base = () => ({ ...key, memberId: env.memberId, at: wallNow() })
    const emit = (event: RuntimeEvent) => env.events.emit(event)
    const drainBudgetMs = () => settings.drainTimeoutMs ?? Math.floor(rebalanceTimeoutMs / 2)

    // the group's metrics, labelled once (not per update)
    const m = {
      handled: Metrics.forGroup(Metrics.messagesHandled, key),
      acked: Metrics.forGroup(Metrics.messagesAcked, key),
      handlerErrors: Metrics.forGroup(Metrics.handlerErrors, key),
      deadLettered: Metrics.forGroup(Metrics.deadLettered, key),
      staleOwner: Metrics.forGroup(Metrics.staleOwner, key),
      batches: Metrics.forGroup(Metrics.batches, key),
      batchDuration: Metrics.forGroup(Metrics.batchDuration, key),
      heartbeats: Metrics.forGroup(Metrics.heartbeats, key),
      heartbeatFailures: Metrics.forGroup(Metrics.heartbeatFailures, key),
      heartbeatDuration: Metrics.forGroup(Metrics.heartbeatDuration, key),
      rebalances: Metrics.forGroup(Metrics.rebalances, key),
      fences: Metrics.forGroup(Metrics.fences, key),
      handlersStuck: Metrics.forGroup(Metrics.handlersStuck, key),
      leaseLost: Metrics.forGroup(Metrics.leaseLost, key),
      // dead-lettered undecoded (docs/runtime.md, "Typed messages"), one series per reason
      rejected: {
        undecodable: Metric.withAttributes(Metrics.forGroup(Metrics.messagesRejected, key), {
          reason: "undecodable",
        }),
        invalid: Metric.withAttributes(Metrics.forGroup(Metrics.messagesRejected, key), {
          reason: "invalid",
        }),
      },
      // what vanished (docs/protocol.md rule 26), one series per kind
      dataLost: {
        token: Metric.withAttributes(Metrics.forGroup(Metrics.dataLost, key), { what: "token" }),
        stream: Metric.withAttributes(Metrics.forGroup(Metrics.dataLost, key), { what: "stream" }),
        group: Metric.withAttributes(Metrics.forGroup(Metrics.dataLost, key), { what: "group" }),
      },
    }
    // metrics are updated in place with the member's context (its registry):
    // no Effect per update, on the per-batch path
    const context = yield* Effect.context<never>()
    const record = (what: TurnRecord): void => {
      switch (what._tag) {
        case "Handled":
          m.handled.updateUnsafe(what.count, context)
          break
        case "Acked":
          m.acked.updateUnsafe(what.count, context)
          break
        case "HandlerError":
          m.handlerErrors.updateUnsafe(1, context)
          break
        case "DeadLettered":
          m.deadLettered.updateUnsafe(1, context)
          break
        case "Rejected":
          m.rejected[what.cause].updateUnsafe(1, context)
          break
        case "StaleOwner":
          m.staleOwner.updateUnsafe(1, context)
          break
        case "DataLost":
          m.dataLost[what.what].updateUnsafe(1, context)
          break
        case "Batch":
          m.batches.updateUnsafe(1, context)
          m.batchDuration.updateUnsafe(what.durationMs, context)
          break
      }
    }

    const telemetry =
      env.telemetry === undefined
        ? undefined
        : turnTelemetry(env.telemetry, key, env.memberId, clock)
    const poller = yield* makePoller({
      streams: env.streams,
      settings,
      handler: env.spec.handler,
      hooks: env.spec.hooks,
      memberId: env.memberId,
      consumerName: env.memberId,
      now,
      wallNow,
      mayAct: () => MemberMachine.leaseValid(machine, now()),
      isPaused: env.isPaused,
      drainBudgetMs,
      emit,
      record:
        telemetry === undefined
          ? record
          : (what) => {
              record(what)
              telemetry.record(what)
            },
      telemetry,
      transactions: env.transactions,
      workers: env.spec.workersPerMember,
      scope,
      onStaleOwner: (shard) => {
        emit({ ...base(), type: "staleOwner", shard })
        Queue.offerUnsafe(inbox, { _tag: "Notice" })
      },
      onExhausted: (shard) => {
        emit({ ...base(), type: "exhausted", shard })
        Queue.offerUnsafe(inbox, { _tag: "Exhausted", shard })
      },
      onTokenMissing: (shard, token, missing) => {
        Queue.offerUnsafe(inbox, { _tag: "TokenMissing", shard, token, missing })
      },
      groupShardCount: () => machine.layout?.shardCount ?? settings.shardCount,
      currentFirstShard: () => machine.layout?.firstShard,
      onStuck: (shard, why, budgetMs) => {
        m.handlersStuck.updateUnsafe(1, context)
        const error = new HandlerStuck({
          ...key,
          memberId: env.memberId,
          shard,
          message: `the handler of shard ${shard} still runs ${budgetMs} ms after its loop was ${why === "revoked" ? "revoked" : "stopped"} (its signal was aborted): shard ${shard} is not released until it returns`,
        })
        lastError = error
        emit({ ...base(), type: "handlerStuck", shard, why, budgetMs, error })
      },
    })

    // -- no coordinator answers (docs/protocol.md rule 25) ----------------------
    // A failover ends within about one coordinator lease; past twice that,
    // the group has live members and nobody serving it: say so once.
    const unservedAfterMs =
      2 *
      defaultCoordinatorLeaseMs({
        heartbeatIntervalMs: settings.heartbeatIntervalMs,
        sessionTimeoutMs: settings.sessionTimeoutMs,
      })
    const unservedGauge = Metric.withAttributes(Metrics.coordinatorUnavailable, memberAttributes)
    const unservedPeriods = Metrics.forGroup(Metrics.coordinatorUnavailablePeriods, key)
    /** Since when no coordinator answered (monotonic, wall), and whether it was said. */
    let unserved: { readonly t: number; readonly at: number; reported: boolean } | undefined
    // the heartbeat loop's progress (health's liveness): a loop that sends no
    // heartbeat, or waits forever for one, never moves this
    let heartbeatEndedAt = now()
    const coordinatorAnswered = (t: number, answered: boolean, error: string) =>
      Effect.gen(function* () {
        if (answered) {
          const was = unserved
          unserved = undefined
          if (was?.reported !== true) return
          yield* Metric.update(unservedGauge, 0)
          emit({ ...base(), type: "coordinatorAvailable", unavailableMs: t - was.t })
          return
        }
        if (unserved === undefined) unserved = { t, at: wallNow(), reported: false }
        if (unserved.reported || t - unserved.t < unservedAfterMs) return
        unserved.reported = true
        yield* Metric.update(unservedGauge, 1)
        yield* Metric.update(unservedPeriods, 1)
        emit({
          ...base(),
          type: "coordinatorUnavailable",
          since: unserved.at,
          forMs: t - unserved.t,
          error,
        })
      })

    const ownedGauge = Metric.withAttributes(Metrics.ownedShards, memberAttributes)
    const lagGauge = Metric.withAttributes(Metrics.lag, memberAttributes)
    // lag per owned shard; a shard no longer owned here is set to 0 (its new owner reports it)
    const shardLag = new Map<number, Metric.Metric<number, unknown>>()
    let lagShards: ReadonlyArray<number> = []
    const reportShardLag = (progress: ReadonlyArray<{ shard: number; lag?: number }>) => {
      const gauge = (shard: number) => {
        let g = shardLag.get(shard)
        if (g === undefined) {
          g = Metric.withAttributes(Metrics.shardLag, { ...attributes, shard: String(shard) })
          shardLag.set(shard, g)
        }
        return g
      }
      const now = progress.map((p) => p.shard)
      for (const shard of lagShards) if (!now.includes(shard)) gauge(shard).updateUnsafe(0, context)
      for (const p of progress) gauge(p.shard).updateUnsafe(p.lag ?? 0, context)
      lagShards = now
    }

    // shards waiting for another member (docs/protocol.md rule 29) --------------
    /** What was said per holder and reason, so each is said once per change. */
    let waitingSaid = new Map<string, string>()
    const sayWaiting = (response: HeartbeatResponse) => {
      const said = new Map<string, string>()
      for (const w of response.waitingOn ?? []) {
        // its session deadline is its last answered heartbeat plus the session
        const silentMs = response.sessionTimeoutMs - w.sessionEndsInMs
        const holderSilent = silentMs > 2 * response.heartbeatIntervalMs
        const k = `${w.reason}\u0000${w.memberId}`
        const what = `${w.shards.join(",")}\u0000${holderSilent}`
        said.set(k, what)
        if (waitingSaid.get(k) === what) continue
        emit({
          ...base(),
          type: "shardsWaiting",
          shards: w.shards,
          holder: w.memberId,
          reason: w.reason,
          until: wallNow() + w.sessionEndsInMs,
          holderSilent,
        })
      }
      waitingSaid = said
    }

    // heartbeats ---------------------------------------------------------------
    const send = (t: number) =>
      Effect.gen(function* () {
        const { seq, request } = MemberMachine.nextRequest(machine, t)
        yield* Metric.update(m.heartbeats, 1)
        yield* Effect.forkIn(
          Effect.gen(function* () {
            const progress = poller.progress()
            if (
              progress.length > 0 &&
              !lagRefreshing &&
              now() - lastLagAt >= settings.heartbeatIntervalMs
            ) {
              // In the background: the lag reads go to every owned shard's node, and a
              // hung node must not hold up the heartbeat (the member's lease) nor the
              // other shards' lags (docs/protocol.md rule 27). This heartbeat carries
              // the lags of the last refresh.
              lastLagAt = now()
              lagRefreshing = true
              yield* Effect.forkIn(
                poller.refreshLag.pipe(
                  Effect.andThen(
                    Effect.suspend(() => {
                      const refreshed = poller.progress()
                      reportShardLag(refreshed)
                      return Metric.update(
                        lagGauge,
                        refreshed.reduce((sum, p) => sum + (p.lag ?? 0), 0),
                      )
                    }),
                  ),
                  Effect.ensuring(
                    Effect.sync(() => {
                      lagRefreshing = false
                    }),
                  ),
                ),
                scope,
              )
            }
            const full =
              progress.length > 0 && request.memberEpoch > 0 ? { ...request, progress } : request
            const sentAt = now()
            const result = yield* Effect.result(
              env.transport.heartbeat(full).pipe(
                Effect.timeoutOrElse({
                  duration: settings.heartbeatTimeoutMs,
                  orElse: () =>
                    Effect.fail(
                      new TransportError({
                        reason: "Timeout",
                        message: `no answer within ${settings.heartbeatTimeoutMs} ms`,
                      }),
                    ),
                }),
              ),
            )
            yield* Queue.offer(inbox, {
              _tag: "Response",
              seq,
              result,
              latencyMs: now() - sentAt,
            })
          }),
          scope,
        )
      })

    // executing the machine's commands ---------------------------------------------
    const exec = (
      commands: ReadonlyArray<MemberMachine.MemberCommand>,
      t: number,
    ): Effect.Effect<void> =>
      Effect.gen(function* () {
        for (const c of commands) {
          switch (c._tag) {
            case "StartShard":
              poller.start(c.shard, c.token)
              emit({ ...base(), type: "assigned", shard: c.shard, token: c.token })
              yield* exec(MemberMachine.step(machine, { _tag: "ShardStarted", shard: c.shard }), t)
              break
            case "StopShard": {
              const shard = c.shard
              emit({ ...base(), type: "revoking", shard })
              yield* Effect.forkIn(
                Effect.flatMap(poller.drain(shard, drainBudgetMs()), (drained) =>
                  Queue.offer(inbox, {
                    _tag: "Drained",
                    shard,
                    runner: drained.runner,
                    abandoned: drained.abandoned,
                  }),
                ),
                scope,
              )
              break
            }
            case "StopAllShards": {
              lastStopReason = c.reason
              const stopped = poller.stopAll(c.reason)
              const shards = stopped.map((r) => r.shard)
              // each loop is reported ended once its user code has (the machine
              // waits for it before a REVOKED or a rejoin; docs/protocol.md rule 19)
              if (c.reason !== "left" && c.reason !== "leave-timeout")
                for (const r of stopped)
                  yield* Effect.forkIn(
                    Effect.andThen(poller.quiet(r, "stopped", drainBudgetMs()), () =>
                      Queue.offer(inbox, { _tag: "Stopped", shard: r.shard }),
                    ),
                    scope,
                  )
              if (c.reason === "lease-lost") {
                yield* Metric.update(m.leaseLost, 1)
                emit({ ...base(), type: "leaseLost", shards })
              }
              if (shards.length > 0 && c.reason !== "left") {
                yield* Metric.update(m.fences, 1)
                emit({ ...base(), type: "lost", shards, reason: c.reason })
                const hook = env.spec.hooks.onLost
                if (hook !== undefined)
                  yield* Effect.forkIn(
                    Effect.ignore(
                      hook({ ...key, memberId: env.memberId, shards, reason: c.reason }),
                    ),
                    scope,
                  )
              }
              break
            }
            case "SendHeartbeat":
              yield* send(t)
              break
            case "LayoutChanged":
              emit({ ...base(), type: "layoutChanged", layout: c.layout })
              break
            case "RequestRejected":
              lastError = c.error
              emit({ ...base(), type: "requestRejected", error: c.error })
              break
            case "LeaseUnusable":
              lastError = c.error
              emit({ ...base(), type: "leaseUnusable", error: c.error })
              break
            case "Superseded":
              lastError = c.error
              emit({ ...base(), type: "superseded", error: c.error })
              break
            case "Left":
              emit({ ...base(), type: "left", reason: lastStopReason })
              finished = true
              break
            default: {
              // a command core adds must be executed here: fail the build until it is
              const unhandled: never = c
              return unhandled
            }
          }
        }
      })

    const handle = (input: Input, t: number): Effect.Effect<void> =>
      Effect.gen(function* () {
        switch (input._tag) {
          case "Response": {
            const { result } = input
            heartbeatEndedAt = t
            m.heartbeatDuration.updateUnsafe(input.latencyMs, context)
            if (Result.isFailure(result)) {
              yield* Metric.update(m.heartbeatFailures, 1)
              const error = env.describeHeartbeatFailure?.(result.failure) ?? result.failure
              lastError = error
              yield* coordinatorAnswered(t, false, error.message)
              emit({
                ...base(),
                type: "heartbeat",
                errorCode: "TRANSPORT_ERROR",
                latencyMs: input.latencyMs,
                error,
              })
              return yield* exec(
                MemberMachine.step(machine, { _tag: "HeartbeatFailed", seq: input.seq, now: t }),
                t,
              )
            }
            const response = result.success
            yield* coordinatorAnswered(
              t,
              response.errorCode !== "NOT_COORDINATOR",
              `NOT_COORDINATOR: ${response.errorMessage ?? "not the coordinator"}`,
            )
            rebalanceTimeoutMs = response.rebalanceTimeoutMs
            const lifecycle = machine.lifecycle
            const assignmentEpoch = machine.assignmentEpoch
            emit({
              ...base(),
              type: "heartbeat",
              errorCode: response.errorCode,
              latencyMs: input.latencyMs,
            })
            const commands = MemberMachine.step(machine, {
              _tag: "ResponseReceived",
              seq: input.seq,
              response,
              now: t,
            })
            const joined =
              (lifecycle === "joining" || lifecycle === "fenced") && machine.lifecycle === "active"
            if (joined) emit({ ...base(), type: "joined", memberEpoch: machine.memberEpoch })
            // an answer the machine applied (its pending is this answer's)
            if (machine.pending === response.pending) sayWaiting(response)
            if (lifecycle === "suspended" && machine.lifecycle === "active")
              emit({ ...base(), type: "leaseRegained", memberEpoch: machine.memberEpoch })
            yield* exec(commands, t)
            if (machine.lifecycle === "active" && machine.assignmentEpoch !== assignmentEpoch) {
              yield* Metric.update(m.rebalances, 1)
              emit({
                ...base(),
                type: "rebalance",
                assignmentEpoch: machine.assignmentEpoch,
                owned: MemberMachine.ownedShards(machine),
              })
            }
            return
          }
          case "Notice":
            return yield* exec(MemberMachine.step(machine, { _tag: "NoticeReceived" }), t)
          case "Drained": {
            // only the drain of the loop the shard still has counts (a stale
            // drain after a fence and a restart must not report the new loop)
            const runner = input.runner
            if (runner === undefined || poller.current(input.shard) !== runner) return
            poller.remove(input.shard, runner)
            emit({ ...base(), type: "revoked", shard: input.shard, abandoned: input.abandoned })
            return yield* exec(
              MemberMachine.step(machine, { _tag: "ShardDrained", shard: input.shard }),
              t,
            )
          }
          case "Leave":
            return yield* exec(MemberMachine.step(machine, { _tag: "LeaveRequested", now: t }), t)
          case "Stopped":
            return yield* exec(
              MemberMachine.step(machine, { _tag: "ShardDrained", shard: input.shard }),
              t,
            )
          case "Exhausted":
            return yield* exec(
              MemberMachine.step(machine, { _tag: "ShardExhausted", shard: input.shard }),
              t,
            )
          case "TokenMissing":
            return yield* exec(
              MemberMachine.step(
                machine,
                input.missing
                  ? { _tag: "ShardTokenMissing", shard: input.shard, token: input.token }
                  : { _tag: "ShardTokenBack", shard: input.shard },
              ),
              t,
            )
          case "Wake":
            return
        }
      })

    // the actor ------------------------------------------------------------------
    const actor = Effect.gen(function* () {
      let zeroWaits = 0
      while (!finished) {
        const deadline = MemberMachine.nextDeadline(machine)
        if (deadline === undefined) break
        const waitMs = deadline - now()
        let input: Option.Option<Input>
        if (waitMs === Number.POSITIVE_INFINITY) input = Option.some(yield* Queue.take(inbox))
        else if (waitMs <= 0 && zeroWaits < 64) input = yield* Queue.poll(inbox)
        else input = yield* Effect.timeoutOption(Queue.take(inbox), Math.max(1, waitMs))
        zeroWaits = waitMs <= 0 && Option.isNone(input) ? zeroWaits + 1 : 0
        let t = now()
        if (Option.isSome(input)) yield* handle(input.value, t)
        // everything else already queued, without waiting
        for (let i = 0; i < 256 && !finished; i++) {
          const more = yield* Queue.poll(inbox)
          if (Option.isNone(more)) break
          yield* handle(more.value, now())
        }
        if (finished) break
        t = now()
        yield* exec(MemberMachine.step(machine, { _tag: "Tick", now: t }), t)
        yield* Metric.update(ownedGauge, poller.owned().length)
      }
      finished = true
      yield* Metric.update(ownedGauge, 0)
      yield* Deferred.succeed(leftSignal, undefined)
    })

    const notices = yield* env.transport.notices(key, env.memberId).pipe(Scope.provide(scope))
    yield* Effect.forkIn(
      Stream.runForEach(notices, () => Queue.offer(inbox, { _tag: "Notice" })),
      scope,
    )
    yield* Effect.forkIn(actor, scope)

    const member: LogicalMember = {
      memberId: env.memberId,
      incarnation: env.incarnation,
      machine,
      poller,
      requestLeave: Effect.asVoid(Queue.offer(inbox, { _tag: "Leave" })),
      left: Deferred.await(leftSignal),
      hasLeft: () => finished,
      stopNow: (reason) =>
        Effect.gen(function* () {
          if (!finished) {
            poller.stopAll(reason)
            finished = true
            yield* Queue.offer(inbox, { _tag: "Wake" })
          }
          yield* Deferred.succeed(leftSignal, undefined)
          yield* Scope.close(scope, Exit.void)
        }),
      nudge: Effect.asVoid(Queue.offer(inbox, { _tag: "Notice" })),
      lastError: () => lastError,
      heartbeatEndedAt: () => heartbeatEndedAt,
      coordinatorUnavailableSince: () => (unserved?.reported === true ? unserved.t : undefined),
    }
    return member
  })
