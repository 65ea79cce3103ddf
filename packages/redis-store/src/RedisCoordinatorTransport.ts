/**
 * CoordinatorTransport on Redis (docs/redis.md, "CoordinatorTransport"):
 * members and the coordinator never talk directly.
 *
 * - heartbeat: the member LPUSHes `{"id", "request"}` onto the group's
 *   request list `{shardline:<stream>:<group>}:hb:requests` (a script that
 *   first checks a coordinator serves, else `Unavailable` at once), then
 *   BLPOPs the request's own reply list `...:hb:reply:<id>` on a dedicated
 *   connection until its timeout. A per-request reply list means a late
 *   answer to an earlier request can never be taken for this one.
 * - serve: BLMPOPs batches from the tail of the request list on a dedicated
 *   connection, runs the handler (the coordinator commits before it
 *   answers), RPUSHes the answer to the reply list with a TTL, and keeps a
 *   presence key `...:hb:serving` alive while its scope is open.
 * - notices: PUBLISH on `...:notice:<memberId>` (SPUBLISH in a cluster, so a
 *   group's notices stay on its slot's node); one subscriber connection per
 *   RedisConnection. A missed notice costs at most one heartbeat
 *   interval: the member's regular heartbeat is the fallback, and a
 *   subscriber that reconnects emits a notice to every subscription.
 */
import { randomUUID } from "node:crypto"
import {
  type BackendUnavailable,
  CoordinatorTransport,
  type GroupKey,
  HeartbeatResponse,
  TransportError,
} from "@shardline/core"
import { Effect, Fiber, Layer, Queue, Schema, Semaphore, Stream } from "effect"
import { Code, evalScript } from "./internal/reply.js"
import { noticeChannel, replyKey, requestsKey, servingKey } from "./keys.js"
import * as RedisConnection from "./RedisConnection.js"
import { Scripts } from "./scripts.js"

export interface RedisTransportOptions {
  /** How long a member waits for an answer (default 5000 ms). */
  readonly timeoutMs?: number
  /** How long an unanswered reply list lives (default 30 s). */
  readonly replyTtlMs?: number
  /** The request list keeps at most this many requests; older ones are dropped (default 10,000). */
  readonly queueCap?: number
  /** TTL of the serve presence key; refreshed every third of it (default 6000 ms). */
  readonly servingTtlMs?: number
  /** BLMPOP timeout of the serve loop, bounds idle load (default 2000 ms). */
  readonly popBlockMs?: number
  /** Requests popped at once (default 64) and handled concurrently at most (default 64). */
  readonly popBatch?: number
  readonly maxInFlight?: number
}

type HeartbeatHandler = CoordinatorTransport.HeartbeatHandler
type RedisConnectionShape = RedisConnection.RedisConnectionShape

const decodeResponse = Schema.decodeUnknownEffect(HeartbeatResponse)

const REQUEST_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const unavailable = (message: string, cause?: unknown) =>
  new TransportError({ reason: "Unavailable", message, cause })

/** Parses one queued envelope; undefined when it is not ours (dropped: nobody to answer). */
const parseEnvelope = (raw: string): { id: string; request: unknown } | undefined => {
  try {
    const value: unknown = JSON.parse(raw)
    if (typeof value !== "object" || value === null) return undefined
    const { id, request } = value as { id?: unknown; request?: unknown }
    return typeof id === "string" && REQUEST_ID.test(id) ? { id, request } : undefined
  } catch {
    return undefined
  }
}

