/**
 * CoordinatorTransport on Redis (docs/redis.md, "CoordinatorTransport"):
 * members and the coordinator never talk directly.
 *
 * - heartbeat: the member LPUSHes `{"id", "inbox", "request"}` onto the
 *   group's request list `<prefix>group:{<stream>:<group>}:hb:requests` (a
 *   script that first checks a coordinator serves, else `Unavailable` at
 *   once; served or not, it refreshes the group's last-heartbeat key
 *   `...:hb:last`, `LAST_HEARTBEAT_TTL_MS`) and waits for the answer `{"id", "response"}` on its transport's
 *   inbox for the group, `...:hb:inbox:<inbox>`: one list per transport and
 *   group, popped in batches by one loop on a dedicated connection while
 *   anyone waits, which hands each answer to the request with its id (an
 *   answer nobody waits for, e.g. a late one, is dropped), so a late answer
 *   to an earlier request can never be taken for this one. Requests of one
 *   group sent in the same event-loop turn (many members in one process) go
 *   in one script call.
 * - serve: BLMPOPs batches from the tail of the request list on a dedicated
 *   connection, runs the handler on each (the coordinator commits before it
 *   answers), RPUSHes the batch's answers to their inboxes with a TTL in
 *   one script call once the batch is handled, and keeps a presence key
 *   `...:hb:serving` alive while its scope is open. A request without an
 *   inbox (an earlier version's member) is answered on its own reply list
 *   `...:hb:reply:<id>`, which that member BLPOPs. When its scope closes it
 *   stops gracefully (docs/protocol.md rule 20): a stop mark queued behind
 *   the requests already there wakes its pop loop, which hands everything
 *   before the mark to the handler and pushes back what came after; it
 *   waits until every request it took is answered, then leaves a short
 *   handover mark in place of its presence, so members' requests keep
 *   queueing for the successor instead of failing. Requests its host refuses
 *   `NOT_COORDINATOR` while another serve holds the presence (a paused
 *   ex-coordinator's pop took them) go back to the list for that serve,
 *   and this one stops popping (docs/protocol.md rule 25).
 * - handover / handovers: PUBLISH (SPUBLISH) on `...:handover`, so standby
 *   candidates try the lease at once after a graceful release.
 * - notices: PUBLISH on `...:notice:<memberId>` (SPUBLISH in a cluster, so a
 *   group's notices stay on its slot's node); one subscriber connection per
 *   RedisConnection. A missed notice costs at most one heartbeat
 *   interval: the member's regular heartbeat is the fallback, and a
 *   subscriber that reconnects emits a notice to every subscription.
 */
import { randomUUID } from "node:crypto"
import {
  CoordinatorTransport,
  type GroupKey,
  HeartbeatResponse,
  TransportError,
} from "@shardline/core"
import { Deferred, Effect, Exit, Layer, Queue, Schema, Scope, Semaphore, Stream } from "effect"
import { Code, evalScript, noReplicasOf, type Reply, scriptFailure } from "./internal/reply.js"
import * as RedisConnection from "./RedisConnection.js"
import { runScript, Scripts } from "./scripts.js"

export interface RedisTransportOptions {
  /** How long a member waits for an answer (default 5000 ms). */
  readonly timeoutMs?: number
  /** An inbox (or reply list) nobody pops expires this long after its last answer (default 30s). */
  readonly replyTtlMs?: number
  /** The request list keeps at most this many requests; older ones are dropped (default 10,000). */
  readonly queueCap?: number
  /** TTL of the serve presence key; refreshed every third of it (default 6000 ms). */
  readonly servingTtlMs?: number
  /** BLMPOP timeout of the serve loop and the inbox loops; bounds idle load (default 2000 ms). */
  readonly popBlockMs?: number
  /**
   * How long a stopping serve's handover mark keeps members' requests
   * queueing for a successor (default 2000 ms, at most `servingTtlMs`).
   */
  readonly handoverMs?: number
  /**
   * Requests popped at once (default 64; at most `maxInFlight`) and handled
   * concurrently at most (default 64). A popped batch is answered in one
   * script call once all of it is handled.
   */
  readonly popBatch?: number
  readonly maxInFlight?: number
}

type HeartbeatHandler = CoordinatorTransport.HeartbeatHandler

