/**
 * The member runtime (docs/runtime.md): validates every declaration, starts
 * the embedded coordinator candidates (default) and one logical member per
 * member id, and stops gracefully.
 *
 * Two APIs over one implementation:
 * - `make(options)`: the Effect API, scoped, needing the port services
 *   (`PortServices`); closing its scope stops it gracefully.
 * - `start(options)`: the Promise API over `make`, with its own ports
 *   (`memoryPorts()` by default), metric registry and signal handling.
 *
 * @example
 * const runtime = await start({
 *   consumers: [consumer({ stream: "orders", group: "billing", eachMessage: async (m) => bill(m) })],
 * })
 * const producer = runtime.producer("orders")
 * await producer.send("customer-42", { amount: "12.50" })
 * await runtime.stop() // drain, leave the group, close
 */
import {
  CoordinatorTransport,
  type GroupConfig,
  type GroupMonitor,
  MemberMachine,
  OwnerFence,
  ShardStreams,
  Store,
  StreamLayouts,
  Time,
  type TransportError,
} from "@shardline/core"
import {
  Acl,
  type BackendUnavailable,
  KeySchema,
  type KeySchemaMismatch,
  type PermissionDenied,
  RedisConnection,
  RedisPorts,
} from "@shardline/redis-store"
import {
  Cause,
  Clock,
  Effect,
  Exit,
  Layer,
  ManagedRuntime,
  Metric,
  Option,
  Result,
  Scope,
  type Tracer,
} from "effect"
import type { Codec } from "./Codec.js"
import { DEFAULTS, decodeOptions, invalid, RuntimeOptionsSchema } from "./Config.js"
import { type ConsumerDefinition, isConsumerDefinition } from "./Consumer.js"
import {
  type HealthServerFailed,
  type InvalidRuntimeConfig,
  NoCoordinator,
  RuntimeStopped,
  SeekFailed,
  ShardNotOwned,
  UnknownGroup,
} from "./Errors.js"
import { type EventHub, type EventListener, type HeartbeatFailure, makeEventHub } from "./Events.js"
import { type Health, healthOf, type RuntimeState } from "./Health.js"
import {
  type HealthServer,
  type HttpOptions,
  serveHealth,
  validateHttpOptions,
} from "./HealthServer.js"
import { memberBase as defaultMemberBase, newInstance, nextIncarnation } from "./Identity.js"
import type { BreakerView } from "./internal/CircuitBreaker.js"
import { type Candidate, runCandidate } from "./internal/CoordinatorCandidate.js"
import { type LogicalMember, makeLogicalMember } from "./internal/LogicalMember.js"
import { type MemberError, makeObserver } from "./internal/Observer.js"
import { makeSendRouter } from "./internal/SendRouter.js"
import { type ConsumerSpec, checkAcross, resolveDefinition } from "./internal/spec.js"
import type { TransactionEnv } from "./internal/TransactionCommit.js"
import { tracedStore } from "./internal/telemetry/coordinatorSpans.js"
import { activeSpan } from "./internal/telemetry/otel.js"
import {
  observeEvents,
  observeGauges,
  resolveTelemetry,
  type Telemetry,
} from "./internal/telemetry/Telemetry.js"
import * as LayoutSource from "./LayoutSource.js"
import { effectLoggerLayer, type Logger, type LogLevel, makeLevelLogger } from "./Logging.js"
import { prometheusTextOf } from "./Metrics.js"
import { memoryPorts, type PortServices, type Ports } from "./Ports.js"
import {
  type EffectProducer,
  makeProducer,
  type OutgoingMessage,
  type Producer,
  type ProducerOptions,
  type SendOptions,
} from "./Producer.js"
import { decodeRedisOptions, type RedisOptions } from "./Redis.js"
import { listenersOf } from "./StreamListener.js"
import type { TelemetryOptions } from "./Telemetry.js"

/** A runtime's options, for `make` (Effect API) and `start` (docs/runtime.md, "Configuration"). */
export interface RuntimeOptions {
  /** Explicit members (`consumer`, `effectConsumer`). */
  readonly consumers?: ReadonlyArray<ConsumerDefinition>
  /** Instances of classes with `@StreamListener` methods. */
  readonly listeners?: ReadonlyArray<object>
  /**
   * `embedded` (default): this process is a lease-elected coordinator
   * candidate for each of its groups. `standalone`: a separate process runs
   * the coordinators (`shardline coordinator`, the bin of @shardline/member-runtime,
   * or `startCoordinator`).
   */
  readonly coordinator?: "embedded" | "standalone"
  /** Base of member ids (default: POD_IP, then HOSTNAME, then an interface address). */
  readonly memberBase?: string
  /** Graceful stop finishes within this long (default 30,000 ms). */
  readonly shutdownTimeoutMs?: number
  /** Capacity of each event listener's buffer (default 10,000). */
  readonly eventBufferCapacity?: number
  /** Subscribed before anything starts, so it sees every event. */
  readonly onEvent?: EventListener
  /**
   * The hub events go to (default: a new `makeEventHub`). Give several
   * runtimes one hub for one event stream in emission order; a custom hub's
   * `emit` must return at once (it runs on the members' fibers).
   */
  readonly eventHub?: EventHub
  /**
   * Where warnings and errors go (docs/runtime.md, "Logging"): pino,
   * bunyan, `console` (the default) or any `{ debug, info, warn, error }`
   * taking (fields, message).
   */
  readonly logger?: Logger | Console
  /** The least severe level written (default `warn`; `silent` writes nothing). */
  readonly logLevel?: LogLevel
  /**
   * OpenTelemetry (docs/observability.md): by default the runtime traces and
   * measures when `@opentelemetry/api` is installed and an SDK registered its
   * providers before the runtime started (or, with the Effect API, when the
   * Effect context has a tracer of its own). Give providers here to use them
   * instead of the global ones, or `false` for nothing at all.
   */
  readonly telemetry?: TelemetryOptions | false
}

