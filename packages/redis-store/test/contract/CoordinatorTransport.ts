/**
 * The CoordinatorTransport contract, run unchanged on every implementation
 * (test/CoordinatorTransport.test.ts). The transport under test answers
 * within `TIMEOUT_MS`; live clock.
 */
import { assert, it } from "@effect/vitest"
import {
  type CoordinatorTransport,
  type GroupKey,
  type HeartbeatRequest,
  HeartbeatRequest as HeartbeatRequestSchema,
  type HeartbeatResponse,
} from "@shardline/core"
import { Deferred, Effect, Exit, Fiber, Schema, Scope, Stream } from "effect"
import { unique } from "../support/targets.js"

type CoordinatorTransportShape = CoordinatorTransport.CoordinatorTransportShape
type HeartbeatHandler = CoordinatorTransport.HeartbeatHandler

/**
 * The member's timeout in every transport under test: 2 s, as a loaded
 * machine needs (at load 22 a heartbeat on the 3-node cluster went
 * unanswered past 750 ms).
 */
export const TIMEOUT_MS = 2_000

/** How long requests wait for a successor after a serve stopped, in every transport under test. */
export const HANDOVER_MS = 400

const requestOf = (key: GroupKey, memberId = "m0", memberEpoch = 0): HeartbeatRequest => ({
  stream: key.stream,
  group: key.group,
  memberId,
  incarnation: 1,
  seq: 1,
  memberEpoch,
  assignmentEpoch: 0,
  metadataVersion: 0,
  ownedShards: [],
  revokingShards: [],
  memberInfo: { consumerName: memberId, host: "h" },
})

const answer = (memberId: string, memberEpoch: number): HeartbeatResponse => ({
  errorCode: "NONE",
  memberId,
  memberEpoch,
  assignmentEpoch: 1,
  assigned: [{ shard: 0, token: 1 }],
  pending: [],
  heartbeatIntervalMs: 1_000,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
})

const decode = Schema.decodeUnknownEffect(HeartbeatRequestSchema)

/** A coordinator stand-in: decodes the untrusted request and answers epoch + `plus`. */
const handler =
  (plus = 1): HeartbeatHandler =>
  (raw) =>
    decode(raw).pipe(
      Effect.map((r) => answer(r.memberId, r.memberEpoch + plus)),
      Effect.orDie,
    )

const freshKey = (): GroupKey => ({ stream: unique("orders"), group: "workers" })

/** Serve in a scope of our own, closed by the returned effect. */
const serveIn = (t: CoordinatorTransportShape, key: GroupKey, h: HeartbeatHandler) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    yield* t.serve(key, h).pipe(Scope.provide(scope))
    return Scope.close(scope, Exit.void)
  })

