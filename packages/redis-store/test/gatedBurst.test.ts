/**
 * Several shards' gated reads in one transaction (docs/redis.md, "The gated
 * fence", "Several shards in one transaction"; src/internal/gatedBurst.ts):
 * each shard fenced on its own, each ack on its own shard, a shard never
 * twice in one transaction, a flushed script cache or a dropped connection
 * in the middle of a burst reads nothing unfenced and leaves every stream
 * at its key. The queue alone (no Redis) first, then on every single node.
 */
import { connect, type Socket } from "node:net"
import { assert, it } from "@effect/vitest"
import type { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import type { Redis } from "ioredis"
import { describe } from "vitest"
import type { Command, FencedRead } from "../src/internal/burst.js"
import {
  type GatedRead,
  MAX_IN_FLIGHT,
  MAX_READS,
  makeBurstQueue,
  mergeTransactions,
  splitReplies,
} from "../src/internal/gatedBurst.js"
import { makeGatedReader } from "../src/internal/gatedRead.js"
import { defaultKeys } from "../src/keys.js"
import { describeTarget, ownUserStreams, redisTargets, unique } from "./support/targets.js"

const { gateKey, ownerTokenKey, shardKey } = defaultKeys

const acked = (stream: string, shard: number, group = "g"): GatedRead => ({
  o: { stream, shard, group, consumer: "c", token: 3, count: 10 },
  ack: { ids: ["1-1"], mode: "ack" },
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
  const recording = (maxInFlight = 1) => {
    const sent: Array<Array<string>> = []
    const pending: Array<(error?: Error) => void> = []
    const label = (r: GatedRead) => `${r.o.stream}:${r.o.shard}:${r.o.group}`
    const queue = makeBurstQueue({
      maxInFlight,
      send: (reads) => {
        sent.push(reads.map(label))
        const d = deferred<Error | undefined>()
        pending.push((e) => d.resolve(e))
        return d.promise.then((e) => {
          if (e !== undefined) throw e
          return reads.map(
            (r): FencedRead => ({
              _tag: "Read",
              messages: [{ id: "1-1", fields: { from: label(r) }, deliveryCount: 1 }],
            }),
          )
        })
      },
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
    pending[0]!()
    const got = await Promise.all(first)
    // each read has its own reply, in its order
    assert.deepStrictEqual(
      got.map((r) => (r._tag === "Read" ? r.messages[0]!.fields.from : r._tag)),
      ["a:0:g", "b:0:g", "c:0:g"],
    )
    await tick()
    assert.deepStrictEqual(sent[1], ["d:0:g", "e:0:g"])
    pending[1]!()
    await Promise.all(later)
  })

  it(`at most ${MAX_IN_FLIGHT} transactions in flight (the default); the reads queued meanwhile wait`, async () => {
    const { queue, sent, pending } = recording(MAX_IN_FLIGHT)
    const reads: Array<Promise<unknown>> = []
    for (let i = 0; i <= MAX_IN_FLIGHT; i++) {
      reads.push(queue.read(acked("s", 2 * i)), queue.read(acked("s", 2 * i + 1)))
      await tick()
    }
    assert.strictEqual(sent.length, MAX_IN_FLIGHT)
    assert.strictEqual(queue.queued(), 2)
    pending[0]!()
    await tick()
    assert.deepStrictEqual(sent[MAX_IN_FLIGHT], [
      `s:${2 * MAX_IN_FLIGHT}:g`,
      `s:${2 * MAX_IN_FLIGHT + 1}:g`,
    ])
    for (const done of pending.slice(1)) done()
    await Promise.all(reads)
  })

  it(`at most ${MAX_READS} reads in one transaction`, async () => {
    const { queue, sent, pending } = recording()
    const reads = Array.from({ length: MAX_READS + 3 }, (_, i) => queue.read(acked("s", i)))
    await tick()
    assert.strictEqual(sent[0]!.length, MAX_READS)
    pending[0]!()
    await tick()
    assert.strictEqual(sent[1]!.length, 3)
    pending[1]!()
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
    pending[0]!(new Error("wire: the connection closed"))
    assert.deepStrictEqual(await Promise.all(failed), [
      "wire: the connection closed",
      "wire: the connection closed",
    ])
    await tick()
    assert.deepStrictEqual(sent[1], ["c:0:g"])
    pending[1]!()
    assert.strictEqual((await next)._tag, "Read")
  })

  it("one MULTI of each read's commands in turn; EXEC's replies cut back per read", () => {
    const a: ReadonlyArray<Command> = [
      ["MULTI"],
      ["EVALSHA", "x"],
      ["XACK", "a"],
      ["XREADGROUP", "a"],
      ["RENAMENX", "a"],
      ["EXEC"],
    ]
    const b: ReadonlyArray<Command> = [
      ["MULTI"],
      ["EVALSHA", "y"],
      ["XREADGROUP", "b"],
      ["RENAMENX", "b"],
      ["EXEC"],
    ]
    const { commands, sizes } = mergeTransactions([a, b])
    assert.deepStrictEqual(commands, [["MULTI"], ...a.slice(1, -1), ...b.slice(1, -1), ["EXEC"]])
    assert.deepStrictEqual(sizes, [4, 3])
    assert.throws(() => mergeTransactions([a.slice(1)]), /MULTI/)
    const queued = commands.slice(0, -1).map(() => "QUEUED")
    const split = splitReplies([...queued, ["ga", 1, "ra", 1, "gb", "rb", 1]], sizes)
    assert.deepStrictEqual(split, {
      _tag: "Replies",
      replies: [
        ["ga", 1, "ra", 1],
        ["gb", "rb", 1],
      ],
    })
    // a reply count that does not match: nothing is attributed
    assert.throws(
      () => splitReplies([...queued, ["ga", 1, "ra", 1, "gb", "rb"]], sizes),
      /replies for/,
    )
    const aborted = splitReplies(
      [
        ...queued.slice(0, 2),
        new Error("NOPERM renamenx"),
        new Error("EXECABORT Transaction discarded"),
      ],
      sizes,
    )
    assert.deepStrictEqual(aborted, { _tag: "Refused", permanent: true })
  })
})

for (const target of redisTargets().filter((t) => t.kind !== "cluster7")) {
  describeTarget(
    "ShardStreams gated reads of several shards in one transaction",
    target,
    ownUserStreams(target, "gated"),
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
        "four busy shards and an idle one leave in ONE transaction: each gets its own shard's entries, each ack lands on its own stream, the idle shard is not moved",
        () =>
          Effect.gen(function* () {
            const { s, stream, firsts } = yield* seeded("burst-own", 4, 5)
            // shard 4: its group made and every entry read and acked (idle)
            yield* s.setOwnerToken({ stream, shard: 4, group: "g", token: 3 })
            yield* s.append(stream, 4, { shard: "4", i: "0" })
            const [only] = yield* s.read({
              stream,
              shard: 4,
              group: "g",
              consumer: "c",
              token: 3,
              count: 1,
            })
            yield* s.ack({ stream, shard: 4, group: "g", token: 3, ids: [only!.id], mode: "ack" })
            const reader = makeGatedReader(subject().connection)
            // MONITOR: what the reader's own connection sent while reading this stream
            const { seen } = yield* monitorOf(redis())
            yield* Effect.sleep("50 millis")
            const got = yield* Effect.promise(() =>
              Promise.all([
                ...[0, 1, 2, 3].map((shard) =>
                  reader.read(...tuple(readOf(stream, shard, firsts[shard]!.g!))),
                ),
                reader.read(
                  { stream, shard: 4, group: "g", consumer: "c", token: 3, count: 100 },
                  undefined,
                ),
              ]),
            )
            for (const [shard, r] of got.slice(0, 4).entries()) {
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
            assert.deepStrictEqual(got[4], { _tag: "Read", messages: [] })
            yield* inPlace(stream, 5)
            yield* Effect.sleep("100 millis")
            // the wire: the connection that sent this stream's gates
            const isGate = (args: ReadonlyArray<string>) =>
              /^evalsha$|^eval$/i.test(args[0]!) && args.some((x) => x.includes(`{${stream}:`))
            const wire = seen.find(({ args }) => isGate(args))!.source
            const sent = seen.filter(({ source }) => source === wire).map(({ args }) => args)
            // its first transaction: MULTI, then every command up to the next MULTI
            // (a resend after a script flush by a test beside this one is a second MULTI)
            const first = sent.findIndex((args) => /^multi$/i.test(args[0]!))
            const next = sent.findIndex((args, i) => i > first && /^multi$/i.test(args[0]!))
            const transaction = sent.slice(first, next < 0 ? undefined : next)
            assert.strictEqual(
              transaction.filter(isGate).length,
              5,
              "the five reads' gates in one transaction",
            )
            // nothing renamed the idle shard
            assert.isFalse(
              seen.some(
                ({ args }) => /^renamenx$/i.test(args[0]!) && args[1] === shardKey(stream, 4),
              ),
            )
          }).pipe(Effect.scoped),
      )

      it.live(
        "a stale token on one shard and a foreign one on another: their gates stay shut, their acks and reads touch nothing; the shards beside them read and ack",
        () =>
          Effect.gen(function* () {
            const { s, stream, firsts } = yield* seeded("burst-stale", 4, 4)
            yield* s.setOwnerToken({ stream, shard: 1, group: "g", token: 9 })
            const foreign = ownerTokenKey(stream, 3, "g")
            yield* Effect.promise(() => redis().set(foreign, "x3"))
            const reader = makeGatedReader(subject().connection)
            const got = yield* Effect.promise(() =>
              Promise.all(
                [0, 1, 2, 3].map((shard) =>
                  reader.read(...tuple(readOf(stream, shard, firsts[shard]!.g!))),
                ),
              ),
            )
            assert.deepStrictEqual(got[1], { _tag: "Stale", current: 9 })
            assert.strictEqual(got[3]!._tag, "Foreign")
            assert.strictEqual((got[3] as { key: string }).key, foreign)
            yield* Effect.promise(() => redis().set(foreign, "3"))
            // shards 1 and 3: the first entry still pending (not acked), nothing more delivered
            for (const shard of [1, 3]) {
              assert.deepStrictEqual(yield* pendingIds(stream, shard), [firsts[shard]!.g!])
              assert.strictEqual(
                (yield* s.drainState({ stream, shard, group: "g" })).undelivered,
                3,
              )
            }
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
            yield* inPlace(stream, 4)
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
        "one shard read by two groups in one transaction: each gate opened and closed in turn; both read their own entries",
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

/**
 * MONITOR on a socket of its own (ioredis' monitor mode races its ready
 * check on a busy server: "Command queue state error"): each command the
 * server ran, with the address of the client that sent it. Closed with the scope.
 */
const monitorOf = (client: Redis) =>
  Effect.acquireRelease(
    Effect.callback<{
      readonly seen: Array<{ source: string; args: ReadonlyArray<string> }>
      readonly socket: Socket
    }>((resume) => {
      const seen: Array<{ source: string; args: ReadonlyArray<string> }> = []
      const { host, port } = client.options
      const socket = connect(port ?? 6379, host ?? "127.0.0.1")
      let buffered = ""
      socket.on("data", (data: Buffer) => {
        buffered += data.toString("utf8")
        const lines = buffered.split("\r\n")
        buffered = lines.pop() ?? ""
        for (const line of lines) {
          if (line === "+OK") resume(Effect.succeed({ seen, socket }))
          const source = /^\+[\d.]+ \[\S+ ([^\]]+)\]/.exec(line)?.[1]
          if (source === undefined) continue
          const args = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!)
          seen.push({ source, args })
        }
      })
      socket.write("MONITOR\r\n")
    }),
    ({ socket }) => Effect.sync(() => socket.destroy()),
  )

const tuple = (r: {
  o: ShardStreams.ReadOptions
  ack: ShardStreams.AckFirst
}): [ShardStreams.ReadOptions, ShardStreams.AckFirst] => [r.o, r.ack]