/** `start`'s options: a runtime's, and where it runs (`ports`, or `redis`). */
export interface StartOptions extends RuntimeOptions {
  /** Default: fresh `memoryPorts()` (in-memory, this runtime only); not with `redis`. */
  readonly ports?: Ports
  /**
   * Run on Redis: `{ url: "redis://host:6379" }` or, for a cluster,
   * `{ nodes: ["host:7000", ...] }` (docs/runtime.md, "On Redis"). The same
   * as `ports: redisPorts(redis)`; validated before anything connects.
   */
  readonly redis?: RedisOptions
  /** Stop gracefully on SIGTERM and SIGINT, then exit the process (default true). */
  readonly handleSignals?: boolean
  /** Where metrics go (default: a registry of this runtime's own). */
  readonly metricRegistry?: Metric.MetricRegistry
  /**
   * Serve `/livez`, `/readyz` and `/metrics` on this port (docs/runtime.md,
   * "Health"); closed when the runtime stops. Off by default.
   */
  readonly http?: HttpOptions
}

/** One logical member, as the runtime sees it now. */
export interface MemberView {
  readonly memberId: string
  readonly stream: string
  readonly group: string
  readonly incarnation: number
  readonly phase: MemberMachine.Phase
  readonly memberEpoch: number
  readonly assignmentEpoch: number
  /** Shards it reads (or is starting to read). */
  readonly owned: ReadonlyArray<number>
  /** Local workers. */
  readonly workers: number
  /**
   * The last error the member met, if any: superseded, lease unusable, a
   * rejected or unanswered heartbeat (with its cause: `TransportError`,
   * `NoCoordinator`), a data-plane call Redis refused (NOPERM), or a
   * handler still running past its drain (`HandlerStuck`).
   */
  readonly lastError: MemberError | undefined
  /** When `lastError` happened (clock ms). */
  readonly lastErrorAt: number | undefined
  /** Turns per owned shard since it was started (fairness checks). */
  readonly turns: ReadonlyMap<number, number>
  /** Its circuit breakers (with `circuitBreaker`): the member's, or one per shard that has one. */
  readonly circuits: ReadonlyArray<BreakerView>
}

/** The runtime with Effect results. */
export interface EffectRuntime {
  readonly memberBase: string
  readonly members: () => ReadonlyArray<MemberView>
  /**
   * Live (heartbeat loops make progress) and ready (every member joined and a
   * coordinator answers it), with each member's details (docs/runtime.md, "Health").
   */
  readonly health: Effect.Effect<Health>
  readonly on: (listener: EventListener) => () => void
  /**
   * Stop reading a shard (it keeps its owner and its fence); works for shards
   * owned later too. A group this runtime does not consume fails `UnknownGroup`.
   */
  readonly pause: (
    stream: string,
    group: string,
    shard: number,
  ) => Effect.Effect<void, UnknownGroup>
  readonly resume: (
    stream: string,
    group: string,
    shard: number,
  ) => Effect.Effect<void, UnknownGroup>
  /**
   * Move the group's read position on a shard this process owns (XGROUP
   * SETID, fenced by the owner token): an entry id, `start` or `end`. It runs
   * between batches, before the shard's next read.
   */
  readonly seek: (
    stream: string,
    group: string,
    shard: number,
    position: string,
  ) => Effect.Effect<void, ShardNotOwned | SeekFailed | UnknownGroup>
  /**
   * A producer on `stream`. Raw (default): `send(key, fields)`; with `codec:
   * "json"` or a codec object, a producer of `T` values (docs/runtime.md,
   * "Typed messages").
   */
  readonly producer: {
    (
      stream: string,
      options?: Omit<Partial<ProducerOptions>, "codec"> & { readonly codec?: "raw" },
    ): Effect.Effect<EffectProducer, never, Scope.Scope>
    <T>(
      stream: string,
      options: Omit<Partial<ProducerOptions>, "codec"> & { readonly codec: "json" | Codec<T> },
    ): Effect.Effect<EffectProducer<T>, never, Scope.Scope>
  }
  /**
   * Close the group's circuit breakers in this process by hand (every
   * member's; a shard-scoped one only for `shard` when given): their shards
   * read again at once. True when one was open.
   */
  readonly resetCircuit: (
    stream: string,
    group: string,
    shard?: number,
  ) => Effect.Effect<boolean, UnknownGroup>
  /** The group's monitoring view, if this process is its coordinator now. */
  readonly monitor: (stream: string, group: string) => Effect.Effect<GroupMonitor | undefined>
  /** Leave every group (drain, leave, close) within `shutdownTimeoutMs`. Idempotent. */
  readonly stop: Effect.Effect<void>
  readonly events: EventHub
}

/** What each runtime traces and measures with, for `start`'s producers (not public: no OpenTelemetry type in the API). */
const telemetryOf = new WeakMap<EffectRuntime, Telemetry>()

