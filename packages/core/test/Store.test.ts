import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { Coordinator, type CoordinatorRecord, Store, toSnapshot } from "../src/index.js"
import { config, Harness, SimMember } from "./coordinator/harness.js"

describe("Store (memory)", () => {
  it.effect("first commit creates the group; CAS on storeRevision rejects a stale commit", () =>
    Effect.gen(function* () {
      const store = yield* Store.makeMemory
      assert.isTrue(Option.isNone(yield* store.load("g")))
      const rev = yield* store.commit("g", 0, Coordinator.createGroup(config(), 0))
      assert.strictEqual(rev, 1)
      const stale = yield* Effect.flip(store.commit("g", 0, Coordinator.createGroup(config(), 0)))
      assert.strictEqual(stale._tag, "StaleRevision")
      assert.strictEqual(store.revision("g"), 1)
    }),
  )

  it.effect("the first commit of a group must be GroupCreated", () =>
    Effect.gen(function* () {
      const store = yield* Store.makeMemory
      const err = yield* Effect.flip(
        store.commit("g", 0, [{ _tag: "GroupEpochBumped", groupEpoch: 1 }]),
      )
      assert.strictEqual(err._tag, "CorruptSnapshot")
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

  it.effect(
    "a corrupt snapshot is a CorruptSnapshot and the stored bytes are never overwritten",
    () =>
      Effect.gen(function* () {
        const store = yield* Store.makeMemory
        yield* store.commit("g", 0, Coordinator.createGroup(config(), 0))
        store.corrupt("g", '{"version":1,"garbage":')
        const err = yield* Effect.flip(store.load("g"))
        assert.strictEqual(err._tag, "CorruptSnapshot")
        const more: Array<CoordinatorRecord> = [{ _tag: "GroupEpochBumped", groupEpoch: 1 }]
        for (let i = 0; i < 70; i++)
          yield* Effect.ignore(store.commit("g", store.revision("g"), more))
        assert.strictEqual(store.raw("g")?.snapshot, '{"version":1,"garbage":')
        assert.strictEqual((yield* Effect.flip(store.load("g")))._tag, "CorruptSnapshot")
      }),
  )

  it.effect("a snapshot that decodes but is inconsistent is corrupt too", () =>
    Effect.gen(function* () {
      const store = yield* Store.makeMemory
      yield* store.commit("g", 0, Coordinator.createGroup(config(), 0))
      const snap = JSON.parse(store.raw("g")!.snapshot)
      snap.target = [null]
      store.corrupt("g", JSON.stringify(snap))
      const err = yield* Effect.flip(store.load("g"))
      assert.strictEqual(err._tag, "CorruptSnapshot")
      assert.include(err.message, "target has 1 entries")
    }),
  )
})
