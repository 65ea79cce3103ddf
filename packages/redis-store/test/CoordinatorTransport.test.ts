/**
 * The CoordinatorTransport contract on core's in-process transport and on
 * every Redis target, then what is lost where on Redis (docs/redis.md,
 * "What is lost where") and foreign data under the transport's keys.
 */
import { assert, it } from "@effect/vitest"
import { HeartbeatRequest, type HeartbeatResponse } from "@shardline/core"
import { Deferred, Effect, Exit, Fiber, Schema, Scope } from "effect"
import { Cluster, type Redis } from "ioredis"
import { replyKey, requestsKey, servingKey } from "../src/keys.js"
import type { GroupKey, StreamHeartbeatRequest } from "../src/ports.js"
import * as RedisCoordinatorTransport from "../src/RedisCoordinatorTransport.js"
import { coordinatorTransportContract, TIMEOUT_MS } from "./contract/CoordinatorTransport.js"
import { memoryTransport } from "./support/memory.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"

const options: RedisCoordinatorTransport.RedisTransportOptions = {
  timeoutMs: TIMEOUT_MS,
  // short enough that a replaced or stopped server notices within the tests
  servingTtlMs: 600,
  popBlockMs: 500,
}

describeTarget(
  "CoordinatorTransport contract",
  { name: "memory (core)" },
  memoryTransport({ timeoutMs: TIMEOUT_MS }),
  (subject) => coordinatorTransportContract(subject),
)

const request = (key: GroupKey, memberEpoch = 0): StreamHeartbeatRequest => ({
  ...key,
  memberId: "m0",
  memberEpoch,
  assignmentEpoch: 0,
  metadataVersion: 0,
  ownedShards: [],
  revokingShards: [],
  memberInfo: { consumerName: "m0", host: "h" },
})

const echo = (raw: unknown) =>
  Schema.decodeUnknownEffect(HeartbeatRequest)(raw).pipe(
    Effect.map(
      (r): HeartbeatResponse => ({
        errorCode: "NONE",
        memberId: r.memberId,
        memberEpoch: r.memberEpoch + 1,
        assignmentEpoch: 1,
        assigned: [],
        pending: [],
        heartbeatIntervalMs: 1_000,
      }),
    ),
    Effect.orDie,
  )

/** KEYS on every master (in a cluster KEYS goes to one node). */
const keysEverywhere = (client: Redis | Cluster, pattern: string) =>
  client instanceof Cluster
    ? Promise.all(client.nodes("master").map((n) => n.keys(pattern))).then((all) => all.flat())
    : client.keys(pattern)

