import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { ShardStreams } from "../src/index.js"

const { DeadLetterFields, deadLetterKey, shardKey } = ShardStreams

const S = "orders"
const base = { stream: S, shard: 3, group: "g" }

/**
 * The coordinator's grant of `address` (its owner token, written before any
 * member reads: docs/protocol.md rule 26), which also creates the group at 0.
 */
const grant = (
  s: ShardStreams.ShardStreamsShape,
  address: { readonly stream: string; readonly shard: number; readonly group: string } = base,
  token = 0,
) => s.setOwnerToken({ stream: address.stream, shard: address.shard, group: address.group, token })

/** Run with a fresh memory ShardStreams. */
const withStreams = <A, E>(f: (s: ShardStreams.ShardStreamsShape) => Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const streams = yield* ShardStreams.ShardStreams
    return yield* f(streams)
  }).pipe(Effect.provide(ShardStreams.layerMemory))

describe("ShardStreams (memory)", () => {
  it.effect("append gives monotonically increasing ms-seq ids from the Clock", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        yield* TestClock.setTime(1_000)
        const a = yield* s.append(S, 3, { k: "a" })
        const b = yield* s.append(S, 3, { k: "b" })
        yield* TestClock.adjust(5)
        const c = yield* s.append(S, 3, { k: "c" })
        assert.deepStrictEqual([a, b, c], ["1000-0", "1000-1", "1005-0"])
        // the clock going backwards never makes ids go backwards
        yield* TestClock.setTime(10)
        assert.strictEqual(yield* s.append(S, 3, { k: "d" }), "1005-1")
        const info = yield* s.info(S, 3)
        assert.strictEqual(info.length, 4)
        assert.strictEqual(info.lastId, "1005-1")
        assert.deepStrictEqual(
          (yield* s.range(shardKey(S, 3))).map((e) => e.fields.k),
          ["a", "b", "c", "d"],
        )
      }),
    ),
  )

  it.effect("read returns a batch in stream order and records it pending for the consumer", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        yield* grant(s)
        for (const k of ["a", "b", "c"]) yield* s.append(S, 3, { k })
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
          pending.map((p) => [p.consumer, p.deliveryCount]),
          [
            ["c1", 1],
            ["c1", 1],
            ["c1", 1],
          ],
        )
      }),
    ),
  )

  it.effect("setOwnerToken refuses to lower the token", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        yield* s.setOwnerToken({ ...base, token: 5 })
        yield* s.setOwnerToken({ ...base, token: 5 })
        const error = yield* Effect.flip(s.setOwnerToken({ ...base, token: 4 }))
        assert.strictEqual(error._tag, "OwnerTokenRegression")
        assert.strictEqual(yield* s.ownerToken(base), 5)
      }),
    ),
  )

  it.effect(
    "a stale token is refused for read, ack, nack, claim and deadLetter; nothing changes",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* s.append(S, 3, { k: "a" })
          yield* s.setOwnerToken({ ...base, token: 1 })
          const [m] = yield* s.read({ ...base, consumer: "old", token: 1, count: 10 })
          yield* s.setOwnerToken({ ...base, token: 2 })
          yield* s.append(S, 3, { k: "b" })
          const stale = { ...base, token: 1 }
          const errors = [
            yield* Effect.flip(s.read({ ...stale, consumer: "old", count: 10 })),
            yield* Effect.flip(s.ack({ ...stale, ids: [m!.id], mode: "ack" })),
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
          // nothing changed: still pending once, "b" still undelivered
          const pending = yield* s.pending(base)
          assert.deepStrictEqual(
            pending.map((p) => [p.id, p.consumer, p.deliveryCount]),
            [[m!.id, "old", 1]],
          )
          assert.deepStrictEqual(yield* s.range(deadLetterKey(S, 3)), [])
          const fresh = yield* s.read({ ...base, consumer: "new", token: 2, count: 10 })
          assert.deepStrictEqual(
            fresh.map((x) => x.fields.k),
            ["b"],
          )
        }),
      ),
  )

  it.effect("xackdel deletes only the entries it acknowledged (as XACKDEL)", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        yield* grant(s)
        for (const k of ["a", "b", "c"]) yield* s.append(S, 3, { k })
        const [a] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
        const ids = (yield* s.range(shardKey(S, 3))).map((e) => e.id)
        // a is pending; b and c were never delivered to the group
        assert.strictEqual(yield* s.ack({ ...base, token: 0, ids, mode: "xackdel" }), 1)
        assert.deepStrictEqual(
          (yield* s.range(shardKey(S, 3))).map((e) => e.id),
          ids.filter((id) => id !== a!.id),
        )
        // another group's pending entry is not deleted by this group's xackdel
        yield* grant(s, { ...base, group: "other" })
        const [b] = yield* s.read({ ...base, group: "other", consumer: "x", token: 0, count: 1 })
        assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [b!.id], mode: "xackdel" }), 0)
        assert.strictEqual((yield* s.info(S, 3)).length, 2)
      }),
    ),
  )

  it.effect(
    "fan-out: xackdel deletes an entry only once every group of the stream acknowledged it (XACKDEL ACKED)",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          const a = { ...base, group: "a", consumer: "ca", token: 0 }
          const b = { ...base, group: "b", consumer: "cb", token: 0 }
          const keys = () => Effect.map(s.range(shardKey(S, 3)), (r) => r.map((e) => e.fields.k))
          yield* grant(s, a)
          yield* grant(s, b)
          // B exists and has not read: A's xackdel acks (count 2) and keeps both
          yield* s.read({ ...b, count: 10 })
          for (const k of ["1", "2"]) yield* s.append(S, 3, { k })
          const a1 = yield* s.read({ ...a, count: 10 })
          assert.strictEqual(yield* s.ack({ ...a, ids: a1.map((m) => m.id), mode: "xackdel" }), 2)
          assert.deepStrictEqual(yield* keys(), ["1", "2"])
          // B reads (pending): A acking again changes nothing, B's retry still sees them
          const b1 = yield* s.read({ ...b, count: 10 })
          assert.deepStrictEqual(
            (yield* s.read({ ...b, count: 10, from: "pending" })).map((m) => m.fields.k),
            ["1", "2"],
          )
          // B acks 1 with xackdel (every group done: deleted), 2 plainly (kept)
          yield* s.ack({ ...b, ids: [b1[0]!.id], mode: "xackdel" })
          yield* s.ack({ ...b, ids: [b1[1]!.id], mode: "ack" })
          assert.deepStrictEqual(yield* keys(), ["2"])
          // C created after A read 3, at the start: 3 stays for it
          yield* s.append(S, 3, { k: "3" })
          const [three] = yield* s.read({ ...a, count: 10 })
          yield* grant(s, { ...base, group: "c" })
          yield* s.setGroupPosition!({ ...base, group: "c", token: 0, position: "start" })
          yield* s.read({ ...a, count: 10, ack: { ids: [three!.id], mode: "xackdel" } })
          assert.deepStrictEqual(
            (yield* s.read({ ...base, group: "c", consumer: "cc", token: 0, count: 10 })).map(
              (m) => m.fields.k,
            ),
            ["2", "3"],
          )
        }),
      ),
  )

  it.effect("ack removes from the PEL and keeps the entry; xackdel also deletes the entry", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        yield* grant(s)
        for (const k of ["a", "b"]) yield* s.append(S, 3, { k })
        const [a, b] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 10 })
        assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [a!.id], mode: "ack" }), 1)
        assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [a!.id], mode: "ack" }), 0)
        assert.strictEqual((yield* s.info(S, 3)).length, 2)
        assert.strictEqual(yield* s.ack({ ...base, token: 0, ids: [b!.id], mode: "xackdel" }), 1)
        assert.deepStrictEqual(
          (yield* s.range(shardKey(S, 3))).map((e) => e.id),
          [a!.id],
        )
        assert.deepStrictEqual(yield* s.pending(base), [])
        const bad = yield* Effect.flip(s.ack({ ...base, token: 0, ids: ["nope"], mode: "ack" }))
        assert.strictEqual(bad._tag, "InvalidEntryId")
      }),
    ),
  )

  it.effect(
    "nothing is lost when a handler fails: nack keeps it pending, redelivered with count+1",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* grant(s)
          yield* s.append(S, 3, { k: "a" })
          const [m] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
          yield* TestClock.adjust(50)
          assert.isTrue(yield* s.nack({ ...base, token: 0, id: m!.id }))
          const [p] = yield* s.pending(base)
          assert.strictEqual(p!.deliveryCount, 2)
          assert.strictEqual(p!.idleMs, 0)
          // not handed out again as a new entry, but retried from the consumer's pending list
          assert.deepStrictEqual(
            yield* s.read({ ...base, consumer: "c1", token: 0, count: 10 }),
            [],
          )
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
          assert.isFalse(yield* s.nack({ ...base, token: 0, id: "9-9" }))
        }),
      ),
  )

  it.effect(
    "claimPending moves idle pending entries to the new consumer with deliveryCount+1",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          for (const k of ["a", "b", "c"]) yield* s.append(S, 3, { k })
          yield* s.setOwnerToken({ ...base, token: 1 })
          yield* s.read({ ...base, consumer: "old", token: 1, count: 2 })
          yield* TestClock.adjust(1_000)
          yield* s.setOwnerToken({ ...base, token: 2 })
          // not idle long enough: nothing moves
          const early = yield* s.claimPending({
            ...base,
            token: 2,
            consumer: "new",
            minIdleMs: 5_000,
            count: 10,
          })
          assert.deepStrictEqual(early.messages, [])
          const claimed = yield* s.claimPending({
            ...base,
            token: 2,
            consumer: "new",
            minIdleMs: 500,
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
          const pending = yield* s.pending(base)
          assert.deepStrictEqual(
            pending.map((p) => [p.consumer, p.deliveryCount, p.idleMs]),
            [
              ["new", 2, 0],
              ["new", 2, 0],
            ],
          )
          // then new entries
          const fresh = yield* s.read({ ...base, consumer: "new", token: 2, count: 10 })
          assert.deepStrictEqual(
            fresh.map((m) => m.fields.k),
            ["c"],
          )
        }),
      ),
  )

  it.effect(
    "claimPending pages with a cursor and reports pending entries deleted from the stream",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* grant(s)
          for (const k of ["a", "b", "c"]) yield* s.append(S, 3, { k })
          const read = yield* s.read({ ...base, consumer: "old", token: 0, count: 10 })
          // a producer's trim (MINID) drops "a", still pending in the group:
          // a dangling reference (no group's ack ever deletes a pending entry)
          yield* s.append(S, 3, { k: "d" }, { trim: { minId: read[1]!.id } })
          const page1 = yield* s.claimPending({
            ...base,
            token: 0,
            consumer: "new",
            minIdleMs: 0,
            count: 1,
          })
          assert.deepStrictEqual(page1.deleted, [read[0]!.id])
          assert.deepStrictEqual(
            page1.messages.map((m) => m.fields.k),
            ["b"],
          )
          assert.strictEqual(page1.next, read[2]!.id)
          const page2 = yield* s.claimPending({
            ...base,
            token: 0,
            consumer: "new",
            minIdleMs: 0,
            count: 1,
            start: page1.next,
          })
          assert.deepStrictEqual(page2.deleted, [])
          assert.deepStrictEqual(
            page2.messages.map((m) => m.fields.k),
            ["c"],
          )
          assert.strictEqual(page2.next, "0-0")
          assert.strictEqual((yield* s.pending(base)).length, 2)
        }),
      ),
  )

  it.effect(
    "deadLetter moves the entry to <shard>:dlq atomically with its ack: never lost, never both",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* grant(s)
          yield* s.append(S, 3, { k: "poison" })
          const [m] = yield* s.read({ ...base, consumer: "c1", token: 0, count: 1 })
          yield* s.nack({ ...base, token: 0, id: m!.id })
          const dlqId = yield* s.deadLetter({
            ...base,
            token: 0,
            id: m!.id,
            reason: "max deliveries",
          })
          assert.isDefined(dlqId)
          const dlq = yield* s.range(deadLetterKey(S, 3))
          assert.strictEqual(dlq.length, 1)
          assert.deepStrictEqual(dlq[0]!.fields, {
            k: "poison",
            [DeadLetterFields.originalId]: m!.id,
            [DeadLetterFields.reason]: "max deliveries",
            [DeadLetterFields.group]: "g",
            [DeadLetterFields.deliveryCount]: "2",
          })
          assert.deepStrictEqual(yield* s.pending(base), [])
          // a second dead-letter of the same entry does nothing (not pending any more)
          assert.isUndefined(yield* s.deadLetter({ ...base, token: 0, id: m!.id, reason: "again" }))
          assert.strictEqual((yield* s.range(deadLetterKey(S, 3))).length, 1)
          assert.strictEqual(deadLetterKey(S, 3), "{orders:3}:dlq")
        }),
      ),
  )

  it.effect("consumer groups are independent and shards are separate streams", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        yield* grant(s, { ...base, shard: 0, group: "g1" })
        yield* grant(s, { ...base, shard: 0, group: "g2" })
        yield* s.append(S, 0, { k: "zero" })
        yield* s.append(S, 1, { k: "one" })
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
        const info = yield* s.info(S, 0)
        assert.deepStrictEqual(
          info.groups.map((g) => [g.name, g.pending]),
          [
            ["g1", 1],
            ["g2", 1],
          ],
        )
      }),
    ),
  )

  it.effect(
    "owner tokens are per (shard, group): groups sharing a stream never fence each other",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          const g1 = { ...base, group: "g1" }
          const g2 = { ...base, group: "g2" }
          for (const k of ["a", "b"]) yield* s.append(S, 3, { k })
          yield* s.setOwnerToken({ ...g1, token: 7 })
          // g2's coordinator starts at token 1: no regression, g1 untouched
          yield* s.setOwnerToken({ ...g2, token: 1 })
          assert.strictEqual(yield* s.ownerToken(g1), 7)
          assert.strictEqual(yield* s.ownerToken(g2), 1)
          // each group's owner reads and acks with its own token
          const r1 = yield* s.read({ ...g1, consumer: "x", token: 7, count: 10 })
          const r2 = yield* s.read({ ...g2, consumer: "y", token: 1, count: 10 })
          assert.strictEqual(yield* s.ack({ ...g1, token: 7, ids: [r1[0]!.id], mode: "ack" }), 1)
          assert.strictEqual(yield* s.ack({ ...g2, token: 1, ids: [r2[0]!.id], mode: "ack" }), 1)
          // g1's token is no fence for g2, and the other way round
          const stale = yield* Effect.flip(s.read({ ...g1, consumer: "x", token: 1, count: 1 }))
          assert.strictEqual(stale._tag, "StaleOwner")
          if (stale._tag === "StaleOwner")
            assert.deepStrictEqual([stale.group, stale.currentToken], ["g1", 7])
          assert.strictEqual(ShardStreams.ownerTokenKey(S, 3, "g1"), "{orders:3}:owner:g1")
          const info = yield* s.info(S, 3)
          assert.deepStrictEqual(
            info.groups.map((g) => [g.name, g.ownerToken]),
            [
              ["g1", 7],
              ["g2", 1],
            ],
          )
        }),
      ),
  )
})

