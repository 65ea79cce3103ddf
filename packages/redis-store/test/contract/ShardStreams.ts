/**
 * The ShardStreams contract: written once, run unchanged on every
 * implementation (test/ShardStreams.test.ts). Live clock: idle times are
 * real milliseconds on Redis, so tests wait a little where idleness matters.
 */
import { assert, it } from "@effect/vitest"
import { ShardStreams } from "@shardline/core"
import { Effect, Fiber } from "effect"
import { unique } from "../support/targets.js"

const { DeadLetterFields, deadLetterKey, shardKey } = ShardStreams

type Streams = ShardStreams.ShardStreamsShape

/** A fresh stream name and the usual address on it. */
const fresh = () => {
  const stream = unique("orders")
  return { stream, base: { stream, shard: 3, group: "g" } }
}

interface Address {
  readonly stream: string
  readonly shard: number
  readonly group: string
}

/**
 * The coordinator's grant of `address`: its owner token, written before
 * any member of the group reads (docs/protocol.md rule 26), whose first
 * write creates the group on the shard at 0.
 */
const grant = (s: Streams, address: Address, token = 0) =>
  s.setOwnerToken({ stream: address.stream, shard: address.shard, group: address.group, token })

/**
 * What a deletion or an eviction does to what an implementation stores
 * (docs/protocol.md rule 26): on Redis DEL and XGROUP DESTROY, in memory
 * core's test hooks.
 */
export interface Vanish {
  readonly deleteStream: (stream: string, shard: number) => Effect.Effect<void>
  readonly destroyGroup: (stream: string, shard: number, group: string) => Effect.Effect<void>
  readonly deleteOwnerToken: (stream: string, shard: number, group: string) => Effect.Effect<void>
}