for (const target of redisTargets()) {
  const acquire = Effect.map(connect(target), (connection) => ({
    connection,
    transport: RedisCoordinatorTransport.makeWith(connection, options),
  }))

  describeTarget("CoordinatorTransport contract", target, acquire, (subject) =>
    coordinatorTransportContract(() => subject().transport),
  )

  describeTarget("CoordinatorTransport losses and bad input", target, acquire, (subject) => {
    const raw = () => subject().connection.client
    const freshKey = () => ({ stream: unique("orders"), group: "workers" })

    it.live(
      "a request nobody pops (coordinator gone after its presence): Timeout; the queue is capped",
      () =>
        Effect.gen(function* () {
          const { transport } = subject()
          const key = freshKey()
          // a presence mark without a server: what a crashed coordinator leaves for its TTL
          yield* Effect.promise(() => raw().set(servingKey(key), "crashed", "PX", 60_000))
          assert.strictEqual(
            (yield* Effect.flip(transport.heartbeat(request(key)))).reason,
            "Timeout",
          )
          assert.strictEqual(yield* Effect.promise(() => raw().llen(requestsKey(key))), 1)
          const small = RedisCoordinatorTransport.makeWith(subject().connection, {
            ...options,
            timeoutMs: 10,
            queueCap: 3,
          })
          for (let i = 0; i < 5; i++) yield* Effect.flip(small.heartbeat(request(key, i)))
          const queued = yield* Effect.promise(() => raw().lrange(requestsKey(key), 0, -1))
          assert.deepStrictEqual(
            queued.map(
              (e) => (JSON.parse(e) as { request: { memberEpoch: number } }).request.memberEpoch,
            ),
            [4, 3, 2],
          )
        }),
    )

    it.live(
      "a coordinator that dies between pop and answer: Timeout; a new coordinator answers the retry",
      () =>
        Effect.gen(function* () {
          const { transport } = subject()
          const key = freshKey()
          const popped = yield* Deferred.make<void>()
          const scope = yield* Scope.make()
          const hang = (): Effect.Effect<HeartbeatResponse> =>
            Effect.andThen(Deferred.succeed(popped, undefined), Effect.never)
          yield* Scope.provide(transport.serve(key, hang), scope)
          const first = yield* Effect.forkChild(Effect.flip(transport.heartbeat(request(key))))
          yield* Deferred.await(popped)
          yield* Scope.close(scope, Exit.void) // the crash: the request was popped, never answered
          assert.strictEqual((yield* Fiber.join(first)).reason, "Timeout")
          yield* transport.serve(key, echo)
          assert.strictEqual((yield* transport.heartbeat(request(key, 4))).memberEpoch, 5)
        }),
    )

    it.live("a response lost after the coordinator committed: Timeout; the retry is answered", () =>
      Effect.gen(function* () {
        const { transport } = subject()
        const key = freshKey()
        let commits = 0
        let first = true
        yield* transport.serve(key, (r) =>
          Effect.suspend(() => {
            commits++ // the commit happens before the answer...
            if (!first) return echo(r)
            first = false
            return Effect.die("connection lost before the answer") // ...which is lost
          }),
        )
        assert.strictEqual(
          (yield* Effect.flip(transport.heartbeat(request(key)))).reason,
          "Timeout",
        )
        assert.strictEqual((yield* transport.heartbeat(request(key, 2))).memberEpoch, 3)
        assert.strictEqual(commits, 2)
      }),
    )

    it.live("a late answer's reply list expires; nothing else is left behind", () =>
      Effect.gen(function* () {
        const { connection } = subject()
        const transport = RedisCoordinatorTransport.makeWith(connection, {
          ...options,
          replyTtlMs: 5_000,
        })
        const key = freshKey()
        const answered = yield* Deferred.make<void>()
        yield* transport.serve(key, (r) =>
          Effect.sleep(TIMEOUT_MS + 100).pipe(
            Effect.andThen(echo(r)),
            Effect.ensuring(Deferred.succeed(answered, undefined)),
          ),
        )
        yield* Effect.flip(transport.heartbeat(request(key)))
        yield* Deferred.await(answered)
        yield* Effect.sleep(50)
        const keys = yield* Effect.promise(() => keysEverywhere(raw(), replyKey(key, "*")))
        assert.strictEqual(keys.length, 1)
        const ttl = yield* Effect.promise(() => raw().pttl(keys[0]!))
        assert.isTrue(ttl > 0 && ttl <= 5_000)
        assert.strictEqual(yield* Effect.promise(() => raw().llen(requestsKey(key))), 0)
      }),
    )

    it.live("garbage in the request list is dropped; the coordinator keeps serving", () =>
      Effect.gen(function* () {
        const { transport } = subject()
        const key = freshKey()
        yield* transport.serve(key, echo)
        for (const junk of ["not json", "{}", '{"id":"../x","request":{}}', "[1,2]"])
          yield* Effect.promise(() => raw().lpush(requestsKey(key), junk))
        assert.strictEqual((yield* transport.heartbeat(request(key, 7))).memberEpoch, 8)
      }),
    )

    it.live(
      "a foreign value at the request list is Unavailable for the member and left as is",
      () =>
        Effect.gen(function* () {
          const { transport } = subject()
          const key = freshKey()
          yield* transport.serve(key, echo)
          yield* Effect.promise(() => raw().set(requestsKey(key), "not a list"))
          const error = yield* Effect.flip(transport.heartbeat(request(key)))
          assert.strictEqual(error.reason, "Unavailable")
          assert.include(error.message, "WRONGTYPE")
          assert.strictEqual(yield* Effect.promise(() => raw().get(requestsKey(key))), "not a list")
        }),
    )
  })
}
