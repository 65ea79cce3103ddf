/**
 * Several runtimes (the Effect API `make`) sharing one set of memory ports,
 * as several processes share one Redis, on effect's TestClock. Every runtime
 * emits into one synchronous event log, and every handler call is recorded
 * in the same log at the moment it runs, so the tests can check ownership
 * intervals against handling in one order.
 */
import {
  CoordinatorLease,
  type CoordinatorTransport,
  type HeartbeatRequest,
  type HeartbeatResponse,
  Layout,
  ShardStreams,
  Store,
  StreamLayouts,
  TransportError,
} from "@shardline/core"
import { CoordinatorTransport as TestingTransport } from "@shardline/core/testing"
import { Context, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { TestClock } from "effect/testing"
import { type ConsumerOptions, consumer } from "../../src/Consumer.js"
import type { EventHub, RuntimeEvent } from "../../src/Events.js"
import { KEY_FIELD, type Message } from "../../src/Message.js"
import type { PortServices } from "../../src/Ports.js"
import type { EffectProducer } from "../../src/Producer.js"
import { type EffectRuntime, make, type RuntimeOptions } from "../../src/Runtime.js"

export const stream = "orders"
export const group = "g"

/** Fast group timing for tests (validated like any user's). */
export const timing = {
  shardCount: 12,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 4_000,
  heartbeatIntervalMs: 300,
  safetyMarginMs: 600,
} as const

export type Entry =
  | { readonly kind: "event"; readonly event: RuntimeEvent }
  | {
      readonly kind: "handle"
      readonly memberId: string
      readonly shard: number
      readonly id: string
      readonly key: string | undefined
      readonly n: number
      readonly deliveryCount: number
    }

export interface WorldOptions {
  readonly shardCount?: number
  readonly transportTimeoutMs?: number
  /** Rewrite a response on its way to a member (fault injection). */
  readonly rewrite?: (request: HeartbeatRequest, response: HeartbeatResponse) => HeartbeatResponse
  /** The data plane the runtimes see, from the memory one (fault injection: a call that hangs). */
  readonly streams?: (memory: ShardStreams.ShardStreamsShape) => ShardStreams.ShardStreamsShape
}

export const makeWorld = (options: WorldOptions = {}) =>
  Effect.gen(function* () {
    const outer = yield* Scope.Scope
    const { transport: memoryTransport, faults } = yield* TestingTransport.makeMemory({
      timeoutMs: options.transportTimeoutMs ?? 1_000,
    })
    const requests: Array<HeartbeatRequest> = []
    /** Member id prefixes whose heartbeats fail: a process that crashed, as the coordinator sees it. */
    const cut = new Set<string>()
    const transport: CoordinatorTransport.CoordinatorTransportShape = {
      ...memoryTransport,
      heartbeat: (request) =>
        [...cut].some((prefix) => request.memberId.startsWith(prefix))
          ? Effect.fail(
              new TransportError({
                reason: "Unavailable",
                message: `${request.memberId} is cut off`,
              }),
            )
          : Effect.map(
              Effect.andThen(
                Effect.sync(() => requests.push(request)),
                memoryTransport.heartbeat(request),
              ),
              (response) => options.rewrite?.(request, response) ?? response,
            ),
    }
    const streams = yield* ShardStreams.makeMemory
    const store = yield* Store.makeMemory
    const lease = yield* CoordinatorLease.makeMemory
    const layouts = yield* StreamLayouts.makeMemory
    const context = Context.make(
      ShardStreams.ShardStreams,
      options.streams?.(streams) ?? streams,
    ).pipe(
      Context.add(TestingTransport.CoordinatorTransport, transport),
      Context.add(Store.Store, store),
      Context.add(CoordinatorLease.CoordinatorLease, lease),
      Context.add(StreamLayouts.StreamLayouts, layouts),
    )
    const ports = Layer.succeedContext(context) as Layer.Layer<PortServices>

    const log: Array<Entry> = []
    const hub: EventHub = {
      emit: (event) => {
        log.push({ kind: "event", event })
      },
      on: () => () => {},
      stats: () => ({ dropped: 0, listenerErrors: 0 }),
    }

    const shardCount = options.shardCount ?? timing.shardCount
    const generation = { generation: 0, firstShard: 0, shardCount }
    let produced = 0
    const producedByKey = new Map<string, Array<number>>()

    /** Append `count` messages round-robin over `keys` keys, routed by `Layout.shardOf`. */
    const produce = (count: number, keys = 20) =>
      Effect.gen(function* () {
        for (let i = 0; i < count; i++) {
          const n = produced++
          const key = `key-${n % keys}`
          const shard = Layout.shardOf(generation, key)
          yield* streams.append(stream, shard, { [KEY_FIELD]: key, n: String(n) })
          producedByKey.set(key, [...(producedByKey.get(key) ?? []), n])
        }
      })

    /** Send `count` keyed messages through a producer (it routes by the stream's layout). */
    const produceVia = (producer: EffectProducer, count: number, keys = 20) =>
      Effect.gen(function* () {
        for (let i = 0; i < count; i++) {
          const n = produced++
          const key = `key-${n % keys}`
          yield* Effect.orDie(producer.send(key, { n: String(n) }))
          producedByKey.set(key, [...(producedByKey.get(key) ?? []), n])
        }
      })

    /** A consumer that records every handler call; `handle` may add behaviour. */
    const recordingConsumer = (
      extra: Partial<Omit<ConsumerOptions, "eachMessage" | "eachBatch">> & {
        readonly handle?: (m: Message, ctx: { signal: AbortSignal }) => unknown
      } = {},
    ) => {
      const { handle, ...rest } = extra
      return consumer({
        stream,
        group,
        ...timing,
        shardCount,
        ...rest,
        eachMessage: (m, ctx) => {
          log.push({
            kind: "handle",
            memberId: ctx.memberId,
            shard: m.shard,
            id: m.id,
            key: m.key,
            n: Number(m.fields.n),
            deliveryCount: m.deliveryCount,
          })
          return handle?.(m, ctx) as void | Promise<void>
        },
      })
    }

    interface Running {
      readonly name: string
      readonly runtime: EffectRuntime
      readonly scope: Scope.Closeable
    }

    /** Start a runtime (`memberBase` = name) on the shared ports, in its own scope. */
    const startRuntime = (name: string, runtimeOptions: RuntimeOptions) =>
      Effect.gen(function* () {
        const scope = yield* Scope.fork(outer)
        const runtime = yield* make({
          memberBase: name,
          eventHub: hub,
          ...runtimeOptions,
        }).pipe(Effect.provide(ports), Scope.provide(scope))
        return { name, runtime, scope } satisfies Running
      })

    /** Stop a runtime gracefully, advancing the clock until it has stopped. */
    const stopRuntime = (r: Running, stepMs = 10, maxSteps = 10_000) =>
      Effect.gen(function* () {
        const fiber = yield* Effect.forkChild(
          Effect.andThen(r.runtime.stop, Scope.close(r.scope, Exit.void)),
        )
        for (let i = 0; i < maxSteps && fiber.pollUnsafe() === undefined; i++)
          yield* TestClock.adjust(stepMs)
        yield* Fiber.join(fiber)
      })

    const runUntil = (what: string, done: () => boolean, maxSteps = 20_000, stepMs = 10) =>
      Effect.gen(function* () {
        for (let i = 0; i < maxSteps; i++) {
          if (done()) return i
          yield* TestClock.adjust(stepMs)
        }
        if (done()) return maxSteps
        return yield* Effect.die(new Error(`not reached after ${maxSteps} steps: ${what}`))
      })

    const handles = () => log.flatMap((e) => (e.kind === "handle" ? [e] : []))
    const events = () => log.flatMap((e) => (e.kind === "event" ? [e.event] : []))
    const eventsOf = <T extends RuntimeEvent["type"]>(type: T) =>
      events().filter((e): e is Extract<RuntimeEvent, { type: T }> => e.type === type)
    /** Every produced message handled at least once. */
    const allHandled = () => new Set(handles().map((h) => h.n)).size === produced

    return {
      streams,
      transport,
      faults,
      /** Every heartbeat of members whose id starts with `prefix` fails from now on (a crash). */
      cut: (prefix: string) => {
        cut.add(prefix)
      },
      store,
      lease,
      layouts,
      requests,
      log,
      shardCount,
      produce,
      produceVia,
      recordingConsumer,
      startRuntime,
      stopRuntime,
      runUntil,
      handles,
      events,
      eventsOf,
      allHandled,
      produced: () => produced,
      producedByKey,
    }
  })

export type World = Effect.Success<ReturnType<typeof makeWorld>>

// ---------------------------------------------------------------------------
// checks over the log

/**
 * Ownership intervals from `assigned` to `revoked` / `lost` / `left`: no two
 * members hold a shard at once, and every handler call runs inside its
 * member's interval for that shard.
 */
export const ownershipProblems = (log: ReadonlyArray<Entry>): Array<string> => {
  const holder = new Map<string, string>() // stream/group/shard -> member
  const problems: Array<string> = []
  const k = (shard: number) => String(shard)
  log.forEach((e, i) => {
    if (e.kind === "handle") {
      if (holder.get(k(e.shard)) !== e.memberId)
        problems.push(`#${i}: ${e.memberId} handles shard ${e.shard} it does not hold`)
      return
    }
    const ev = e.event
    switch (ev.type) {
      case "assigned": {
        const other = holder.get(k(ev.shard))
        if (other !== undefined && other !== ev.memberId)
          problems.push(`#${i}: ${ev.memberId} gets shard ${ev.shard} while ${other} holds it`)
        holder.set(k(ev.shard), ev.memberId)
        break
      }
      case "revoked":
        if (holder.get(k(ev.shard)) === ev.memberId) holder.delete(k(ev.shard))
        break
      case "lost":
        for (const shard of ev.shards)
          if (holder.get(k(shard)) === ev.memberId) holder.delete(k(shard))
        break
      default:
        break
    }
  })
  return problems
}

/** Per key, handled messages in production order, each handled once (no re-delivery). */
export const orderProblems = (
  log: ReadonlyArray<Entry>,
  producedByKey: ReadonlyMap<string, ReadonlyArray<number>>,
  { allowRedelivery = false } = {},
): Array<string> => {
  const problems: Array<string> = []
  const byKey = new Map<string, Array<number>>()
  for (const e of log)
    if (e.kind === "handle" && e.key !== undefined)
      byKey.set(e.key, [...(byKey.get(e.key) ?? []), e.n])
  for (const [key, ns] of byKey) {
    const expected = producedByKey.get(key) ?? []
    if (!allowRedelivery) {
      if (ns.join() !== expected.slice(0, ns.length).join())
        problems.push(`${key}: handled ${ns.join(",")} but produced ${expected.join(",")}`)
      continue
    }
    // at-least-once: a re-delivery may go back to an earlier message, never skip ahead
    let prev = -1
    for (const n of ns) {
      const pos = expected.indexOf(n)
      if (pos > prev + 1) problems.push(`${key}: ${n} handled before an earlier message`)
      prev = pos
    }
  }
  return problems
}