export const coordinatorTransportContract = (subject: () => CoordinatorTransportShape) => {
  it.live("a heartbeat reaches the group's handler as plain data and the response is decoded", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      const seen: Array<unknown> = []
      yield* t.serve(key, (raw) => {
        seen.push(raw)
        return handler()(raw)
      })
      const request = requestOf(key)
      assert.deepStrictEqual(yield* t.heartbeat(request), answer("m0", 1))
      assert.deepStrictEqual(seen, [JSON.parse(JSON.stringify(request))])
    }),
  )

  it.live(
    "no coordinator serving the group: Unavailable at once; after a stop with no successor, once the handover window ran out",
    () =>
      Effect.gen(function* () {
        const t = subject()
        const key = freshKey()
        assert.strictEqual((yield* Effect.flip(t.heartbeat(requestOf(key)))).reason, "Unavailable")
        const close = yield* serveIn(t, key, handler())
        assert.strictEqual((yield* t.heartbeat(requestOf(key))).memberEpoch, 1)
        // another group (same group name on another stream) is not served
        const other = { ...key, stream: `${key.stream}-eu` }
        assert.strictEqual(
          (yield* Effect.flip(t.heartbeat(requestOf(other)))).reason,
          "Unavailable",
        )
        yield* close
        yield* Effect.sleep(HANDOVER_MS + 100)
        assert.strictEqual((yield* Effect.flip(t.heartbeat(requestOf(key)))).reason, "Unavailable")
      }),
  )

  it.live(
    "rule 20: a graceful stop hands over: a request sent after the stop is answered by the successor, not failed",
    () =>
      Effect.gen(function* () {
        const t = subject()
        const key = freshKey()
        const close = yield* serveIn(t, key, handler(1))
        assert.strictEqual((yield* t.heartbeat(requestOf(key))).memberEpoch, 1)
        yield* close
        const pending = yield* Effect.forkChild(t.heartbeat(requestOf(key)))
        yield* Effect.sleep(50)
        yield* t.serve(key, handler(2)) // the successor
        const answered = yield* Fiber.join(pending)
        assert.strictEqual(answered.memberEpoch, 2)
      }),
  )

  it.live(
    "rule 20: a request the stopping serve already took is answered by it before its scope has closed",
    () =>
      Effect.gen(function* () {
        const t = subject()
        const key = freshKey()
        const gate = yield* Deferred.make<void>()
        const taken = yield* Deferred.make<void>()
        const close = yield* serveIn(t, key, (raw) =>
          Deferred.succeed(taken, undefined).pipe(
            Effect.andThen(Deferred.await(gate)),
            Effect.andThen(handler(1)(raw)),
          ),
        )
        const pending = yield* Effect.forkChild(t.heartbeat(requestOf(key)))
        yield* Deferred.await(taken)
        const closing = yield* Effect.forkChild(close)
        yield* Effect.sleep(50)
        yield* Deferred.succeed(gate, undefined)
        assert.strictEqual((yield* Fiber.join(pending)).memberEpoch, 1)
        yield* Fiber.join(closing)
      }),
  )

  it.live("handovers reach the group's subscribed candidates (and only them)", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      const other = { ...key, group: `${key.group}-b` }
      const mine = yield* t.handovers(key)
      const theirs = yield* t.handovers(other)
      const got = yield* Effect.forkChild(Stream.runHead(mine))
      const notGot = yield* Effect.forkChild(Stream.runHead(theirs))
      yield* Effect.sleep(20)
      yield* t.handover(key)
      assert.isTrue((yield* Fiber.join(got))._tag === "Some")
      yield* Effect.sleep(100)
      assert.isUndefined(notGot.pollUnsafe())
    }).pipe(Effect.scoped),
  )

  // The handlers below wait for a gate the test opens once the member has
  // timed out, so "too late" never depends on how fast the machine is.
  it.live(
    "a coordinator too slow to answer: the member times out; the coordinator finishes its work",
    () =>
      Effect.gen(function* () {
        const t = subject()
        const key = freshKey()
        const gate = yield* Deferred.make<void>()
        const finished = yield* Deferred.make<void>()
        yield* t.serve(key, (raw) =>
          Deferred.await(gate).pipe(
            Effect.andThen(handler()(raw)),
            Effect.tap(() => Deferred.succeed(finished, undefined)),
          ),
        )
        const error = yield* Effect.flip(t.heartbeat(requestOf(key)))
        assert.strictEqual(error.reason, "Timeout")
        yield* Deferred.succeed(gate, undefined)
        yield* Deferred.await(finished)
      }),
  )

  it.live("a late answer is never taken for a later request's answer", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      const gate = yield* Deferred.make<void>()
      const lateDone = yield* Deferred.make<void>()
      let calls = 0
      yield* t.serve(key, (raw) => {
        calls++
        if (calls > 1) return handler(1)(raw)
        return Deferred.await(gate).pipe(
          Effect.andThen(handler(1000)(raw)),
          Effect.tap(() => Deferred.succeed(lateDone, undefined)),
        )
      })
      assert.strictEqual(
        (yield* Effect.flip(t.heartbeat(requestOf(key, "m0", 1)))).reason,
        "Timeout",
      )
      yield* Deferred.succeed(gate, undefined)
      yield* Deferred.await(lateDone)
      // the answer to the first request (epoch 1001) comes after its member gave up
      assert.strictEqual((yield* t.heartbeat(requestOf(key, "m0", 2))).memberEpoch, 3)
      assert.strictEqual((yield* t.heartbeat(requestOf(key, "m0", 5))).memberEpoch, 6)
    }),
  )

  it.live("concurrent heartbeats of many members each get their own answer", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      yield* t.serve(key, handler())
      const members = Array.from({ length: 20 }, (_, i) => `m${i}`)
      const answers = yield* Effect.forEach(members, (m, i) => t.heartbeat(requestOf(key, m, i)), {
        concurrency: "unbounded",
      })
      assert.deepStrictEqual(
        answers.map((a) => [a.memberId, a.memberEpoch]),
        members.map((m, i) => [m, i + 1]),
      )
    }),
  )

  it.live("a response that does not decode is a Decode TransportError", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      yield* t.serve(key, () =>
        Effect.succeed({ ...answer("m0", 1), errorCode: "WHAT" } as unknown as HeartbeatResponse),
      )
      assert.strictEqual((yield* Effect.flip(t.heartbeat(requestOf(key)))).reason, "Decode")
    }),
  )

  it.live("a newer serve replaces the older one; closing the older one changes nothing", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      const closeOld = yield* serveIn(t, key, handler(1))
      assert.strictEqual((yield* t.heartbeat(requestOf(key))).memberEpoch, 1)
      yield* t.serve(key, handler(100))
      // every answer comes from the newer one once the older has noticed
      let newer = 0
      for (let i = 0; newer < 5; i++) {
        assert.isBelow(i, 200, "the newer serve never took over")
        // a request popped by the older one as it stops may go unanswered: a timeout
        const result = yield* Effect.result(t.heartbeat(requestOf(key)))
        newer = result._tag === "Success" && result.success.memberEpoch === 100 ? newer + 1 : 0
        if (newer === 0) yield* Effect.sleep(20)
      }
      yield* closeOld
      assert.strictEqual((yield* t.heartbeat(requestOf(key))).memberEpoch, 100)
    }),
  )

  it.live(
    "rule 25: a replaced serve says so (ended, not active) while its scope is open; a serve whose scope closed does not",
    () =>
      Effect.gen(function* () {
        const t = subject()
        const key = freshKey()
        const oldScope = yield* Scope.make()
        const older = yield* t.serve(key, handler(1)).pipe(Scope.provide(oldScope))
        assert.isTrue(older.active())
        const ended = yield* Effect.forkChild(older.ended)
        yield* t.serve(key, handler(100))
        // the older serve learns it was replaced (Redis: at its next presence refresh)
        yield* Fiber.join(ended).pipe(Effect.timeout(10_000))
        assert.isFalse(older.active())
        yield* Scope.close(oldScope, Exit.void)
        // a serve stopped by its own scope is not "ended on its own"
        const s = yield* Scope.make()
        const closed = yield* t.serve(freshKey(), handler(1)).pipe(Scope.provide(s))
        const notEnded = yield* Effect.forkChild(closed.ended)
        yield* Scope.close(s, Exit.void)
        yield* Effect.sleep(100)
        assert.isUndefined(notEnded.pollUnsafe())
        yield* Fiber.interrupt(notEnded)
      }),
  )

  it.live("notices reach only the named member of the named group, and coalesce", () =>
    Effect.gen(function* () {
      const t = subject()
      const key = freshKey()
      const other = { ...key, stream: `${key.stream}-eu` }
      const mine = yield* t.notices(key, "m0")
      const m1 = yield* t.notices(key, "m1")
      const otherGroup = yield* t.notices(other, "m0")
      const probe = yield* t.notices(key, "probe")
      yield* t.notify(key, "m0")
      yield* t.notify(key, "m0")
      yield* t.notify(key, "probe")
      // notices arrive in order: once the probe's is here, both of m0's are too
      yield* Stream.runCollect(Stream.take(probe, 1))
      assert.strictEqual((yield* Stream.runCollect(Stream.take(mine, 1))).length, 1)
      const more = yield* Effect.forkChild(Stream.runCollect(Stream.take(mine, 1)))
      const others = yield* Effect.forkChild(Stream.runCollect(Stream.take(m1, 1)))
      const elsewhere = yield* Effect.forkChild(Stream.runCollect(Stream.take(otherGroup, 1)))
      yield* t.notify(key, "probe")
      yield* Stream.runCollect(Stream.take(probe, 1))
      // coalesced: the two pushes were one notice; m1 and the other group's m0 got none
      assert.isUndefined(more.pollUnsafe())
      assert.isUndefined(others.pollUnsafe())
      assert.isUndefined(elsewhere.pollUnsafe())
      yield* t.notify(key, "m1")
      assert.strictEqual((yield* Fiber.join(others)).length, 1)
      yield* Fiber.interrupt(more)
      yield* Fiber.interrupt(elsewhere)
    }),
  )

  it.live(
    "a member subscribed twice (two scopes) gets the notice on both; a closed one on neither",
    () =>
      Effect.gen(function* () {
        const t = subject()
        const key = freshKey()
        const a = yield* t.notices(key, "m0")
        const scope = yield* Scope.make()
        yield* t.notices(key, "m0").pipe(Scope.provide(scope))
        yield* Scope.close(scope, Exit.void)
        yield* t.notify(key, "m0")
        assert.strictEqual((yield* Stream.runCollect(Stream.take(a, 1))).length, 1)
        const b = yield* t.notices(key, "m0")
        yield* t.notify(key, "m0")
        assert.strictEqual((yield* Stream.runCollect(Stream.take(b, 1))).length, 1)
        assert.strictEqual((yield* Stream.runCollect(Stream.take(a, 1))).length, 1)
      }),
  )
}