describe("ShardStreams (memory): wake-up, takeover read, seal and drain", () => {
  it.effect(
    "waitForEntries: true at once when entries wait, on the next append, false on timeout",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          assert.isFalse(yield* s.waitForEntries({ ...base, timeoutMs: 0 }))
          const waiting = yield* Effect.forkChild(s.waitForEntries({ ...base, timeoutMs: 1_000 }))
          yield* TestClock.adjust(10)
          yield* s.append(S, 3, { k: "a" })
          assert.isTrue(yield* Fiber.join(waiting))
          assert.isTrue(yield* s.waitForEntries({ ...base, timeoutMs: 1_000 }))
          yield* grant(s)
          yield* s.read({ ...base, consumer: "c", token: 0, count: 10 })
          const idle = yield* Effect.forkChild(s.waitForEntries({ ...base, timeoutMs: 1_000 }))
          yield* TestClock.adjust(1_000)
          assert.isFalse(yield* Fiber.join(idle))
          // another shard's append does not wake it
          const other = yield* Effect.forkChild(s.waitForEntries({ ...base, timeoutMs: 500 }))
          yield* s.append(S, 4, { k: "b" })
          yield* TestClock.adjust(500)
          assert.isFalse(yield* Fiber.join(other))
        }),
      ),
  )

  it.effect(
    "a takeover read re-delivers idle pending entries of any consumer first, then new ones",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* grant(s, base, 1)
          for (const k of ["a", "b", "c"]) yield* s.append(S, 3, { k })
          yield* s.read({ ...base, consumer: "old", token: 1, count: 2 })
          yield* TestClock.adjust(5_000)
          yield* grant(s, base, 2)
          const batch = yield* s.read({
            ...base,
            consumer: "new",
            token: 2,
            count: 10,
            claimIdleMs: 1_000,
          })
          assert.deepStrictEqual(
            batch.map((m) => [m.fields.k, m.deliveryCount]),
            [
              ["a", 2],
              ["b", 2],
              ["c", 1],
            ],
          )
          const pending = yield* s.pending(base)
          assert.deepStrictEqual([...new Set(pending.map((p) => p.consumer))], ["new"])
        }),
      ),
  )

  it.effect(
    "a sealed shard refuses appends (ShardSealed) and is drained once everything is acked",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* s.append(S, 3, { k: "a" })
          yield* s.append(S, 3, { k: "b" })
          assert.deepStrictEqual(yield* s.drainState(base), {
            sealed: false,
            undelivered: 2,
            pending: 0,
            drained: false,
          })
          yield* s.seal(S, 3)
          yield* s.seal(S, 3) // idempotent
          const refused = yield* Effect.flip(s.append(S, 3, { k: "late" }))
          assert.strictEqual(refused._tag, "ShardSealed")
          assert.strictEqual((yield* s.info(S, 3)).length, 2)
          yield* grant(s)
          const batch = yield* s.read({ ...base, consumer: "c", token: 0, count: 1 })
          assert.deepStrictEqual(yield* s.drainState(base), {
            sealed: true,
            undelivered: 1,
            pending: 1,
            drained: false,
          })
          yield* s.ack({ ...base, token: 0, ids: batch.map((m) => m.id), mode: "ack" })
          const rest = yield* s.read({ ...base, consumer: "c", token: 0, count: 10 })
          yield* s.ack({ ...base, token: 0, ids: rest.map((m) => m.id), mode: "xackdel" })
          assert.deepStrictEqual(yield* s.drainState(base), {
            sealed: true,
            undelivered: 0,
            pending: 0,
            drained: true,
          })
          // drained is per group: another group has everything still to read
          assert.isFalse((yield* s.drainState({ ...base, group: "other" })).drained)
          // other shards are not sealed
          assert.isString(yield* s.append(S, 4, { k: "ok" }))
        }),
      ),
  )
})

