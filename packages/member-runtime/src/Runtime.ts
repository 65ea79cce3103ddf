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
  StreamLayouts,
} from "@shardline/core"
import { RedisPorts } from "@shardline/redis-store"
import { Clock, Effect, Exit, Layer, ManagedRuntime, Metric, Option, Result, Scope } from "effect"
import { DEFAULTS, decodeOptions, invalid, RuntimeOptionsSchema } from "./Config.js"
import { type ConsumerDefinition, isConsumerDefinition } from "./Consumer.js"
import {
  type InvalidRuntimeConfig,
  RuntimeStopped,
  type SeekFailed,
  ShardNotOwned,
} from "./Errors.js"
import { type EventHub, type EventListener, makeEventHub } from "./Events.js"
import { memberBase as defaultMemberBase, newInstance, nextIncarnation } from "./Identity.js"
import { type Candidate, runCandidate } from "./internal/CoordinatorCandidate.js"
import {
  type LogicalMember,
  type MemberError,
  makeLogicalMember,
} from "./internal/LogicalMember.js"
import { type ConsumerSpec, checkAcross, resolveDefinition } from "./internal/spec.js"
import * as LayoutSource from "./LayoutSource.js"
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

export interface RuntimeOptions {
  /** Explicit members (`consumer`, `effectConsumer`). */
  readonly consumers?: ReadonlyArray<ConsumerDefinition>
  /** Instances of classes with `@StreamListener` methods. */
  readonly listeners?: ReadonlyArray<object>
  /**
   * `embedded` (default): this process is a lease-elected coordinator
   * candidate for each of its groups. `standalone`: a separate process runs
   * the coordinators (`shardline coordinator`, the bin of @shardline/redis-store,
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
}

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
  /** The last error the coordinator or the member's lease surfaced, if any. */
  /** The member's last error: superseded, lease unusable, a rejected request, a stuck handler. */
  readonly lastError: MemberError | undefined
  /** Turns per owned shard since it was started (fairness checks). */
  readonly turns: ReadonlyMap<number, number>
}

/** The runtime with Effect results. */
export interface EffectRuntime {
  readonly memberBase: string
  readonly members: () => ReadonlyArray<MemberView>
  readonly on: (listener: EventListener) => () => void
  /** Stop reading a shard (it keeps its owner and its fence); works for shards owned later too. */
  readonly pause: (stream: string, group: string, shard: number) => Effect.Effect<void>
  readonly resume: (stream: string, group: string, shard: number) => Effect.Effect<void>
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
  ) => Effect.Effect<void, ShardNotOwned | SeekFailed>
  readonly producer: (
    stream: string,
    options?: Partial<ProducerOptions>,
  ) => Effect.Effect<EffectProducer, never, Scope.Scope>
  /** The group's monitoring view, if this process is its coordinator now. */
  readonly monitor: (stream: string, group: string) => Effect.Effect<GroupMonitor | undefined>
  /** Leave every group (drain, leave, close) within `shutdownTimeoutMs`. Idempotent. */
  readonly stop: Effect.Effect<void>
  readonly events: EventHub
}

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

