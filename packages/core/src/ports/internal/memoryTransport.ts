/**
 * The in-process CoordinatorTransport with its fault hooks. The public port
 * module hands out only the transport; `@shardline/core/testing` also the
 * hooks.
 */
import { Deferred, Effect, Fiber, Queue, Schema, Stream } from "effect"
import { TransportError } from "../../Errors.js"
import { HeartbeatResponse } from "../../protocol/Heartbeat.js"
import { monotonicMillis } from "../../time/Instant.js"
import type {
  CoordinatorTransportShape,
  HeartbeatHandler,
  Serving,
} from "../CoordinatorTransport.js"
import { type GroupKey, groupKeyString } from "../GroupKey.js"

export interface MemoryTransportOptions {
  /** How long a member waits for a response before a Timeout (default 5000 ms). */
  readonly timeoutMs?: number
  /**
   * After a serve's scope closes, requests wait this long for a successor's
   * serve instead of failing Unavailable (default 2000 ms; docs/protocol.md rule 20).
   */
  readonly handoverMs?: number
}

/** Fault injection for the in-memory transport (tests and simulations). */
export interface TransportFaultsShape {
  /** The next `n` requests are lost before reaching the coordinator (member times out). */
  readonly dropRequests: (n: number) => Effect.Effect<void>
  /** The coordinator handles the next `n` requests, but their responses are lost (member times out). */
  readonly dropResponses: (n: number) => Effect.Effect<void>
  /** Delay every response by `ms`; at or beyond the timeout the member times out instead. */
  readonly delayResponses: (ms: number) => Effect.Effect<void>
  /** How many requests reached a coordinator handler. */
  readonly handled: Effect.Effect<number>
}

const decodeResponse = Schema.decodeUnknownEffect(HeartbeatResponse)

/** Simulates the wire: only JSON survives the trip. */
const wire = (value: unknown): unknown => JSON.parse(JSON.stringify(value))