describe("ShardStreams (memory): seek, trimming and idempotent appends", () => {
  it.effect(
    "setGroupPosition moves the group's read position (start, end, an id), fenced by the token, and wakes waiters",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          yield* s.setOwnerToken({ ...base, token: 2 })
          const ids: Array<string> = []
          for (const k of ["a", "b", "c"]) ids.push(yield* s.append(S, 3, { k }))
          yield* s.setGroupPosition!({ ...base, token: 2, position: "end" })
          assert.deepStrictEqual(yield* s.read({ ...base, consumer: "c", token: 2, count: 10 }), [])
          const waiting = yield* Effect.forkChild(s.waitForEntries({ ...base, timeoutMs: 1_000 }))
          yield* TestClock.adjust(10)
          yield* s.setGroupPosition!({ ...base, token: 2, position: ids[0]! })
          assert.isTrue(yield* Fiber.join(waiting))
          const after = yield* s.read({ ...base, consumer: "c", token: 2, count: 10 })
          assert.deepStrictEqual(
            after.map((m) => m.fields.k),
            ["b", "c"],
          )
          yield* s.setGroupPosition!({ ...base, token: 2, position: "start" })
          assert.strictEqual((yield* s.drainState(base)).undelivered, 3)
          // pending entries stay pending (XGROUP SETID keeps the PEL)
          assert.strictEqual((yield* s.pending(base)).length, 2)
          const stale = yield* Effect.flip(
            s.setGroupPosition!({ ...base, token: 1, position: "end" }),
          )
          assert.strictEqual(stale._tag, "StaleOwner")
          assert.strictEqual((yield* s.drainState(base)).undelivered, 3)
          const bad = yield* Effect.flip(
            s.setGroupPosition!({ ...base, token: 2, position: "nonsense" }),
          )
          assert.strictEqual(bad._tag, "InvalidEntryId")
        }),
      ),
  )

  it.effect("append trims by MAXLEN or MINID", () =>
    withStreams((s) =>
      Effect.gen(function* () {
        const ids: Array<string> = []
        for (const k of ["a", "b", "c", "d"])
          ids.push(yield* s.append(S, 3, { k }, { trim: { maxLen: 2, approximate: true } }))
        assert.deepStrictEqual(
          (yield* s.range(shardKey(S, 3))).map((e) => e.fields.k),
          ["c", "d"],
        )
        yield* s.append(S, 3, { k: "e" }, { trim: { minId: ids[3]! } })
        assert.deepStrictEqual(
          (yield* s.range(shardKey(S, 3))).map((e) => e.fields.k),
          ["d", "e"],
        )
      }),
    ),
  )

  it.effect(
    "an idempotent append retried on a sealed shard returns its first id while the window holds it, then ShardSealed",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          const idem = { producerId: "p1", messageId: "order-1" }
          const first = yield* s.append(S, 3, { k: "a" }, { idempotency: idem })
          yield* s.seal(S, 3)
          assert.strictEqual(yield* s.append(S, 3, { k: "a" }, { idempotency: idem }), first)
          const other = yield* Effect.flip(
            s.append(S, 3, { k: "a" }, { idempotency: { ...idem, messageId: "order-2" } }),
          )
          assert.strictEqual(other._tag, "ShardSealed")
          // past the window the retry is an append like any other: refused
          yield* TestClock.adjust(ShardStreams.IDEMPOTENCY_WINDOW.durationMs)
          const late = yield* Effect.flip(s.append(S, 3, { k: "a" }, { idempotency: idem }))
          assert.strictEqual(late._tag, "ShardSealed")
          assert.strictEqual((yield* s.info(S, 3)).length, 1)
        }),
      ),
  )

  it.effect(
    "an idempotent append seen within the window adds nothing and returns the first id",
    () =>
      withStreams((s) =>
        Effect.gen(function* () {
          const idem = { producerId: "p1", messageId: "7" }
          const first = yield* s.append(S, 3, { k: "a" }, { idempotency: idem })
          const again = yield* s.append(S, 3, { k: "a" }, { idempotency: idem })
          assert.strictEqual(again, first)
          // another producer, or another shard, is another window
          const other = yield* s.append(
            S,
            3,
            { k: "a" },
            { idempotency: { ...idem, producerId: "p2" } },
          )
          assert.notStrictEqual(other, first)
          yield* s.append(S, 4, { k: "a" }, { idempotency: idem })
          assert.strictEqual((yield* s.info(S, 3)).length, 2)
          // past the window's duration the id may be reused
          yield* TestClock.adjust(ShardStreams.IDEMPOTENCY_WINDOW.durationMs)
          const later = yield* s.append(S, 3, { k: "a" }, { idempotency: idem })
          assert.notStrictEqual(later, first)
          // the window keeps at most maxSize ids per producer: the oldest is forgotten
          for (let i = 0; i < ShardStreams.IDEMPOTENCY_WINDOW.maxSize; i++)
            yield* s.append(
              S,
              5,
              { i: String(i) },
              { idempotency: { producerId: "p", messageId: String(i) } },
            )
          yield* s.append(S, 5, { i: "0" }, { idempotency: { producerId: "p", messageId: "0" } })
          assert.strictEqual((yield* s.info(S, 5)).length, ShardStreams.IDEMPOTENCY_WINDOW.maxSize)
          yield* s.append(S, 5, { i: "x" }, { idempotency: { producerId: "p", messageId: "x" } })
          yield* s.append(S, 5, { i: "0" }, { idempotency: { producerId: "p", messageId: "0" } })
          assert.strictEqual(
            (yield* s.info(S, 5)).length,
            ShardStreams.IDEMPOTENCY_WINDOW.maxSize + 2,
          )
        }),
      ),
  )
})