/** The runtime (Effect API). Fails with `InvalidRuntimeConfig` before anything starts. */
export const make = (
  options: RuntimeOptions,
): Effect.Effect<EffectRuntime, InvalidRuntimeConfig, Scope.Scope | PortServices> =>
  Effect.gen(function* () {
    const resolved = resolveOptions(options)
    if (Result.isFailure(resolved)) return yield* Effect.fail(resolved.failure)
    const { o, memberBase, shutdownTimeoutMs, specs } = resolved.success

    // ports and scopes ------------------------------------------------------------
    const streams = yield* ShardStreams.ShardStreams
    const transport = yield* CoordinatorTransport.CoordinatorTransport
    const layouts = yield* Effect.serviceOption(StreamLayouts.StreamLayouts)
    const outer = yield* Scope.Scope
    const coordinatorScope = yield* Scope.fork(outer)
    const memberScope = yield* Scope.fork(outer)
    const clock = yield* Clock.Clock
    const events =
      options.eventHub ??
      makeEventHub(o.eventBufferCapacity !== undefined ? { capacity: o.eventBufferCapacity } : {})
    if (options.onEvent !== undefined) events.on(options.onEvent)
    const fence = yield* OwnerFence.make

    // coordinators ------------------------------------------------------------------
    const candidates = new Map<string, Candidate>()
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
        }
        const candidate = yield* runCandidate({ config, holder, transport, events }).pipe(
          Effect.provideService(OwnerFence.OwnerFence, fence),
          Scope.provide(coordinatorScope),
        )
        candidates.set(k, candidate)
      }
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
        }).pipe(Scope.provide(memberScope))
        g.members.push(member)
        all.push({ member, spec })
      }
    }

    // stop ----------------------------------------------------------------------------
    let stopping: Effect.Effect<void> | undefined
    const stopOnce = Effect.gen(function* () {
      yield* Effect.forEach(all, ({ member }) => member.requestLeave, { discard: true })
      // leave while this process's coordinators still serve; force what is left at the deadline
      yield* Effect.timeoutOption(
        Effect.forEach(all, ({ member }) => member.left, {
          concurrency: "unbounded",
          discard: true,
        }),
        Math.max(1, Math.floor(shutdownTimeoutMs * 0.9)),
      )
      yield* Effect.forEach(
        all.filter(({ member }) => !member.hasLeft()),
        ({ member }) => member.stopNow("shutdown deadline"),
        { discard: true },
      )
      yield* Scope.close(memberScope, Exit.void)
      yield* Scope.close(coordinatorScope, Exit.void)
    })
    const stop = Effect.suspend(() => {
      if (stopping === undefined) stopping = Effect.cached(stopOnce).pipe(Effect.runSync)
      return stopping
    })
    yield* Scope.addFinalizer(outer, stop)

    const groupOf = (stream: string, group: string) => groups.get(groupKeyString(stream, group))
    const base = (stream: string, group: string, memberId: string) => ({
      stream,
      group,
      memberId,
      at: clock.currentTimeMillisUnsafe(),
    })
    const ownerOf = (g: GroupRuntime, shard: number) =>
      g.members.find((m) => m.poller.current(shard)?.alive === true)

    const runtime: EffectRuntime = {
      memberBase,
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
          lastError: member.lastError(),
          turns: new Map([...member.poller.runners].map(([shard, r]) => [shard, r.turns])),
        })),
      pause: (stream, group, shard) =>
        Effect.sync(() => {
          const g = groupOf(stream, group)
          if (g === undefined || g.paused.has(shard)) return
          g.paused.add(shard)
          events.emit({
            ...base(stream, group, ownerOf(g, shard)?.memberId ?? ""),
            type: "paused",
            shard,
          })
        }),
      resume: (stream, group, shard) =>
        Effect.sync(() => {
          const g = groupOf(stream, group)
          if (g === undefined || !g.paused.delete(shard)) return
          for (const m of g.members) m.poller.resume(shard)
          events.emit({
            ...base(stream, group, ownerOf(g, shard)?.memberId ?? ""),
            type: "resumed",
            shard,
          })
        }),
      seek: (stream, group, shard, position) =>
        Effect.suspend(() => {
          const g = groupOf(stream, group)
          const owner = g === undefined ? undefined : ownerOf(g, shard)
          return owner === undefined
            ? Effect.fail(new ShardNotOwned({ stream, group, shard }))
            : owner.poller.seek(shard, position)
        }),
      producer: (stream, producerOptions = {}) => {
        // the stream's stored layout when the ports have one (it follows
        // reshards), else the declared shard counts at generation 0
        const declared = LayoutSource.fixed(
          Object.fromEntries(specs.map((s) => [s.settings.stream, s.settings.shardCount])),
        )
        return makeProducer(streams, stream, {
          ...producerOptions,
          layout:
            producerOptions.layout ??
            (Option.isSome(layouts)
              ? LayoutSource.fromStreamLayouts(layouts.value, declared)
              : declared),
        })
      },
      monitor: (stream, group) => {
        const candidate = candidates.get(groupKeyString(stream, group))
        return candidate === undefined
          ? Effect.succeed(undefined)
          : Effect.map(candidate.host.monitor, Option.getOrUndefined)
      },
      stop,
    }
    return runtime
  })

// ---------------------------------------------------------------------------
// Promise API

