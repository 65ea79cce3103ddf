/**
 * The CoordinatorTransport suites of one Redis target: the contract, then
 * what is lost where (docs/redis.md, "What is lost where") and foreign data
 * under the transport's keys. Registered by the CoordinatorTransport*.test.ts
 * files, split so that vitest runs the targets in parallel (these tests
 * mostly wait for timeouts).
 */
import { randomUUID } from "node:crypto"
import { assert, it } from "@effect/vitest"
import { type GroupKey, HeartbeatRequest, type HeartbeatResponse } from "@shardline/core"
import { Deferred, Effect, Exit, Fiber, Logger, Schema, Scope, Stream } from "effect"
import { Cluster, type Redis } from "ioredis"
import { defaultKeys } from "../../src/keys.js"
import * as RedisConnection from "../../src/RedisConnection.js"
import * as RedisCoordinatorTransport from "../../src/RedisCoordinatorTransport.js"
import {
  coordinatorTransportContract,
  HANDOVER_MS,
  TIMEOUT_MS,
} from "../contract/CoordinatorTransport.js"
import { connect, describeTarget, type RedisTarget, unique } from "./targets.js"

const { inboxKey, replyKey, requestsKey, servingKey } = defaultKeys

const options: RedisCoordinatorTransport.RedisTransportOptions = {
  timeoutMs: TIMEOUT_MS,
  // short enough that a replaced or stopped server notices within the tests
  servingTtlMs: 600,
  popBlockMs: 500,
  handoverMs: HANDOVER_MS,
}

const request = (key: GroupKey, memberEpoch = 0): HeartbeatRequest => ({
  ...key,
  memberId: "m0",
  incarnation: 1,
  seq: 1,
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
        sessionTimeoutMs: 10_000,
        rebalanceTimeoutMs: 10_000,
      }),
    ),
    Effect.orDie,
  )

/** KEYS on every master (in a cluster KEYS goes to one node). */
const keysEverywhere = (client: Redis | Cluster, pattern: string) =>
  client instanceof Cluster
    ? Promise.all(client.nodes("master").map((n) => n.keys(pattern))).then((all) => all.flat())
    : client.keys(pattern)