export const makeMemoryTransport = (
  options: MemoryTransportOptions = {},
): Effect.Effect<{
  readonly transport: CoordinatorTransportShape
  readonly faults: TransportFaultsShape
}> =>
  Effect.sync(() => {
    const timeoutMs = options.timeoutMs ?? 5_000
    const handoverMs = options.handoverMs ?? 2_000
    const handlers = new Map<
      string,
      { readonly handler: HeartbeatHandler; readonly replaced: Deferred.Deferred<void> }
    >()
    /** Groups whose serve just stopped: until when, and a signal for the successor's serve. */
    const handovers = new Map<
      string,
      { readonly until: number; readonly next: Deferred.Deferred<void> }
    >()
    /** The group's handler; during a handover, wait (at most `waitMs`) for the successor's. */
    const handlerOf = (k: string, waitMs: number) =>
      Effect.gen(function* () {
        const served = handlers.get(k)
        if (served !== undefined) return served
        const handover = handovers.get(k)
        if (handover === undefined || (yield* monotonicMillis) >= handover.until) return undefined
        yield* Effect.ignore(Effect.timeout(Deferred.await(handover.next), waitMs))
        return handlers.get(k)
      })
    const subscribers = new Map<string, Set<Queue.Queue<void>>>()
    let dropRequests = 0
    let dropResponses = 0
    let delayMs = 0
    let handled = 0

    const memberKey = (key: GroupKey, memberId: string) =>
      JSON.stringify([key.stream, key.group, memberId])
    /** The candidates' channel: two elements, never a member's three. */
    const handoverKey = (key: GroupKey) => JSON.stringify([key.stream, key.group])
    const subscribe = (k: string) =>
      Effect.gen(function* () {
        const queue = yield* Queue.sliding<void>(1)
        let set = subscribers.get(k)
        if (set === undefined) {
          set = new Set()
          subscribers.set(k, set)
        }
        set.add(queue)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            set.delete(queue)
            if (set.size === 0) subscribers.delete(k)
          }),
        )
        return Stream.fromQueue(queue)
      })
    const publish = (k: string) =>
      Effect.sync(() => {
        for (const queue of subscribers.get(k) ?? []) Queue.offerUnsafe(queue, undefined)
      })
    const timeout = (message: string) =>
      Effect.flatMap(Effect.sleep(timeoutMs), () =>
        Effect.fail(new TransportError({ reason: "Timeout", message })),
      )

    const transport: CoordinatorTransportShape = {
      heartbeat: (request) =>
        Effect.gen(function* () {
          if (dropRequests > 0) {
            dropRequests--
            return yield* timeout("heartbeat request lost")
          }
          const served = yield* handlerOf(
            groupKeyString({ stream: request.stream, group: request.group }),
            timeoutMs,
          )
          if (served === undefined)
            return yield* new TransportError({
              reason: "Unavailable",
              message: `no coordinator serves group ${request.group} on stream ${request.stream}`,
            })
          handled++
          // The coordinator keeps working on a request the member gave up on
          // (as over a real network), so the handler runs detached and only
          // the member's wait is bounded. At least 1 ms: `timeoutMs: 0` makes
          // injected faults fail at once without racing a served request.
          const fiber = yield* Effect.forkDetach(served.handler(wire(request)))
          const answer = yield* Fiber.join(fiber).pipe(
            Effect.timeoutOrElse({
              duration: Math.max(timeoutMs, 1),
              orElse: () =>
                Effect.fail(
                  new TransportError({
                    reason: "Timeout",
                    message: "coordinator did not answer in time",
                  }),
                ),
            }),
          )
          const raw = wire(answer)
          if (dropResponses > 0) {
            dropResponses--
            return yield* timeout("heartbeat response lost")
          }
          if (delayMs > 0 && delayMs >= timeoutMs)
            return yield* timeout("heartbeat response too late")
          if (delayMs > 0) yield* Effect.sleep(delayMs)
          return yield* decodeResponse(raw).pipe(
            Effect.mapError(
              (cause) => new TransportError({ reason: "Decode", message: cause.message, cause }),
            ),
          )
        }),

      notices: (key, memberId) => subscribe(memberKey(key, memberId)),

      serve: (key, handler) =>
        Effect.gen(function* () {
          const k = groupKeyString(key)
          const registration = { handler, replaced: yield* Deferred.make<void>() }
          // a newer serve replaces the group's previous one, which learns it
          const previous = handlers.get(k)
          handlers.set(k, registration)
          if (previous !== undefined) yield* Deferred.succeed(previous.replaced, undefined)
          const waiting = handovers.get(k)
          handovers.delete(k)
          if (waiting !== undefined) yield* Deferred.succeed(waiting.next, undefined)
          yield* Effect.addFinalizer(() =>
            Effect.gen(function* () {
              if (handlers.get(k) !== registration) return
              handlers.delete(k)
              // requests wait a little for a successor (rule 20)
              const until = (yield* monotonicMillis) + handoverMs
              handovers.set(k, { until, next: yield* Deferred.make<void>() })
            }),
          )
          const serving: Serving = {
            active: () => handlers.get(k) === registration,
            ended: Deferred.await(registration.replaced),
          }
          return serving
        }),

      notify: (key, memberId) => publish(memberKey(key, memberId)),

      handover: (key) => publish(handoverKey(key)),

      handovers: (key) => subscribe(handoverKey(key)),
    }

    const faults: TransportFaultsShape = {
      dropRequests: (n) =>
        Effect.sync(() => {
          dropRequests = n
        }),
      dropResponses: (n) =>
        Effect.sync(() => {
          dropResponses = n
        }),
      delayResponses: (ms) =>
        Effect.sync(() => {
          delayMs = ms
        }),
      handled: Effect.sync(() => handled),
    }
    return { transport, faults }
  })
