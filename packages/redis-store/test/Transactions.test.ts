/**
 * The transaction contract (test/contract/Transactions.ts) on core's memory
 * port and on every Redis target (docs/exactly-once.md); direct sends on
 * the memory port and single nodes, the outbox on the cluster and on single
 * nodes told to use it; then what only a cluster has: the shard's hash slot.
 */
import { assert, it } from "@effect/vitest"
import { ShardStreams } from "@shardline/core"
import { ShardStreams as MemoryShardStreams } from "@shardline/core/testing"
import { Effect } from "effect"
import type { Redis } from "ioredis"
import { keySlot } from "../src/acl.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import {
  commitThenReadContract,
  directSendsContract,
  groupCommitContract,
  outboxContract,
  transactionsContract,
  transactionsVanishContract,
} from "./contract/Transactions.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"
import { memoryVanish, redisVanish } from "./support/vanish.js"

/** A fresh stream's shard 1 owned with token 3, its first `n` entries read (pending): the read and their ids. */
const pendingOn = (s: ShardStreams.ShardStreamsShape, name: string, n: number) =>
  Effect.gen(function* () {
    const base = { stream: unique(name), shard: 1, group: "g" }
    yield* s.setOwnerToken({ ...base, token: 3 })
    for (let i = 0; i < n; i++) yield* s.append(base.stream, 1, { n: String(i) })
    const read = { ...base, token: 3, consumer: "c", count: Math.max(n, 10) }
    const ids = (yield* s.read(read)).map((m) => m.id)
    return { base, read, ids }
  })

/** The commit of `ids` (acks only) riding `read`. */
const ackRiding = (
  s: ShardStreams.ShardStreamsShape,
  read: ShardStreams.ReadOptions,
  ids: ReadonlyArray<string>,
) =>
  s.transactions!.commitGroupThenRead!(
    {
      stream: read.stream,
      shard: read.shard,
      group: read.group,
      token: read.token,
      mode: "ack",
      parts: [{ ids, writes: [], sends: [] }],
    },
    read,
  )

describeTarget(
  "Transactions contract",
  { name: "memory (core)" },
  MemoryShardStreams.makeMemory,
  (subject) => {
    transactionsContract(subject)
    groupCommitContract(subject)
    commitThenReadContract(subject)
    directSendsContract(subject)
    transactionsVanishContract(subject, () => memoryVanish(subject()))
  },
)

for (const target of redisTargets()) {
  describeTarget(
    "Transactions contract",
    target,
    Effect.map(connect(target), (connection) => ({
      connection,
      streams: RedisShardStreams.makeWith(connection),
    })),
    (fixture) => {
      const subject = () => fixture().streams
      transactionsContract(subject)
      groupCommitContract(subject)
      commitThenReadContract(subject)
      if (target.kind === "cluster7") outboxContract(subject)
      else directSendsContract(subject)
      transactionsVanishContract(subject, () => redisVanish(fixture().connection))
      it.live(
        "a value under the gate key (not Shardline's): the commit commits, its read reads nothing, the value stays",
        () =>
          Effect.gen(function* () {
            const s = subject()
            const { connection } = fixture()
            const { base, read, ids } = yield* pendingOn(s, "ride-occupied", 1)
            yield* s.append(base.stream, 1, { n: "1" })
            const gate = connection.keys.gateKey(base.stream, 1)
            const client = connection.client
            yield* Effect.promise(() => client.set(gate, "someone else's"))
            const done = yield* ackRiding(s, read, ids)
            assert.deepStrictEqual(done, { outcome: { committed: ["Committed"] } })
            assert.strictEqual(yield* Effect.promise(() => client.get(gate)), "someone else's")
            // nothing delivered: the new entry is not pending, the stream is whole under its key
            assert.deepStrictEqual(yield* s.pending(base), [])
            assert.strictEqual((yield* s.range(ShardStreams.shardKey(base.stream, 1))).length, 2)
            yield* Effect.promise(() => client.del(gate))
          }),
      )
      if (target.kind !== "cluster7")
        it.live(
          "a group's parts go as one: 32 INCRs of one key reach Redis as ONE write (keyspace events)",
          () =>
            Effect.gen(function* () {
              const s = subject()
              const tx = s.transactions!
              const client = fixture().connection.client as Redis
              const { base, ids } = yield* pendingOn(s, "joined", 32)
              const n = tx.keys(base.stream, 1).key("n")
              const before = yield* Effect.promise(() =>
                client.config("GET", "notify-keyspace-events"),
              )
              const events: Array<string> = []
              // connected (ioredis' ready check done) before it subscribes: a
              // SUBSCRIBE sent in between goes out ahead of the check's INFO,
              // which the server then refuses, and ioredis reconnects; an
              // event in that gap is lost (7 rounds in 2,000 on a loop here)
              const listener = client.duplicate({ lazyConnect: true })
              yield* Effect.promise(async () => {
                await listener.connect()
                await client.config("SET", "notify-keyspace-events", "K$")
                listener.on("message", (_channel: string, event: string) => events.push(event))
                await listener.subscribe(`__keyspace@0__:${n}`)
              })
              const done = yield* tx.commitGroup({
                ...base,
                token: 3,
                mode: "ack",
                parts: ids.map((id) => ({
                  ids: [id],
                  writes: [{ command: "INCR", args: [n] }],
                  sends: [],
                })),
              })
              const seen = yield* Effect.promise(async () => {
                await client.ping() // the events reach the listener before this reply is read
                await listener.ping()
                const config = await client.config("GET", "notify-keyspace-events")
                const subscribers = await client.pubsub("NUMSUB", `__keyspace@0__:${n}`)
                const status = listener.status
                listener.disconnect()
                await client.config(
                  "SET",
                  "notify-keyspace-events",
                  String((before as Array<string>)[1] ?? ""),
                )
                return `notify-keyspace-events then: ${String(config)}; subscribers: ${String(subscribers)}; the listener: ${status}`
              })
              assert.deepStrictEqual(done, { committed: ids.map(() => "Committed" as const) })
              assert.deepStrictEqual(yield* tx.read(n), { type: "string", value: "32" })
              assert.deepStrictEqual(events, ["incrby"], seen)
              assert.deepStrictEqual(yield* s.pending(base), [])
            }),
        )
      it.live(
        "the script cache flushed: a commit and the read it carries run all the same (EVAL, as a read's gate)",
        () =>
          Effect.gen(function* () {
            const s = subject()
            const { base, read, ids } = yield* pendingOn(s, "ride-flush", 2)
            const next = yield* s.append(base.stream, 1, { n: "2" })
            const client = fixture().connection.client
            yield* Effect.promise(async () => {
              const nodes = "nodes" in client ? client.nodes("master") : [client]
              for (const node of nodes) await node.script("FLUSH")
            })
            const done = yield* ackRiding(s, read, ids)
            assert.deepStrictEqual(done.outcome, { committed: ["Committed"] })
            assert.deepStrictEqual(
              done.entries?.map((e) => e.id),
              [next],
            )
          }),
      )
    },
  )
  if (target.kind !== "cluster7")
    describeTarget(
      "Transactions contract (outbox on one node)",
      target,
      Effect.map(connect(target), (connection) =>
        RedisShardStreams.makeWith(connection, { transactionSends: "outbox" }),
      ),
      (subject) => {
        transactionsContract(subject)
        groupCommitContract(subject)
        outboxContract(subject)
      },
    )
}

