/**
 * Several shards' gated reads in one transaction (docs/redis.md, "The gated
 * fence", "Several shards in one transaction"; src/internal/gatedBurst.ts):
 * each shard fenced on its own, each ack on its own shard, a shard never
 * twice in one transaction, a flushed script cache or a dropped connection
 * in the middle of a burst reads nothing unfenced and leaves every stream
 * at its key. The queue alone (no Redis) first, then on every single node.
 */
import { createHash } from "node:crypto"
import { assert, it } from "@effect/vitest"
import type { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import type { Redis } from "ioredis"
import { describe } from "vitest"
import type { FencedRead } from "../src/internal/burst.js"
import {
  type AckedRead,
  burstCommands,
  burstOutcomes,
  MAX_SHARDS,
  makeBurstQueue,
} from "../src/internal/gatedBurst.js"
import { makeGatedReader } from "../src/internal/gatedRead.js"
import { defaultKeys } from "../src/keys.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { Scripts } from "../src/scripts.js"
import { connectAsOwnUser, describeTarget, redisTargets, unique } from "./support/targets.js"

const { gateKey, ownerTokenKey, shardKey } = defaultKeys

const acked = (stream: string, shard: number, group = "g", ids = ["1-1"]): AckedRead => ({
  o: { stream, shard, group, consumer: "c", token: 3, count: 10 },
  ack: { ids, mode: "ack" },
})

/** A promise and its resolver, to hold a transaction "in flight". */
const deferred = <A>() => {
  let resolve!: (a: A) => void
  const promise = new Promise<A>((r) => {
    resolve = r
  })
  return { promise, resolve }
}
const tick = () => new Promise((r) => setTimeout(r, 0))

describe("the burst queue (no Redis)", () => {
  const recording = () => {
    const sent: Array<Array<string>> = []
    const pending: Array<{ n: number; done: (error?: Error) => void }> = []
    const label = (r: AckedRead) => `${r.o.stream}:${r.o.shard}:${r.o.group}`
    const settle = <A>(reads: ReadonlyArray<AckedRead>, ok: () => A) => {
      sent.push(reads.map(label))
      const d = deferred<Error | undefined>()
      pending.push({ n: reads.length, done: (e) => d.resolve(e) })
      return d.promise.then((e) => {
        if (e !== undefined) throw e
        return ok()
      })
    }
    const read = (r: AckedRead): FencedRead => ({
      _tag: "Read",
      messages: [{ id: "1-1", fields: { from: label(r) }, deliveryCount: 1 }],
    })
    const queue = makeBurstQueue({
      keys: defaultKeys,
      single: (r) => settle([r], () => read(r)),
      several: (reads) => settle(reads, () => reads.map(read)),
    })
    return { queue, sent, pending }
  }

  it("reads queued in one tick leave in one transaction; those queued meanwhile leave together when it returns", async () => {
    const { queue, sent, pending } = recording()
    const first = ["a", "b", "c"].map((s) => queue.read(acked(s, 0)))
    await tick()
    assert.deepStrictEqual(sent, [["a:0:g", "b:0:g", "c:0:g"]])
    const later = ["d", "e"].map((s) => queue.read(acked(s, 0)))
    await tick()
    // one transaction in flight: d and e wait for it
    assert.strictEqual(sent.length, 1)
    assert.strictEqual(queue.queued(), 2)
    pending[0]!.done()
    const got = await Promise.all(first)
    // each read has its own reply, in its order
    assert.deepStrictEqual(
      got.map((r) => (r._tag === "Read" ? r.messages[0]!.fields.from : r._tag)),
      ["a:0:g", "b:0:g", "c:0:g"],
    )
    await tick()
    assert.deepStrictEqual(sent[1], ["d:0:g", "e:0:g"])
    pending[1]!.done()
    await Promise.all(later)
  })

  it("the same shard (another group) is never twice in one transaction; it leaves in the next", async () => {
    const { queue, sent, pending } = recording()
    const reads = [
      queue.read(acked("s", 0, "g1")),
      queue.read(acked("s", 0, "g2")),
      queue.read(acked("s", 1, "g1")),
    ]
    await tick()
    assert.deepStrictEqual(sent, [["s:0:g1", "s:1:g1"]])
    pending[0]!.done()
    await tick()
    assert.deepStrictEqual(sent[1], ["s:0:g2"])
    pending[1]!.done()
    await Promise.all(reads)
  })

  it(`at most ${MAX_SHARDS} shards in one transaction`, async () => {
    const { queue, sent, pending } = recording()
    const reads = Array.from({ length: MAX_SHARDS + 3 }, (_, i) => queue.read(acked("s", i)))
    await tick()
    assert.strictEqual(sent[0]!.length, MAX_SHARDS)
    pending[0]!.done()
    await tick()
    assert.strictEqual(sent[1]!.length, 3)
    pending[1]!.done()
    await Promise.all(reads)
  })

  it("a failed transaction fails each of its reads, and the queue goes on", async () => {
    const { queue, sent, pending } = recording()
    const failed = [queue.read(acked("a", 0)), queue.read(acked("b", 0))].map((p) =>
      p.then(
        () => "read",
        (e: Error) => e.message,
      ),
    )
    await tick()
    const next = queue.read(acked("c", 0))
    pending[0]!.done(new Error("wire: the connection closed"))
    assert.deepStrictEqual(await Promise.all(failed), [
      "wire: the connection closed",
      "wire: the connection closed",
    ])
    await tick()
    assert.deepStrictEqual(sent[1], ["c:0:g"])
    pending[1]!.done()
    assert.strictEqual((await next)._tag, "Read")
  })

  it("the transaction refuses the same gate key twice, and a reply per shard lands on its shard", () => {
    assert.throws(
      () => burstCommands([acked("s", 0, "g1"), acked("s", 0, "g2")], defaultKeys, false),
      /same shard twice/,
    )
    const reads = [acked("a", 0, "g", ["1-1"]), acked("b", 0, "g", ["2-2"])]
    const commands = burstCommands(reads, defaultKeys, false)
    const text = commands.map((c) => c.join(" "))
    // each ack and read on its own shard's gate key
    assert.include(text, `XACK ${gateKey("a", 0)} g 1-1`)
    assert.include(text, `XACK ${gateKey("b", 0)} g 2-2`)
    // a stale shard a, an open shard b: a is Stale, b reads
    const entry = ["9-9", ["i", "b"]]
    const res = [
      ...commands.slice(0, -1).map(() => "QUEUED"),
      [
        [
          [1, 7],
          [0, 1],
        ],
        0,
        new Error("NOGROUP gate absent"),
        1,
        [[gateKey("b", 0), [entry]]],
        new Error("ERR no such key"),
        1,
      ],
    ]
    const decided = burstOutcomes(reads, res, defaultKeys)
    assert.strictEqual(decided._tag, "Done")
    const outcomes = decided._tag === "Done" ? decided.outcomes : []
    assert.deepStrictEqual(outcomes[0], { _tag: "Stale", current: 7 })
    assert.strictEqual((outcomes[1] as FencedRead)._tag, "Read")
  })
})

for (const target of redisTargets().filter((t) => t.kind !== "cluster7")) {
  describeTarget(
    "ShardStreams gated reads of several shards in one transaction",
    target,
    Effect.map(connectAsOwnUser(target), ({ connection, killAll }) => ({
      connection,
      killAll,
      streams: RedisShardStreams.makeWith(connection, { read: "gated" }),
    })),
    (subject) => {
      const redis = () => subject().connection.client as Redis

      /**
       * `shards` shards of a new stream, token 3, `n` entries each (fields
       * { shard, i }); each shard's first entry read (by the script: it makes
       * the group) and not acked: the next read carries its ack.
       */
      const seeded = (prefix: string, shards: number, n: number, groups = ["g"]) =>
        Effect.gen(function* () {
          const s = subject().streams
          const stream = unique(prefix)
          const firsts: Array<Record<string, string>> = []
          for (let shard = 0; shard < shards; shard++) {
            for (const group of groups) yield* s.setOwnerToken({ stream, shard, group, token: 3 })
            for (let i = 0; i < n; i++)
              yield* s.append(stream, shard, { shard: `${shard}`, i: `${i}` })
            const ids: Record<string, string> = {}
            for (const group of groups) {
              const [first] = yield* s.read({
                stream,
                shard,
                group,
                consumer: "c",
                token: 3,
                count: 1,
              })
              ids[group] = first!.id
            }
            firsts.push(ids)
          }
          return { s, stream, firsts }
        })

      const readOf = (
        stream: string,
        shard: number,
        ackId: string,
        group = "g",
        token = 3,
      ): { o: ShardStreams.ReadOptions; ack: ShardStreams.AckFirst } => ({
        o: { stream, shard, group, consumer: "c", token, count: 100 },
        ack: { ids: [ackId], mode: "ack" },
      })

      /** Every shard's stream at its key, no gate key left. */
      const inPlace = (stream: string, shards: number) =>
        Effect.gen(function* () {
          for (let shard = 0; shard < shards; shard++) {
            const [type, gate] = yield* Effect.promise(() =>
              Promise.all([
                redis().type(shardKey(stream, shard)),
                redis().exists(gateKey(stream, shard)),
              ]),
            )
            assert.deepStrictEqual([type, gate], ["stream", 0], `shard ${shard}`)
          }
        })

      const pendingIds = (stream: string, shard: number, group = "g") =>
        Effect.map(subject().streams.pending({ stream, shard, group }), (ps) => ps.map((p) => p.id))

      it.live(
        "four shards' reads leave in ONE transaction: each gets its own shard's entries, each ack lands on its own stream",
        () =>
          Effect.gen(function* () {
            const { stream, firsts } = yield* seeded("burst-own", 4, 5)
            const reader = makeGatedReader(subject().connection)
            // loaded: a first EVALSHA is not answered NOSCRIPT (then sent again with EVAL)
            yield* Effect.promise(() => redis().script("LOAD", Scripts.gateBurst.lua))
            // MONITOR: the gate scripts that named this stream's shards
            const monitor = yield* Effect.promise(() => redis().duplicate().monitor())
            yield* Effect.addFinalizer(() => Effect.sync(() => monitor.disconnect()))
            const gates: Array<ReadonlyArray<string>> = []
            monitor.on("monitor", (_time: string, args: ReadonlyArray<string>) => {
              const name = String(args[0]).toLowerCase()
              if ((name === "evalsha" || name === "eval") && args.some((a) => a.includes(stream)))
                gates.push(args)
            })
            yield* Effect.sleep("50 millis")
            const got = yield* Effect.promise(() =>
              Promise.all(
                [0, 1, 2, 3].map((shard) =>
                  reader.read(...tuple(readOf(stream, shard, firsts[shard]!.g!))),
                ),
              ),
            )
            for (const [shard, r] of got.entries()) {
              assert.strictEqual(r._tag, "Read")
              const messages = r._tag === "Read" ? r.messages : []
              assert.deepStrictEqual(
                messages.map((m) => `${m.fields.shard}:${m.fields.i}`),
                ["1", "2", "3", "4"].map((i) => `${shard}:${i}`),
              )
              // its own first entry acked (and only its own batch pending)
              assert.deepStrictEqual(
                yield* pendingIds(stream, shard),
                messages.map((m) => m.id),
              )
            }
            yield* inPlace(stream, 4)
            yield* Effect.sleep("100 millis")
            assert.strictEqual(gates.length, 1, `one gate call for the four shards: ${JSON.stringify(gates)}`)
            assert.strictEqual(gates[0]![1], createSha(Scripts.gateBurst.lua))
            for (let shard = 0; shard < 4; shard++)
              assert.isTrue(gates[0]!.includes(shardKey(stream, shard)), `shard ${shard}`)
          }).pipe(Effect.scoped),
      )

      it.live(
        "a stale token on one shard: its gate stays shut, its ack and read touch nothing; the shards beside it read and ack",
        () =>
          Effect.gen(function* () {
            const { s, stream, firsts } = yield* seeded("burst-stale", 3, 4)
            yield* s.setOwnerToken({ stream, shard: 1, group: "g", token: 9 })
            const reader = makeGatedReader(subject().connection)
            const got = yield* Effect.promise(() =>
              Promise.all(
                [0, 1, 2].map((shard) =>
                  reader.read(...tuple(readOf(stream, shard, firsts[shard]!.g!))),
                ),
              ),
            )
            assert.deepStrictEqual(got[1], { _tag: "Stale", current: 9 })
            // shard 1: its first entry still pending (not acked), nothing more delivered
            assert.deepStrictEqual(yield* pendingIds(stream, 1), [firsts[1]!.g!])
            assert.strictEqual(
              (yield* s.drainState({ stream, shard: 1, group: "g" })).undelivered,
              3,
            )
            for (const shard of [0, 2]) {
              const r = got[shard]!
              assert.strictEqual(r._tag, "Read", `shard ${shard}`)
              const messages = r._tag === "Read" ? r.messages : []
              assert.deepStrictEqual(
                messages.map((m) => m.fields.shard),
                [`${shard}`, `${shard}`, `${shard}`],
              )
              assert.deepStrictEqual(
                yield* pendingIds(stream, shard),
                messages.map((m) => m.id),
              )
            }
            yield* inPlace(stream, 3)
          }),
      )

      it.live(
        "every refusal of one shard (nine states) answers as the lean gate and opens nothing for it; the shards around it open",
        () =>
          Effect.gen(function* () {
            const c = redis()
            type K = { key: string; owner: string; gate: string }
            const states: ReadonlyArray<{
              name: string
              token: number
              setup: (k: K) => Promise<unknown>
            }> = [
              { name: "current", token: 3, setup: () => Promise.resolve() },
              { name: "newer token", token: 4, setup: () => Promise.resolve() },
              { name: "stale token", token: 2, setup: () => Promise.resolve() },
              { name: "no token", token: 0, setup: (k) => c.del(k.owner) },
              { name: "foreign token", token: 3, setup: (k) => c.set(k.owner, "x3") },
              { name: "huge token", token: 3, setup: (k) => c.set(k.owner, "1".repeat(16)) },
              {
                name: "token key of another type",
                token: 3,
                setup: (k) => c.del(k.owner).then(() => c.rpush(k.owner, "3")),
              },
              { name: "gate occupied", token: 3, setup: (k) => c.set(k.gate, "theirs") },
              { name: "no stream", token: 3, setup: (k) => c.del(k.key) },
            ]
            const keysOf = (stream: string, shard: number): K => ({
              key: shardKey(stream, shard),
              owner: ownerTokenKey(stream, shard, "g"),
              gate: gateKey(stream, shard),
            })
            for (const state of states) {
              // the lean gate alone on one shard, then gate-burst with that shard between two good ones
              const lone = yield* seeded("burst-lean", 1, 2)
              const k = keysOf(lone.stream, 0)
              yield* Effect.promise(() => state.setup(k))
              const leanReply = yield* Effect.promise(() =>
                c.eval(Scripts.gateFast.lua, 3, k.key, k.owner, k.gate, state.token),
              )
              const { stream } = yield* seeded("burst-nine", 3, 2)
              const ks = [0, 1, 2].map((shard) => keysOf(stream, shard))
              yield* Effect.promise(() => state.setup(ks[1]!))
              const reply = (yield* Effect.promise(() =>
                c.eval(
                  Scripts.gateBurst.lua,
                  9,
                  ...ks.flatMap((x) => [x.key, x.owner, x.gate]),
                  3,
                  state.token,
                  3,
                ),
              )) as Array<unknown>
              const byRole = (x: unknown, kk: K) =>
                JSON.stringify(x).replaceAll(kk.owner, "<owner>").replaceAll(kk.gate, "<gate>")
              assert.strictEqual(byRole(reply[1], ks[1]!), byRole(leanReply, k), state.name)
              assert.deepStrictEqual(
                [reply[0], reply[2]],
                [
                  [0, 1],
                  [0, 1],
                ],
                state.name,
              )
              const opened = Array.isArray(reply[1]) && reply[1][0] === 0 && reply[1][1] === 1
              const gates = yield* Effect.promise(() =>
                Promise.all(ks.map((x) => c.exists(x.gate))),
              )
              assert.deepStrictEqual(
                gates,
                [1, opened || state.name === "gate occupied" ? 1 : 0, 1],
                `${state.name}: a gate is open only where its own fence held`,
              )
              for (const [i, x] of ks.entries())
                if (i !== 1 || opened) yield* Effect.promise(() => c.renamenx(x.gate, x.key))
              if (Array.isArray(leanReply) && leanReply[0] === 0 && leanReply[1] === 1)
                yield* Effect.promise(() => c.renamenx(k.gate, k.key))
            }
          }),
      )

      it.live(
        "a flushed script cache in a burst: no gate opened, sent again with EVAL, each shard read once",
        () =>
          Effect.gen(function* () {
            const { stream, firsts } = yield* seeded("burst-flush", 3, 3)
            const reader = makeGatedReader(subject().connection)
            yield* Effect.promise(() => redis().script("FLUSH"))
            const got = yield* Effect.promise(() =>
              Promise.all(
                [0, 1, 2].map((shard) =>
                  reader.read(...tuple(readOf(stream, shard, firsts[shard]!.g!))),
                ),
              ),
            )
            for (const [shard, r] of got.entries()) {
              assert.strictEqual(r._tag, "Read")
              const messages = r._tag === "Read" ? r.messages : []
              assert.deepStrictEqual(
                messages.map((m) => `${m.fields.shard}:${m.fields.i}`),
                [`${shard}:1`, `${shard}:2`],
              )
              assert.deepStrictEqual(
                (yield* subject().streams.pending({ stream, shard, group: "g" })).map(
                  (p) => p.deliveryCount,
                ),
                [1, 1],
                "read once",
              )
            }
            yield* inPlace(stream, 3)
          }),
      )

      it.live(
        "one shard read by two groups at once: never in one transaction; both read their own entries",
        () =>
          Effect.gen(function* () {
            const { stream, firsts } = yield* seeded("burst-twice", 2, 3, ["g1", "g2"])
            const reader = makeGatedReader(subject().connection)
            const got = yield* Effect.promise(() =>
              Promise.all([
                reader.read(...tuple(readOf(stream, 0, firsts[0]!.g1!, "g1"))),
                reader.read(...tuple(readOf(stream, 0, firsts[0]!.g2!, "g2"))),
                reader.read(...tuple(readOf(stream, 1, firsts[1]!.g1!, "g1"))),
              ]),
            )
            for (const r of got) {
              assert.strictEqual(r._tag, "Read")
              assert.strictEqual(r._tag === "Read" ? r.messages.length : 0, 2)
            }
            for (const [shard, group] of [
              [0, "g1"],
              [0, "g2"],
              [1, "g1"],
            ] as const)
              assert.strictEqual((yield* pendingIds(stream, shard, group)).length, 2)
            yield* inPlace(stream, 2)
          }),
      )

      it.live(
        "a connection dropped under a burst: its reads fail or read, never unfenced, nothing lost, every stream at its key; the next burst runs on a new connection",
        () =>
          Effect.gen(function* () {
            const { s, stream, firsts } = yield* seeded("burst-drop", 3, 4)
            const reader = makeGatedReader(subject().connection)
            // open the wire, then queue a burst and drop the connection under it
            const opened = yield* Effect.promise(() =>
              reader.read(...tuple(readOf(stream, 0, firsts[0]!.g!))),
            )
            const shard0 = opened._tag === "Read" ? opened.messages.map((m) => m.id) : []
            assert.strictEqual(shard0.length, 3)
            const acks = [shard0[0]!, firsts[1]!.g!, firsts[2]!.g!]
            const inFlight = [0, 1, 2].map((shard) =>
              reader.read(...tuple(readOf(stream, shard, acks[shard]!))).then(
                (r) => r,
                (e: Error) => e,
              ),
            )
            assert.isAtLeast(Number(yield* subject().killAll), 1)
            const got = yield* Effect.promise(() => Promise.all(inFlight))
            yield* inPlace(stream, 3)
            for (const [shard, r] of got.entries()) {
              if (r instanceof Error) continue
              assert.strictEqual(r._tag, "Read", `shard ${shard}`)
            }
            // every entry is delivered (returned or pending) or still to read: nothing lost
            yield* s.setOwnerToken({ stream, shard: 1, group: "g", token: 4 })
            const after = yield* Effect.promise(() =>
              Promise.all(
                [0, 1, 2].map((shard) => reader.read(...tuple(readOf(stream, shard, "0-1")))),
              ),
            )
            assert.deepStrictEqual(after[1], { _tag: "Stale", current: 4 })
            for (const shard of [0, 2]) {
              const pending = yield* pendingIds(stream, shard)
              const state = yield* s.drainState({ stream, shard, group: "g" })
              assert.strictEqual(state.undelivered, 0, `shard ${shard}`)
              assert.isAtLeast(pending.length, 1)
            }
            yield* inPlace(stream, 3)
          }),
      )
    },
  )
}

const tuple = (r: {
  o: ShardStreams.ReadOptions
  ack: ShardStreams.AckFirst
}): [ShardStreams.ReadOptions, ShardStreams.AckFirst] => [r.o, r.ack]

const createSha = (lua: string) => createHash("sha1").update(lua).digest("hex")