/** The runtime with Promise results. */
export interface ShardlineRuntime {
  readonly memberBase: string
  readonly members: () => ReadonlyArray<MemberView>
  /** Subscribe to events; returns the unsubscribe function. Listeners never block members. */
  readonly on: (listener: EventListener) => () => void
  readonly pause: (stream: string, group: string, shard: number) => void
  readonly resume: (stream: string, group: string, shard: number) => void
  readonly seek: (stream: string, group: string, shard: number, position: string) => Promise<void>
  /** A producer on `stream`, routed by the runtime's shard counts unless `layout` is given. */
  readonly producer: (stream: string, options?: Partial<ProducerOptions>) => Producer
  /** Prometheus text exposition of this runtime's metrics. */
  readonly metrics: () => Promise<string>
  readonly monitor: (stream: string, group: string) => Promise<GroupMonitor | undefined>
  /** Drain, leave every group and close, within `shutdownTimeoutMs`. Idempotent. */
  readonly stop: () => Promise<void>
  /** Resolves once the runtime has stopped (by `stop()` or a signal). */
  readonly stopped: Promise<void>
}

/** Wrap an Effect producer whose construction is under way. */
const promiseProducer = (
  stream: string,
  ready: Promise<EffectProducer>,
  run: <A, E>(effect: Effect.Effect<A, E>) => Promise<A>,
): Producer => ({
  stream,
  send: (key: string, fields?: Readonly<Record<string, string>>, options?: SendOptions) =>
    ready.then((p) => run(p.send(key, fields, options))),
  sendBatch: (messages: ReadonlyArray<OutgoingMessage>) =>
    ready.then((p) => run(p.sendBatch(messages))),
  flush: () => ready.then((p) => run(p.flush)),
  close: () => ready.then((p) => run(p.close)),
})

/**
 * Start a runtime (Promise API). Rejects with `InvalidRuntimeConfig` (naming
 * the field) before anything connects when a declaration is invalid.
 */
export const start = async (options: StartOptions = {}): Promise<ShardlineRuntime> => {
  const { ports: given, redis, handleSignals = true, metricRegistry, ...rest } = options
  // every check before anything connects
  const resolved = resolveOptions(rest)
  if (Result.isFailure(resolved)) throw resolved.failure
  if (redis !== undefined && given !== undefined)
    throw invalid("redis", "give either redis or ports, not both")
  let ports: Ports
  if (redis !== undefined) {
    const decoded = decodeRedisOptions(redis)
    if (Result.isFailure(decoded)) throw decoded.failure
    ports = { layer: RedisPorts.layer(decoded.success) }
  } else ports = given ?? memoryPorts()
  const registry: Metric.MetricRegistry = metricRegistry ?? new Map()
  const managed = ManagedRuntime.make(
    Layer.merge(
      ports.layer as Layer.Layer<PortServices, never>,
      Layer.succeed(Metric.MetricRegistry, registry),
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
  const onSignal = (signal: NodeJS.Signals) => {
    void stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(`shardline: stop after ${signal} failed`, error)
        process.exit(1)
      },
    )
  }
  const stop = (): Promise<void> => {
    if (stopPromise === undefined) {
      if (handleSignals) {
        process.off("SIGTERM", onSignal)
        process.off("SIGINT", onSignal)
      }
      stopPromise = (async () => {
        try {
          await managed.runPromise(runtime.stop)
          await managed.runPromise(Scope.close(scope, Exit.void))
        } finally {
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
  return {
    memberBase: runtime.memberBase,
    members: runtime.members,
    on: runtime.on,
    pause: (stream, group, shard) => {
      Effect.runSync(runtime.pause(stream, group, shard))
    },
    resume: (stream, group, shard) => {
      Effect.runSync(runtime.resume(stream, group, shard))
    },
    seek: (stream, group, shard, position) => run(runtime.seek(stream, group, shard, position)),
    producer: (stream, producerOptions) =>
      promiseProducer(
        stream,
        run(Scope.provide(runtime.producer(stream, producerOptions), scope)),
        run,
      ),
    metrics: () => prometheusTextOf(registry),
    monitor: (stream, group) => run(runtime.monitor(stream, group)),
    stop,
    stopped,
  }
}