const cluster = redisTargets().find((t) => t.kind === "cluster7")!
describeTarget(
  "Transactions in a cluster",
  cluster,
  Effect.map(connect(cluster), (connection) => RedisShardStreams.makeWith(connection)),
  (subject) => {
    it.live(
      "writes only the shard's hash slot: other keys are refused before anything commits",
      () =>
        Effect.gen(function* () {
          const s = subject()
          const tx = s.transactions!
          assert.strictEqual(tx.sends, "outbox")
          const stream = unique("slots")
          const rules = tx.keys(stream, 1)
          assert.isUndefined(rules.check(rules.key("n")))
          assert.isUndefined(rules.check(`orders-by-customer:{${stream}:1}`))
          // a key of another slot (found by trying names), and one of another shard
          let other = "counter"
          for (let i = 0; keySlot(other) === keySlot(`{${stream}:1}`); i++) other = `counter-${i}`
          assert.strictEqual(rules.check(other)?.reason, "KeyOutsideSlot")
          assert.match(rules.check(other)!.message, /key\(name\)/)
          assert.strictEqual(rules.check(`{${stream}:1}:owner:g`)?.reason, "ReservedKey")
          // the port refuses it too
          const base = { stream, shard: 1, group: "g" }
          yield* s.setOwnerToken({ ...base, token: 1 })
          yield* s.append(stream, 1, { v: "1" })
          const [m] = yield* s.read({ ...base, token: 1, consumer: "c", count: 1 })
          const refused = yield* Effect.flip(
            tx.commit({
              ...base,
              token: 1,
              ids: [m!.id],
              mode: "ack",
              writes: [{ command: "INCR", args: [other] }],
              sends: [],
            }),
          )
          assert.strictEqual((refused as { reason?: string }).reason, "KeyOutsideSlot")
          assert.strictEqual((yield* s.pending(base)).length, 1)
        }),
    )

    it.live("makes a shard's rules once, and each shard's rules are its own", () =>
      Effect.sync(() => {
        const tx = subject().transactions!
        const stream = unique("rules")
        // a second shard of another hash slot
        let shard = 2
        while (keySlot(`{${stream}:${shard}}`) === keySlot(`{${stream}:1}`)) shard++
        const one = tx.keys(stream, 1)
        const two = tx.keys(stream, shard)
        assert.strictEqual(tx.keys(stream, 1), one)
        assert.notStrictEqual(two, one)
        // the second shard's key passed its rules, then shard 1's refuse it
        assert.isUndefined(two.check(two.key("n")))
        assert.strictEqual(one.check(two.key("n"))?.reason, "KeyOutsideSlot")
        assert.isUndefined(one.check(one.key("n")))
        assert.strictEqual(tx.keys(unique("rules"), 1).key("n") === one.key("n"), false)
      }),
    )
  },
)
