import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Schema, Scope, Stream } from "effect"
import { TestClock } from "effect/testing"
import type { HeartbeatRequest, HeartbeatResponse } from "../src/index.js"
import { HeartbeatRequest as HeartbeatRequestSchema } from "../src/index.js"
import { CoordinatorTransport } from "../src/testing.js"

const key = { stream: "orders", group: "orders" }

const request: HeartbeatRequest = {
  group: "orders",
  stream: "orders",
  memberId: "m0",
  incarnation: 1,
  seq: 1,
  memberEpoch: 0,
  assignmentEpoch: 0,
  metadataVersion: 0,
  ownedShards: [],
  revokingShards: [],
  memberInfo: { consumerName: "m0", host: "h" },
}

const answer = (memberEpoch: number): HeartbeatResponse => ({
  errorCode: "NONE",
  memberId: "m0",
  memberEpoch,
  assignmentEpoch: 1,
  assigned: [{ shard: 0, token: 1 }],
  pending: [],
  heartbeatIntervalMs: 1_000,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
})

/** A coordinator stand-in: decodes the untrusted request and answers epoch + 1. */
const handler = (request: unknown) =>
  Schema.decodeUnknownEffect(HeartbeatRequestSchema)(request).pipe(
    Effect.map((r) => answer(r.memberEpoch + 1)),
    Effect.orDie,
  )

const provide = Effect.provide(CoordinatorTransport.layerMemoryWith({ timeoutMs: 1_000 }))