const groupKeyString = (stream: string, group: string) => JSON.stringify([stream, group])

interface GroupRuntime {
  readonly spec: ConsumerSpec
  readonly members: Array<LogicalMember>
  readonly paused: Set<number>
}

interface Resolved {
  readonly o: typeof RuntimeOptionsSchema.Type
  readonly memberBase: string
  readonly shutdownTimeoutMs: number
  readonly specs: ReadonlyArray<ConsumerSpec>
}

/** Every check of the options that needs no port (so `start` runs them before connecting). */
const resolveOptions = (options: RuntimeOptions): Result.Result<Resolved, InvalidRuntimeConfig> => {
  const decoded = decodeOptions(RuntimeOptionsSchema, options, "")
  if (Result.isFailure(decoded)) return Result.fail(decoded.failure)
  const o = decoded.success
  const memberBase = o.memberBase ?? defaultMemberBase()
  const shutdownTimeoutMs = o.shutdownTimeoutMs ?? DEFAULTS.shutdownTimeoutMs
  const definitions: Array<{ readonly def: ConsumerDefinition; readonly label: string }> = []
  for (const [i, def] of (options.consumers ?? []).entries()) {
    if (!isConsumerDefinition(def))
      return Result.fail(
        invalid(`consumers[${i}]`, "must be made with consumer(...) or effectConsumer(...)"),
      )
    definitions.push({ def, label: `consumers[${i}]` })
  }
  for (const [i, instance] of (options.listeners ?? []).entries()) {
    const defs = typeof instance === "object" && instance !== null ? listenersOf(instance) : []
    if (defs.length === 0)
      return Result.fail(
        invalid(`listeners[${i}]`, "must be an instance of a class with @StreamListener methods"),
      )
    for (const def of defs) definitions.push({ def, label: def.label })
  }
  const specs: Array<ConsumerSpec> = []
  for (const { def, label } of definitions) {
    const spec = resolveDefinition(def, label, memberBase)
    if (Result.isFailure(spec)) return Result.fail(spec.failure)
    specs.push(spec.success)
  }
  const across = checkAcross(specs)
  if (Result.isFailure(across)) return Result.fail(across.failure)
  return Result.succeed({ o, memberBase, shutdownTimeoutMs, specs })
}

/** `start`, `end`, or a stream entry id (`<ms>-<seq>`, or `<ms>` for `<ms>-0`). */
const isPosition = (position: string): boolean =>
  position === "start" || position === "end" || /^\d{1,20}(-\d{1,20})?$/.test(position)

/**
 * A heartbeat of a standalone group that no coordinator serves: say so, and
 * how to start one with the group's settings (the transports' words for it:
 * "no coordinator serves ...").
 */
const noCoordinatorOr = (spec: ConsumerSpec, error: TransportError): HeartbeatFailure => {
  if (error.reason !== "Unavailable" || !error.message.includes("no coordinator serves"))
    return error
  const s = spec.settings
  return new NoCoordinator({
    stream: s.stream,
    group: s.group,
    message: `no coordinator serves group ${JSON.stringify(s.group)} of stream ${JSON.stringify(s.stream)}: its members run with coordinator: "standalone", so one must run elsewhere: shardline coordinator --redis <url> --stream ${s.stream} --group ${s.group} --shards ${s.shardCount} --session-timeout ${s.sessionTimeoutMs} --heartbeat-interval ${s.heartbeatIntervalMs} --rebalance-timeout ${s.rebalanceTimeoutMs} (the shardline bin of @shardline/member-runtime), or startCoordinator({ ports, groups: [...] }) in a process of your own, or drop coordinator: "standalone" to coordinate in this process. The members keep trying and join as soon as one serves`,
    cause: error,
  })
}

/**
 * The runtime (Effect API). Fails with `InvalidRuntimeConfig` before anything
 * starts; on Redis (a `RedisConnection` in context, as `redisPorts` gives),
 * with `PermissionDenied` when the ACL user may not run a command, or touch a
 * key or channel, that its groups need (redis-store `Acl.checkPermissions`;
 * a runtime without consumers: what its producers need,
 * `Acl.checkProducerPermissions`),
 * and `KeySchemaMismatch` when the namespace holds keys of another key
 * schema, an earlier version's unprefixed keys of its groups included
 * (redis-store `KeySchema.ensure`; docs/redis.md, "Keys").
 */
export const make = (
  options: RuntimeOptions,
): Effect.Effect<
  EffectRuntime,
  InvalidRuntimeConfig | PermissionDenied | KeySchemaMismatch | BackendUnavailable,
  Scope.Scope | PortServices