/** Subscriptions of one transport: channel -> queues, on the connection's subscriber. */
const makeNoticeHub = (connection: RedisConnectionShape) => {
  const channels = new Map<string, Set<Queue.Queue<void>>>()
  let attached = false
  let lost = false

  const attach = () => {
    if (attached) return connection.subscriber()
    attached = true
    const sub = connection.subscriber()
    sub.on(connection.isCluster ? "smessage" : "message", (channel: string) => {
      for (const queue of channels.get(channel) ?? []) Queue.offerUnsafe(queue, undefined)
    })
    // after a lost connection notices may have been missed: once it is back
    // (ioredis resubscribes), everyone looks again
    sub.on("close", () => {
      lost = true
    })
    sub.on("ready", () => {
      if (!lost) return
      lost = false
      for (const set of channels.values()) for (const q of set) Queue.offerUnsafe(q, undefined)
    })
    return sub
  }

  const add = (channel: string, queue: Queue.Queue<void>) =>
    Effect.suspend(() => {
      const sub = attach()
      let set = channels.get(channel)
      const first = set === undefined
      if (set === undefined) {
        set = new Set()
        channels.set(channel, set)
      }
      set.add(queue)
      if (!first) return Effect.void
      // subscribed when this returns; a failure leaves the heartbeat as the fallback
      return Effect.tryPromise(() =>
        connection.isCluster ? sub.ssubscribe(channel) : sub.subscribe(channel),
      ).pipe(
        Effect.catch((error) =>
          Effect.logWarning(`notices: SUBSCRIBE ${channel} failed; heartbeats still run`, error),
        ),
        Effect.asVoid,
      )
    })

  const remove = (channel: string, queue: Queue.Queue<void>) =>
    Effect.suspend(() => {
      const set = channels.get(channel)
      set?.delete(queue)
      if (set === undefined || set.size > 0) return Effect.void
      channels.delete(channel)
      const sub = connection.subscriber()
      return Effect.ignore(
        Effect.tryPromise(() =>
          connection.isCluster ? sub.sunsubscribe(channel) : sub.unsubscribe(channel),
        ),
      )
    })

  return { add, remove }
}