/** A handled request: its envelope, whether it was refused NOT_COORDINATOR, and [reply list, JSON]. */
interface Answer {
  readonly raw: string
  readonly notCoordinator: boolean
  readonly reply: readonly [string, string]
}
type RedisConnectionShape = RedisConnection.RedisConnectionShape

const decodeResponse = Schema.decodeUnknownEffect(HeartbeatResponse)

const REQUEST_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/**
 * TTL of the group's last-heartbeat key, refreshed by every push of
 * members' requests (hb-push.lua), served or not: the time since the last
 * push is this less its PTTL, which a reader compares with the group's
 * session timeout (a running member pushes at least every heartbeat
 * interval, which is shorter). A session longer than this reads as "no
 * heartbeat" once the key expired: 10 minutes.
 */
export const LAST_HEARTBEAT_TTL_MS = 600_000

/** Requests sent in one hb-push call at most (Lua's unpack has a stack limit). */
const MAX_PUSH_BATCH = 1_000

const unavailable = (message: string, cause?: unknown) =>
  new TransportError({ reason: "Unavailable", message, cause })

/**
 * A member's heartbeat command that failed, as its TransportError: one the
 * master refused for want of replicas (`min-replicas-to-write`, docs/redis.md)
 * has `NotEnoughReplicas` as its cause (nothing was queued); either way
 * "Unavailable", which the member retries as it does an outage, keeping its
 * shards until its session runs out.
 */
const heartbeatFailure = (operation: string, key: string, cause: unknown): TransportError => {
  const noReplicas = noReplicasOf(operation, key, cause)
  return noReplicas !== undefined
    ? unavailable(noReplicas.message, noReplicas)
    : unavailable(
        cause instanceof Error ||
          (typeof cause === "object" && cause !== null && "message" in cause)
          ? String((cause as { message: unknown }).message)
          : String(cause),
        cause,
      )
}

interface Envelope {
  readonly id: string
  readonly inbox: string | undefined
  readonly request: unknown
}

/** Parses one queued envelope; undefined when it is not ours (dropped: nobody to answer). */
const parseEnvelope = (raw: string): Envelope | undefined => {
  try {
    const value: unknown = JSON.parse(raw)
    if (typeof value !== "object" || value === null) return undefined
    const { id, inbox, request } = value as { id?: unknown; inbox?: unknown; request?: unknown }
    if (typeof id !== "string" || !REQUEST_ID.test(id)) return undefined
    if (inbox === undefined) return { id, inbox, request }
    return typeof inbox === "string" && REQUEST_ID.test(inbox) ? { id, inbox, request } : undefined
  } catch {
    return undefined
  }
}

/** An answer popped from an inbox: its request id and the response JSON; undefined when garbage. */
const parseAnswer = (raw: string): { id: string; response: unknown } | undefined => {
  try {
    const value: unknown = JSON.parse(raw)
    if (typeof value !== "object" || value === null) return undefined
    const { id, response } = value as { id?: unknown; response?: unknown }
    return typeof id === "string" ? { id, response } : undefined
  } catch {
    return undefined
  }
}

/** How a waiting request ends: its answer's response (undecoded), or an error. */
type Outcome = Exit.Exit<unknown, TransportError>

interface Waiter {
  /** performance.now() past which it ends with Timeout. */
  readonly deadline: number
  readonly resume: (outcome: Outcome) => void
}

/** A serve's stop mark starts with this (`{"stop":"<server id>"}`): never a request envelope. */
const STOP_MARK_PREFIX = '{"stop":'

/** Answers popped per BLMPOP of an inbox. */
const INBOX_BATCH = 1_024

/**
 * Resolves once a subscribe command may be sent without breaking the
 * connection: ioredis writes a SUBSCRIBE issued between the TCP connect and
 * the end of its ready check at once, ahead of the check's INFO, which the
 * server then refuses (subscriber mode); the check fails, the connection is
 * made again, and the command is reported failed though the channel ends up
 * subscribed. In that window (status "connect") it waits for "ready", or for
 * the close that ends the attempt: on a hung server the check's INFO fails
 * at the command deadline, and the subscribe then fails at its own, so a
 * member's start is never held for good (test/commandDeadline.test.ts,
 * "hung server"); in any other status ioredis queues the
 * command until the connection is ready, or sends it on a ready one.
 */
