import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import {
  Coordinator,
  CoordinatorLease,
  type CoordinatorRecord,
  inspectGroup,
  Store as PublicStore,
  toSnapshot,
} from "../src/index.js"
import { Store } from "../src/testing.js"
import { config, Harness, SimMember } from "./coordinator/harness.js"

const key = { stream: "orders", group: "g" }
const bump = (groupEpoch: number): Array<CoordinatorRecord> => [
  { _tag: "GroupEpochBumped", groupEpoch },
]

/** A created group with `commits` more commits; returns the store. */
const grown = (commits: number, compactEvery = 64) =>
  Effect.gen(function* () {
    const store = yield* Store.makeMemoryWith({ compactEvery })
    yield* store.commit(key, 0, Coordinator.createGroup(config(), 0))
    for (let i = 1; i <= commits; i++) yield* store.commit(key, i, bump(i))
    return store
  })

describe("Store (memory bytes + the shared decoder)", () => {
  it.effect("first commit creates the group; CAS on storeRevision rejects a stale commit", () =>
    Effect.gen(function* () {
      const store = yield* Store.makeMemory
      assert.isTrue(Option.isNone(yield* store.load(key)))
      const rev = yield* store.commit(key, 0, Coordinator.createGroup(config(), 0))
      assert.strictEqual(rev, 1)
      const stale = yield* Effect.flip(store.commit(key, 0, Coordinator.createGroup(config(), 0)))
      assert.strictEqual(stale._tag, "StaleRevision")
      assert.strictEqual(store.revision(key), 1)
    }),
  )

  it.effect(
    "rule 32: a commit fenced by a lease token that no longer holds the lease writes nothing (LeaseLost)",
    () =>
      Effect.gen(function* () {
        const lease = yield* CoordinatorLease.makeMemory
        const store = yield* Store.makeMemoryWith({ lease })
        const first = yield* lease.acquire(key, "c1", 1_000)
        yield* store.commit(key, 0, Coordinator.createGroup(config(), 0), first)
        yield* lease.release(first)
        const second = yield* lease.acquire(key, "c2", 1_000)
        // at the right revision, under the old token: refused, nothing written
        const fenced = yield* Effect.flip(store.commit(key, 1, bump(1), first))
        assert.strictEqual(fenced._tag, "LeaseLost")
        assert.strictEqual(store.revision(key), 1)
        // the holder's token commits; no fence is not checked (the port's default)
        assert.strictEqual(yield* store.commit(key, 1, bump(1), second), 2)
        assert.strictEqual(yield* store.commit(key, 2, bump(2)), 3)
        // a released lease holds for nobody
        yield* lease.release(second)
        assert.strictEqual(
          (yield* Effect.flip(store.commit(key, 3, bump(3), second)))._tag,
          "LeaseLost",
        )
      }),
  )

  it.effect("the first commit of a group must be GroupCreated, for that very group", () =>
    Effect.gen(function* () {
      const store = yield* Store.makeMemory
      const err = yield* Effect.flip(store.commit(key, 0, bump(1)))
      assert.strictEqual(err._tag, "CorruptSnapshot")
      const other = { stream: "payments", group: "g" }
      const foreign = yield* Effect.flip(
        store.commit(other, 0, Coordinator.createGroup(config(), 0)),
      )
      assert.strictEqual(foreign._tag, "CorruptSnapshot")
      assert.include(foreign.message, "not g on stream payments")
      assert.strictEqual(store.revision(other), 0)
    }),
  )

  it.effect("the public memory store is the same store without the hooks", () =>
    Effect.gen(function* () {
      const store = yield* PublicStore.makeMemory
      assert.strictEqual(yield* store.commit(key, 0, Coordinator.createGroup(config(), 0)), 1)
      assert.strictEqual(Option.getOrThrow(yield* store.load(key)).storeRevision, 1)
      assert.notProperty(store, "corrupt")
    }),
  )

  it.effect(
    "replaying committed records (across compactions) reproduces the coordinator state",
    () =>
      Effect.gen(function* () {
        const h = new Harness()
        const ms = ["a", "b", "c"].map((id) => new SimMember(id))
        for (let i = 0; i < 40; i++) for (const m of ms) m.onResponse(h.hb(m.request()).response)
        h.hb(ms[0]!.leaveRequest())
        for (let i = 0; i < 40; i++)
          for (const m of ms.slice(1)) m.onResponse(h.hb(m.request()).response)
        assert.deepStrictEqual(h.stored(), toSnapshot(h.state))
        assert.strictEqual(h.stored().storeRevision, h.commits.length)
      }),
  )

  it.effect("compaction: a snapshot every `compactEvery` batches; audit events go to the log", () =>
    Effect.gen(function* () {
      const store = yield* grown(9, 4)
      // revisions 1..10: compacted at 4 and 8, batches 9 and 10 after the snapshot
      const raw = store.raw(key)!
      assert.strictEqual(raw.revision, 10)
      assert.strictEqual(raw.batches.length, 2)
      assert.isDefined(raw.snapshot)
      assert.notInclude(raw.batches.join(""), "Audit")
      const snapshot = Option.getOrThrow(yield* store.load(key))
      assert.strictEqual(snapshot.storeRevision, 10)
      assert.strictEqual(snapshot.groupEpoch, 9)
      assert.deepStrictEqual(
        store.auditLog(key).map((e) => e.kind),
        ["GroupCreated"],
      )
    }),
  )

  it.effect("compaction never overwrites a newer revision", () =>
    Effect.gen(function* () {
      const store = yield* grown(2)
      const backend = store.backend
      // a commit lands between compaction's load and its snapshot write
      const racing = PublicStore.makeEncoded(
        {
          ...backend,
          replaceSnapshot: (k, revision, bytes) =>
            Effect.andThen(
              Effect.orDie(backend.append(k, revision, { records: "[]", audit: [] })),
              backend.replaceSnapshot(k, revision, bytes),
            ),
        },
        { compactEvery: 1 },
      )
      assert.strictEqual(yield* racing.commit(key, 3, bump(3)), 4)
      const raw = store.raw(key)!
      assert.strictEqual(raw.revision, 5)
      assert.isUndefined(raw.snapshot) // the stale compaction was refused
      assert.strictEqual(raw.batches.length, 5)
      const snapshot = Option.getOrThrow(yield* store.load(key))
      assert.strictEqual(snapshot.storeRevision, 5)
      assert.strictEqual(snapshot.groupEpoch, 3)
      assert.isFalse(yield* backend.replaceSnapshot(key, 4, "{}"))
    }),
  )

  it.effect(
    "a corrupt snapshot is a CorruptSnapshot and the stored bytes are never overwritten",
    () =>
      Effect.gen(function* () {
        const store = yield* Store.makeMemory
        yield* store.commit(key, 0, Coordinator.createGroup(config(), 0))
        store.corrupt(key, '{"version":1,"garbage":')
        const err = yield* Effect.flip(store.load(key))
        assert.strictEqual(err._tag, "CorruptSnapshot")
        for (let i = 0; i < 70; i++)
          yield* Effect.ignore(store.commit(key, store.revision(key), bump(1)))
        assert.strictEqual(store.raw(key)?.snapshot, '{"version":1,"garbage":')
        assert.strictEqual((yield* Effect.flip(store.load(key)))._tag, "CorruptSnapshot")
      }),
  )

  it.effect("a snapshot that decodes but is inconsistent is corrupt too", () =>
    Effect.gen(function* () {
      const store = yield* grown(0)
      const snapshot = Option.getOrThrow(yield* store.load(key))
      store.corrupt(key, JSON.stringify({ ...snapshot, target: [null] }))
      const err = yield* Effect.flip(store.load(key))
      assert.strictEqual(err._tag, "CorruptSnapshot")
      assert.include(err.message, "target has 1 entries")
    }),
  )

  it.effect("a snapshot of another version is corrupt, and left as it is", () =>
    Effect.gen(function* () {
      const store = yield* grown(0)
      const snapshot = Option.getOrThrow(yield* store.load(key))
      const future = JSON.stringify({ ...snapshot, version: snapshot.version + 100 })
      store.corrupt(key, future)
      const err = yield* Effect.flip(store.load(key))
      assert.strictEqual(err._tag, "CorruptSnapshot")
      assert.include(err.message, "snapshot")
      for (let i = 0; i < 70; i++)
        yield* Effect.ignore(store.commit(key, store.revision(key), bump(1)))
      assert.strictEqual(store.raw(key)?.snapshot, future)
    }),
  )

  it.effect("another group's snapshot stored under this key is foreign: corrupt", () =>
    Effect.gen(function* () {
      const store = yield* grown(0)
      const snapshot = Option.getOrThrow(yield* store.load(key))
      store.corrupt(
        key,
        JSON.stringify({ ...snapshot, config: { ...snapshot.config, stream: "payments" } }),
      )
      const err = yield* Effect.flip(store.load(key))
      assert.include(err.message, "g on stream payments, not g on stream orders")
    }),
  )

  it.effect("a corrupt batch: CorruptSnapshot naming its revision; never compacted away", () =>
    Effect.gen(function* () {
      const store = yield* grown(3, 8)
      store.corruptBatch(key, 2, '[{"_tag":"GroupEpochBumped","groupEpoch":"x"}]')
      const err = yield* Effect.flip(store.load(key))
      assert.strictEqual(err._tag, "CorruptSnapshot")
      assert.include(err.message, "batch at revision 3")
      // commits still append (the CAS needs no decoding) but compaction cannot replace bad bytes
      for (let i = 4; i <= 20; i++) yield* store.commit(key, i, bump(i))
      const raw = store.raw(key)!
      assert.isUndefined(raw.snapshot)
      assert.strictEqual(raw.batches.length, 21)
      assert.strictEqual((yield* Effect.flip(store.load(key)))._tag, "CorruptSnapshot")
    }),
  )

  it.effect("a snapshot whose revision does not add up with its batches is corrupt", () =>
    Effect.gen(function* () {
      const store = yield* grown(0)
      const snapshot = Option.getOrThrow(yield* store.load(key))
      store.corrupt(key, JSON.stringify(snapshot))
      assert.isTrue(Option.isSome(yield* store.load(key)))
      store.corrupt(key, JSON.stringify({ ...snapshot, storeRevision: 7 }))
      const err = yield* Effect.flip(store.load(key))
      assert.include(err.message, "snapshot is at revision 7, expected 1")
    }),
  )

  it.effect("inspectGroup reads snapshot and monitoring view without a coordinator", () =>
    Effect.gen(function* () {
      const h = new Harness()
      const ms = ["a", "b"].map((id) => new SimMember(id))
      for (let i = 0; i < 4; i++) for (const m of ms) m.onResponse(h.hb(m.request()).response)
      const stored = h.stored()
      const store = yield* Store.makeMemory
      yield* store.commit(key, 0, Coordinator.createGroup(config(), 0))
      assert.isTrue(
        Option.isNone(
          yield* inspectGroup({ stream: "orders", group: "nope" }).pipe(
            Effect.provideService(PublicStore.Store, store),
          ),
        ),
      )
      // the same bytes the harness store holds, under the harness's key
      const seen = yield* inspectGroup(key).pipe(
        Effect.provideService(PublicStore.Store, {
          load: () => Effect.succeed(Option.some(stored)),
          commit: () => Effect.die("read-only"),
        }),
      )
      const found = Option.getOrThrow(seen)
      assert.strictEqual(found.snapshot.storeRevision, stored.storeRevision)
      assert.deepStrictEqual(found.monitor.shardsPerMember, { a: 2, b: 2 })
      assert.strictEqual(found.monitor.rebalanceInProgress, false)
      // and it never writes
      const before = store.raw(key)
      yield* inspectGroup(key).pipe(Effect.provideService(PublicStore.Store, store))
      assert.deepStrictEqual(store.raw(key), before)
    }),
  )
})