export const makeWith = (
  connection: RedisConnectionShape,
  options: RedisTransportOptions = {},
): CoordinatorTransport.CoordinatorTransportShape => {
  const timeoutMs = options.timeoutMs ?? 5_000
  const replyTtlMs = options.replyTtlMs ?? 30_000
  const queueCap = options.queueCap ?? 10_000
  const servingTtlMs = options.servingTtlMs ?? 6_000
  const popBlockMs = options.popBlockMs ?? 2_000
  const popBatch = options.popBatch ?? 64
  const maxInFlight = options.maxInFlight ?? 64
  const hub = makeNoticeHub(connection)

  const serving = (key: GroupKey, serverId: string, mode: "claim" | "refresh" | "clear") =>
    evalScript(
      connection,
      `serve (${mode})`,
      Scripts.hbServing,
      [servingKey(key)],
      [serverId, mode, String(servingTtlMs)],
    )

  const answer = (key: GroupKey, raw: string, handler: HeartbeatHandler) => {
    const envelope = parseEnvelope(raw)
    if (envelope === undefined)
      return Effect.logWarning(`serve: dropped a request that is not a Shardline envelope`)
    return handler(envelope.request).pipe(
      Effect.flatMap((response) =>
        evalScript(
          connection,
          "serve (reply)",
          Scripts.hbReply,
          [replyKey(key, envelope.id)],
          [JSON.stringify(response), String(replyTtlMs)],
        ),
      ),
      // the member times out and retries: nothing else to do with a failed answer
      Effect.catchCause((cause) => Effect.logWarning("serve: a heartbeat was not answered", cause)),
    )
  }

  return {
    heartbeat: (request) =>
      Effect.gen(function* () {
        const key = { stream: request.stream, group: request.group }
        const id = randomUUID()
        const pushed = yield* evalScript(
          connection,
          "heartbeat (push)",
          Scripts.hbPush,
          [requestsKey(key), servingKey(key)],
          [JSON.stringify({ id, request }), String(queueCap)],
        ).pipe(Effect.mapError((e) => unavailable(e.message, e)))
        if (pushed[0] === Code.Unavailable)
          return yield* unavailable(`no coordinator serves ${key.stream}/${key.group}`)
        const reply = yield* connection
          .blocking("heartbeat (BLPOP)", (c) => c.blpop(replyKey(key, id), timeoutMs / 1_000))
          .pipe(Effect.mapError((e) => unavailable(e.message, e)))
        if (reply === null)
          return yield* new TransportError({
            reason: "Timeout",
            message: `no answer within ${timeoutMs} ms`,
          })
        const raw = yield* Effect.try({
          try: (): unknown => JSON.parse(reply[1]),
          catch: (cause) =>
            new TransportError({ reason: "Decode", message: "response is not JSON", cause }),
        })
        return yield* decodeResponse(raw).pipe(
          Effect.mapError(
            (cause) => new TransportError({ reason: "Decode", message: cause.message, cause }),
          ),
        )
      }).pipe(
        // BLPOP's own timeout runs on the server; this bounds the rest
        // (connecting, a Redis that does not answer) on the member's side
        Effect.timeoutOrElse({
          duration: timeoutMs + 1_000,
          orElse: () =>
            Effect.fail(
              new TransportError({
                reason: "Timeout",
                message: `no answer within ${timeoutMs} ms`,
              }),
            ),
        }),
      ),

    notices: (key, memberId) =>
      Effect.gen(function* () {
        const queue = yield* Queue.sliding<void>(1)
        const channel = noticeChannel(key, memberId)
        yield* Effect.addFinalizer(() => hub.remove(channel, queue))
        yield* hub.add(channel, queue)
        return Stream.fromQueue(queue)
      }),

    serve: (key, handler) =>
      Effect.gen(function* () {
        const serverId = randomUUID()
        // added first so it runs last: after the loops below have stopped
        // bounded: with Redis away the mark simply expires
        yield* Effect.addFinalizer(() =>
          Effect.ignore(serving(key, serverId, "clear").pipe(Effect.timeout(1_000))),
        )
        yield* Effect.ignore(serving(key, serverId, "claim"))
        const permits = yield* Semaphore.make(maxInFlight)
        const scope = yield* Effect.scope

        const handle = (raw: string) =>
          permits
            .take(1)
            .pipe(
              Effect.andThen(
                Effect.forkIn(
                  answer(key, raw, handler).pipe(Effect.ensuring(permits.release(1))),
                  scope,
                ),
              ),
            )

        const pop = connection
          .blocking("serve (BLMPOP)", (c) =>
            c.call("BLMPOP", popBlockMs / 1_000, 1, requestsKey(key), "RIGHT", "COUNT", popBatch),
          )
          .pipe(
            Effect.flatMap((reply) => {
              const items = Array.isArray(reply) && Array.isArray(reply[1]) ? reply[1] : []
              return Effect.forEach(items, (raw) => handle(String(raw)), { discard: true })
            }),
            // Redis away: retry without spinning
            Effect.catch(() => Effect.sleep(200)),
          )
        const popFiber = yield* Effect.forkScoped(Effect.forever(pop))

        const refresh: Effect.Effect<void> = Effect.sleep(Math.max(1, servingTtlMs / 3)).pipe(
          Effect.andThen(Effect.result(serving(key, serverId, "refresh"))),
          Effect.flatMap((result) =>
            result._tag === "Success" && result.success[0] === Code.Replaced
              ? Fiber.interrupt(popFiber) // a newer serve took over: stop popping
              : refresh,
          ),
        )
        yield* Effect.forkScoped(refresh)
      }),

    notify: (key, memberId) =>
      Effect.ignore(
        connection.command("notify (PUBLISH / SPUBLISH)", (c) =>
          connection.isCluster
            ? c.spublish(noticeChannel(key, memberId), "")
            : c.publish(noticeChannel(key, memberId), ""),
        ),
      ),
  }
}

/** CoordinatorTransport on the `RedisConnection` in context. */
export const make = (
  options: RedisTransportOptions = {},
): Effect.Effect<
  CoordinatorTransport.CoordinatorTransportShape,
  never,
  RedisConnection.RedisConnection
> => RedisConnection.RedisConnection.useSync((connection) => makeWith(connection, options))

export const layerFromConnection = (
  options: RedisTransportOptions = {},
): Layer.Layer<CoordinatorTransport.CoordinatorTransport, never, RedisConnection.RedisConnection> =>
  Layer.effect(CoordinatorTransport.CoordinatorTransport, make(options))

/** `CoordinatorTransport` on a connection of its own (closed with the layer). */
export const layer = (
  options: RedisConnection.RedisConnectionOptions & { readonly transport?: RedisTransportOptions },
): Layer.Layer<CoordinatorTransport.CoordinatorTransport, BackendUnavailable> =>
  layerFromConnection(options.transport).pipe(Layer.provide(RedisConnection.layer(options)))
