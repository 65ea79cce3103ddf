/**
 * The gated fence (the default read of new entries on a single node): what
 * the contract cannot see. A refused read leaves the stream where it was and
 * reads or acks nothing, whatever refused it (a stale token, a foreign
 * token, a flushed script cache); a dropped connection is replaced; many
 * read loops share one connection without mixing their transactions.
 */
import { assert, it } from "@effect/vitest"
import { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import type { Redis, RedisOptions } from "ioredis"
import { aclRules } from "../src/acl.js"
import { makeGatedReader } from "../src/internal/gatedRead.js"
import { defaultKeys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { Scripts } from "../src/scripts.js"
import { readAllAckingWithNext } from "./support/reads.js"
import { describeTarget, ownUserStreams, redisTargets, unique } from "./support/targets.js"

const { gateKey, ownerTokenKey, shardKey } = defaultKeys

for (const target of redisTargets().filter((t) => t.kind !== "cluster7")) {
  describeTarget("ShardStreams gated fence", target, ownUserStreams(target, "gated"), (subject) => {
    const redis = () => subject().connection.client as Redis

    /** A shard with `n` entries, token 3, whose group exists (one entry read and acked). */
    const seeded = (prefix: string, n: number) =>
      Effect.gen(function* () {
        const s = subject().streams
        const stream = unique(prefix)
        const base = { stream, shard: 0, group: "g" }
        yield* s.setOwnerToken({ ...base, token: 3 })
        for (let i = 0; i <= n; i++) yield* s.append(stream, 0, { i: String(i) })
        const [first] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
        yield* s.ack({ ...base, token: 3, ids: [first!.id], mode: "ack" })
        return { s, stream, base }
      })

    /** The stream is at its own key, the gate key is empty, and `undelivered`/`pending` are as given. */
    const untouched = (
      stream: string,
      base: { stream: string; shard: number; group: string },
      undelivered: number,
      pending: number,
    ) =>
      Effect.gen(function* () {
        const s = subject().streams
        const keys = yield* Effect.promise(() =>
          Promise.all([redis().type(shardKey(stream, 0)), redis().exists(gateKey(stream, 0))]),
        )
        assert.deepStrictEqual(keys, ["stream", 0])
        const state = yield* s.drainState(base)
        assert.strictEqual(state.undelivered, undelivered)
        assert.strictEqual((yield* s.pending(base)).length, pending)
      })

    it.live("reads new entries in order, each ack riding on the next read", () =>
      Effect.gen(function* () {
        const { s, stream, base } = yield* seeded("gated-order", 7)
        const all = yield* readAllAckingWithNext(s, {
          ...base,
          consumer: "c",
          token: 3,
          count: 3,
        })
        assert.isTrue(all.every((m) => m.deliveryCount === 1))
        assert.deepStrictEqual(
          all.map((m) => m.fields.i),
          ["1", "2", "3", "4", "5", "6", "7"],
        )
        yield* untouched(stream, base, 0, 0)
      }),
    )

    it.live(
      "an empty read that acknowledges nothing renames nothing: a WATCH on the stream survives it; a read that finds entries still modifies the key",
      () =>
        Effect.gen(function* () {
          const { stream, base } = yield* seeded("gated-idle", 0)
          const key = shardKey(stream, 0)
          // the gated reader itself: a fallback to the script would hide a rename
          const reader = makeGatedReader(subject().connection)
          const read = (token: number) =>
            Effect.promise(() =>
              reader.read({ ...base, consumer: "c", token, count: 10 }, undefined),
            )
          const watcher = redis().duplicate()
          yield* Effect.addFinalizer(() => Effect.sync(() => watcher.disconnect()))
          /** WATCH the stream, run `between`, then EXEC: true when the WATCH held. */
          const watchHolds = <A, E, R>(between: Effect.Effect<A, E, R>) =>
            Effect.gen(function* () {
              yield* Effect.promise(() => watcher.watch(key))
              const result = yield* between
              const exec = yield* Effect.promise(() => watcher.multi().ping().exec())
              return { held: exec !== null, result }
            })
          // an idle shard: three empty reads, the stream never moved
          const idle = yield* watchHolds(Effect.forEach([1, 2, 3], () => read(3)))
          assert.isTrue(idle.held, "an empty gated read aborted another client's WATCH")
          for (const r of idle.result) assert.deepStrictEqual(r, { _tag: "Read", messages: [] })
          yield* untouched(stream, base, 0, 0)
          // the fence still comes first: a stale owner is refused on an idle shard
          yield* subject().streams.setOwnerToken({ ...base, token: 4 })
          assert.deepStrictEqual(yield* read(3), { _tag: "Stale", current: 4 })
          // a read that finds an entry moves the stream (its RENAMENX pair): the WATCH aborts
          yield* subject().streams.append(stream, 0, { i: "new" })
          const busy = yield* watchHolds(read(4))
          assert.isFalse(busy.held)
          assert.strictEqual(busy.result._tag, "Read")
          assert.deepStrictEqual(
            busy.result._tag === "Read" ? busy.result.messages.map((m) => m.fields.i) : [],
            ["new"],
          )
          yield* untouched(stream, base, 0, 1)
        }).pipe(Effect.scoped),
    )

    it.live(
      "a read after a commit's ack (afterAck) takes the lean gate: no unread check (it opens on an idle shard too), the same fence and replies",
      () =>
        Effect.gen(function* () {
          const { stream, base } = yield* seeded("gated-after-ack", 2)
          const key = shardKey(stream, 0)
          const reader = makeGatedReader(subject().connection)
          const read = (token: number, afterAck: boolean) =>
            Effect.promise(() =>
              reader.read({ ...base, consumer: "c", token, count: 10, afterAck }, undefined),
            )
          const watcher = redis().duplicate()
          yield* Effect.addFinalizer(() => Effect.sync(() => watcher.disconnect()))
          const watchHolds = <A, E, R>(between: Effect.Effect<A, E, R>) =>
            Effect.gen(function* () {
              yield* Effect.promise(() => watcher.watch(key))
              const result = yield* between
              const exec = yield* Effect.promise(() => watcher.multi().ping().exec())
              return { held: exec !== null, result }
            })
          // entries to read: read as any gated read reads them
          const first = yield* read(3, true)
          assert.strictEqual(first._tag, "Read")
          assert.deepStrictEqual(
            first._tag === "Read" ? first.messages.map((m) => m.fields.i) : [],
            ["1", "2"],
          )
          yield* untouched(stream, base, 0, 2)
          // nothing unread: the full gate's unread check keeps the key as it is,
          // the lean gate (no check) moves it both ways and reads nothing
          const checked = yield* watchHolds(read(3, false))
          assert.isTrue(checked.held)
          const lean = yield* watchHolds(read(3, true))
          assert.isFalse(lean.held, "afterAck did not take the lean gate")
          assert.deepStrictEqual(lean.result, { _tag: "Read", messages: [] })
          yield* untouched(stream, base, 0, 2)
          // the fence first: a stale owner is refused, nothing read, the stream in place
          yield* subject().streams.append(stream, 0, { i: "3" })
          yield* subject().streams.setOwnerToken({ ...base, token: 4 })
          assert.deepStrictEqual(yield* read(3, true), { _tag: "Stale", current: 4 })
          yield* untouched(stream, base, 1, 2)
          // a value under the gate key is foreign: left alone, the gate stays shut
          yield* Effect.promise(() => redis().set(gateKey(stream, 0), "not ours"))
          const foreign = yield* read(4, true)
          assert.strictEqual(foreign._tag, "Foreign")
          assert.strictEqual(
            yield* Effect.promise(() => redis().get(gateKey(stream, 0))),
            "not ours",
          )
          yield* Effect.promise(() => redis().del(gateKey(stream, 0)))
          yield* untouched(stream, base, 1, 2)
        }).pipe(Effect.scoped),
    )

    it.live(
      "a stale token carrying an ack: StaleOwner, nothing read or acked, the stream in place",
      () =>
        Effect.gen(function* () {
          const { s, stream, base } = yield* seeded("gated-stale", 4)
          const [a] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
          yield* s.setOwnerToken({ ...base, token: 4 })
          const stale = yield* Effect.flip(
            s.read({
              ...base,
              consumer: "c",
              token: 3,
              count: 2,
              ack: { ids: [a!.id], mode: "ack" },
            }),
          )
          assert.strictEqual(stale._tag, "StaleOwner")
          assert.strictEqual((stale as { currentToken: number }).currentToken, 4)
          yield* untouched(stream, base, 3, 1)
          // the current owner reads on
          const next = yield* s.read({ ...base, consumer: "d", token: 4, count: 10 })
          assert.deepStrictEqual(
            next.map((m) => m.fields.i),
            ["2", "3", "4"],
          )
        }),
    )

    it.live("a foreign owner token: ForeignValue naming the key, nothing read", () =>
      Effect.gen(function* () {
        const { s, stream, base } = yield* seeded("gated-foreign", 2)
        const owner = ownerTokenKey(stream, 0, "g")
        yield* Effect.promise(() => redis().set(owner, "not-a-token"))
        const error = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 3, count: 5 }))
        assert.strictEqual(error._tag, "ForeignValue")
        assert.strictEqual((error as { key: string }).key, owner)
        yield* untouched(stream, base, 2, 0)
        assert.strictEqual(yield* Effect.promise(() => redis().get(owner)), "not-a-token")
      }),
    )

    it.live("a value under the gate key is foreign: left as it is, the stream not read", () =>
      Effect.gen(function* () {
        const { s, stream, base } = yield* seeded("gated-gate-foreign", 2)
        const gate = gateKey(stream, 0)
        yield* Effect.promise(() => redis().set(gate, "someone else's"))
        const error = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 3, count: 5 }))
        assert.strictEqual(error._tag, "ForeignValue")
        assert.strictEqual((error as { key: string }).key, gate)
        assert.strictEqual(yield* Effect.promise(() => redis().get(gate)), "someone else's")
        yield* Effect.promise(() => redis().del(gate))
        yield* untouched(stream, base, 2, 0)
      }),
    )

    it.live(
      "the lean gate (a read whose ack is queued in the MULTI) decides and replies as the full gate, in every state",
      () =>
        Effect.gen(function* () {
          // src/lua/gate-fast.lua skips the prelude: it must stay the full gate with ARGV[3] = ""
          const c = redis()
          const states: ReadonlyArray<{
            readonly name: string
            readonly token: number
            readonly setup: (keys: { key: string; owner: string; gate: string }) => Promise<unknown>
          }> = [
            { name: "current", token: 3, setup: () => Promise.resolve() },
            { name: "newer", token: 4, setup: () => Promise.resolve() },
            { name: "stale", token: 2, setup: () => Promise.resolve() },
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
          for (const state of states) {
            const replies: Array<unknown> = []
            for (const [script, args] of [
              [Scripts.gate, ["g", ""]],
              [Scripts.gateFast, []],
            ] as const) {
              const { stream } = yield* seeded(`gated-lean-${replies.length}`, 2)
              const keys = {
                key: shardKey(stream, 0),
                owner: ownerTokenKey(stream, 0, "g"),
                gate: gateKey(stream, 0),
              }
              yield* Effect.promise(() => state.setup(keys))
              const reply = yield* Effect.promise(() =>
                c.eval(script.lua, 3, keys.key, keys.owner, keys.gate, state.token, ...args),
              )
              // the key names differ per run: compare them by role
              replies.push(
                JSON.stringify(reply)
                  .replaceAll(keys.owner, "<owner>")
                  .replaceAll(keys.gate, "<gate>"),
              )
              const opened = Array.isArray(reply) && reply[0] === 0 && reply[1] === 1
              assert.strictEqual(
                yield* Effect.promise(() => c.exists(keys.gate)),
                opened || state.name === "gate occupied" ? 1 : 0,
                `${state.name}: the gate is open only when the fence held`,
              )
              if (opened) yield* Effect.promise(() => c.renamenx(keys.gate, keys.key))
            }
            assert.strictEqual(replies[1], replies[0], state.name)
          }
        }),
    )

    it.live(
      "owner tokens of several digits are compared as numbers, by the lean gate (a read carrying an ack) as by the full one: 10 refuses 9, opens to 10 and 100",
      () =>
        Effect.gen(function* () {
          // every other gated test uses one-digit tokens, which a string comparison gets right
          const s = subject().streams
          // the gated reader itself: the script it may fall back to would hide the gate's decision
          const reader = makeGatedReader(subject().connection)
          const cases: ReadonlyArray<readonly [current: number, token: number, opens: boolean]> = [
            [10, 9, false],
            [10, 10, true],
            [10, 100, true],
            [99, 100, true],
            [100, 99, false],
          ]
          for (const [current, token, opens] of cases)
            for (const lean of [true, false]) {
              const label = `${lean ? "lean" : "full"} gate, token ${token} against ${current}`
              const stream = unique("gated-digits")
              const base = { stream, shard: 0, group: "g" }
              yield* s.setOwnerToken({ ...base, token: 1 })
              for (let i = 0; i < 3; i++) yield* s.append(stream, 0, { i: String(i) })
              const [first] = yield* s.read({ ...base, consumer: "c", token: 1, count: 1 })
              yield* s.setOwnerToken({ ...base, token: current })
              // a read with a native ack takes the lean gate; one with no ack the full gate
              const ack = lean ? { ids: [first!.id], mode: "ack" as const } : undefined
              const got = yield* Effect.promise(() =>
                reader.read({ ...base, consumer: "c", token, count: 5 }, ack),
              )
              if (opens) {
                assert.strictEqual(got._tag, "Read", label)
                assert.deepStrictEqual(
                  got._tag === "Read" ? got.messages.map((m) => m.fields.i) : [],
                  ["1", "2"],
                  label,
                )
                // the lean read acked entry 0 before reading
                yield* untouched(stream, base, 0, lean ? 2 : 3)
              } else {
                assert.deepStrictEqual(got, { _tag: "Stale", current }, label)
                yield* untouched(stream, base, 2, 1)
              }
            }
        }),
    )

    it.live(
      "a read carrying an ack (the lean gate): a foreign owner token or gate value is ForeignValue, a flushed cache still fenced; nothing read or acked",
      () =>
        Effect.gen(function* () {
          const { s, stream, base } = yield* seeded("gated-lean-refusals", 3)
          const [first] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
          const ack = { ids: [first!.id], mode: "ack" as const }
          const read = { ...base, consumer: "c", token: 3, count: 5, ack }
          const owner = ownerTokenKey(stream, 0, "g")
          yield* Effect.promise(() => redis().set(owner, "not-a-token"))
          const foreign = yield* Effect.flip(s.read(read))
          assert.strictEqual(foreign._tag, "ForeignValue")
          assert.strictEqual((foreign as { key: string }).key, owner)
          yield* untouched(stream, base, 2, 1)
          yield* Effect.promise(() => redis().set(owner, "3"))
          const gate = gateKey(stream, 0)
          yield* Effect.promise(() => redis().set(gate, "someone else's"))
          const occupied = yield* Effect.flip(s.read(read))
          assert.strictEqual(occupied._tag, "ForeignValue")
          assert.strictEqual((occupied as { key: string }).key, gate)
          yield* Effect.promise(() => redis().del(gate))
          yield* untouched(stream, base, 2, 1)
          // flushed and stale: the lean gate sent again with EVAL refuses all the same
          yield* Effect.promise(() => redis().script("FLUSH"))
          yield* s.setOwnerToken({ ...base, token: 5 })
          const stale = yield* Effect.flip(s.read(read))
          assert.strictEqual(stale._tag, "StaleOwner")
          yield* untouched(stream, base, 2, 1)
        }),
    )

    it.live("a flushed script cache: the gate stays shut, then the script is loaded again", () =>
      Effect.gen(function* () {
        const { s, stream, base } = yield* seeded("gated-flush", 3)
        yield* Effect.promise(() => redis().script("FLUSH"))
        const batch = yield* s.read({ ...base, consumer: "c", token: 3, count: 2 })
        assert.deepStrictEqual(
          batch.map((m) => m.fields.i),
          ["1", "2"],
        )
        // flushed again, and stale: refused all the same
        yield* Effect.promise(() => redis().script("FLUSH"))
        yield* s.setOwnerToken({ ...base, token: 5 })
        const stale = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 3, count: 2 }))
        assert.strictEqual(stale._tag, "StaleOwner")
        yield* untouched(stream, base, 1, 2)
      }),
    )

    it.live("the transaction without its gate (an unknown script) touches nothing", () =>
      Effect.gen(function* () {
        // the construction's own guarantee, without the gate script's help
        const { stream, base } = yield* seeded("gated-shut", 3)
        const key = shardKey(stream, 0)
        const gate = gateKey(stream, 0)
        const owner = ownerTokenKey(stream, 0, "g")
        const replies = yield* Effect.promise(() =>
          redis()
            .multi()
            .evalsha("0".repeat(40), 3, key, owner, gate, "3")
            .xreadgroup("GROUP", "g", "c", "COUNT", 10, "STREAMS", gate, ">")
            .renamenx(gate, key)
            .exec(),
        )
        assert.match(String(replies![0]![0]), /NOSCRIPT/)
        assert.match(String(replies![1]![0]), /NOGROUP/)
        assert.match(String(replies![2]![0]), /no such key/)
        yield* untouched(stream, base, 3, 0)
      }),
    )

    it.live(
      "a dropped connection: the next read fails or reads, never unfenced, and the one after runs on a new connection",
      () =>
        Effect.gen(function* () {
          const { s, base } = yield* seeded("gated-drop", 4)
          yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
          const killed = yield* subject().killAll
          assert.isAtLeast(Number(killed), 1)
          yield* Effect.sleep("300 millis")
          // the first read after the drop may fail (RedisUnavailable), never read unfenced
          const first = yield* Effect.result(s.read({ ...base, consumer: "c", token: 3, count: 1 }))
          const got = first._tag === "Success" ? first.success.length : 0
          if (first._tag === "Failure") assert.strictEqual(first.failure._tag, "BackendUnavailable")
          const rest = yield* s.read({ ...base, consumer: "c", token: 3, count: 10 })
          assert.strictEqual(got + rest.length, 3)
          yield* s.setOwnerToken({ ...base, token: 4 })
          const stale = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 3, count: 1 }))
          assert.strictEqual(stale._tag, "StaleOwner")
        }),
    )

    it.live(
      "an ACL user without RENAMENX (an earlier version's rules): reads take the script",
      () =>
        Effect.gen(function* () {
          const user = unique("old-acl")
          const rules = aclRules({ xackdel: subject().connection.features.xackdel }).filter(
            (r) => r !== "+renamenx",
          )
          yield* Effect.promise(() =>
            redis().call("ACL", "SETUSER", user, "reset", "on", ">pw", ...rules),
          )
          const { s, stream, base } = yield* seeded("gated-old-acl", 3)
          const old = yield* RedisConnection.make({
            ...target.options,
            username: user,
            password: "pw",
          })
          const streams = RedisShardStreams.makeWith(old, { read: "gated" })
          const first = yield* streams.read({ ...base, consumer: "c", token: 3, count: 2 })
          assert.deepStrictEqual(
            first.map((m) => m.fields.i),
            ["1", "2"],
          )
          // the server refused the transaction once (ACL LOG); after that the script reads
          const refusals = Effect.promise(async () => {
            const log = (await redis().call("ACL", "LOG", "128")) as Array<Array<unknown>>
            return log
              .map((entry) => {
                const fields = new Map<unknown, unknown>()
                for (let i = 0; i + 1 < entry.length; i += 2) fields.set(entry[i], entry[i + 1])
                return fields
              })
              .filter((e) => e.get("username") === user)
              .reduce((n, e) => n + Number(e.get("count")), 0)
          })
          const afterFirst = yield* refusals
          assert.isAtLeast(afterFirst, 1)
          const next = yield* streams.read({
            ...base,
            consumer: "c",
            token: 3,
            count: 2,
            ack: { ids: first.map((m) => m.id), mode: "ack" },
          })
          assert.deepStrictEqual(
            next.map((m) => m.fields.i),
            ["3"],
          )
          assert.strictEqual(yield* refusals, afterFirst)
          yield* s.setOwnerToken({ ...base, token: 4 })
          const stale = yield* Effect.flip(
            streams.read({ ...base, consumer: "c", token: 3, count: 2 }),
          )
          assert.strictEqual(stale._tag, "StaleOwner")
          yield* untouched(stream, base, 0, 1)
        }).pipe(Effect.scoped),
    )

    it.live("sixteen loops on one connection: every entry once, to its own shard's loop", () =>
      Effect.gen(function* () {
        const s = subject().streams
        const stream = unique("gated-loops")
        const shards = Array.from({ length: 16 }, (_, i) => i)
        for (const shard of shards) {
          yield* s.setOwnerToken({ stream, shard, group: "g", token: 1 })
          for (let i = 0; i < 20; i++)
            yield* s.append(stream, shard, { s: String(shard), i: String(i) })
        }
        const loop = (shard: number) =>
          readAllAckingWithNext(s, {
            stream,
            shard,
            group: "g",
            consumer: `c${shard}`,
            token: 1,
            count: 3,
          })
        const all = yield* Effect.forEach(shards, loop, { concurrency: "unbounded" })
        const expected = Array.from({ length: 20 }, (_, i) => String(i))
        for (const [shard, read] of all.entries()) {
          assert.isTrue(read.every((m) => m.fields.s === String(shard)))
          assert.deepStrictEqual(
            read.map((m) => m.fields.i),
            expected,
          )
        }
        for (const shard of shards)
          assert.strictEqual((yield* s.pending({ stream, shard, group: "g" })).length, 0)
      }),
    )

    /**
     * A connection made with these ioredis options, a shard with 4 entries
     * (token 2) whose group exists (its first entry read by the script),
     * and the gated read of the rest through the gated reader itself: the
     * script it falls back to would hide a gate that found nothing.
     */
    const gatedWith = (options: RedisOptions, keyPrefix?: string) =>
      Effect.gen(function* () {
        const connection = yield* RedisConnection.make({
          ...target.options,
          redis: options,
          ...(keyPrefix === undefined ? {} : { keyPrefix }),
        })
        const s = RedisShardStreams.makeWith(connection, { read: "gated" })
        const stream = unique("gated-options")
        const base = { stream, shard: 0, group: "g", consumer: "c", token: 2, count: 10 }
        yield* s.setOwnerToken({ stream, shard: 0, group: "g", token: 2 })
        for (let i = 0; i < 4; i++) yield* s.append(stream, 0, { i: String(i) })
        const first = yield* s.read({ ...base, count: 1 })
        const gated = yield* Effect.promise(() =>
          makeGatedReader(connection).read(base, { ids: first.map((m) => m.id), mode: "ack" }),
        ).pipe(
          Effect.timeoutOrElse({
            duration: "5 seconds",
            orElse: () => Effect.die(new Error("the gated read never ran")),
          }),
        )
        assert.strictEqual(gated._tag, "Read")
        const rest = gated._tag === "Read" ? gated.messages : []
        assert.deepStrictEqual(
          [...first, ...rest].map((m) => m.fields.i),
          ["0", "1", "2", "3"],
        )
        return { s, stream, base }
      })

    it.live(
      "a key prefix: the gated read addresses the namespace's keys, as every other command",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const prefix = `${unique("pfx")}:`
            const { s, stream, base } = yield* gatedWith({}, prefix)
            // the stream lives under the prefix only, and the gated read acked the first entry there
            const keys = yield* Effect.promise(() =>
              Promise.all([
                redis().type(`${prefix}${ShardStreams.shardKey(stream, 0)}`),
                redis().exists(shardKey(stream, 0)),
              ]),
            )
            assert.deepStrictEqual(keys, ["stream", 0])
            const state = yield* s.drainState({ stream, shard: 0, group: "g" })
            assert.strictEqual(state.pending, 3)
            // a stale token is refused through the prefixed owner key too
            const stale = yield* Effect.flip(s.read({ ...base, token: 1 }))
            assert.strictEqual(stale._tag, "StaleOwner")
          }),
        ),
    )

    it.live("a connection made with ioredis' lazyConnect still opens its gated wire", () =>
      Effect.scoped(Effect.asVoid(gatedWith({ lazyConnect: true }))),
    )
  })
}
