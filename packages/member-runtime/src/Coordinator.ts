/**
 * The standalone coordinator (docs/runtime.md, "Coordinator placement"): a
 * process that only coordinates. It runs the same lease-elected candidate as
 * the embedded default for each group, on whatever ports it is given; member
 * runtimes then use `coordinator: "standalone"`. Several standalone
 * processes may run: one holds each group's lease, the others wait.
 *
 * @example
 * const coordinator = await startCoordinator({
 *   ports: redisPorts({ url }), // shared with the members
 *   groups: [{ stream: "orders", group: "billing", shardCount: 16 }],
 * })
 * await coordinator.stop()
 */
import {
  CoordinatorTransport,
  decodeGroupConfig,
  type GroupConfig,
  type InvalidGroupConfig,
  OwnerFence,
  type StartAt,
  Store,
} from "@shardline/core"
import { Clock, Effect, Exit, type Layer, ManagedRuntime, Scope } from "effect"
import { DEFAULTS } from "./Config.js"
import { type EventHub, type EventListener, makeEventHub } from "./Events.js"
import { memberBase, nextIncarnation } from "./Identity.js"
import { type Candidate, runCandidate } from "./internal/CoordinatorCandidate.js"
import { tracedStore } from "./internal/telemetry/coordinatorSpans.js"
import { observeEvents, resolveTelemetry } from "./internal/telemetry/Telemetry.js"
import { memoryPorts, type PortServices, type Ports } from "./Ports.js"
import type { TelemetryOptions } from "./Telemetry.js"

/** A group a standalone coordinator serves, with the group's settings (they must match its members'). */
export interface CoordinatedGroup {
  readonly stream: string
  readonly group: string
  /** Shards of the stream (generation 0) when the group is created (default 16). */
  readonly shardCount?: number
  readonly sessionTimeoutMs?: number
  readonly rebalanceTimeoutMs?: number
  readonly heartbeatIntervalMs?: number
  /** Where the group starts on each shard when it is created (docs/runtime.md, "Where a new group starts"; default earliest). */
  readonly startAt?: StartAt
}

/** Options of a standalone coordinator (`startCoordinator`, `makeCoordinator`; docs/runtime.md, "Coordinator placement"). */
export interface CoordinatorOptions {
  readonly groups: ReadonlyArray<CoordinatedGroup>
  /** The lease holder's name (default: the process's base id + a new incarnation). */
  readonly holder?: string
  readonly eventHub?: EventHub
  /** OpenTelemetry providers, or `false` for none (as the runtime's, docs/observability.md). */
  readonly telemetry?: TelemetryOptions | false
}

/** A running standalone coordinator: the lease holder's name and the groups it serves now. */
export interface EffectCoordinator {
  readonly holder: string
  /** Groups whose lease this process holds now. */
  readonly serving: () => ReadonlyArray<{ readonly stream: string; readonly group: string }>
}

/** The group config a coordinated group stands for, validated (names the bad field). */
export const groupConfigOf = (
  g: CoordinatedGroup,
): Effect.Effect<GroupConfig, InvalidGroupConfig> =>
  decodeGroupConfig({
    groupId: g.group,
    stream: g.stream,
    shardCount: g.shardCount ?? DEFAULTS.shardCount,
    sessionTimeoutMs: g.sessionTimeoutMs ?? DEFAULTS.sessionTimeoutMs,
    rebalanceTimeoutMs: g.rebalanceTimeoutMs ?? DEFAULTS.rebalanceTimeoutMs,
    heartbeatIntervalMs: g.heartbeatIntervalMs ?? DEFAULTS.heartbeatIntervalMs,
    ...(g.startAt !== undefined ? { startAt: g.startAt } : {}),
  })

/** Run a coordinator candidate for each group until the scope closes (Effect API). */
export const makeCoordinator = (
  options: CoordinatorOptions,
): Effect.Effect<EffectCoordinator, InvalidGroupConfig, Scope.Scope | PortServices> =>
  Effect.gen(function* () {
    const holder = options.holder ?? `${memberBase()}#${nextIncarnation()}`
    const transport = yield* CoordinatorTransport.CoordinatorTransport
    const fence = yield* OwnerFence.make
    const configs = yield* Effect.forEach(options.groups, groupConfigOf)
    const telemetry = yield* resolveTelemetry(options.telemetry)
    const store = yield* Store.Store
    const clock = yield* Clock.Clock
    if (telemetry !== undefined && options.eventHub !== undefined) {
      const unsubscribe = observeEvents(telemetry, options.eventHub)
      yield* Effect.addFinalizer(() => Effect.sync(unsubscribe))
    }
    const candidates: Array<Candidate> = []
    for (const config of configs)
      candidates.push(
        yield* runCandidate({
          config,
          holder,
          transport,
          ...(options.eventHub !== undefined ? { events: options.eventHub } : {}),
        }).pipe(
          Effect.provideService(OwnerFence.OwnerFence, fence),
          Effect.provideService(
            Store.Store,
            telemetry?.tracer === undefined ? store : tracedStore(store, telemetry.tracer, clock),
          ),
        ),
      )
    return {
      holder,
      serving: () =>
        candidates
          .filter((c) => c.isServing())
          .map((c) => ({ stream: c.host.key.stream, group: c.host.key.group })),
    }
  })

/** A running standalone coordinator (Promise API): `stop()` gives its leases up and closes. */
export interface StandaloneCoordinator extends EffectCoordinator {
  readonly stop: () => Promise<void>
}

/** Start a standalone coordinator (Promise API); default ports: fresh `memoryPorts()`. */
export const startCoordinator = async (
  options: CoordinatorOptions & { readonly ports?: Ports; readonly onEvent?: EventListener },
): Promise<StandaloneCoordinator> => {
  const ports = options.ports ?? memoryPorts()
  const managed = ManagedRuntime.make(ports.layer as Layer.Layer<PortServices>)
  const scope = await managed.runPromise(Scope.make())
  const hub = options.eventHub ?? makeEventHub()
  if (options.onEvent !== undefined) hub.on(options.onEvent)
  try {
    const coordinator = await managed.runPromise(
      Scope.provide(makeCoordinator({ ...options, eventHub: hub }), scope),
    )
    return {
      ...coordinator,
      stop: async () => {
        await managed.runPromise(Scope.close(scope, Exit.void))
        await managed.dispose()
      },
    }
  } catch (error) {
    await managed.runPromise(Scope.close(scope, Exit.void))
    await managed.dispose()
    throw error
  }
}