const pastReadyCheck = (sub: RedisConnection.Client): Promise<void> =>
  sub.status !== "connect"
    ? Promise.resolve()
    : new Promise((resolve) => {
        const done = () => {
          sub.off("ready", done)
          sub.off("close", done)
          resolve()
        }
        sub.once("ready", done)
        sub.once("close", done)
      })

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
        pastReadyCheck(sub).then(() =>
          connection.isCluster ? sub.ssubscribe(channel) : sub.subscribe(channel),
        ),
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
          pastReadyCheck(sub).then(() =>
            connection.isCluster ? sub.sunsubscribe(channel) : sub.unsubscribe(channel),
          ),
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
  const handoverMs = Math.min(options.handoverMs ?? 2_000, servingTtlMs)
  const maxInFlight = options.maxInFlight ?? 64
  const {
    handoverChannel,
    inboxKey,
    noticeChannel,
    lastHeartbeatKey,
    replyKey,
    requestsKey,
    servingKey,
  } = connection.keys
  const hub = makeNoticeHub(connection)
  const timedOut = () =>
    new TransportError({ reason: "Timeout", message: `no answer within ${timeoutMs} ms` })

  const serving = (
    key: GroupKey,
    serverId: string,
    mode: "claim" | "refresh" | "clear" | "handover",
  ) =>
    evalScript(
      connection,
      `serve (${mode})`,
      Scripts.hbServing,
      [servingKey(key)],
      [serverId, mode, String(mode === "handover" ? handoverMs : servingTtlMs)],
    )

  const publish = (channel: string) =>
    Effect.ignore(
      connection.command("publish (PUBLISH / SPUBLISH)", (c) =>
        connection.isCluster ? c.spublish(channel, "") : c.publish(channel, ""),
      ),
    )

  const subscribe = (channel: string) =>
    Effect.gen(function* () {
      const queue = yield* Queue.sliding<void>(1)
      yield* Effect.addFinalizer(() => hub.remove(channel, queue))
      yield* hub.add(channel, queue)
      return Stream.fromQueue(queue)
    })

  /** The handler's answer (with its reply list and JSON); undefined when there is none to send. */
  const answer = (key: GroupKey, raw: string, handler: HeartbeatHandler) => {
    const envelope = parseEnvelope(raw)
    if (envelope === undefined)
      return raw.startsWith(STOP_MARK_PREFIX)
        ? Effect.succeed(undefined) // another serve's stop mark: not a request
        : Effect.as(
            Effect.logWarning(`serve: dropped a request that is not a Shardline envelope`),
            undefined,
          )
    const { id, inbox } = envelope
    return handler(envelope.request).pipe(
      Effect.map((response): Answer | undefined => ({
        raw,
        notCoordinator: response.errorCode === "NOT_COORDINATOR",
        reply:
          inbox === undefined
            ? [replyKey(key, id), JSON.stringify(response)]
            : // id is a checked UUID: no escaping needed
              [inboxKey(key, inbox), `{"id":"${id}","response":${JSON.stringify(response)}}`],
      })),
      // the member times out and retries: nothing else to do with a failed answer
      Effect.catchCause((cause) =>
        Effect.as(Effect.logWarning("serve: a heartbeat was not answered", cause), undefined),
      ),
    )
  }

  /**
   * The requests this server's coordinator answered NOT_COORDINATOR, handed
   * back to the request list when another server serves the group now (a
   * paused ex-coordinator's pop took them): that server answers them. The
   * answers to send: all of them unless handed back.
   */
  const handBack = (
    key: GroupKey,
    serverId: string,
    answers: ReadonlyArray<Answer>,
    replaced: Effect.Effect<void>,
  ) => {
    const refused = answers.filter((a) => a.notCoordinator)
    if (refused.length === 0) return Effect.succeed(answers)
    return evalScript(
      connection,
      "serve (hand back)",
      Scripts.hbHandback,
      [servingKey(key), requestsKey(key)],
      [serverId, ...refused.map((a) => a.raw)],
    ).pipe(
      // handed back: this serve was replaced, it stops popping (else it
      // would pop them again until its next refresh finds out)
      Effect.flatMap((reply) =>
        Number(reply[0]) === 0
          ? Effect.as(
              replaced,
              answers.filter((a) => !a.notCoordinator),
            )
          : Effect.succeed(answers),
      ),
      // Redis away: answer them here, as before
      Effect.orElseSucceed(() => answers),
    )
  }

  /** Handle a popped batch, then push all its answers in one script call. */
  const answerBatch = (
    key: GroupKey,
    serverId: string,
    raws: ReadonlyArray<string>,
    handler: HeartbeatHandler,
    replaced: Effect.Effect<void>,
  ) =>
    Effect.forEach(raws, (raw) => answer(key, raw, handler), { concurrency: raws.length }).pipe(
      Effect.flatMap((all) =>
        handBack(
          key,
          serverId,
          all.filter((a) => a !== undefined),
          replaced,
        ),
      ),
      Effect.flatMap((answers) => {
        const keys: Array<string> = []
        const args: Array<string> = []
        for (const a of answers) {
          keys.push(a.reply[0])
          args.push(a.reply[1])
        }
        if (keys.length === 0) return Effect.void
        args.push(String(replyTtlMs))
        return evalScript(connection, "serve (reply)", Scripts.hbReply, keys, args).pipe(
          Effect.flatMap((reply) =>
            Number(reply[1]) > 0
              ? Effect.logWarning(
                  `serve: ${reply[1]} answers not sent: their lists hold foreign values`,
                )
              : Effect.void,
          ),
        )
      }),
      // the members time out and retry: nothing else to do with failed answers
      Effect.catchCause((cause) => Effect.logWarning("serve: heartbeats were not answered", cause)),
    )

  /**
   * The member side of this transport for one group: requests out, answers
   * in, deadlines.
   * - Out: requests made in one event-loop turn (with many members in one
   *   process, the answers that wake them arrive together) go in one hb-push
   *   call; each is still its own envelope, and a refusal (nobody serves, a
   *   foreign value, Redis away) ends every request of the call.
   * - In: answers `{"id", "response"}` arrive on the group's inbox list; one
   *   loop on a dedicated connection, running only while a request waits,
   *   pops them in batches and hands each to the request with its id. An
   *   answer nobody waits for (garbage, or too late) is dropped.
   * - Deadlines: one timer, at the oldest request's deadline (requests are
   *   kept in send order, all with the same timeout), ends overdue requests
   *   with Timeout whatever Redis is doing.
   */
  const makeMemberSide = (key: GroupKey) => {
    const inbox = randomUUID()
    const list = inboxKey(key, inbox)
    const requests = requestsKey(key)
    const waiting = new Map<string, Waiter>()
    let outbox: { readonly envelopes: Array<string>; readonly ids: Array<string> } | undefined
    let looping = false
    let timer: ReturnType<typeof setTimeout> | undefined

    const end = (id: string, outcome: Outcome) => {
      const waiter = waiting.get(id)
      if (waiter === undefined) return
      waiting.delete(id)
      if (waiting.size === 0 && timer !== undefined) {
        clearTimeout(timer)
        timer = undefined
      }
      waiter.resume(outcome)
    }

    const arm = () => {
      if (timer !== undefined) return
      const oldest = waiting.values().next()
      if (oldest.done === true) return
      timer = setTimeout(sweep, Math.max(0, oldest.value.deadline - performance.now()))
      // a waiting request's own fiber, not this timer, is what keeps work alive
      timer.unref?.()
    }

    const sweep = () => {
      timer = undefined
      const now = performance.now()
      for (const [id, waiter] of waiting) {
        if (waiter.deadline > now) break
        end(id, Exit.fail(timedOut()))
      }
      arm()
    }

    const send = () => {
      const batch = outbox
      outbox = undefined
      if (batch === undefined) return
      const refuse = (error: TransportError) => {
        for (const id of batch.ids) end(id, Exit.fail(error))
      }
      // a throw inside runScript would escape this callback: reject instead
      Promise.resolve()
        .then(() =>
          runScript(
            connection.client,
            Scripts.hbPush,
            [requests, servingKey(key), lastHeartbeatKey(key)],
            batch.envelopes,
          ),
        )
        .then(
          (raw) => {
            const failure = scriptFailure("heartbeat (push)", raw)
            if (failure !== undefined)
              refuse(heartbeatFailure("heartbeat (push)", requests, failure))
            else if ((raw as Reply)[0] === Code.Unavailable)
              refuse(unavailable(`no coordinator serves ${key.stream}/${key.group}`))
          },
          (cause) => refuse(heartbeatFailure("heartbeat (push)", requests, cause)),
        )
    }

    const loop = async () => {
      const lease = connection.lease()
      let healthy = true
      try {
        while (waiting.size > 0) {
          const reply = await lease.client.call(
            "BLMPOP",
            popBlockMs / 1_000,
            1,
            list,
            "LEFT",
            "COUNT",
            INBOX_BATCH,
          )
          const items = Array.isArray(reply) && Array.isArray(reply[1]) ? reply[1] : []
          for (const item of items) {
            const answer = parseAnswer(String(item))
            if (answer !== undefined) end(answer.id, Exit.succeed(answer.response))
          }
        }
      } catch (cause) {
        healthy = false
        const error = heartbeatFailure("heartbeat (inbox pop)", list, cause)
        for (const id of [...waiting.keys()]) end(id, Exit.fail(error))
      } finally {
        lease.release(healthy)
        looping = false
        if (waiting.size > 0) startLoop()
      }
    }

    const startLoop = () => {
      if (looping) return
      looping = true
      void loop()
    }

    /** Send `request` and wait for its answer's response (undecoded). */
    const heartbeat = (request: unknown) =>
      Effect.callback<unknown, TransportError>((resume) => {
        const id = randomUUID()
        // registered before it is sent, so its answer is never unexpected
        waiting.set(id, { deadline: performance.now() + timeoutMs, resume })
        arm()
        startLoop()
        if (outbox !== undefined && outbox.ids.length >= MAX_PUSH_BATCH) send()
        if (outbox === undefined) {
          outbox = { envelopes: [String(queueCap), String(LAST_HEARTBEAT_TTL_MS)], ids: [] }
          setImmediate(send)
        }
        outbox.envelopes.push(JSON.stringify({ id, inbox, request }))
        outbox.ids.push(id)
        // interrupted: stop waiting (a request already sent is answered into the void)
        return Effect.sync(() => {
          waiting.delete(id)
        })
      })

    return { heartbeat }
  }

  const memberSides = new Map<string, ReturnType<typeof makeMemberSide>>()
  const memberSide = (request: GroupKey) => {
    const tag = requestsKey(request)
    let side = memberSides.get(tag)
    if (side === undefined) {
      // a key of its own: the side outlives the request it was made for
      side = makeMemberSide({ stream: request.stream, group: request.group })
      memberSides.set(tag, side)
    }
    return side
  }

  return {
    heartbeat: (request) =>
      Effect.flatMap(
        Effect.suspend(() => memberSide(request).heartbeat(request)),
        (raw) =>
          Effect.mapError(
            decodeResponse(raw),
            (cause) => new TransportError({ reason: "Decode", message: cause.message, cause }),
          ),
      ),

    notices: (key, memberId) => subscribe(noticeChannel(key, memberId)),

    serve: (key, handler) =>
      Effect.gen(function* () {
        const serverId = randomUUID()
        const requests = requestsKey(key)
        const stopMark = `${STOP_MARK_PREFIX}"${serverId}"}`
        const permits = yield* Semaphore.make(maxInFlight)
        // the pop loop and the handling of what it took live in a scope of
        // their own, closed only once the graceful stop below has drained them
        const work = yield* Scope.make()
        const loopDone = yield* Deferred.make<void>()
        /** Completed when this serve stops answering on its own (docs/protocol.md rule 25). */
        const ended = yield* Deferred.make<void>()
        const count = Math.max(1, Math.min(popBatch, maxInFlight))
        let stopping = false
        /** A newer serve claimed the group's presence: this one must not pop any more. */
        let replaced = false
        /**
         * Found replaced (by its refresh, or a hand-back): stop popping after
         * the current pop, and tell the candidate, which still holds its
         * scope open.
         */
        const onReplaced = Effect.suspend(() => {
          stopping = true
          replaced = true
          return Deferred.succeed(ended, undefined)
        })

        const stopGracefully = Effect.gen(function* () {
          stopping = true
          // wake the pop loop: the mark queues behind every request already there
          // (bounded: with Redis away the command would wait in ioredis' queue);
          // a replaced loop pops nothing more, so its mark would be the next serve's
          if (!replaced)
            yield* Effect.ignore(
              Effect.timeout(
                Effect.tryPromise(() =>
                  runScript(
                    connection.client,
                    Scripts.hbPush,
                    [requests, servingKey(key), lastHeartbeatKey(key)],
                    // not a member's request: the last heartbeat stays as it is
                    [String(queueCap + 1), "0", stopMark],
                  ),
                ),
                1_000,
              ),
            )
          // (with the mark lost, the loop still ends at its block timeout)
          yield* Effect.ignore(Effect.timeout(Deferred.await(loopDone), popBlockMs + 1_000))
          // every request it took is answered before it returns
          yield* Effect.ignore(Effect.timeout(permits.take(maxInFlight), 5_000))
          yield* Scope.close(work, Exit.void)
          // members' requests keep queueing for the successor (bounded: Redis may be away)
          yield* Effect.ignore(serving(key, serverId, "handover").pipe(Effect.timeout(1_000)))
        })
        // added first, so it runs last: after the refresh loop has stopped
        yield* Effect.addFinalizer(() => stopGracefully)
        yield* Effect.ignore(serving(key, serverId, "claim"))

        const handle = (raws: ReadonlyArray<string>) =>
          raws.length === 0
            ? Effect.void
            : permits
                .take(raws.length)
                .pipe(
                  Effect.andThen(
                    Effect.forkIn(
                      answerBatch(key, serverId, raws, handler, onReplaced).pipe(
                        Effect.ensuring(permits.release(raws.length)),
                      ),
                      work,
                    ),
                  ),
                )

        /** Requests popped after our stop mark go back to the tail, oldest nearest it. */
        const pushBack = (raws: ReadonlyArray<string>) =>
          raws.length === 0
            ? Effect.void
            : Effect.ignore(
                connection.command("serve (push back)", (c) =>
                  c.rpush(requests, ...[...raws].reverse()),
                ),
              )

        /** One pop; true when the loop must end (its own stop mark, or stopping). */
        const pop = connection
          .blocking("serve (BLMPOP)", (c) =>
            c.call("BLMPOP", popBlockMs / 1_000, 1, requests, "RIGHT", "COUNT", count),
          )
          .pipe(
            // a hung server (SIGSTOP, a dead master's open socket) must not
            // hold the loop: past its block time and as long again, the pop
            // is abandoned and its connection closed (docs/protocol.md rule 25)
            Effect.timeout(popBlockMs + Math.max(1_000, popBlockMs)),
            Effect.flatMap((reply) => {
              const items = (Array.isArray(reply) && Array.isArray(reply[1]) ? reply[1] : []).map(
                String,
              )
              // replaced meanwhile (a hand-back's own push may land in this
              // pop): what it took goes back untouched, for the new server
              if (replaced) return Effect.as(pushBack(items), true)
              const at = items.indexOf(stopMark)
              if (at < 0) return Effect.as(handle(items), stopping)
              return Effect.as(
                Effect.andThen(handle(items.slice(0, at)), pushBack(items.slice(at + 1))),
                true,
              )
            }),
            // Redis away: retry without spinning
            Effect.catch(() => Effect.as(Effect.sleep(200), stopping)),
          )
        const loop: Effect.Effect<void> = Effect.flatMap(pop, (done) => (done ? Effect.void : loop))
        // a loop that ends before its scope closes has stopped answering on its own
        const loopEnded = Effect.andThen(
          Deferred.succeed(loopDone, undefined),
          Effect.suspend(() => (stopping ? Effect.void : Deferred.succeed(ended, undefined))),
        )
        yield* Effect.forkIn(Effect.ensuring(loop, loopEnded), work)

        const refresh: Effect.Effect<void> = Effect.sleep(Math.max(1, servingTtlMs / 3)).pipe(
          Effect.andThen(Effect.result(serving(key, serverId, "refresh"))),
          Effect.flatMap((result) =>
            result._tag === "Success" && result.success[0] === Code.Replaced ? onReplaced : refresh,
          ),
        )
        yield* Effect.forkScoped(refresh)
        const self: CoordinatorTransport.Serving = {
          active: () => !replaced && !stopping,
          ended: Deferred.await(ended),
        }
        return self
      }),

    notify: (key, memberId) => publish(noticeChannel(key, memberId)),

    handover: (key) => publish(handoverChannel(key)),

    handovers: (key) => subscribe(handoverChannel(key)),
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
): Layer.Layer<CoordinatorTransport.CoordinatorTransport, RedisConnection.ConnectError> =>
  layerFromConnection(options.transport).pipe(Layer.provide(RedisConnection.layer(options)))