export const redisTransportSuites = (target: RedisTarget) => {
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

    it.live(
      "a request a replaced server's coordinator refuses (NOT_COORDINATOR) goes back to the list for the server that serves now, which answers it; the replaced server stops popping (docs/protocol.md rule 25)",
      () =>
        Effect.gen(function* () {
          const { connection, transport } = subject()
          const key = freshKey()
          const popped = yield* Deferred.make<void>()
          const gate = yield* Deferred.make<void>()
          let refusals = 0
          // a paused ex-coordinator: its pop took the request; it resumes
          // once a successor serves, and its coordinator no longer leads
          const zombie = yield* transport.serve(key, (r) =>
            Effect.gen(function* () {
              yield* Deferred.succeed(popped, undefined)
              yield* Deferred.await(gate)
              refusals++
              const answer = yield* echo(r)
              return { ...answer, errorCode: "NOT_COORDINATOR" as const, memberEpoch: -1 }
            }),
          )
          const beat = yield* Effect.forkChild(transport.heartbeat(request(key, 4)))
          yield* Deferred.await(popped)
          yield* Effect.promise(() => raw().set(servingKey(key), "successor", "PX", 60_000))
          yield* Deferred.succeed(gate, undefined)
          yield* zombie.ended // it found out it was replaced
          assert.isFalse(zombie.active())
          // back in the list (its pop, blocked meanwhile, may take it once
          // more: it pushes that back untouched)
          for (let i = 0; (yield* Effect.promise(() => raw().llen(requestsKey(key)))) !== 1; i++) {
            assert.isBelow(i, 300, "the request never went back to the list")
            yield* Effect.sleep(10)
          }
          // the successor's serve answers it
          const successor = RedisCoordinatorTransport.makeWith(connection, options)
          yield* successor.serve(key, echo)
          const answered = yield* Fiber.join(beat)
          assert.strictEqual(answered.errorCode, "NONE")
          assert.strictEqual(answered.memberEpoch, 5)
          // once, or twice if its blocked pop took the hand-back before it
          // knew it was replaced; never again
          assert.isAtMost(refusals, 2)
        }),
    )

    it.live(
      "a server that still serves the group answers its coordinator's NOT_COORDINATOR itself",
      () =>
        Effect.gen(function* () {
          const { transport } = subject()
          const key = freshKey()
          yield* transport.serve(key, (r) =>
            Effect.map(echo(r), (a) => ({ ...a, errorCode: "NOT_COORDINATOR" as const })),
          )
          assert.strictEqual(
            (yield* transport.heartbeat(request(key))).errorCode,
            "NOT_COORDINATOR",
          )
          assert.strictEqual(yield* Effect.promise(() => raw().llen(requestsKey(key))), 0)
        }),
    )

    it.live("a late answer nobody pops expires with its inbox; nothing else is left behind", () =>
      Effect.gen(function* () {
        const { connection } = subject()
        const transport = RedisCoordinatorTransport.makeWith(connection, {
          ...options,
          replyTtlMs: 5_000,
        })
        // the member on a connection of its own, closed once it gave up: its
        // inbox loop has certainly stopped when the late answer arrives
        const memberScope = yield* Scope.make()
        const member = RedisCoordinatorTransport.makeWith(
          yield* Scope.provide(connect(target), memberScope),
          options,
        )
        const key = freshKey()
        const gate = yield* Deferred.make<void>()
        const answered = yield* Deferred.make<void>()
        yield* transport.serve(key, (r) =>
          Deferred.await(gate).pipe(
            Effect.andThen(echo(r)),
            Effect.ensuring(Deferred.succeed(answered, undefined)),
          ),
        )
        assert.strictEqual((yield* Effect.flip(member.heartbeat(request(key)))).reason, "Timeout")
        yield* Scope.close(memberScope, Exit.void)
        yield* Deferred.succeed(gate, undefined) // answered only after the member gave up
        yield* Deferred.await(answered)
        // the transport pushes the answer right after the handler returns
        let keys: Array<string> = []
        for (let i = 0; keys.length === 0; i++) {
          assert.isBelow(i, 500, "the late answer was never pushed")
          yield* Effect.sleep(10)
          keys = yield* Effect.promise(() => keysEverywhere(raw(), inboxKey(key, "*")))
        }
        assert.strictEqual(keys.length, 1)
        const ttl = yield* Effect.promise(() => raw().pttl(keys[0]!))
        assert.isTrue(ttl > 0 && ttl <= 5_000)
        assert.strictEqual(yield* Effect.promise(() => raw().llen(requestsKey(key))), 0)
        assert.deepStrictEqual(
          yield* Effect.promise(() => keysEverywhere(raw(), replyKey(key, "*"))),
          [],
        )
      }),
    )

    if (target.kind !== "cluster7")
      it.live("a subscriber that lost its connection gets a notice once it is back", () =>
        Effect.gen(function* () {
          // a connection of its own, named, so only its subscriber is killed
          const name = unique("sub")
          const connection = yield* RedisConnection.make({
            ...target.options,
            redis: { connectionName: name },
          })
          const transport = RedisCoordinatorTransport.makeWith(connection, options)
          const key = freshKey()
          const notices = yield* transport.notices(key, "m0")
          const clients = yield* Effect.promise(() =>
            raw().call("CLIENT", "LIST", "TYPE", "pubsub"),
          )
          const id = /id=(\d+) .*name=(\S+)/
            .exec(
              String(clients)
                .split("\n")
                .find((l) => l.includes(`name=${name}`)) ?? "",
            )
            ?.at(1)
          assert.isDefined(id)
          yield* Effect.promise(() => raw().call("CLIENT", "KILL", "ID", id!))
          // no notify: the reconnect itself tells the member to look again
          assert.strictEqual((yield* Stream.runCollect(Stream.take(notices, 1))).length, 1)
          // and it is subscribed again
          yield* transport.notify(key, "m0")
          assert.strictEqual((yield* Stream.runCollect(Stream.take(notices, 1))).length, 1)
        }),
      )

    if (target.kind !== "cluster7")
      it.live(
        "a channel subscribed while the subscriber is between its TCP connect and its ready check: no reconnect, no failed SUBSCRIBE, both channels get their notices",
        () =>
          Effect.gen(function* () {
            const connection = yield* RedisConnection.make(target.options ?? {})
            const transport = RedisCoordinatorTransport.makeWith(connection, options)
            const [first, second] = [freshKey(), freshKey()]
            const sub = connection.subscriber() as Redis
            let closes = 0
            sub.on("close", () => closes++)
            const warnings: Array<string> = []
            const logger = Logger.make(({ logLevel, message }) => {
              if (logLevel === "Warn") warnings.push(String(message))
            })
            const scope = yield* Effect.scope
            // the second subscription starts in the window: connected, the
            // ready check (INFO) not answered yet
            let late: Fiber.Fiber<Stream.Stream<void>, unknown> | undefined
            sub.once("connect", () => {
              late = Effect.runFork(
                Scope.provide(transport.notices(second, "m0"), scope).pipe(
                  Effect.provide(Logger.layer([logger])),
                ),
              )
            })
            const early = yield* transport
              .notices(first, "m0")
              .pipe(Effect.provide(Logger.layer([logger])))
            assert.isDefined(late, "the subscriber connected before the first subscription")
            const secondNotices = yield* Fiber.join(late!)
            for (const [key, notices] of [
              [first, early],
              [second, secondNotices],
            ] as const) {
              const got = yield* Effect.forkChild(Stream.runCollect(Stream.take(notices, 1)))
              yield* transport.notify(key, "m0")
              assert.strictEqual((yield* Fiber.join(got)).length, 1)
            }
            assert.strictEqual(closes, 0, "the subscriber reconnected")
            assert.deepStrictEqual(warnings, [])
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
      "requests without an inbox (an earlier member) are answered on their reply lists; a foreign value at one costs only its answer",
      () =>
        Effect.gen(function* () {
          const { transport } = subject()
          const key = freshKey()
          const ids = [randomUUID(), randomUUID(), randomUUID()]
          yield* Effect.promise(() => raw().set(replyKey(key, ids[1]!), "not a list", "PX", 60_000))
          // queued before anyone serves, so the first pop takes all three
          for (const [i, id] of ids.entries())
            yield* Effect.promise(() =>
              raw().lpush(requestsKey(key), JSON.stringify({ id, request: request(key, i + 1) })),
            )
          yield* transport.serve(key, echo)
          // polled: a BLPOP here would block the connection the answers are sent on
          const answer = (id: string) =>
            Effect.gen(function* () {
              for (let i = 0; i < 500; i++) {
                const r = yield* Effect.promise(() => raw().lpop(replyKey(key, id)))
                if (r !== null) return (JSON.parse(r) as HeartbeatResponse).memberEpoch
                yield* Effect.sleep(10)
              }
              return assert.fail(`no answer for ${id}`)
            })
          assert.strictEqual(yield* answer(ids[0]!), 2)
          assert.strictEqual(yield* answer(ids[2]!), 4)
          assert.strictEqual(
            yield* Effect.promise(() => raw().get(replyKey(key, ids[1]!))),
            "not a list",
          )
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
