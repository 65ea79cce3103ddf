/**
 * The heartbeat transport between members and their group coordinator.
 *
 * Member side: `heartbeat(request)` gets the answer of the coordinator of the
 * request's group (`request.stream`, `request.group`) or a `TransportError`;
 * `notices(key, memberId)` subscribes to "look again" pushes (a hint to
 * heartbeat now, e.g. when the member's assignment grew). Coordinator side:
 * `serve(key, handler)` answers the group's heartbeats for as long as its
 * scope is open (and, when the scope closes, answers what it already took
 * before it returns); `notify(key, memberId)` pushes a notice. Between
 * coordinator candidates: `handover(key)` says the coordinator released its
 * lease, and `handovers(key)` subscribes to that, so a standby takes over at
 * once instead of at its next poll (docs/protocol.md rule 20).
 *
 * The handler receives the request as `unknown`: it crossed a process
 * boundary, so the coordinator decodes it (and answers INVALID_REQUEST when it
 * does not decode). The member decodes the response the same way.
 *
 * @example
 * const transport = yield* CoordinatorTransport.CoordinatorTransport
 * const key = { stream: "orders", group: "workers" }
 * yield* transport.serve(key, host.heartbeat)            // coordinator side
 * const notices = yield* transport.notices(key, "pod-1-m0") // member side
 * const response = yield* transport.heartbeat(request)
 */
import { Context, Effect, Layer, type Scope, type Stream } from "effect"
import type { TransportError } from "../Errors.js"
import type { HeartbeatRequest, HeartbeatResponse } from "../protocol/Heartbeat.js"
import type { GroupKey } from "./GroupKey.js"
import { type MemoryTransportOptions, makeMemoryTransport } from "./internal/memoryTransport.js"

export type HeartbeatHandler = (request: unknown) => Effect.Effect<HeartbeatResponse>

/**
 * One serve as it sees itself (docs/protocol.md rule 25). A serve can stop
 * answering while the scope that runs it is still open: a newer serve of the
 * group replaced it (another candidate held the lease meanwhile), or its loop
 * ended on its own. Its candidate must notice, or the group stalls behind a
 * lease nobody serves under.
 */
export interface Serving {
  /** Its loop still answers the group's requests: not replaced, not ended. */
  readonly active: () => boolean
  /** Completes once it stopped answering on its own (never when its scope closes first). */
  readonly ended: Effect.Effect<void>
}

export interface CoordinatorTransportShape {
  /** Send a heartbeat to the coordinator of (request.stream, request.group). */
  readonly heartbeat: (
    request: HeartbeatRequest,
  ) => Effect.Effect<HeartbeatResponse, TransportError>
  /**
   * Subscribe (now, within the scope) to this member's notices. Notices are
   * hints and coalesce: several pushes before a take are one element.
   */
  readonly notices: (
    key: GroupKey,
    memberId: string,
  ) => Effect.Effect<Stream.Stream<void>, never, Scope.Scope>
  /**
   * Answer the group's heartbeats until the scope closes or a newer `serve`
   * of the group replaces this one (then `Serving.ended` completes).
   */
  readonly serve: (
    key: GroupKey,
    handler: HeartbeatHandler,
  ) => Effect.Effect<Serving, never, Scope.Scope>
  /** Push a "look again" notice to a member of the group (no-op if nobody listens). */
  readonly notify: (key: GroupKey, memberId: string) => Effect.Effect<void>
  /** Tell the group's coordinator candidates its lease was just released (a hint, may be lost). */
  readonly handover: (key: GroupKey) => Effect.Effect<void>
  /** Subscribe (now, within the scope) to the group's handovers; they coalesce like notices. */
  readonly handovers: (key: GroupKey) => Effect.Effect<Stream.Stream<void>, never, Scope.Scope>
}

export class CoordinatorTransport extends Context.Service<
  CoordinatorTransport,
  CoordinatorTransportShape
>()("@shardline/core/CoordinatorTransport") {}

export type MemoryOptions = MemoryTransportOptions

/**
 * An in-process transport: requests and responses cross as JSON (only what
 * survives the wire arrives) and the response is decoded. Fault injection for
 * tests lives in `@shardline/core/testing`.
 */
export const makeMemory = (options: MemoryOptions = {}): Effect.Effect<CoordinatorTransportShape> =>
  Effect.map(makeMemoryTransport(options), ({ transport }) => transport)

export const layerMemoryWith = (options: MemoryOptions): Layer.Layer<CoordinatorTransport> =>
  Layer.effect(CoordinatorTransport, makeMemory(options))

export const layerMemory: Layer.Layer<CoordinatorTransport> = layerMemoryWith({})
