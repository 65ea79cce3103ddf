/**
 * The ShardStreams contract on core's memory port and on every Redis target,
 * then what only a real store can get: foreign values under our keys.
 */
import { assert, it } from "@effect/vitest"
import { ShardStreams } from "@shardline/core"
import { ShardStreams as MemoryShardStreams } from "@shardline/core/testing"
import { Effect } from "effect"
import { defaultKeys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { shardStreamsContract } from "./contract/ShardStreams.js"
import { readAllAckingWithNext } from "./support/reads.js"
import { connect, describeTarget, ownUserStreams, redisTargets, unique } from "./support/targets.js"
import { memoryVanish, redisVanish } from "./support/vanish.js"

const { deadLetterKey, ownerTokenKey, shardKey } = defaultKeys

describeTarget(
  "ShardStreams contract",
  { name: "memory (core)" },
  MemoryShardStreams.makeMemory,
  (subject) => shardStreamsContract(subject, () => memoryVanish(subject())),
)

for (const target of redisTargets()) {
  const acquire = Effect.map(connect(target), (connection) => ({
    connection,
    streams: RedisShardStreams.makeWith(connection),
  }))

  describeTarget("ShardStreams contract", target, acquire, (subject) =>
    shardStreamsContract(
      () => subject().streams,
      () => redisVanish(subject().connection),
    ),
  )

  // the default above is the gated fence on single nodes: the script's read of new entries too
  if (target.kind !== "cluster7")
    describeTarget(
      "ShardStreams contract (script fence)",
      target,
      Effect.map(connect(target), (connection) => ({
        connection,
        streams: RedisShardStreams.makeWith(connection, { read: "script" }),
      })),
      (subject) =>
        shardStreamsContract(
          () => subject().streams,
          () => redisVanish(subject().connection),
        ),
    )

  // the optimistic fence (single nodes; a cluster always uses the script)
  if (target.kind !== "cluster7")
    describeTarget(
      "ShardStreams contract (optimistic fence)",
      target,
      Effect.map(connect(target), (connection) => ({
        connection,
        streams: RedisShardStreams.makeWith(connection, { read: "optimistic" }),
      })),
      (subject) =>
        shardStreamsContract(
          () => subject().streams,
          () => redisVanish(subject().connection),
        ),
    )

  if (target.kind !== "cluster7")
    describeTarget(
      "ShardStreams optimistic fence",
      target,
      ownUserStreams(target, "optimistic"),
      (fixture) => {
        const subject = () => fixture().streams
        it.live(
          "acks through an armed reader: ack and xackdel, then a stale token is refused",
          () =>
            Effect.gen(function* () {
              const s = subject()
              const stream = unique("sticky")
              const base = { stream, shard: 0, group: "g" }
              yield* s.setOwnerToken({ ...base, token: 3 })
              for (const k of ["z", "a", "b", "c", "d"]) yield* s.append(stream, 0, { k })
              // the first read creates the group (through the script); the next ones arm the WATCH
              const [z] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
              yield* s.ack({ ...base, token: 3, ids: [z!.id], mode: "xackdel" })
              const [a, b] = yield* s.read({ ...base, consumer: "c", token: 3, count: 2 })
              assert.strictEqual(yield* s.ack({ ...base, token: 3, ids: [a!.id], mode: "ack" }), 1)
              assert.strictEqual(
                yield* s.ack({ ...base, token: 3, ids: [b!.id], mode: "xackdel" }),
                1,
              )
              assert.strictEqual((yield* s.info(stream, 0)).length, 3)
              const [c] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
              yield* s.setOwnerToken({ ...base, token: 4 })
              const stale = yield* Effect.flip(
                s.ack({ ...base, token: 3, ids: [c!.id], mode: "ack" }),
              )
              assert.strictEqual(stale._tag, "StaleOwner")
              assert.strictEqual((yield* s.pending(base)).length, 1)
              const late = yield* Effect.flip(
                s.read({ ...base, consumer: "c", token: 3, count: 1 }),
              )
              assert.strictEqual(late._tag, "StaleOwner")
              assert.strictEqual((yield* s.drainState(base)).undelivered, 1)
            }),
        )

        it.live(
          "an armed reader's next read, carrying an ack, after a new owner is fenced in: refused, nothing read or acked",
          () =>
            Effect.gen(function* () {
              const s = subject()
              const stream = unique("sticky-read")
              const base = { stream, shard: 0, group: "g" }
              yield* s.setOwnerToken({ ...base, token: 3 })
              for (const k of ["a", "b", "c", "d"]) yield* s.append(stream, 0, { k })
              // the first read creates the group (through the script), the second arms the WATCH
              yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
              const [b] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
              yield* s.setOwnerToken({ ...base, token: 4 })
              const stale = yield* Effect.flip(
                s.read({
                  ...base,
                  consumer: "c",
                  token: 3,
                  count: 2,
                  ack: { ids: [b!.id], mode: "ack" },
                }),
              )
              assert.strictEqual(stale._tag, "StaleOwner")
              assert.strictEqual((yield* s.drainState(base)).undelivered, 2)
              assert.strictEqual((yield* s.pending(base)).length, 2)
            }),
        )

        it.live(
          "an armed reader whose connection dropped (its WATCH gone with it): a new owner fenced in meanwhile is still refused",
          () =>
            Effect.gen(function* () {
              const s = subject()
              const stream = unique("sticky-drop")
              const base = { stream, shard: 0, group: "g" }
              yield* s.setOwnerToken({ ...base, token: 3 })
              for (const k of ["a", "b", "c", "d"]) yield* s.append(stream, 0, { k })
              yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
              yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
              // every connection of this fence drops (the reader's too); ioredis reconnects what it may
              const killer = yield* fixture().killAll
              assert.isAtLeast(Number(killer), 1)
              yield* Effect.sleep("300 millis")
              yield* s.setOwnerToken({ ...base, token: 4 })
              const stale = yield* Effect.flip(
                s.read({ ...base, consumer: "c", token: 3, count: 2 }),
              )
              assert.strictEqual(stale._tag, "StaleOwner")
              assert.strictEqual((yield* s.drainState(base)).undelivered, 2)
            }),
        )
      },
    )

  // the optimistic fence's bursts (internal/burst.ts) would be reordered by
  // ioredis auto-pipelining: the dedicated connections have it off whatever the options say
  if (target.kind !== "cluster7")
    describeTarget(
      "ShardStreams optimistic fence, auto-pipelining asked for",
      target,
      Effect.map(
        RedisConnection.make({ ...target.options, redis: { enableAutoPipelining: true } }),
        (connection) => ({
          connection,
          streams: RedisShardStreams.makeWith(connection, { read: "optimistic" }),
        }),
      ),
      (subject) => {
        it.live("reads and acks in order, and refuses a stale token", () =>
          Effect.gen(function* () {
            const { connection, streams: s } = subject()
            const lease = connection.lease()
            assert.isFalse(lease.client.options.enableAutoPipelining)
            lease.release(true)
            const stream = unique("sticky-auto")
            const base = { stream, shard: 0, group: "g" }
            yield* s.setOwnerToken({ ...base, token: 1 })
            for (let i = 0; i < 6; i++) yield* s.append(stream, 0, { i: String(i) })
            const all = yield* readAllAckingWithNext(s, {
              ...base,
              consumer: "c",
              token: 1,
              count: 2,
            })
            assert.deepStrictEqual(
              all.map((m) => m.fields.i),
              ["0", "1", "2", "3", "4", "5"],
            )
            assert.strictEqual((yield* s.pending(base)).length, 0)
            yield* s.append(stream, 0, { i: "6" })
            yield* s.setOwnerToken({ ...base, token: 2 })
            const stale = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 1, count: 2 }))
            assert.strictEqual(stale._tag, "StaleOwner")
            assert.strictEqual((yield* s.drainState(base)).undelivered, 1)
          }),
        )
      },
    )

  describeTarget("ShardStreams drain state and the outbox", target, acquire, (subject) => {
    it.live(
      "a sealed shard the group read and acked is not drained while its outbox holds a send; it is once the send is relayed",
      () =>
        Effect.gen(function* () {
          const { streams: s, connection } = subject()
          const stream = unique("drain-outbox")
          const base = { stream, shard: 0, group: "g" }
          const outbox = connection.keys.outboxKey(stream, 0, "g")
          const raw = connection.client
          yield* s.setOwnerToken({ ...base, token: 1 })
          yield* s.append(stream, 0, { k: "a" })
          const [m] = yield* s.read({ ...base, consumer: "c", token: 1, count: 10 })
          yield* s.ack({ ...base, token: 1, ids: [m!.id], mode: "ack" })
          yield* s.seal(stream, 0)
          const done = yield* s.drainState(base)
          assert.deepStrictEqual([done.drained, done.relaying], [true, undefined])
          // a committed send waiting for its relay (docs/exactly-once.md)
          const id = yield* Effect.promise(
            () => raw.xadd(outbox, "*", "send", "x") as Promise<string>,
          )
          const held = yield* s.drainState(base)
          assert.deepStrictEqual(
            [held.drained, held.relaying, held.undelivered, held.pending],
            [false, true, 0, 0],
          )
          // another group's outbox is not this group's
          assert.isUndefined((yield* s.drainState({ ...base, group: "other" })).relaying)
          yield* Effect.promise(() => raw.xdel(outbox, id))
          assert.isTrue((yield* s.drainState(base)).drained)
          // a value of another type at the outbox key: ForeignValue, left as is
          yield* Effect.promise(() => raw.set(outbox, "not a stream"))
          const error = yield* Effect.flip(s.drainState(base))
          assert.strictEqual(error._tag, "ForeignValue")
          assert.strictEqual(yield* Effect.promise(() => raw.get(outbox)), "not a stream")
        }),
    )
  })

  describeTarget("ShardStreams bad input", target, acquire, (subject) => {
    const fresh = () => {
      const stream = unique("bad")
      return { stream, base: { stream, shard: 0, group: "g" } }
    }
    const raw = () => subject().connection.client

    it.live(
      "a non-stream at the shard key is ForeignValue for every operation; it is left as is",
      () =>
        Effect.gen(function* () {
          const { streams: s } = subject()
          const { stream, base } = fresh()
          const key = shardKey(stream, 0)
          yield* Effect.promise(() => raw().set(key, "not a stream"))
          // the group's token (its grant leaves a key of another type alone)
          yield* s.setOwnerToken({ ...base, token: 0 })
          const errors = [
            yield* Effect.flip(s.append(stream, 0, { k: "v" })),
            yield* Effect.flip(s.read({ ...base, consumer: "c", token: 0, count: 1 })),
            yield* Effect.flip(
              s.read({ ...base, consumer: "c", token: 0, count: 1, from: "pending" }),
            ),
            yield* Effect.flip(
              s.read({ ...base, consumer: "c", token: 0, count: 1, claimIdleMs: 0 }),
            ),
            yield* Effect.flip(s.ack({ ...base, token: 0, ids: ["1-0"], mode: "ack" })),
            yield* Effect.flip(s.ack({ ...base, token: 0, ids: ["1-0"], mode: "xackdel" })),
            yield* Effect.flip(s.nack({ ...base, token: 0, id: "1-0" })),
            yield* Effect.flip(
              s.claimPending({ ...base, token: 0, consumer: "c", minIdleMs: 0, count: 1 }),
            ),
            yield* Effect.flip(s.deadLetter({ ...base, token: 0, id: "1-0", reason: "r" })),
            yield* Effect.flip(s.pending(base)),
            yield* Effect.flip(s.info(stream, 0)),
            yield* Effect.flip(s.range(ShardStreams.shardKey(stream, 0))),
            yield* Effect.flip(s.waitForEntries({ ...base, timeoutMs: 10 })),
            yield* Effect.flip(s.waitForEntries({ ...base, timeoutMs: 10, afterId: "0-0" })),
          ]
          for (const error of errors) {
            assert.strictEqual(error._tag, "ForeignValue")
            if (error._tag === "ForeignValue") assert.strictEqual(error.key, key)
          }
          assert.strictEqual(yield* Effect.promise(() => raw().get(key)), "not a stream")
        }),
    )

    it.live(
      "an owner token that is not an integer is ForeignValue; nothing is read or overwritten",
      () =>
        Effect.gen(function* () {
          const { streams: s } = subject()
          const { stream, base } = fresh()
          yield* s.setOwnerToken({ ...base, token: 0 })
          yield* s.append(stream, 0, { k: "v" })
          yield* s.append(stream, 0, { k: "w" })
          yield* s.read({ ...base, consumer: "c", token: 0, count: 1 })
          const owner = ownerTokenKey(stream, 0, "g")
          for (const foreign of ["abc", "-3", "1.5", "99999999999999999999"]) {
            yield* Effect.promise(() => raw().set(owner, foreign))
            for (const error of [
              yield* Effect.flip(s.read({ ...base, consumer: "c", token: 9, count: 1 })),
              yield* Effect.flip(s.setOwnerToken({ ...base, token: 9 })),
              yield* Effect.flip(s.ownerToken(base)),
              yield* Effect.flip(s.ack({ ...base, token: 9, ids: ["1-0"], mode: "ack" })),
            ]) {
              assert.strictEqual(error._tag, "ForeignValue")
              if (error._tag === "ForeignValue") assert.strictEqual(error.key, owner)
            }
            assert.strictEqual(yield* Effect.promise(() => raw().get(owner)), foreign)
          }
          // a hash where the token belongs
          yield* Effect.promise(() => raw().del(owner))
          yield* Effect.promise(() => raw().hset(owner, "token", "1"))
          assert.strictEqual(
            (yield* Effect.flip(s.read({ ...base, consumer: "c", token: 9, count: 1 })))._tag,
            "ForeignValue",
          )
          assert.strictEqual((yield* Effect.flip(s.info(stream, 0)))._tag, "ForeignValue")
          // the second entry was never read
          assert.strictEqual((yield* s.pending(base)).length, 1)
        }),
    )

    it.live(
      "a foreign dead-letter key fails the dead-letter before its ack: the entry stays pending",
      () =>
        Effect.gen(function* () {
          const { streams: s } = subject()
          const { stream, base } = fresh()
          yield* s.setOwnerToken({ ...base, token: 0 })
          yield* s.append(stream, 0, { k: "v" })
          const [m] = yield* s.read({ ...base, consumer: "c", token: 0, count: 1 })
          const dlq = deadLetterKey(stream, 0)
          yield* Effect.promise(() => raw().rpush(dlq, "a list"))
          const error = yield* Effect.flip(
            s.deadLetter({ ...base, token: 0, id: m!.id, reason: "r" }),
          )
          assert.strictEqual(error._tag, "ForeignValue")
          if (error._tag === "ForeignValue") assert.strictEqual(error.key, dlq)
          assert.deepStrictEqual(
            (yield* s.pending(base)).map((p) => p.id),
            [m!.id],
          )
          assert.deepStrictEqual(yield* Effect.promise(() => raw().lrange(dlq, 0, -1)), ["a list"])
        }),
    )

    it.live("arguments Redis cannot represent are InvalidArgument, before any command", () =>
      Effect.gen(function* () {
        const { streams: s } = subject()
        const { stream, base } = fresh()
        const errors = [
          yield* Effect.flip(s.append(stream, 0, {})),
          yield* Effect.flip(s.setOwnerToken({ ...base, token: 1.5 })),
          yield* Effect.flip(s.setOwnerToken({ ...base, token: -1 })),
          yield* Effect.flip(s.read({ ...base, consumer: "c", token: 0, count: 0 })),
          yield* Effect.flip(s.read({ ...base, consumer: "c", token: Number.NaN, count: 1 })),
          yield* Effect.flip(
            s.claimPending({ ...base, token: 0, consumer: "c", minIdleMs: -1, count: 1 }),
          ),
          yield* Effect.flip(s.waitForEntries({ ...base, timeoutMs: 10, afterId: "x" })),
        ]
        for (const error of errors) assert.strictEqual(error._tag, "InvalidArgument")
        assert.strictEqual(yield* Effect.promise(() => raw().exists(shardKey(stream, 0))), 0)
      }),
    )
  })
}
