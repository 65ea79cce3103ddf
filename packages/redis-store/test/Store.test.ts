/**
 * The Store contract on core's memory bytes and on the Redis bytes of every
 * target (each behind core's one decoder), then what only a real store can
 * get: foreign values, truncated JSON and a wrong schema version under our
 * keys. Each is a CorruptSnapshot, and nothing is overwritten.
 */
import { assert, it } from "@effect/vitest"
import { Coordinator, type GroupKey, SnapshotJson, Store } from "@shardline/core"
import { Store as TestingStore } from "@shardline/core/testing"
import { Effect, Option, Schema } from "effect"
import { defaultKeys } from "../src/keys.js"
import * as RedisCoordinatorLease from "../src/RedisCoordinatorLease.js"
import * as RedisStore from "../src/RedisStore.js"
import { bump, configFor, type StoreSubject, storeContract } from "./contract/Store.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"

const {
  auditKey,
  groupBase: groupTag,
  storeBatchesKey,
  storeRevisionKey,
  storeSnapshotKey,
} = defaultKeys

const encodeSnapshotForTest = Schema.encodeSync(SnapshotJson)

describeTarget(
  "Store contract",
  { name: "memory (core)" },
  Effect.sync((): StoreSubject => {
    const memory = TestingStore.makeMemoryUnsafe()
    return {
      backend: memory.backend,
      audit: (key) => Effect.sync(() => memory.backend.audit(key)),
    }
  }),
  (subject) => storeContract(subject),
)