> =>
  Effect.gen(function* () {
    const resolved = resolveOptions(options)
    if (Result.isFailure(resolved)) return yield* Effect.fail(resolved.failure)
    const { o, memberBase, shutdownTimeoutMs, specs } = resolved.success

    // on Redis: the ACL user may run everything these groups need, before anything runs
    const redis = yield* Effect.serviceOption(RedisConnection.RedisConnection)
    // a runtime with producers only: what a producer needs (the commands and
    // the namespace's key pattern; its streams are named later, by
    // `runtime.producer`), as `createProducer` checks it (docs/redis.md, "ACL")
    if (Option.isSome(redis) && specs.length === 0)
      yield* Acl.checkProducerPermissions(redis.value, [])
    if (Option.isSome(redis) && specs.length > 0) {
      yield* Acl.checkPermissions(
        redis.value,
        specs.map((spec) => ({
          stream: spec.settings.stream,
          group: spec.settings.group,
          memberIds: spec.memberIds,
        })),
      )
      // and the namespace holds this version's keys (not an earlier layout's), recorded
      yield* KeySchema.ensure(
        redis.value,
        specs.map((spec) => ({ stream: spec.settings.stream, group: spec.settings.group })),
      )
    }

    // ports and scopes ------------------------------------------------------------
    const streams = yield* ShardStreams.ShardStreams
    const transport = yield* CoordinatorTransport.CoordinatorTransport
    const layouts = yield* Effect.serviceOption(StreamLayouts.StreamLayouts)
    // the stream's stored layout when the ports have one (it follows
    // reshards), else the declared shard counts at generation 0
    const defaultLayoutSource = (): LayoutSource.LayoutSource => {
      const declared = LayoutSource.fixed(
        Object.fromEntries(specs.map((s) => [s.settings.stream, s.settings.shardCount])),
      )
      return Option.isSome(layouts)
        ? LayoutSource.fromStreamLayouts(layouts.value, declared)
        : declared
    }
    const outer = yield* Scope.Scope
    const coordinatorScope = yield* Scope.fork(outer)
    const memberScope = yield* Scope.fork(outer)
    const clock = yield* Clock.Clock
    const hub =
      options.eventHub ??
      makeEventHub(o.eventBufferCapacity !== undefined ? { capacity: o.eventBufferCapacity } : {})
    if (options.onEvent !== undefined) hub.on(options.onEvent)
    // every event is logged and remembered on its way to the hub (src/internal/Observer.ts)
    const log = makeLevelLogger(options.logger, o.logLevel ?? "warn")
    const observer = makeObserver(hub, log)
    const events = observer.events
    const standalone = (o.coordinator ?? "embedded") === "standalone"
    const fence = yield* OwnerFence.make
    const telemetry = yield* resolveTelemetry(options.telemetry)
    const store = yield* Store.Store

    // coordinators ------------------------------------------------------------------
    const candidates = new Map<
      string,
      { readonly candidate: Candidate; readonly heartbeatIntervalMs: number }
    >()
    if ((o.coordinator ?? "embedded") === "embedded") {
      const holder = `${memberBase}#${nextIncarnation()}`
      for (const spec of specs) {
        const k = groupKeyString(spec.settings.stream, spec.settings.group)
        if (candidates.has(k)) continue
        const config: GroupConfig = {
          groupId: spec.settings.group,
          stream: spec.settings.stream,
          shardCount: spec.settings.shardCount,
          sessionTimeoutMs: spec.settings.sessionTimeoutMs,
          rebalanceTimeoutMs: spec.settings.rebalanceTimeoutMs,
          heartbeatIntervalMs: spec.settings.heartbeatIntervalMs,
          ...(spec.settings.startAt !== undefined ? { startAt: spec.settings.startAt } : {}),
        }
        const candidate = yield* runCandidate({ config, holder, transport, events }).pipe(
          Effect.provideService(OwnerFence.OwnerFence, fence),
          Effect.provideService(
            Store.Store,
            telemetry?.tracer === undefined ? store : tracedStore(store, telemetry.tracer, clock),
          ),
          Scope.provide(coordinatorScope),
        )
        candidates.set(k, { candidate, heartbeatIntervalMs: config.heartbeatIntervalMs })
      }
    }

    // handlers' transactions (docs/exactly-once.md): one send router for every
    // member, over the layout source the runtime's producers use
    const transactions: TransactionEnv = {
      port: streams.transactions,
      router: makeSendRouter(defaultLayoutSource()),
    }

    // members -----------------------------------------------------------------------
    const groups = new Map<string, GroupRuntime>()
    const all: Array<{ readonly member: LogicalMember; readonly spec: ConsumerSpec }> = []
    const host = memberBase
    for (const spec of specs) {
      const k = groupKeyString(spec.settings.stream, spec.settings.group)
      let g = groups.get(k)
      if (g === undefined) {
        g = { spec, members: [], paused: new Set() }
        groups.set(k, g)
      }
      const paused = g.paused
      for (const memberId of spec.memberIds) {
        const member = yield* makeLogicalMember({
          spec,
          memberId,
          incarnation: nextIncarnation(),
          instance: newInstance(),
          host,
          streams,
          transport,
          events,
          isPaused: (shard) => paused.has(shard),
          leaveTimeoutMs: shutdownTimeoutMs,
          ...(standalone
            ? { describeHeartbeatFailure: (e: TransportError) => noCoordinatorOr(spec, e) }
            : {}),
          telemetry,
          transactions,
        }).pipe(Scope.provide(memberScope))
        g.members.push(member)
        all.push({ member, spec })
      }
    }

    // telemetry from events and gauges: nothing on the members' path ----------------
    if (telemetry !== undefined) {
      const unsubscribe = observeEvents(telemetry, events)
      const instruments = telemetry.instruments
      const unobserve =
        instruments === undefined
          ? undefined
          : observeGauges(instruments, () =>
              all.map(({ member, spec }) => ({
                stream: spec.settings.stream,
                group: spec.settings.group,
                memberId: member.memberId,
                owned: member.hasLeft() ? () => [] : member.poller.progress,
              })),
            )
      yield* Scope.addFinalizer(
        outer,
        Effect.sync(() => {
          unobserve?.()
          // the last events (left, resigned) are still delivered: unsubscribe after them
          setTimeout(unsubscribe, 1_000).unref()
        }),
      )
    }

    // stop ----------------------------------------------------------------------------
    let stopping: Effect.Effect<void> | undefined
    let state: RuntimeState = "running"
    const stateOf = (member: LogicalMember, spec: ConsumerSpec) =>
      observer.member(spec.settings.stream, spec.settings.group, member.memberId)
    /**
     * A member no coordinator can answer: it never joined (or is fenced),
     * owns nothing and its last heartbeat failed; or its heartbeats fail in a
     * way waiting will not cure (no coordinator serves it, NOPERM). Its leave
     * would only wait out the deadline: it stops at once.
     */
    const unreachable = (member: LogicalMember, spec: ConsumerSpec) => {
      const state = stateOf(member, spec)
      if (state.hopeless) return true
      const lifecycle = member.machine.lifecycle
      return (
        state.heartbeatFailing &&
        (lifecycle === "joining" || lifecycle === "fenced") &&
        MemberMachine.ownedShards(member.machine).length === 0
      )
    }
    const stopOnce = Effect.gen(function* () {
      const cutOff = all.filter(({ member, spec }) => unreachable(member, spec))
      yield* Effect.forEach(
        cutOff,
        ({ member }) => member.stopNow("stopped: its coordinator cannot be reached"),
        { discard: true },
      )
      const leaving = all.filter((x) => !cutOff.includes(x))
      yield* Effect.forEach(leaving, ({ member }) => member.requestLeave, { discard: true })
      // leave while this process's coordinators still serve; a member whose
      // heartbeats turn hopeless meanwhile stops at once; force what is left at the deadline
      yield* Effect.timeoutOption(
        Effect.forEach(
          leaving,
          ({ member, spec }) =>
            Effect.raceFirst(
              member.left,
              Effect.andThen(
                Effect.repeat(Effect.sleep(50), {
                  until: () => stateOf(member, spec).hopeless,
                }),
                member.stopNow("stopped: its coordinator cannot be reached"),
              ),
            ),
          { concurrency: "unbounded", discard: true },
        ),
        Math.max(1, Math.floor(shutdownTimeoutMs * 0.9)),
      )
      const late = all.filter(({ member }) => !member.hasLeft())
      if (late.length > 0)
        log.log(
          "warn",
          { memberIds: late.map(({ member }) => member.memberId) },
          `${late.length} member(s) had not left at 90% of shutdownTimeoutMs (${shutdownTimeoutMs} ms): stopped at once, their handlers' signals aborted`,
        )
      yield* Effect.forEach(late, ({ member }) => member.stopNow("shutdown deadline"), {
        discard: true,
      })
      yield* Scope.close(memberScope, Exit.void)
      // A leading coordinator hands over only once the shards this process's
      // members released are granted to their next owners (bounded by a
      // heartbeat interval): their heartbeats, answered here, need not wait
      // for the successor (docs/protocol.md rule 20).
      yield* Effect.forEach(
        candidates.values(),
        ({ candidate, heartbeatIntervalMs }) => grantsSettled(candidate, heartbeatIntervalMs),
        { concurrency: "unbounded", discard: true },
      )
      yield* Scope.close(coordinatorScope, Exit.void)
    })
    /** Until every shard targeted to a live member is granted (at most a heartbeat interval). */
    const grantsSettled = (candidate: Candidate, heartbeatIntervalMs: number) => {
      const settled = Effect.map(candidate.host.state, (state) =>
        Option.match(state, {
          onNone: () => true,
          onSome: (s) => s.target.every((to, shard) => to === null || s.current[shard] !== null),
        }),
      )
      const poll: Effect.Effect<void> = Effect.suspend(() =>
        candidate.isServing()
          ? Effect.flatMap(settled, (done) =>
              done ? Effect.void : Effect.andThen(Effect.sleep(5), poll),
            )
          : Effect.void,
      )
      return Effect.timeoutOption(poll, Math.max(1, heartbeatIntervalMs))
    }
    const stop = Effect.suspend(() => {
      if (stopping === undefined) {
        state = "stopping"
        stopping = Effect.cached(
          Effect.ensuring(
            stopOnce,
            Effect.sync(() => {
              state = "stopped"
            }),
          ),
        ).pipe(Effect.runSync)
      }
      return stopping
    })
    yield* Scope.addFinalizer(outer, stop)

    const groupOf = (stream: string, group: string) => groups.get(groupKeyString(stream, group))
    const knownGroup = (
      stream: string,
      group: string,
    ): Effect.Effect<GroupRuntime, UnknownGroup> => {
      const g = groupOf(stream, group)
      return g !== undefined
        ? Effect.succeed(g)
        : Effect.fail(
            new UnknownGroup({
              stream,
              group,
              message: `this runtime does not consume group ${JSON.stringify(group)} of stream ${JSON.stringify(stream)} (it consumes ${
                [...groups.values()]
                  .map((x) => `${x.spec.settings.group} of ${x.spec.settings.stream}`)
                  .join(", ") || "no group"
              })`,
            }),
          )
    }
    const base = (stream: string, group: string, memberId: string) => ({
      stream,
      group,
      memberId,
      at: clock.currentTimeMillisUnsafe(),
    })
    const ownerOf = (g: GroupRuntime, shard: number) =>
      g.members.find((m) => m.poller.current(shard)?.alive === true)

    const health = Effect.sync(() =>
      healthOf(
        all.map(({ member, spec }) => ({
          memberId: member.memberId,
          stream: spec.settings.stream,
          group: spec.settings.group,
          phase: MemberMachine.phase(member.machine),
          left: member.hasLeft(),
          heartbeatEndedAt: member.heartbeatEndedAt(),
          coordinatorUnavailableSince: member.coordinatorUnavailableSince(),
          sessionTimeoutMs: spec.settings.sessionTimeoutMs,
          heartbeatIntervalMs: spec.settings.heartbeatIntervalMs,
          heartbeatTimeoutMs: spec.settings.heartbeatTimeoutMs,
        })),
        Time.monotonicMillisOf(clock),
        state,
      ),
    )

    const runtime: EffectRuntime = {
      memberBase,
      health,
      events,
      on: events.on,
      members: () =>
        all.map(({ member, spec }) => ({
          memberId: member.memberId,
          stream: spec.settings.stream,
          group: spec.settings.group,
          incarnation: member.incarnation,
          phase: MemberMachine.phase(member.machine),
          memberEpoch: member.machine.memberEpoch,
          assignmentEpoch: member.machine.assignmentEpoch,
          owned: MemberMachine.ownedShards(member.machine),
          workers: spec.workersPerMember,
          lastError: stateOf(member, spec).lastError ?? member.lastError(),
          lastErrorAt: stateOf(member, spec).lastErrorAt,
          turns: new Map([...member.poller.runners].map(([shard, r]) => [shard, r.turns])),
          circuits: member.poller.circuits(),
        })),
      pause: (stream, group, shard) =>
        Effect.map(knownGroup(stream, group), (g) => {
          if (g.paused.has(shard)) return
          g.paused.add(shard)
          events.emit({
            ...base(stream, group, ownerOf(g, shard)?.memberId ?? ""),
            type: "paused",
            shard,
          })
        }),
      resume: (stream, group, shard) =>
        Effect.map(knownGroup(stream, group), (g) => {
          if (!g.paused.delete(shard)) return
          for (const m of g.members) m.poller.resume(shard)
          events.emit({
            ...base(stream, group, ownerOf(g, shard)?.memberId ?? ""),
            type: "resumed",
            shard,
          })
        }),
      seek: (stream, group, shard, position) =>
        Effect.flatMap(knownGroup(stream, group), (g) => {
          if (!isPosition(position))
            return Effect.fail(
              new SeekFailed({
                stream,
                group,
                shard,
                message: `${JSON.stringify(position)} is no position: give "start", "end" or a stream entry id such as "1700000000000-0" (or "1700000000000")`,
              }),
            )
          const owner = ownerOf(g, shard)
          return owner === undefined
            ? Effect.fail(new ShardNotOwned({ stream, group, shard }))
            : owner.poller.seek(shard, position)
        }),
      producer: ((stream: string, producerOptions: Partial<ProducerOptions> = {}) =>
        makeProducer(
          streams,
          stream,
          { ...producerOptions, layout: producerOptions.layout ?? defaultLayoutSource() },
          telemetry?.tracer,
        )) as EffectRuntime["producer"],
      resetCircuit: (stream, group, shard) =>
        Effect.map(knownGroup(stream, group), (g) =>
          g.members.reduce((closed, m) => m.poller.resetCircuit(shard) || closed, false),
        ),
      monitor: (stream, group) => {
        const candidate = candidates.get(groupKeyString(stream, group))?.candidate
        return candidate === undefined
          ? Effect.succeed(undefined)
          : Effect.map(candidate.host.monitor, Option.getOrUndefined)
      },
      stop,
    }
    if (telemetry !== undefined) telemetryOf.set(runtime, telemetry)
    return runtime
  })