export const shardStreamsContract = (subject: () => Streams, vanish: () => Vanish) => {
  it.live("append gives increasing ids; range and info see them in order", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream } = fresh()
      const ids: Array<string> = []
      for (const k of ["a", "b", "c"]) ids.push(yield* s.append(stream, 3, { k, n: "1" }))
      const ms = ids.map((id) => id.split("-").map(Number) as [number, number])
      for (let i = 1; i < ms.length; i++)
        assert.isTrue(
          ms[i]![0] > ms[i - 1]![0] || (ms[i]![0] === ms[i - 1]![0] && ms[i]![1] > ms[i - 1]![1]),
        )
      const range = yield* s.range(shardKey(stream, 3))
      assert.deepStrictEqual(
        range.map((e) => [e.id, e.fields]),
        ids.map((id, i) => [id, { k: ["a", "b", "c"][i]!, n: "1" }]),
      )
      const info = yield* s.info(stream, 3)
      assert.strictEqual(info.length, 3)
      assert.strictEqual(info.lastId, ids[2])
      assert.deepStrictEqual(info.groups, [])
    }),
  )

  it.live(
    "after the grant (the group created at 0), read returns a batch in stream order and records it pending",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base)
        for (const k of ["a", "b", "c"]) yield* s.append(stream, 3, { k })
        const first = yield* s.read({ ...base, consumer: "c1", token: 0, count: 2 })
        assert.deepStrictEqual(
          first.map((m) => [m.fields.k, m.deliveryCount]),
          [
            ["a", 1],
            ["b", 1],
          ],
        )
        const second = yield* s.read({ ...base, consumer: "c1", token: 0, count: 10 })
        assert.deepStrictEqual(
          second.map((m) => m.fields.k),
          ["c"],
        )
        assert.deepStrictEqual(yield* s.read({ ...base, consumer: "c1", token: 0, count: 10 }), [])
        const pending = yield* s.pending(base)
        assert.deepStrictEqual(
          pending.map((p) => [p.id, p.consumer, p.deliveryCount]),
          [...first, ...second].map((m) => [m.id, "c1", 1]),
        )
        const info = yield* s.info(stream, 3)
        assert.deepStrictEqual(
          info.groups.map((g) => [g.name, g.pending, g.lastDeliveredId, g.consumers, g.ownerToken]),
          [["g", 3, second[0]!.id, ["c1"], 0]],
        )
      }),
  )

  it.live("a field named __proto__ is an ordinary field: kept, read back, never a prototype", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      yield* grant(s, base)
      const fields = JSON.parse('{"__proto__":"x","k":"v"}') as Record<string, string>
      yield* s.append(stream, 3, fields)
      const [m] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
      assert.isTrue(Object.hasOwn(m!.fields, "__proto__"))
      assert.strictEqual(Object.getOwnPropertyDescriptor(m!.fields, "__proto__")?.value, "x")
      assert.strictEqual(Object.getPrototypeOf(m!.fields), Object.prototype)
      assert.deepStrictEqual(Object.keys(m!.fields).sort(), ["__proto__", "k"])
    }),
  )

  it.live(
    "keyField takes that field out into key (new and pending reads); without it no key at all",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        const withProto = JSON.parse('{"__proto__":"x","rk":"k3"}') as Record<string, string>
        for (const fields of [{ rk: "k1", n: "1" }, { n: "2" }, withProto, { rk: "k4", n: "4" }])
          yield* s.append(stream, 3, fields)
        const address = { ...base, consumer: "c1", token: 0, keyField: "rk" }
        yield* grant(s, base)
        const first = yield* s.read({ ...address, count: 2 })
        const second = yield* s.read({ ...address, count: 2 })
        const pending = yield* s.read({ ...address, count: 10, from: "pending" })
        const plain = yield* s.read({
          ...base,
          consumer: "c1",
          token: 0,
          count: 1,
          from: "pending",
        })
        for (const batch of [[...first, ...second], pending]) {
          assert.deepStrictEqual(
            batch.map((m) => [m.key, { ...m.fields }]),
            [
              ["k1", { n: "1" }],
              [undefined, { n: "2" }],
              ["k3", JSON.parse('{"__proto__":"x"}')],
              ["k4", { n: "4" }],
            ],
          )
          assert.isTrue(batch.every((m) => Object.hasOwn(m, "key")))
          assert.strictEqual(
            Object.getOwnPropertyDescriptor(batch[2]!.fields, "__proto__")?.value,
            "x",
          )
          assert.strictEqual(Object.getPrototypeOf(batch[2]!.fields), Object.prototype)
        }
        assert.isFalse(Object.hasOwn(plain[0]!, "key"))
        assert.deepStrictEqual({ ...plain[0]!.fields }, { rk: "k1", n: "1" })
      }),
  )

  it.live("setOwnerToken only raises: equal is a no-op, lower fails OwnerTokenRegression", () =>
    Effect.gen(function* () {
      const s = subject()
      const { base } = fresh()
      assert.strictEqual(yield* s.ownerToken(base), 0)
      yield* s.setOwnerToken({ ...base, token: 5 })
      yield* s.setOwnerToken({ ...base, token: 5 })
      const error = yield* Effect.flip(s.setOwnerToken({ ...base, token: 4 }))
      assert.strictEqual(error._tag, "OwnerTokenRegression")
      if (error._tag === "OwnerTokenRegression") assert.strictEqual(error.currentToken, 5)
      assert.strictEqual(yield* s.ownerToken(base), 5)
      yield* s.setOwnerToken({ ...base, token: 9 })
      assert.strictEqual(yield* s.ownerToken(base), 9)
    }),
  )

  it.live(
    "a stale token is refused for read, ack, nack, claim and deadLetter; nothing changes",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* s.append(stream, 3, { k: "a" })
        yield* s.setOwnerToken({ ...base, token: 1 })
        const [m] = yield* s.read({ ...base, consumer: "old", token: 1, count: 10 })
        yield* s.setOwnerToken({ ...base, token: 2 })
        yield* s.append(stream, 3, { k: "b" })
        const stale = { ...base, token: 1 }
        const errors = [
          yield* Effect.flip(s.read({ ...stale, consumer: "old", count: 10 })),
          yield* Effect.flip(s.read({ ...stale, consumer: "old", count: 10, claimIdleMs: 0 })),
          yield* Effect.flip(s.ack({ ...stale, ids: [m!.id], mode: "ack" })),
          yield* Effect.flip(s.ack({ ...stale, ids: [m!.id], mode: "xackdel" })),
          yield* Effect.flip(s.nack({ ...stale, id: m!.id })),
          yield* Effect.flip(
            s.claimPending({ ...stale, consumer: "old", minIdleMs: 0, count: 10 }),
          ),
          yield* Effect.flip(s.deadLetter({ ...stale, id: m!.id, reason: "x" })),
        ]
        for (const error of errors) {
          assert.strictEqual(error._tag, "StaleOwner")
          if (error._tag === "StaleOwner") assert.strictEqual(error.currentToken, 2)
        }
        // nothing changed: still pending once, "b" still undelivered, entries kept
        const pending = yield* s.pending(base)
        assert.deepStrictEqual(
          pending.map((p) => [p.id, p.consumer, p.deliveryCount]),
          [[m!.id, "old", 1]],
        )
        assert.deepStrictEqual(yield* s.range(deadLetterKey(stream, 3)), [])
        assert.strictEqual((yield* s.range(shardKey(stream, 3))).length, 2)
        const fresh2 = yield* s.read({ ...base, consumer: "new", token: 2, count: 10 })
        assert.deepStrictEqual(
          fresh2.map((x) => x.fields.k),
          ["b"],
        )
      }),
  )

  it.live("owner tokens are per group: fencing one group never fences another (fan-out)", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      yield* s.append(stream, 3, { k: "a" })
      yield* s.setOwnerToken({ ...base, group: "g", token: 7 })
      assert.strictEqual(yield* s.ownerToken({ ...base, group: "h" }), 0)
      yield* s.setOwnerToken({ ...base, group: "h", token: 1 })
      const h = yield* s.read({ ...base, group: "h", consumer: "c", token: 1, count: 10 })
      assert.deepStrictEqual(
        h.map((m) => m.fields.k),
        ["a"],
      )
      const g = yield* Effect.flip(
        s.read({ ...base, group: "g", consumer: "c", token: 1, count: 10 }),
      )
      assert.strictEqual(g._tag, "StaleOwner")
      // another shard of the same stream and group is not fenced either
      yield* s.append(stream, 4, { k: "x" })
      yield* s.setOwnerToken({ ...base, shard: 4, token: 1 })
      assert.strictEqual(
        (yield* s.read({ ...base, shard: 4, consumer: "c", token: 1, count: 1 })).length,
        1,
      )
      // each exists from its fence on (setOwnerToken creates the group at 0)
      const info = yield* s.info(stream, 3)
      assert.deepStrictEqual(
        info.groups.map((x) => [x.name, x.ownerToken, x.lastDeliveredId]).sort(),
        [
          ["g", 7, "0-0"],
          ["h", 1, info.lastId],
        ],
      )
    }),
  )

  it.live(
    "setOwnerToken creates the group at 0 where absent (never moves it): from its grant on, another group's xackdel keeps what it has not read",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        const keys = () => Effect.map(s.range(shardKey(stream, 3)), (r) => r.map((e) => e.fields.k))
        // a backlog, then B is granted the shard: its group exists before it reads
        for (const k of ["1", "2"]) yield* s.append(stream, 3, { k })
        yield* s.setOwnerToken({ ...base, group: "b", token: 5 })
        const groups = () => Effect.map(s.info(stream, 3), (i) => i.groups.map((g) => g.name))
        assert.deepStrictEqual(yield* groups(), ["b"])
        const a = { ...base, group: "a", consumer: "ca", token: 0 }
        yield* grant(s, a)
        const batch = yield* s.read({ ...a, count: 10 })
        yield* s.ack({ ...a, ids: batch.map((m) => m.id), mode: "xackdel" })
        assert.deepStrictEqual(yield* keys(), ["1", "2"])
        // a re-grant (same or higher token) neither moves nor recreates it
        const [one] = yield* s.read({ ...base, group: "b", consumer: "cb", token: 5, count: 1 })
        yield* s.setOwnerToken({ ...base, group: "b", token: 5 })
        yield* s.setOwnerToken({ ...base, group: "b", token: 6 })
        assert.deepStrictEqual(
          (yield* s.pending({ ...base, group: "b" })).map((p) => p.id),
          [one!.id],
        )
        const rest = yield* s.read({ ...base, group: "b", consumer: "cb", token: 6, count: 10 })
        assert.deepStrictEqual(
          rest.map((m) => m.fields.k),
          ["2"],
        )
        // on a shard with no stream yet: created (empty), so the first entries wait for it too
        yield* s.setOwnerToken({ ...base, shard: 4, group: "b", token: 1 })
        assert.deepStrictEqual(
          (yield* s.info(stream, 4)).groups.map((g) => g.name),
          ["b"],
        )
        // a sealed shard without a stream is not created (nothing can be appended to it)
        yield* s.seal(stream, 5)
        yield* s.setOwnerToken({ ...base, shard: 5, group: "b", token: 1 })
        assert.deepStrictEqual(yield* s.info(stream, 5), { length: 0, lastId: "0-0", groups: [] })
      }),
  )

  it.live("ack keeps the entry; xackdel deletes exactly what it acknowledged", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      yield* grant(s, base)
      for (const k of ["a", "b", "c"]) yield* s.append(stream, 3, { k })
      const [a, b] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 2 })
      const c = (yield* s.range(shardKey(stream, 3)))[2]!
      assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [a!.id], mode: "ack" }), 1)
      assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [a!.id], mode: "ack" }), 0)
      assert.strictEqual((yield* s.info(stream, 3)).length, 3)
      // b is pending: acked and deleted; a (acked) and c (never delivered) are not pending: kept
      assert.strictEqual(
        yield* s.ack({ ...base, token: 0, ids: [b!.id, a!.id, c.id, "99-0"], mode: "xackdel" }),
        1,
      )
      assert.deepStrictEqual(
        (yield* s.range(shardKey(stream, 3))).map((e) => e.id),
        [a!.id, c.id],
      )
      assert.deepStrictEqual(yield* s.pending(base), [])
      assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [], mode: "ack" }), 0)
    }),
  )

  it.live(
    "fan-out: xackdel of one group keeps what another group has not read, holds pending or joined later to read; deletes once all acked",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        const a = { ...base, group: "a", consumer: "ca", token: 0 }
        const b = { ...base, group: "b", consumer: "cb", token: 0 }
        const keys = () => Effect.map(s.range(shardKey(stream, 3)), (r) => r.map((e) => e.fields.k))
        const ids = (batch: ReadonlyArray<ShardStreams.StreamMessage>) => batch.map((m) => m.id)
        // B exists (its grant created it) but has not read yet
        yield* grant(s, a)
        yield* grant(s, b)
        assert.deepStrictEqual(yield* s.read({ ...b, count: 10 }), [])
        for (const k of ["1", "2", "3"]) yield* s.append(stream, 3, { k })
        const a1 = yield* s.read({ ...a, count: 10 })
        // acked in A (the count says so), kept for B
        assert.strictEqual(yield* s.ack({ ...a, ids: ids(a1), mode: "xackdel" }), 3)
        assert.deepStrictEqual(yield* keys(), ["1", "2", "3"])
        assert.deepStrictEqual(yield* s.pending({ ...base, group: "a" }), [])
        const b1 = yield* s.read({ ...b, count: 10 })
        assert.deepStrictEqual(
          b1.map((m) => [m.fields.k, m.deliveryCount]),
          [
            ["1", 1],
            ["2", 1],
            ["3", 1],
          ],
        )
        // B's own xackdel comes last: every group is done, now they go
        assert.strictEqual(yield* s.ack({ ...b, ids: ids(b1), mode: "xackdel" }), 3)
        assert.deepStrictEqual(yield* keys(), [])

        // B has read and holds them pending; A acks with its next read (as the runtime does)
        for (const k of ["4", "5"]) yield* s.append(stream, 3, { k })
        const b2 = yield* s.read({ ...b, count: 10 })
        const a2 = yield* s.read({ ...a, count: 10 })
        assert.deepStrictEqual(
          yield* s.read({ ...a, count: 10, ack: { ids: ids(a2), mode: "xackdel" } }),
          [],
        )
        assert.deepStrictEqual(yield* keys(), ["4", "5"])
        // B's retry (its own pending entries) still finds them, fields and all
        const retry = yield* s.read({ ...b, count: 10, from: "pending" })
        assert.deepStrictEqual(
          retry.map((m) => m.fields.k),
          ["4", "5"],
        )
        // and so does a takeover claim of B's entries by another consumer of B
        const claimed = yield* s.claimPending({
          ...b,
          consumer: "cb2",
          minIdleMs: 0,
          count: 10,
        })
        assert.deepStrictEqual(
          claimed.messages.map((m) => m.fields.k),
          ["4", "5"],
        )
        assert.deepStrictEqual(claimed.deleted, [])
        // B acks them plainly: acknowledged by all, but the last ack was not an xackdel: kept
        assert.strictEqual(yield* s.ack({ ...b, ids: ids(b2), mode: "ack" }), 2)
        assert.deepStrictEqual(yield* keys(), ["4", "5"])

        // C joins later: created after A read, at an earlier position (the start)
        for (const k of ["6", "7"]) yield* s.append(stream, 3, { k })
        const a3 = yield* s.read({ ...a, count: 10 })
        const seek = s.setGroupPosition
        assert.isDefined(seek)
        if (seek === undefined) return
        yield* grant(s, { ...base, group: "c" })
        yield* seek({ ...base, group: "c", token: 0, position: "start" })
        assert.strictEqual(yield* s.ack({ ...a, ids: ids(a3), mode: "xackdel" }), 2)
        assert.deepStrictEqual(yield* keys(), ["4", "5", "6", "7"])
        const c = yield* s.read({ ...base, group: "c", consumer: "cc", token: 0, count: 10 })
        assert.deepStrictEqual(
          c.map((m) => m.fields.k),
          ["4", "5", "6", "7"],
        )
        // B has not read 6 and 7 yet either
        const b3 = yield* s.read({ ...b, count: 10 })
        assert.deepStrictEqual(
          b3.map((m) => m.fields.k),
          ["6", "7"],
        )
        // C's xackdel is the last acknowledgement of 4..7 (A and B acked them): all gone
        yield* s.ack({ ...b, ids: ids(b3), mode: "ack" })
        yield* s.ack({ ...base, group: "c", token: 0, ids: ids(c), mode: "xackdel" })
        assert.deepStrictEqual(yield* keys(), [])
      }),
  )

  it.live(
    "fan-out: xackdel deletes what a group positioned past it (created at the end) never wanted; a group moved back keeps it",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const seek = s.setGroupPosition
        assert.isDefined(seek)
        if (seek === undefined) return
        const { stream, base } = fresh()
        const a = { ...base, group: "a", consumer: "ca", token: 0 }
        const keys = () => Effect.map(s.range(shardKey(stream, 3)), (r) => r.map((e) => e.fields.k))
        yield* grant(s, a)
        for (const k of ["1", "2", "3"]) yield* s.append(stream, 3, { k })
        // D only wants what comes after its creation: 1..3 are not its to keep
        yield* grant(s, { ...base, group: "d" })
        yield* seek({ ...base, group: "d", token: 0, position: "end" })
        const a1 = yield* s.read({ ...a, count: 2 })
        yield* s.ack({ ...a, ids: a1.map((m) => m.id), mode: "xackdel" })
        assert.deepStrictEqual(yield* keys(), ["3"])
        // D moved back to the start before A acks 3: D has not delivered 3, so it stays
        yield* seek({ ...base, group: "d", token: 0, position: "start" })
        const [three] = yield* s.read({ ...a, count: 10 })
        yield* s.ack({ ...a, ids: [three!.id], mode: "xackdel" })
        assert.deepStrictEqual(yield* keys(), ["3"])
        const d = yield* s.read({ ...base, group: "d", consumer: "cd", token: 0, count: 10 })
        assert.deepStrictEqual(
          d.map((m) => m.fields.k),
          ["3"],
        )
        yield* s.ack({ ...base, group: "d", token: 0, ids: [three!.id], mode: "xackdel" })
        assert.deepStrictEqual(yield* keys(), [])
      }),
  )

  it.live(
    "read with ack: acknowledges the previous batch, then reads the next (ack and xackdel)",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base)
        for (const k of ["a", "b", "c", "d", "e"]) yield* s.append(stream, 3, { k })
        const address = { ...base, consumer: "c1", token: 0 }
        const first = yield* s.read({ ...address, count: 2 })
        const second = yield* s.read({
          ...address,
          count: 2,
          ack: { ids: first.map((m) => m.id), mode: "ack" },
        })
        assert.deepStrictEqual(
          second.map((m) => [m.fields.k, m.deliveryCount]),
          [
            ["c", 1],
            ["d", 1],
          ],
        )
        assert.deepStrictEqual(
          (yield* s.pending(base)).map((p) => p.id),
          second.map((m) => m.id),
        )
        // xackdel: acknowledged and deleted; an id that was not pending is neither
        const third = yield* s.read({
          ...address,
          count: 2,
          ack: { ids: [...second.map((m) => m.id), first[0]!.id], mode: "xackdel" },
        })
        assert.deepStrictEqual(
          third.map((m) => m.fields.k),
          ["e"],
        )
        assert.deepStrictEqual(
          (yield* s.range(shardKey(stream, 3))).map((e) => e.fields.k),
          ["a", "b", "e"],
        )
        // the read that finds nothing still acknowledges
        const empty = yield* s.read({
          ...address,
          count: 2,
          ack: { ids: third.map((m) => m.id), mode: "ack" },
        })
        assert.deepStrictEqual(empty, [])
        assert.deepStrictEqual(yield* s.pending(base), [])
        // the own-pending and takeover reads acknowledge first too
        yield* s.append(stream, 3, { k: "f" })
        const [f] = yield* s.read({ ...address, count: 1 })
        const retry = yield* s.read({
          ...address,
          count: 1,
          from: "pending",
          ack: { ids: [f!.id], mode: "ack" },
        })
        assert.deepStrictEqual(retry, [])
        yield* s.append(stream, 3, { k: "g" })
        const [g] = yield* s.read({ ...address, count: 1 })
        const taken = yield* s.read({
          ...address,
          consumer: "c2",
          count: 5,
          claimIdleMs: 0,
          ack: { ids: [g!.id], mode: "ack" },
        })
        assert.deepStrictEqual(taken, [])
        assert.deepStrictEqual(yield* s.pending(base), [])
      }),
  )

  it.live("read with ack refused (stale token, invalid id) acknowledges and reads nothing", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      for (const k of ["a", "b"]) yield* s.append(stream, 3, { k })
      yield* s.setOwnerToken({ ...base, token: 1 })
      const [a] = yield* s.read({ ...base, consumer: "old", token: 1, count: 1 })
      const invalid = yield* Effect.flip(
        s.read({
          ...base,
          consumer: "old",
          token: 1,
          count: 1,
          ack: { ids: [a!.id, "nope"], mode: "xackdel" },
        }),
      )
      assert.strictEqual(invalid._tag, "InvalidEntryId")
      yield* s.setOwnerToken({ ...base, token: 2 })
      const stale = yield* Effect.flip(
        s.read({
          ...base,
          consumer: "old",
          token: 1,
          count: 1,
          ack: { ids: [a!.id], mode: "ack" },
        }),
      )
      assert.strictEqual(stale._tag, "StaleOwner")
      assert.deepStrictEqual(
        (yield* s.pending(base)).map((p) => [p.id, p.consumer]),
        [[a!.id, "old"]],
      )
      assert.strictEqual((yield* s.range(shardKey(stream, 3))).length, 2)
      // "b" was never delivered: the new owner reads it
      assert.deepStrictEqual(
        (yield* s.read({ ...base, consumer: "new", token: 2, count: 5 })).map((m) => m.fields.k),
        ["b"],
      )
    }),
  )

  it.live("an invalid entry id is InvalidEntryId and nothing in the batch is acknowledged", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      yield* grant(s, base)
      yield* s.append(stream, 3, { k: "a" })
      const [a] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
      for (const bad of ["nope", "1", "1-x", "-1-0"]) {
        const error = yield* Effect.flip(
          s.ack({ ...base, token: 0, ids: [a!.id, bad], mode: "xackdel" }),
        )
        assert.strictEqual(error._tag, "InvalidEntryId")
      }
      assert.strictEqual(
        (yield* Effect.flip(s.nack({ ...base, token: 0, id: "x" })))._tag,
        "InvalidEntryId",
      )
      assert.strictEqual(
        (yield* Effect.flip(s.deadLetter({ ...base, token: 0, id: "x", reason: "r" })))._tag,
        "InvalidEntryId",
      )
      assert.strictEqual(
        (yield* Effect.flip(
          s.claimPending({ ...base, token: 0, consumer: "c", minIdleMs: 0, count: 1, start: "x" }),
        ))._tag,
        "InvalidEntryId",
      )
      assert.strictEqual((yield* s.pending(base)).length, 1)
      assert.strictEqual((yield* s.range(shardKey(stream, 3))).length, 1)
    }),
  )

  it.live(
    "nack keeps the entry pending with deliveryCount+1; it is retried from the consumer's pending list",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base)
        yield* s.append(stream, 3, { k: "a" })
        const [m] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
        yield* Effect.sleep(150)
        const [before] = yield* s.pending(base)
        assert.isTrue(yield* s.nack({ ...base, token: 0, id: m!.id }))
        const [p] = yield* s.pending(base)
        assert.strictEqual(p!.deliveryCount, 2)
        assert.strictEqual(p!.consumer, "c1")
        assert.isTrue(p!.idleMs < before!.idleMs) // idle time reset
        // not handed out again as a new entry, but from the consumer's pending list
        assert.deepStrictEqual(yield* s.read({ ...base, consumer: "c1", token: 0, count: 10 }), [])
        const retry = yield* s.read({
          ...base,
          consumer: "c1",
          token: 0,
          count: 10,
          from: "pending",
        })
        assert.deepStrictEqual(
          retry.map((r) => [r.id, r.fields.k, r.deliveryCount]),
          [[m!.id, "a", 2]],
        )
        assert.deepStrictEqual(
          yield* s.read({ ...base, consumer: "other", token: 0, count: 10, from: "pending" }),
          [],
        )
        assert.isFalse(yield* s.nack({ ...base, token: 0, id: "9-9" }))
        // a group never granted has no token: refused whatever the token
        assert.strictEqual(
          (yield* Effect.flip(s.nack({ ...base, group: "unknown", token: 0, id: m!.id })))._tag,
          "OwnerTokenMissing",
        )
      }),
  )

  it.live("claimPending moves idle pending entries to the new consumer with deliveryCount+1", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      for (const k of ["a", "b", "c"]) yield* s.append(stream, 3, { k })
      yield* s.setOwnerToken({ ...base, token: 1 })
      yield* s.read({ ...base, consumer: "old", token: 1, count: 2 })
      yield* Effect.sleep(60)
      yield* s.setOwnerToken({ ...base, token: 2 })
      const early = yield* s.claimPending({
        ...base,
        token: 2,
        consumer: "new",
        minIdleMs: 60_000,
        count: 10,
      })
      assert.deepStrictEqual(early.messages, [])
      const claimed = yield* s.claimPending({
        ...base,
        token: 2,
        consumer: "new",
        minIdleMs: 50,
        count: 10,
      })
      assert.strictEqual(claimed.next, "0-0")
      assert.deepStrictEqual(
        claimed.messages.map((m) => [m.fields.k, m.deliveryCount]),
        [
          ["a", 2],
          ["b", 2],
        ],
      )
      assert.deepStrictEqual(
        (yield* s.pending(base)).map((p) => [p.consumer, p.deliveryCount]),
        [
          ["new", 2],
          ["new", 2],
        ],
      )
      const next = yield* s.read({ ...base, consumer: "new", token: 2, count: 10 })
      assert.deepStrictEqual(
        next.map((m) => m.fields.k),
        ["c"],
      )
    }),
  )

  it.live(
    "claimPending pages with a cursor and reports pending entries deleted from the stream",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base)
        for (const k of ["a", "b", "c"]) yield* s.append(stream, 3, { k })
        const read = yield* s.read({ ...base, consumer: "old", token: 0, count: 10 })
        // a producer's trim (MINID) drops "a", still pending in the group: a
        // dangling reference (no group's ack ever deletes a pending entry)
        yield* s.append(stream, 3, { k: "d" }, { trim: { minId: read[1]!.id } })
        // page until the cursor is 0-0; the dangling reference is reported
        // (on Redis it may use up a page of its own: XAUTOCLAIM counts it)
        const messages: Array<string> = []
        const deleted: Array<string> = []
        let next: string | undefined
        let pages = 0
        do {
          assert.isBelow(pages++, 10)
          const more = yield* s.claimPending({
            ...base,
            token: 0,
            consumer: "new",
            minIdleMs: 0,
            count: 1,
            ...(next === undefined ? {} : { start: next }),
          })
          assert.isAtMost(more.messages.length, 1)
          messages.push(...more.messages.map((m) => m.fields.k!))
          deleted.push(...more.deleted)
          next = more.next
        } while (next !== "0-0")
        assert.isAtLeast(pages, 2)
        assert.deepStrictEqual(messages, ["b", "c"])
        assert.deepStrictEqual(deleted, [read[0]!.id])
        assert.strictEqual((yield* s.pending(base)).length, 2)
      }),
  )

  it.live(
    "takeover read (claimIdleMs): the previous owner's idle entries first, then new ones",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        for (const k of ["a", "b", "c", "d"]) yield* s.append(stream, 3, { k })
        yield* grant(s, base, 1)
        yield* s.read({ ...base, consumer: "old", token: 1, count: 2 })
        yield* s.setOwnerToken({ ...base, token: 2 })
        // not idle long enough: left with the old consumer; only new entries
        const notYet = yield* s.read({
          ...base,
          consumer: "new",
          token: 2,
          count: 1,
          claimIdleMs: 60_000,
        })
        assert.deepStrictEqual(
          notYet.map((m) => [m.fields.k, m.deliveryCount]),
          [["c", 1]],
        )
        yield* Effect.sleep(60)
        const batch = yield* s.read({
          ...base,
          consumer: "new",
          token: 2,
          count: 10,
          claimIdleMs: 50,
        })
        assert.deepStrictEqual(
          batch.map((m) => [m.fields.k, m.deliveryCount]),
          [
            ["a", 2],
            ["b", 2],
            ["c", 2],
            ["d", 1],
          ],
        )
        assert.deepStrictEqual(
          (yield* s.pending(base)).map((p) => [p.consumer, p.deliveryCount]),
          [
            ["new", 2],
            ["new", 2],
            ["new", 2],
            ["new", 1],
          ],
        )
      }),
  )

  it.live(
    "deadLetter copies the entry to <shard>:dlq atomically with its ack: never lost, never both",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base)
        yield* s.append(stream, 3, { k: "poison" })
        const [m] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
        yield* s.nack({ ...base, token: 0, id: m!.id })
        const dlqId = yield* s.deadLetter({
          ...base,
          token: 0,
          id: m!.id,
          reason: "max deliveries",
        })
        assert.isDefined(dlqId)
        const dlq = yield* s.range(deadLetterKey(stream, 3))
        assert.strictEqual(dlq.length, 1)
        assert.strictEqual(dlq[0]!.id, dlqId)
        assert.deepStrictEqual(dlq[0]!.fields, {
          k: "poison",
          [DeadLetterFields.originalId]: m!.id,
          [DeadLetterFields.reason]: "max deliveries",
          [DeadLetterFields.group]: "g",
          [DeadLetterFields.deliveryCount]: "2",
        })
        assert.deepStrictEqual(yield* s.pending(base), [])
        // not pending any more: nothing happens
        assert.isUndefined(yield* s.deadLetter({ ...base, token: 0, id: m!.id, reason: "again" }))
        // a group never granted has no token: refused whatever the token
        assert.strictEqual(
          (yield* Effect.flip(
            s.deadLetter({ ...base, group: "unknown", token: 0, id: m!.id, reason: "r" }),
          ))._tag,
          "OwnerTokenMissing",
        )
        assert.strictEqual((yield* s.range(deadLetterKey(stream, 3))).length, 1)
      }),
  )

  it.live("consumer groups are independent and shards are separate streams", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      yield* grant(s, { ...base, shard: 0, group: "g1" })
      yield* grant(s, { ...base, shard: 0, group: "g2" })
      yield* s.append(stream, 0, { k: "zero" })
      yield* s.append(stream, 1, { k: "one" })
      const g1 = yield* s.read({
        ...base,
        shard: 0,
        group: "g1",
        consumer: "c",
        token: 0,
        count: 9,
      })
      const g2 = yield* s.read({
        ...base,
        shard: 0,
        group: "g2",
        consumer: "c",
        token: 0,
        count: 9,
      })
      assert.deepStrictEqual(
        [...g1, ...g2].map((m) => m.fields.k),
        ["zero", "zero"],
      )
      const info = yield* s.info(stream, 0)
      assert.deepStrictEqual(
        info.groups.map((g) => [g.name, g.pending]),
        [
          ["g1", 1],
          ["g2", 1],
        ],
      )
      assert.deepStrictEqual(yield* s.pending({ ...base, shard: 1, group: "g1" }), [])
      const none = yield* s.info(unique("none"), 0)
      assert.deepStrictEqual(none, { length: 0, lastId: "0-0", groups: [] })
    }),
  )

  it.live(
    "waitForEntries: at once when undelivered entries exist, false on an idle shard, woken by an append",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        // nothing at all: times out
        assert.isFalse(yield* s.waitForEntries({ ...base, timeoutMs: 30 }))
        yield* s.append(stream, 3, { k: "a" })
        assert.isTrue(yield* s.waitForEntries({ ...base, timeoutMs: 5_000 }))
        yield* grant(s, base)
        yield* s.read({ ...base, consumer: "c", token: 0, count: 10 })
        // all delivered: idle until the next append
        assert.isFalse(yield* s.waitForEntries({ ...base, timeoutMs: 30 }))
        const waiting = yield* Effect.forkChild(s.waitForEntries({ ...base, timeoutMs: 20_000 }))
        yield* Effect.sleep(20)
        yield* s.append(stream, 3, { k: "b" })
        assert.isTrue(yield* Fiber.join(waiting))
        const [b] = yield* s.read({ ...base, consumer: "c", token: 0, count: 10 })
        assert.strictEqual(b!.fields.k, "b")
        // an explicit afterId
        assert.isTrue(yield* s.waitForEntries({ ...base, timeoutMs: 5_000, afterId: "0-0" }))
        assert.isFalse(yield* s.waitForEntries({ ...base, timeoutMs: 30, afterId: b!.id }))
      }),
  )

  it.live("seal: appends fail ShardSealed and add nothing; reads and acks go on; idempotent", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream, base } = fresh()
      yield* grant(s, base)
      const a = yield* s.append(stream, 3, { k: "a" })
      yield* s.seal(stream, 3)
      yield* s.seal(stream, 3)
      const refused = yield* Effect.flip(s.append(stream, 3, { k: "late" }))
      assert.strictEqual(refused._tag, "ShardSealed")
      if (refused._tag === "ShardSealed") {
        assert.strictEqual(refused.stream, stream)
        assert.strictEqual(refused.shard, 3)
      }
      assert.deepStrictEqual(
        (yield* s.range(shardKey(stream, 3))).map((e) => e.id),
        [a],
      )
      // the other shards of the stream are not sealed
      yield* s.append(stream, 4, { k: "b" })
      // the group still drains the sealed shard
      const [m] = yield* s.read({ ...base, consumer: "c", token: 0, count: 10 })
      assert.strictEqual(m!.id, a)
      assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [a], mode: "ack" }), 1)
    }),
  )

  it.live(
    "an idempotent append retried after a reshard sealed the shard returns its first id (never ShardSealed, so never re-routed and stored twice)",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream } = fresh()
        const idem = { producerId: "p1", messageId: "order-1" }
        // the first append lands, its reply is lost, then a reshard seals the shard
        const first = yield* s.append(stream, 3, { k: "a" }, { idempotency: idem })
        yield* s.seal(stream, 3)
        const retried = yield* s.append(stream, 3, { k: "a" }, { idempotency: idem })
        assert.strictEqual(retried, first)
        // anything the window has not seen is refused as before, adding nothing
        for (const options of [
          { idempotency: { ...idem, messageId: "order-2" } },
          { idempotency: { ...idem, producerId: "p2" } },
          {},
        ]) {
          const refused = yield* Effect.flip(s.append(stream, 3, { k: "a" }, options))
          assert.strictEqual(refused._tag, "ShardSealed")
        }
        assert.deepStrictEqual(
          (yield* s.range(shardKey(stream, 3))).map((e) => e.id),
          [first],
        )
      }),
  )

  it.live(
    "drainState: undelivered after the last-delivered id, pending; drained once sealed and both 0",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        const state = () => s.drainState(base)
        // nothing there at all
        assert.deepStrictEqual(yield* state(), {
          sealed: false,
          undelivered: 0,
          pending: 0,
          drained: false,
        })
        for (const k of ["a", "b", "c"]) yield* s.append(stream, 3, { k })
        // a group that never read: everything is undelivered
        assert.deepStrictEqual(yield* state(), {
          sealed: false,
          undelivered: 3,
          pending: 0,
          drained: false,
        })
        yield* grant(s, base)
        const [a, b] = yield* s.read({ ...base, consumer: "c", token: 0, count: 2 })
        assert.deepStrictEqual(yield* state(), {
          sealed: false,
          undelivered: 1,
          pending: 2,
          drained: false,
        })
        yield* s.seal(stream, 3)
        yield* s.ack({ ...base, token: 0, ids: [a!.id], mode: "xackdel" })
        assert.deepStrictEqual(yield* state(), {
          sealed: true,
          undelivered: 1,
          pending: 1,
          drained: false,
        })
        const [c] = yield* s.read({ ...base, consumer: "c", token: 0, count: 10 })
        yield* s.ack({ ...base, token: 0, ids: [b!.id, c!.id], mode: "ack" })
        assert.deepStrictEqual(yield* state(), {
          sealed: true,
          undelivered: 0,
          pending: 0,
          drained: true,
        })
        // another group on the same shard has its own state
        assert.deepStrictEqual(yield* s.drainState({ ...base, group: "other" }), {
          sealed: true,
          undelivered: 2,
          pending: 0,
          drained: false,
        })
        // an entry deleted before the group existed (the only group's
        // XACKDEL) is not counted as undelivered, nor is one both groups acked
        yield* grant(s, { ...base, group: "other" })
        const [o] = yield* s.read({ ...base, group: "other", consumer: "x", token: 0, count: 1 })
        yield* s.ack({ ...base, group: "other", token: 0, ids: [o!.id], mode: "xackdel" })
        assert.deepStrictEqual(yield* s.drainState({ ...base, group: "other" }), {
          sealed: true,
          undelivered: 1,
          pending: 0,
          drained: false,
        })
      }),
  )

  it.live(
    "retireShard: the stream and the named groups' tokens go; the seal and dead letters stay",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        for (const k of ["a", "b"]) yield* s.append(stream, 3, { k })
        yield* s.setOwnerToken({ ...base, token: 4 })
        yield* s.setOwnerToken({ ...base, group: "g2", token: 6 })
        yield* s.setOwnerToken({ ...base, group: "kept", token: 2 })
        const [a, b] = yield* s.read({ ...base, consumer: "c", token: 4, count: 2 })
        const dlq = yield* s.deadLetter({ ...base, token: 4, id: a!.id, reason: "poison" })
        yield* s.ack({ ...base, token: 4, ids: [b!.id], mode: "ack" })
        yield* s.seal(stream, 3)
        yield* s.retireShard(stream, 3, ["g", "g2"])
        yield* s.retireShard(stream, 3, ["g", "g2"])
        assert.deepStrictEqual(yield* s.range(shardKey(stream, 3)), [])
        assert.strictEqual((yield* s.info(stream, 3)).length, 0)
        assert.strictEqual(yield* s.ownerToken(base), 0)
        assert.strictEqual(yield* s.ownerToken({ ...base, group: "g2" }), 0)
        assert.strictEqual(yield* s.ownerToken({ ...base, group: "kept" }), 2)
        assert.deepStrictEqual(
          (yield* s.range(deadLetterKey(stream, 3))).map((e) => e.id),
          [dlq!],
        )
        // still sealed: a late producer is refused, the shard is not recreated
        assert.strictEqual(
          (yield* Effect.flip(s.append(stream, 3, { k: "late" })))._tag,
          "ShardSealed",
        )
        assert.deepStrictEqual(yield* s.drainState(base), {
          sealed: true,
          undelivered: 0,
          pending: 0,
          drained: true,
        })
      }),
  )

  it.live(
    "setGroupPosition moves the group's read position (end, an id, start), fenced; pending stays pending",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const seek = s.setGroupPosition
        assert.isDefined(seek)
        if (seek === undefined) return
        const { stream, base } = fresh()
        yield* s.setOwnerToken({ ...base, token: 2 })
        // on a shard with no stream yet: creates the group there
        yield* seek({ ...base, token: 2, position: "end" })
        const ids: Array<string> = []
        for (const k of ["a", "b", "c"]) ids.push(yield* s.append(stream, 3, { k }))
        yield* seek({ ...base, token: 2, position: "end" })
        assert.deepStrictEqual(yield* s.read({ ...base, consumer: "c", token: 2, count: 10 }), [])
        yield* seek({ ...base, token: 2, position: ids[0]! })
        const after = yield* s.read({ ...base, consumer: "c", token: 2, count: 10 })
        assert.deepStrictEqual(
          after.map((m) => m.fields.k),
          ["b", "c"],
        )
        yield* seek({ ...base, token: 2, position: "start" })
        assert.strictEqual((yield* s.drainState(base)).undelivered, 3)
        // pending entries stay pending (XGROUP SETID keeps the PEL)
        assert.strictEqual((yield* s.pending(base)).length, 2)
        // a stale owner moves nothing
        const stale = yield* Effect.flip(seek({ ...base, token: 1, position: "end" }))
        assert.strictEqual(stale._tag, "StaleOwner")
        assert.strictEqual((yield* s.drainState(base)).undelivered, 3)
        const bad = yield* Effect.flip(seek({ ...base, token: 2, position: "nonsense" }))
        assert.strictEqual(bad._tag, "InvalidEntryId")
        // another group of the shard is granted, put somewhere, and reads from there
        yield* grant(s, { ...base, group: "late" })
        yield* seek({ ...base, group: "late", token: 0, position: ids[1]! })
        const late = yield* s.read({ ...base, group: "late", consumer: "c", token: 0, count: 10 })
        assert.deepStrictEqual(
          late.map((m) => m.fields.k),
          ["c"],
        )
      }),
  )

  it.live("append trims by MAXLEN or MINID", () =>
    Effect.gen(function* () {
      const s = subject()
      const { stream } = fresh()
      const ids: Array<string> = []
      for (const k of ["a", "b", "c", "d"])
        ids.push(yield* s.append(stream, 3, { k }, { trim: { maxLen: 2 } }))
      assert.deepStrictEqual(
        (yield* s.range(shardKey(stream, 3))).map((e) => e.fields.k),
        ["c", "d"],
      )
      yield* s.append(stream, 3, { k: "e" }, { trim: { minId: ids[3]! } })
      assert.deepStrictEqual(
        (yield* s.range(shardKey(stream, 3))).map((e) => e.fields.k),
        ["d", "e"],
      )
      // approximate trimming never keeps fewer entries than asked
      for (const k of ["f", "g"])
        yield* s.append(stream, 3, { k }, { trim: { maxLen: 3, approximate: true } })
      assert.isAtLeast((yield* s.info(stream, 3)).length, 3)
    }),
  )

  it.live(
    "an idempotent append seen within the window adds nothing and returns the first id; the window keeps the last 100 ids",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream } = fresh()
        const idem = { producerId: "p1", messageId: "7" }
        const first = yield* s.append(stream, 3, { k: "a" }, { idempotency: idem })
        const again = yield* s.append(stream, 3, { k: "a" }, { idempotency: idem })
        assert.strictEqual(again, first)
        // another producer, or another shard, is another window
        const other = yield* s.append(
          stream,
          3,
          { k: "a" },
          { idempotency: { ...idem, producerId: "p2" } },
        )
        assert.notStrictEqual(other, first)
        yield* s.append(stream, 4, { k: "a" }, { idempotency: idem })
        assert.strictEqual((yield* s.info(stream, 3)).length, 2)
        // the window keeps at most maxSize ids per producer: the oldest is forgotten
        const max = ShardStreams.IDEMPOTENCY_WINDOW.maxSize
        const send = (messageId: string) =>
          s.append(stream, 5, { i: messageId }, { idempotency: { producerId: "p", messageId } })
        for (let i = 0; i < max; i++) yield* send(String(i))
        yield* send("0")
        assert.strictEqual((yield* s.info(stream, 5)).length, max)
        yield* send("x")
        yield* send("0")
        assert.strictEqual((yield* s.info(stream, 5)).length, max + 2)
        // ... and the newest ones are still remembered
        yield* send(String(max - 1))
        assert.strictEqual((yield* s.info(stream, 5)).length, max + 2)
      }),
  )

  // docs/protocol.md rule 26: nothing Shardline stores disappears in silence

  /** Every fenced call of `address` under `token`, each flipped to its error (a success is a failure of the test). */
  const everyFencedCall = (s: Streams, address: Address, token: number, id: string) => {
    const at = { ...address, token }
    const calls: ReadonlyArray<
      readonly [string, Effect.Effect<unknown, { readonly _tag: string }>]
    > = [
      ["read", s.read({ ...at, consumer: "c", count: 10 })],
      [
        "read with an ack",
        s.read({ ...at, consumer: "c", count: 10, ack: { ids: [id], mode: "ack" } }),
      ],
      ["read of own pending", s.read({ ...at, consumer: "c", count: 10, from: "pending" })],
      ["takeover read", s.read({ ...at, consumer: "c2", count: 10, claimIdleMs: 0 })],
      ["ack", s.ack({ ...at, ids: [id], mode: "ack" })],
      ["xackdel", s.ack({ ...at, ids: [id], mode: "xackdel" })],
      ["nack", s.nack({ ...at, id })],
      ["claimPending", s.claimPending({ ...at, consumer: "c2", minIdleMs: 0, count: 10 })],
      ["deadLetter", s.deadLetter({ ...at, id, reason: "r" })],
    ]
    return Effect.forEach(calls, ([name, call]) =>
      Effect.map(
        Effect.matchEffect(call, {
          onFailure: (error) => Effect.succeed(error),
          onSuccess: (value) => Effect.succeed({ _tag: `succeeded: ${JSON.stringify(value)}` }),
        }),
        (error) => [name, error] as const,
      ),
    )
  }

  it.live(
    "a missing owner token refuses every token, for every fenced call and a seek; nothing changes; a coordinator's write brings it back",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base, 5)
        for (const k of ["a", "b", "c"]) yield* s.append(stream, 3, { k })
        const [a] = yield* s.read({ ...base, consumer: "c", token: 5, count: 1 })
        // a group never granted: no token, refused (compared with 0 it let every token through)
        for (const [name, error] of yield* everyFencedCall(
          s,
          { ...base, group: "never" },
          5,
          a!.id,
        ))
          assert.strictEqual(error._tag, "OwnerTokenMissing", name)
        // the group's token deleted (or evicted): every token is refused, however high
        yield* vanish().deleteOwnerToken(stream, 3, "g")
        for (const token of [0, 4, 5, 6, 2 ** 40]) {
          for (const [name, error] of yield* everyFencedCall(s, base, token, a!.id)) {
            assert.strictEqual(error._tag, "OwnerTokenMissing", `${name} with token ${token}`)
            if (error._tag === "OwnerTokenMissing") {
              const e = error as unknown as Address & { readonly token: number }
              assert.deepStrictEqual([e.stream, e.shard, e.group, e.token], [stream, 3, "g", token])
            }
          }
          const seek = s.setGroupPosition
          if (seek !== undefined)
            assert.strictEqual(
              (yield* Effect.flip(seek({ ...base, token, position: "end" })))._tag,
              "OwnerTokenMissing",
            )
        }
        // nothing changed: a pending with its consumer, b and c undelivered, no dead letter
        assert.deepStrictEqual(
          (yield* s.pending(base)).map((p) => [p.id, p.consumer, p.deliveryCount]),
          [[a!.id, "c", 1]],
        )
        assert.strictEqual((yield* s.drainState(base)).undelivered, 2)
        assert.strictEqual((yield* s.range(shardKey(stream, 3))).length, 3)
        assert.deepStrictEqual(yield* s.range(deadLetterKey(stream, 3)), [])
        // the coordinator writes a token again (a grant, a takeover's re-fence): the group as it was
        yield* grant(s, base, 7)
        assert.deepStrictEqual(
          (yield* s.read({ ...base, consumer: "c", token: 7, count: 10 })).map((m) => m.fields.k),
          ["b", "c"],
        )
        assert.strictEqual((yield* s.pending(base)).length, 3)
      }),
  )

  it.live(
    "a vanished group: every fenced call is DataLost (group), never empty, not pending or nothing acked; a re-grant does not re-create it, a seek does",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base, 3)
        for (const k of ["a", "b"]) yield* s.append(stream, 3, { k })
        const [a] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
        yield* vanish().destroyGroup(stream, 3, "g")
        for (const [name, error] of yield* everyFencedCall(s, base, 3, a!.id)) {
          assert.strictEqual(error._tag, "DataLost", name)
          if (error._tag === "DataLost") {
            const e = error as unknown as Address & { readonly what: string }
            assert.deepStrictEqual([e.stream, e.shard, e.group, e.what], [stream, 3, "g", "group"])
          }
        }
        // a refusal changes nothing, and a re-grant (same or higher token) creates nothing in silence
        yield* grant(s, base, 3)
        yield* grant(s, base, 4)
        assert.deepStrictEqual((yield* s.info(stream, 3)).groups, [])
        assert.strictEqual(
          (yield* Effect.flip(s.read({ ...base, consumer: "c", token: 4, count: 10 })))._tag,
          "DataLost",
        )
        // a fenced seek creates it again where it says: what the stream holds is read again
        const seek = s.setGroupPosition
        assert.isDefined(seek)
        if (seek === undefined) return
        assert.strictEqual(
          (yield* Effect.flip(seek({ ...base, token: 3, position: "start" })))._tag,
          "StaleOwner",
        )
        yield* seek({ ...base, token: 4, position: "start" })
        assert.deepStrictEqual(
          (yield* s.read({ ...base, consumer: "c", token: 4, count: 10 })).map((m) => m.fields.k),
          ["a", "b"],
        )
      }),
  )

  it.live(
    "a vanished stream: DataLost (stream); appended again, DataLost (group); a shard sealed without a stream reads empty",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* grant(s, base, 3)
        yield* s.append(stream, 3, { k: "a" })
        const [a] = yield* s.read({ ...base, consumer: "c", token: 3, count: 1 })
        yield* vanish().deleteStream(stream, 3)
        for (const [name, error] of yield* everyFencedCall(s, base, 3, a!.id)) {
          assert.strictEqual(error._tag, "DataLost", name)
          if (error._tag === "DataLost")
            assert.strictEqual((error as unknown as { readonly what: string }).what, "stream", name)
        }
        // nothing was created by the refusals
        assert.deepStrictEqual(yield* s.info(stream, 3), { length: 0, lastId: "0-0", groups: [] })
        // a producer's append creates a stream without the group
        yield* s.append(stream, 3, { k: "b" })
        const again = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 3, count: 10 }))
        assert.strictEqual(again._tag, "DataLost")
        assert.strictEqual((again as unknown as { readonly what: string }).what, "group")
        // a shard sealed by a reshard without a stream: nothing to read, nothing lost
        yield* s.seal(stream, 6)
        const sealed = { ...base, shard: 6 }
        yield* grant(s, sealed, 1)
        assert.deepStrictEqual(yield* s.read({ ...sealed, consumer: "c", token: 1, count: 10 }), [])
        assert.deepStrictEqual(
          yield* s.claimPending({ ...sealed, token: 1, consumer: "c", minIdleMs: 0, count: 10 }),
          { next: "0-0", messages: [], deleted: [] },
        )
        assert.deepStrictEqual(yield* s.info(stream, 6), { length: 0, lastId: "0-0", groups: [] })
      }),
  )

  it.live(
    "setOwnerToken's createGroup: a first grant creates the group where missing; a later grant or a re-fence (false) never re-creates a vanished one, even where the token vanished too",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        yield* s.append(stream, 3, { k: "a" })
        const groups = () => Effect.map(s.info(stream, 3), (i) => i.groups.map((g) => g.name))
        // a re-fence of a token that vanished with its group: the token only
        yield* s.setOwnerToken({ ...base, token: 4, createGroup: false })
        assert.deepStrictEqual(yield* groups(), [])
        assert.strictEqual(yield* s.ownerToken(base), 4)
        assert.strictEqual(
          (yield* Effect.flip(s.read({ ...base, consumer: "c", token: 4, count: 10 })))._tag,
          "DataLost",
        )
        // the group's first grant (a token already there or not): created at 0
        yield* s.setOwnerToken({ ...base, token: 5, createGroup: true })
        assert.deepStrictEqual(yield* groups(), ["g"])
        assert.deepStrictEqual(
          (yield* s.read({ ...base, consumer: "c", token: 5, count: 10 })).map((m) => m.fields.k),
          ["a"],
        )
        // the stream and the token vanish; a re-fence does not bring an empty stream back
        yield* vanish().deleteStream(stream, 3)
        yield* vanish().deleteOwnerToken(stream, 3, "g")
        yield* s.setOwnerToken({ ...base, token: 5, createGroup: false })
        assert.deepStrictEqual(yield* s.info(stream, 3), { length: 0, lastId: "0-0", groups: [] })
        const lost = yield* Effect.flip(s.read({ ...base, consumer: "c", token: 5, count: 10 }))
        assert.strictEqual((lost as unknown as { readonly what: string }).what, "stream")
      }),
  )

  it.live(
    "setOwnerToken's createAt (a new group's startAt): the group is created at the end or after an id; a group that exists keeps its position",
    () =>
      Effect.gen(function* () {
        const s = subject()
        const { stream, base } = fresh()
        const before = yield* s.append(stream, 3, { k: "a" })
        yield* s.append(stream, 3, { k: "b" })
        const readK = (group: string, token: number) =>
          Effect.map(s.read({ ...base, group, consumer: "c", token, count: 10 }), (ms) =>
            ms.map((m) => m.fields.k),
          )
        // at the end: only what is appended after it
        yield* s.setOwnerToken({
          ...base,
          group: "late",
          token: 1,
          createGroup: true,
          createAt: "end",
        })
        // after an id: what follows it
        yield* s.setOwnerToken({
          ...base,
          group: "mid",
          token: 1,
          createGroup: true,
          createAt: before,
        })
        // an existing group (created at its start by an earlier first grant): kept where it is
        yield* s.setOwnerToken({ ...base, group: "kept", token: 1, createGroup: true })
        yield* s.setOwnerToken({
          ...base,
          group: "kept",
          token: 2,
          createGroup: true,
          createAt: "end",
        })
        yield* s.append(stream, 3, { k: "c" })
        assert.deepStrictEqual(yield* readK("late", 1), ["c"])
        assert.deepStrictEqual(yield* readK("mid", 1), ["b", "c"])
        assert.deepStrictEqual(yield* readK("kept", 2), ["a", "b", "c"])
      }),
  )
}