for (const target of redisTargets()) {
  const acquire = Effect.map(connect(target), (connection) => ({
    connection,
    backend: RedisStore.makeEncodedWith(connection, { auditMaxLen: 1_000 }),
    audit: (key: GroupKey) =>
      Effect.map(RedisStore.auditEvents(connection, key, 10_000), (events) =>
        events.map((e) => e.event),
      ),
  }))

  describeTarget("Store contract", target, acquire, (subject) => storeContract(subject))

  describeTarget("Store lease fence (docs/protocol.md rule 32)", target, acquire, (subject) => {
    it.live(
      "a commit whose token no longer holds the lease key writes nothing (LeaseLost); the holder's commits",
      () =>
        Effect.gen(function* () {
          const { connection, backend } = subject()
          const store = Store.makeEncoded(backend)
          const leases = RedisCoordinatorLease.makeWith(connection)
          const key = { stream: unique("fence"), group: "g" }
          const first = yield* leases.acquire(key, "c1", 60_000)
          assert.strictEqual(
            yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0), first),
            1,
          )
          yield* leases.release(first)
          const stored = () =>
            Effect.promise(() =>
              Promise.all([
                connection.client.get(storeRevisionKey(key)),
                connection.client.llen(storeBatchesKey(key)),
                connection.client.xlen(auditKey(key)),
              ]),
            )
          // no lease key at all: refused
          const absent = yield* Effect.flip(store.commit(key, 1, bump(1), first))
          assert.strictEqual(absent._tag, "LeaseLost")
          const second = yield* leases.acquire(key, "c2", 60_000)
          const before = yield* stored()
          // the lease key holds another token: refused at the right revision, nothing written
          const taken = yield* Effect.flip(store.commit(key, 1, bump(1), first))
          assert.strictEqual(taken._tag, "LeaseLost")
          assert.deepStrictEqual(yield* stored(), before)
          // the same token under another holder's name is not the lease either
          const renamed = yield* Effect.flip(
            store.commit(key, 1, bump(1), { holder: "c1", token: second.token }),
          )
          assert.strictEqual(renamed._tag, "LeaseLost")
          assert.deepStrictEqual(yield* stored(), before)
          // the holder's token commits (and a StaleRevision is still one)
          assert.strictEqual(yield* store.commit(key, 1, bump(1), second), 2)
          const stale = yield* Effect.flip(store.commit(key, 1, bump(1), second))
          assert.strictEqual(stale._tag, "StaleRevision")
          assert.strictEqual((yield* stored())[0], "2")
          // a lease key of the wrong type is foreign: CorruptSnapshot, nothing written
          yield* leases.release(second)
          yield* Effect.promise(() => connection.client.set(connection.keys.leaseKey(key), "x"))
          const foreign = yield* Effect.flip(store.commit(key, 2, bump(2), second))
          assert.strictEqual(foreign._tag, "CorruptSnapshot")
          assert.strictEqual((yield* stored())[0], "2")
        }),
    )
  })

  describeTarget("Store bad input", target, acquire, (subject) => {
    const raw = () => subject().connection.client
    const store = () => Store.makeEncoded(subject().backend)
    const created = Effect.gen(function* () {
      const key = { stream: unique("bad"), group: "g" }
      yield* store().commit(key, 0, Coordinator.createGroup(configFor(key), 0))
      yield* store().commit(key, 1, bump(1))
      return key
    })
    /** Every key of the group, as stored (to check nothing was overwritten). */
    const dump = (key: GroupKey) =>
      Effect.promise(async () => {
        const c = raw()
        const out: Record<string, unknown> = {}
        for (const k of [storeRevisionKey(key), storeSnapshotKey(key), storeBatchesKey(key)]) {
          const type = await c.type(k)
          out[k] =
            type === "string"
              ? await c.get(k)
              : type === "list"
                ? await c.lrange(k, 0, -1)
                : type === "hash"
                  ? await c.hgetall(k)
                  : type
        }
        out.audit = await c.xlen(auditKey(key)).catch((e: Error) => e.message)
        return out
      })
    /** load and commit both fail CorruptSnapshot; nothing changes. */
    /**
     * Foreign keys: load and commit both fail CorruptSnapshot, nothing changes.
     * Bytes that do not decode: load fails CorruptSnapshot (so no coordinator
     * is ever elected on them); a blind commit (no load first) only appends a
     * batch, compaction never runs from them, and the bytes stay as they are.
     */
    const refused = (key: GroupKey, expected: number, message: string, foreignKeys: boolean) =>
      Effect.gen(function* () {
        const before = yield* dump(key)
        const loaded = yield* Effect.flip(store().load(key))
        assert.strictEqual(loaded._tag, "CorruptSnapshot")
        assert.include(loaded.message, message)
        assert.deepStrictEqual(yield* dump(key), before)
        if (foreignKeys) {
          const committed = yield* Effect.flip(store().commit(key, expected, bump(7)))
          assert.strictEqual(committed._tag, "CorruptSnapshot")
          const replaced = yield* Effect.result(
            subject().backend.replaceSnapshot(key, expected, "{}"),
          )
          assert.isFalse(replaced._tag === "Success" && replaced.success)
          assert.deepStrictEqual(yield* dump(key), before)
          return
        }
        // commits past the compaction threshold: compaction loads, fails, writes nothing
        const compacting = Store.makeEncoded(subject().backend, { compactEvery: 2 })
        for (let i = 0; i < 3; i++) yield* compacting.commit(key, expected + i, bump(7 + i))
        const after = yield* dump(key)
        const snapshotKey = storeSnapshotKey(key)
        const batchesKey = storeBatchesKey(key)
        assert.strictEqual(after[snapshotKey], before[snapshotKey])
        const list = (v: unknown): Array<string> => (Array.isArray(v) ? v : [])
        const kept = list(before[batchesKey])
        assert.deepStrictEqual(list(after[batchesKey]).slice(0, kept.length), kept)
        assert.strictEqual((yield* Effect.flip(store().load(key)))._tag, "CorruptSnapshot")
      })

    it.live("a foreign value under each of the group's keys: CorruptSnapshot, left as is", () =>
      Effect.gen(function* () {
        for (const [name, plant] of [
          ["revision as a list", (k: GroupKey) => raw().rpush(storeRevisionKey(k), "x")],
          ["revision not an integer", (k: GroupKey) => raw().set(storeRevisionKey(k), "two")],
          ["snapshot as a hash", (k: GroupKey) => raw().hset(storeSnapshotKey(k), "a", "b")],
          ["batches as a string", (k: GroupKey) => raw().set(storeBatchesKey(k), "x")],
          ["audit as a list", (k: GroupKey) => raw().rpush(auditKey(k), "x")],
        ] as ReadonlyArray<readonly [string, (k: GroupKey) => Promise<unknown>]>) {
          const key = yield* created
          const target = name.startsWith("revision")
            ? storeRevisionKey(key)
            : name.startsWith("snapshot")
              ? storeSnapshotKey(key)
              : name.startsWith("batches")
                ? storeBatchesKey(key)
                : auditKey(key)
          yield* Effect.promise(() =>
            raw()
              .del(target)
              .then(() => plant(key)),
          )
          if (name.startsWith("audit")) {
            // the audit stream is only written by commits: load still works
            assert.isTrue(Option.isSome(yield* store().load(key)))
            const before = yield* dump(key)
            assert.strictEqual(
              (yield* Effect.flip(store().commit(key, 2, bump(2))))._tag,
              "CorruptSnapshot",
            )
            assert.deepStrictEqual(yield* dump(key), before)
          } else yield* refused(key, 2, "", true)
        }
      }),
    )

    it.live("batches without a revision are foreign (someone deleted the revision)", () =>
      Effect.gen(function* () {
        const key = yield* created
        yield* Effect.promise(() => raw().del(storeRevisionKey(key)))
        yield* refused(key, 0, "without a revision", true)
      }),
    )

    it.live("truncated JSON in a batch and in the snapshot: CorruptSnapshot naming it", () =>
      Effect.gen(function* () {
        const key = yield* created
        const batches = yield* Effect.promise(() => raw().lrange(storeBatchesKey(key), 0, -1))
        yield* Effect.promise(() => raw().lset(storeBatchesKey(key), 1, batches[1]!.slice(0, 10)))
        yield* refused(key, 2, "batch at revision 2", false)
        // a compacted group whose snapshot is cut short
        const other = yield* created
        yield* store().commit(other, 2, bump(2))
        const loaded = Option.getOrThrow(yield* store().load(other))
        assert.isTrue(
          yield* subject().backend.replaceSnapshot(other, 3, encodeSnapshotForTest(loaded)),
        )
        const snapshot = yield* Effect.promise(() => raw().get(storeSnapshotKey(other)))
        yield* Effect.promise(() =>
          raw().set(storeSnapshotKey(other), snapshot!.slice(0, snapshot!.length / 2)),
        )
        yield* refused(other, 3, "snapshot", false)
      }),
    )

    it.live("a snapshot of another schema version: CorruptSnapshot, left as is", () =>
      Effect.gen(function* () {
        const key = yield* created
        const loaded = Option.getOrThrow(yield* store().load(key))
        const json = JSON.parse(encodeSnapshotForTest(loaded)) as Record<string, unknown>
        yield* Effect.promise(() =>
          raw().set(storeSnapshotKey(key), JSON.stringify({ ...json, version: 99 })),
        )
        yield* Effect.promise(() => raw().del(storeBatchesKey(key)))
        yield* refused(key, 2, "snapshot", false)
      }),
    )

    it.live("keys live in the group's slot: shardline:group:{<stream>:<group>}", () =>
      Effect.sync(() => {
        const key = { stream: "orders", group: "workers" }
        for (const k of [
          storeRevisionKey(key),
          storeSnapshotKey(key),
          storeBatchesKey(key),
          auditKey(key),
        ])
          assert.isTrue(k.startsWith(groupTag(key)))
        assert.strictEqual(storeRevisionKey(key), "shardline:group:{orders:workers}:store:revision")
      }),
    )

    it.live("the audit stream is capped (MAXLEN ~)", () =>
      Effect.gen(function* () {
        const backend = RedisStore.makeEncodedWith(subject().connection, { auditMaxLen: 10 })
        const capped = Store.makeEncoded(backend)
        const key = { stream: unique("cap"), group: "g" }
        yield* capped.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
        for (let i = 1; i <= 300; i++) yield* capped.commit(key, i, bump(i))
        const length = yield* Effect.promise(() => raw().xlen(auditKey(key)))
        assert.isBelow(length, 200)
        assert.isAtLeast(length, 10)
      }),
    )
  })
}