// ---------------------------------------------------------------------------
// Promise API

/** The runtime with Promise results. */
export interface ShardlineRuntime {
  readonly memberBase: string
  readonly members: () => ReadonlyArray<MemberView>
  /**
   * Live (heartbeat loops make progress) and ready (every member joined and a
   * coordinator answers it), with each member's details (docs/runtime.md, "Health").
   *
   * @example
   * const { live, ready, details } = runtime.health()
   * if (!ready) console.warn(details.flatMap((m) => m.reasons))
   */
  readonly health: () => Health
  /**
   * Serve `/livez`, `/readyz` and `/metrics` on `port` (docs/runtime.md,
   * "Health"), closed when the runtime stops; as the `http` option does.
   * Rejects with `InvalidRuntimeConfig` or `HealthServerFailed`.
   *
   * @example
   * const server = await runtime.serveHealth({ port: 9464 })
   * console.log(`${server.url}/readyz`)
   */
  readonly serveHealth: (options: HttpOptions) => Promise<HealthServer>
  /** The endpoint the `http` option started, if any. */
  readonly http: HealthServer | undefined
  /** Subscribe to events; returns the unsubscribe function. Listeners never block members. */
  readonly on: (listener: EventListener) => () => void
  /** Stop reading a shard; throws `UnknownGroup` for a group this runtime does not consume. */
  readonly pause: (stream: string, group: string, shard: number) => void
  readonly resume: (stream: string, group: string, shard: number) => void
  readonly seek: (stream: string, group: string, shard: number, position: string) => Promise<void>
  /** Close the group's circuit breakers by hand (a shard's only, with `shard`); true when one was open. */
  readonly resetCircuit: (stream: string, group: string, shard?: number) => boolean
  /**
   * A producer on `stream`, routed by the runtime's shard counts unless
   * `layout` is given. Raw (default): `send(key, fields)` with a string map.
   * Typed (`codec: "json"` or a codec object; docs/runtime.md, "Typed
   * messages"): `send(key, value)` with a `T`.
   *
   * @example
   * const orders = runtime.producer<{ amount: number }>("orders", { codec: "json" })
   * await orders.send("customer-42", { amount: 12.5 })
   */
  readonly producer: {
    (
      stream: string,
      options?: Omit<Partial<ProducerOptions>, "codec"> & { readonly codec?: "raw" },
    ): Producer
    <T>(
      stream: string,
      options: Omit<Partial<ProducerOptions>, "codec"> & { readonly codec: "json" | Codec<T> },
    ): Producer<T>
  }
  /** Prometheus text exposition of this runtime's metrics. */
  readonly metrics: () => Promise<string>
  readonly monitor: (stream: string, group: string) => Promise<GroupMonitor | undefined>
  /** Drain, leave every group and close, within `shutdownTimeoutMs`. Idempotent. */
  readonly stop: () => Promise<void>
  /** Resolves once the runtime has stopped (by `stop()` or a signal). */
  readonly stopped: Promise<void>
}

