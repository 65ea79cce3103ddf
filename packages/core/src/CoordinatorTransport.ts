/**
 * The heartbeat transport between members and their group coordinator.
 *
 * Member side: `heartbeat(request)` gets the coordinator's answer or a
 * `TransportError`; `notices(group, memberId)` subscribes to "look again"
 * pushes (a hint to heartbeat now, e.g. when the member's assignment grew).
 * Coordinator side: `serve(group, handler)` answers the group's heartbeats
 * for as long as its scope is open; `notify(group, memberId)` pushes a notice.
 *
 * The handler receives the request as `unknown`: it crossed a process
 * boundary, so the coordinator decodes it (and answers INVALID_REQUEST when it
 * does not decode). The member decodes the response the same way.
 */
import { Context, Effect, Layer, Queue, Schema, type Scope, Stream } from "effect"
import { TransportError } from "./Errors.js"
import { type HeartbeatRequest, HeartbeatResponse } from "./protocol/Heartbeat.js"

export type HeartbeatHandler = (request: unknown) => Effect.Effect<HeartbeatResponse>

export class CoordinatorTransport extends Context.Service<
  CoordinatorTransport,
  {
    readonly heartbeat: (
      request: HeartbeatRequest,
    ) => Effect.Effect<HeartbeatResponse, TransportError>
    /**
     * Subscribe (now, within the scope) to this member's notices. Notices are
     * hints and coalesce: several pushes before a take are one element.
     */
    readonly notices: (
      group: string,
      memberId: string,
    ) => Effect.Effect<Stream.Stream<void>, never, Scope.Scope>
    /** Answer the group's heartbeats until the scope closes (a newer `serve` replaces it). */
    readonly serve: (
      group: string,
      handler: HeartbeatHandler,
    ) => Effect.Effect<void, never, Scope.Scope>
    readonly notify: (group: string, memberId: string) => Effect.Effect<void>
  }
>()("@shardline/core/CoordinatorTransport") {}

/** Fault injection for the in-memory transport (tests and simulations). */
export class CoordinatorTransportFaults extends Context.Service<
  CoordinatorTransportFaults,
  {
    /** The next `n` requests are lost before reaching the coordinator (member times out). */
    readonly dropRequests: (n: number) => Effect.Effect<void>
    /** The coordinator handles the next `n` requests, but their responses are lost (member times out). */
    readonly dropResponses: (n: number) => Effect.Effect<void>
    /** Delay every response by `ms`; at or beyond the timeout the member times out instead. */
    readonly delayResponses: (ms: number) => Effect.Effect<void>
    /** How many requests reached a coordinator handler. */
    readonly handled: Effect.Effect<number>
  }
>()("@shardline/core/CoordinatorTransportFaults") {}

export interface MemoryOptions {
  /** How long a member waits for a response before a Timeout (default 5000 ms). */
  readonly timeoutMs?: number
}

const decodeResponse = Schema.decodeUnknownEffect(HeartbeatResponse)

/** Simulates the wire: only JSON survives the trip. */
const wire = (value: unknown): unknown => JSON.parse(JSON.stringify(value))

export const makeMemory = (
  options: MemoryOptions = {},
): Effect.Effect<{
  readonly transport: CoordinatorTransport["Service"]
  readonly faults: CoordinatorTransportFaults["Service"]
}> =>
  Effect.sync(() => {
    const timeoutMs = options.timeoutMs ?? 5_000
    const handlers = new Map<string, { readonly handler: HeartbeatHandler }>()
    const subscribers = new Map<string, Set<Queue.Queue<void>>>()
    let dropRequests = 0
    let dropResponses = 0
    let delayMs = 0
    let handled = 0

    const key = (group: string, memberId: string) => `${group}\u0000${memberId}`
    const timeout = (message: string) =>
      Effect.flatMap(Effect.sleep(timeoutMs), () =>
        Effect.fail(new TransportError({ reason: "Timeout", message })),
      )

    const transport: CoordinatorTransport["Service"] = {
      heartbeat: (request) =>
        Effect.gen(function* () {
          if (dropRequests > 0) {
            dropRequests--
            return yield* timeout("heartbeat request lost")
          }
          const served = handlers.get(request.group)
          if (served === undefined)
            return yield* new TransportError({
              reason: "Unavailable",
              message: `no coordinator serves group ${request.group}`,
            })
          handled++
          const raw = wire(yield* served.handler(wire(request)))
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

      notices: (group, memberId) =>
        Effect.gen(function* () {
          const queue = yield* Queue.sliding<void>(1)
          const k = key(group, memberId)
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
        }),

      serve: (group, handler) =>
        Effect.gen(function* () {
          const registration = { handler }
          handlers.set(group, registration)
          yield* Effect.addFinalizer(() =>
            Effect.sync(() => {
              if (handlers.get(group) === registration) handlers.delete(group)
            }),
          )
        }),

      notify: (group, memberId) =>
        Effect.sync(() => {
          for (const queue of subscribers.get(key(group, memberId)) ?? [])
            Queue.offerUnsafe(queue, undefined)
        }),
    }

    const faults: CoordinatorTransportFaults["Service"] = {
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

/** In-process transport plus its fault hooks. */
export const layerMemoryWith = (
  options: MemoryOptions,
): Layer.Layer<CoordinatorTransport | CoordinatorTransportFaults> =>
  Layer.effectContext(
    Effect.map(makeMemory(options), ({ transport, faults }) =>
      Context.make(CoordinatorTransport, transport).pipe(
        Context.add(CoordinatorTransportFaults, faults),
      ),
    ),
  )

export const layerMemory: Layer.Layer<CoordinatorTransport | CoordinatorTransportFaults> =
  layerMemoryWith({})