describe("CoordinatorTransport (memory)", () => {
  it.effect(
    "a heartbeat reaches the group's handler as plain data and the response is decoded",
    () =>
      Effect.gen(function* () {
        const transport = yield* CoordinatorTransport.CoordinatorTransport
        yield* transport.serve(key, handler)
        const response = yield* transport.heartbeat(request)
        assert.deepStrictEqual(response, answer(1))
      }).pipe(provide),
  )

  it.effect(
    "no coordinator serving the group: Unavailable; serving stops when its scope closes",
    () =>
      Effect.gen(function* () {
        const transport = yield* CoordinatorTransport.CoordinatorTransport
        const none = yield* Effect.flip(transport.heartbeat(request))
        assert.strictEqual(none.reason, "Unavailable")
        const scope = yield* Scope.make()
        yield* transport.serve(key, handler).pipe(Scope.provide(scope))
        assert.strictEqual((yield* transport.heartbeat(request)).memberEpoch, 1)
        yield* Scope.close(scope, Exit.void)
        // docs/protocol.md rule 20: requests wait a handover window for a
        // successor (2 s by default), then fail Unavailable
        const waiting = yield* Effect.forkChild(Effect.flip(transport.heartbeat(request)))
        yield* TestClock.adjust(2_000)
        assert.strictEqual((yield* Fiber.join(waiting)).reason, "Unavailable")
        assert.strictEqual((yield* Effect.flip(transport.heartbeat(request))).reason, "Unavailable")
      }).pipe(provide),
  )

  it.effect("rule 20: a request sent after a serve stopped is answered by the successor", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      const scope = yield* Scope.make()
      yield* transport.serve(key, handler).pipe(Scope.provide(scope))
      yield* Scope.close(scope, Exit.void)
      const waiting = yield* Effect.forkChild(transport.heartbeat(request))
      yield* TestClock.adjust(100)
      yield* transport.serve(key, (raw) =>
        Effect.map(handler(raw), (r) => ({ ...r, memberEpoch: 7 })),
      )
      assert.strictEqual((yield* Fiber.join(waiting)).memberEpoch, 7)
    }).pipe(provide),
  )

  it.effect("a lost response: the coordinator handled it, the member times out", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      const faults = yield* CoordinatorTransport.CoordinatorTransportFaults
      yield* transport.serve(key, handler)
      yield* faults.dropResponses(1)
      const fiber = yield* Effect.forkChild(Effect.flip(transport.heartbeat(request)))
      yield* TestClock.adjust(1_000)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason, "Timeout")
      assert.strictEqual(yield* faults.handled, 1)
      // the next one gets through
      assert.strictEqual((yield* transport.heartbeat(request)).memberEpoch, 1)
    }).pipe(provide),
  )

  it.effect(
    "a coordinator that never answers: the member times out; the coordinator keeps working",
    () =>
      Effect.gen(function* () {
        const transport = yield* CoordinatorTransport.CoordinatorTransport
        let finished = 0
        // answers only after 5 s, like a paused coordinator process
        yield* transport.serve(key, (req) =>
          Effect.sleep(5_000).pipe(
            Effect.andThen(handler(req)),
            Effect.tap(() => Effect.sync(() => finished++)),
          ),
        )
        const fiber = yield* Effect.forkChild(Effect.flip(transport.heartbeat(request)))
        yield* TestClock.adjust(1_000)
        const error = yield* Fiber.join(fiber)
        assert.strictEqual(error.reason, "Timeout")
        assert.strictEqual(finished, 0)
        // the member's timeout did not interrupt the coordinator's work
        yield* TestClock.adjust(4_000)
        assert.strictEqual(finished, 1)
      }).pipe(provide),
  )

  it.effect("a lost request never reaches the coordinator", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      const faults = yield* CoordinatorTransport.CoordinatorTransportFaults
      yield* transport.serve(key, handler)
      yield* faults.dropRequests(1)
      const fiber = yield* Effect.forkChild(Effect.flip(transport.heartbeat(request)))
      yield* TestClock.adjust(1_000)
      assert.strictEqual((yield* Fiber.join(fiber)).reason, "Timeout")
      assert.strictEqual(yield* faults.handled, 0)
    }).pipe(provide),
  )

  it.effect("delayed responses arrive late; beyond the timeout they time out", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      const faults = yield* CoordinatorTransport.CoordinatorTransportFaults
      yield* transport.serve(key, handler)
      yield* faults.delayResponses(300)
      const late = yield* Effect.forkChild(transport.heartbeat(request))
      yield* TestClock.adjust(299)
      assert.isTrue(late.pollUnsafe() === undefined)
      yield* TestClock.adjust(1)
      assert.strictEqual((yield* Fiber.join(late)).memberEpoch, 1)
      yield* faults.delayResponses(1_000)
      const lost = yield* Effect.forkChild(Effect.flip(transport.heartbeat(request)))
      yield* TestClock.adjust(1_000)
      assert.strictEqual((yield* Fiber.join(lost)).reason, "Timeout")
    }).pipe(provide),
  )

  it.effect("a response that does not decode is a Decode TransportError", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      yield* transport.serve(key, () =>
        Effect.succeed({ ...answer(1), errorCode: "WHAT" } as unknown as HeartbeatResponse),
      )
      const error = yield* Effect.flip(transport.heartbeat(request))
      assert.strictEqual(error.reason, "Decode")
    }).pipe(provide),
  )

  it.effect("notices reach only the named member and coalesce", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      const mine = yield* transport.notices(key, "m0")
      const other = yield* transport.notices(key, "m1")
      yield* transport.notify(key, "m0")
      yield* transport.notify(key, "m0")
      yield* transport.notify({ stream: "billing", group: "orders" }, "m1")
      const got = yield* Stream.runCollect(Stream.take(mine, 1))
      assert.strictEqual(got.length, 1)
      const more = yield* Effect.forkChild(Stream.runCollect(Stream.take(mine, 1)))
      const others = yield* Effect.forkChild(Stream.runCollect(Stream.take(other, 1)))
      yield* TestClock.adjust(10_000)
      // coalesced: the two pushes were one notice; m1 got none
      assert.isTrue(more.pollUnsafe() === undefined)
      assert.isTrue(others.pollUnsafe() === undefined)
      yield* transport.notify(key, "m1")
      assert.strictEqual((yield* Fiber.join(others)).length, 1)
    }).pipe(provide),
  )

  it.effect(
    "groups are (stream, group): the same group name on two streams reaches two coordinators",
    () =>
      Effect.gen(function* () {
        const transport = yield* CoordinatorTransport.CoordinatorTransport
        yield* transport.serve(key, handler)
        yield* transport.serve({ stream: "payments", group: "orders" }, (raw) =>
          Effect.map(handler(raw), (r) => ({ ...r, memberEpoch: r.memberEpoch + 100 })),
        )
        assert.strictEqual((yield* transport.heartbeat(request)).memberEpoch, 1)
        assert.strictEqual(
          (yield* transport.heartbeat({ ...request, stream: "payments" })).memberEpoch,
          101,
        )
        const none = yield* Effect.flip(transport.heartbeat({ ...request, stream: "billing" }))
        assert.strictEqual(none.reason, "Unavailable")
        const onPayments = yield* transport.notices({ stream: "payments", group: "orders" }, "m0")
        const fiber = yield* Effect.forkChild(Stream.runCollect(Stream.take(onPayments, 1)))
        yield* transport.notify(key, "m0")
        yield* TestClock.adjust(1)
        assert.isTrue(fiber.pollUnsafe() === undefined)
        yield* transport.notify({ stream: "payments", group: "orders" }, "m0")
        assert.strictEqual((yield* Fiber.join(fiber)).length, 1)
      }).pipe(provide),
  )
})