/** Run a synchronous Effect; its failure is thrown as the typed error itself. */
const runSyncOrThrow = <A, E>(effect: Effect.Effect<A, E>): A => {
  const exit = Effect.runSyncExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/**
 * Where a Promise producer's calls stop (docs/runtime.md, "Producer"): its
 * owner's `stop()` or `close()` closes the gate, and a call is admitted or
 * refused at the moment it is made, not when it runs (a microtask or more
 * later, once the producer is ready): a send called before `stop()` is
 * appended, and the owner waits for it (`drained`) before it closes the
 * ports; one called after is refused with `RuntimeStopped`, nothing written.
 */
export interface ProducerGate {
  /** Refuse every later call with `RuntimeStopped` (`message`). */
  readonly close: () => void
  readonly isClosed: () => boolean
  /** Admit a call made now (or refuse it); an admitted call is tracked until it settles. */
  readonly admit: <A>(call: () => Promise<A>) => Promise<A>
  /** Resolves once every admitted call has settled. */
  readonly drained: () => Promise<void>
}

export const makeProducerGate = (message: string): ProducerGate => {
  let closed = false
  const inflight = new Set<Promise<void>>()
  const drained = async (): Promise<void> => {
    // a call admitted while waiting (before close) is waited for too
    while (inflight.size > 0) await Promise.all(inflight)
  }
  return {
    close: () => {
      closed = true
    },
    isClosed: () => closed,
    admit: (call) => {
      if (closed) return Promise.reject(new RuntimeStopped({ message }))
      const result = call()
      const settled: Promise<void> = result.then(
        () => {
          inflight.delete(settled)
        },
        () => {
          inflight.delete(settled)
        },
      )
      inflight.add(settled)
      return result
    },
    drained,
  }
}

/**
 * Wrap an Effect producer whose construction is under way (a runtime's, or
 * a producer of its own: src/StandaloneProducer.ts); `gate` admits or
 * refuses each call when it is made.
 */
export const promiseProducer = (
  stream: string,
  ready: Promise<EffectProducer<unknown>>,
  run: <A, E>(effect: Effect.Effect<A, E>) => Promise<A>,
  telemetry: Telemetry | undefined,
  gate: ProducerGate,
): Producer<unknown> => {
  // the caller's active OpenTelemetry span, read at the call (the send runs
  // later, on the runtime's fibers), becomes the Effect parent of the send span
  const callerSpan = (): Tracer.ExternalSpan | undefined =>
    telemetry?.api === undefined || telemetry.tracer === undefined
      ? undefined
      : activeSpan(telemetry.api)
  // a producer made after stop() has no Effect producer; its calls say so
  ready.catch(() => undefined)
  const under = <A, E>(
    parent: Tracer.ExternalSpan | undefined,
    effect: Effect.Effect<A, E>,
  ): Effect.Effect<A, E> => (parent === undefined ? effect : Effect.withParentSpan(effect, parent))
  return {
    stream,
    send: (key: string, value: unknown, options?: SendOptions) =>
      gate.admit(() => {
        const parent = callerSpan()
        return ready.then((p) => run(under(parent, p.send(key, value, options))))
      }),
    sendBatch: (messages: ReadonlyArray<OutgoingMessage<unknown>>) =>
      gate.admit(() => {
        const parent = callerSpan()
        return ready.then((p) => run(under(parent, p.sendBatch(messages))))
      }),
    flush: () => gate.admit(() => ready.then((p) => run(p.flush))),
    close: () => gate.admit(() => ready.then((p) => run(p.close))),
  }
}

/**
 * Start a runtime (Promise API). Rejects with `InvalidRuntimeConfig` (naming
 * the field) before anything connects when a declaration is invalid, and
 * with `HealthServerFailed` (the runtime stopped again) when its `http`
 * endpoint cannot listen.
 */
export const start = async (options: StartOptions = {}): Promise<ShardlineRuntime> => {
  const { ports: given, redis, handleSignals = true, metricRegistry, http, ...rest } = options
  // every check before anything connects
  const resolved = resolveOptions(rest)
  if (Result.isFailure(resolved)) throw resolved.failure
  if (http !== undefined) {
    const invalidHttp = validateHttpOptions(http)
    if (invalidHttp !== undefined) throw invalidHttp
  }
  if (redis !== undefined && given !== undefined)
    throw invalid("redis", "give either redis or ports, not both")
  let ports: Ports
  if (redis !== undefined) {
    const decoded = decodeRedisOptions(redis)
    if (Result.isFailure(decoded)) throw decoded.failure
    ports = { layer: RedisPorts.layer(decoded.success) }
  } else ports = given ?? memoryPorts()
  const registry: Metric.MetricRegistry = metricRegistry ?? new Map()
  // Effect's own logs (the ports') go to the runtime's logger too
  const effectLogs = effectLoggerLayer(
    makeLevelLogger(rest.logger, resolved.success.o.logLevel ?? "warn"),
  )
  const managed = ManagedRuntime.make(
    Layer.mergeAll(
      // the ports' logs while they connect (the eviction warning: docs/redis.md,
      // "Eviction") go to the runtime's logger too
      (ports.layer as Layer.Layer<PortServices, never>).pipe(Layer.provide(effectLogs)),
      Layer.succeed(Metric.MetricRegistry, registry),
      effectLogs,
    ),
  )
  const scope = await managed.runPromise(Scope.make())
  let runtime: EffectRuntime
  try {
    runtime = await managed.runPromise(Scope.provide(make(rest), scope))
  } catch (error) {
    await managed.runPromise(Scope.close(scope, Exit.void))
    await managed.dispose()
    throw error
  }
  let resolveStopped!: () => void
  const stopped = new Promise<void>((resolve) => {
    resolveStopped = resolve
  })
  let stopPromise: Promise<void> | undefined
  const servers: Array<HealthServer> = []
  const onSignal = (signal: NodeJS.Signals) => {
    void stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(`shardline: stop after ${signal} failed`, error)
        process.exit(1)
      },
    )
  }
  // the producers' calls: refused from the call of stop() on, and those made
  // before it are appended before the ports close
  const producerGate = makeProducerGate("the runtime is stopped")
  const stop = (): Promise<void> => {
    if (stopPromise === undefined) {
      if (handleSignals) {
        process.off("SIGTERM", onSignal)
        process.off("SIGINT", onSignal)
      }
      producerGate.close()
      stopPromise = (async () => {
        try {
          // members leave while the producers' last sends are appended (each
          // append has its command deadline: docs/protocol.md rule 18); the
          // scope's close then flushes what is still queued (src/Producer.ts)
          const [left] = await Promise.allSettled([
            managed.runPromise(runtime.stop),
            producerGate.drained(),
          ])
          if (left.status === "rejected") throw left.reason
          await managed.runPromise(Scope.close(scope, Exit.void))
        } finally {
          // probes see the drain (ready false, live true) until the runtime has stopped
          await Promise.all(servers.map((s) => s.close()))
          await managed.dispose()
          resolveStopped()
        }
      })()
    }
    return stopPromise
  }
  if (handleSignals) {
    process.once("SIGTERM", onSignal)
    process.once("SIGINT", onSignal)
  }
  const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> =>
    stopPromise === undefined
      ? managed.runPromise(effect)
      : Promise.reject(new RuntimeStopped({ message: "the runtime is stopped" }))
  const health = (): Health => Effect.runSync(runtime.health)
  const metrics = () => prometheusTextOf(registry)
  const serve = async (httpOptions: HttpOptions): Promise<HealthServer> => {
    if (stopPromise !== undefined) throw new RuntimeStopped({ message: "the runtime is stopped" })
    const server = await serveHealth({ health, metrics }, httpOptions)
    servers.push(server)
    // stopped while it started listening: close it with the rest
    if (stopPromise !== undefined) await server.close()
    return server
  }
  let httpServer: HealthServer | undefined
  if (http !== undefined) {
    try {
      httpServer = await serve(http)
    } catch (error) {
      await stop()
      throw error as HealthServerFailed
    }
  }
  return {
    memberBase: runtime.memberBase,
    members: runtime.members,
    health,
    serveHealth: serve,
    http: httpServer,
    on: runtime.on,
    pause: (stream, group, shard) => {
      runSyncOrThrow(runtime.pause(stream, group, shard))
    },
    resume: (stream, group, shard) => {
      runSyncOrThrow(runtime.resume(stream, group, shard))
    },
    seek: (stream, group, shard, position) => run(runtime.seek(stream, group, shard, position)),
    resetCircuit: (stream, group, shard) =>
      runSyncOrThrow(runtime.resetCircuit(stream, group, shard)),
    producer: ((stream: string, producerOptions?: Partial<ProducerOptions>) =>
      promiseProducer(
        stream,
        run(
          Scope.provide(
            runtime.producer(
              stream,
              producerOptions as Partial<ProducerOptions> & {
                readonly codec: "json"
              },
            ),
            scope,
          ),
        ),
        (effect) => managed.runPromise(effect),
        telemetryOf.get(runtime),
        producerGate,
      )) as ShardlineRuntime["producer"],
    metrics,
    monitor: (stream, group) => run(runtime.monitor(stream, group)),
    stop,
    stopped,
  }
}
