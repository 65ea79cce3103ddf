/**
 * The Store contract, run unchanged on every implementation
 * (test/Store.test.ts): core's memory bytes and the Redis bytes, each behind
 * core's one decoder (`Store.makeEncoded`). The subject hands out the
 * byte-level backend so the compaction and audit paths are checked too.
 */
import { assert, it } from "@effect/vitest"
import {
  Coordinator,
  type CoordinatorRecord,
  type GroupKey,
  makeGroupConfig,
  Store,
} from "@shardline/core"
import { Effect, Option } from "effect"
import { unique } from "../support/targets.js"

export interface StoreSubject {
  readonly backend: Store.Encoded
  /** The audit events stored for the group (encoded), oldest first. */
  readonly audit: (key: GroupKey) => Effect.Effect<ReadonlyArray<string>, unknown>
}

export const configFor = (key: GroupKey, shardCount = 4) =>
  makeGroupConfig({
    groupId: key.group,
    stream: key.stream,
    shardCount,
    sessionTimeoutMs: 30_000,
    rebalanceTimeoutMs: 10_000,
    heartbeatIntervalMs: 3_000,
  })

export const bump = (groupEpoch: number): Array<CoordinatorRecord> => [
  { _tag: "GroupEpochBumped", groupEpoch },
  {
    _tag: "Audit",
    event: {
      at: groupEpoch,
      kind: "TargetAssignmentChanged",
      reason: `bump ${groupEpoch}`,
      before: { groupEpoch: groupEpoch - 1, assignmentEpoch: 0 },
      after: { groupEpoch, assignmentEpoch: 0 },
    },
  },
]

const freshKey = (): GroupKey => ({ stream: unique("orders"), group: "workers" })

export const storeContract = (subject: () => StoreSubject) => {
  const storeOf = (compactEvery = 64) => Store.makeEncoded(subject().backend, { compactEvery })

  it.live("load is none before the first commit; the first commit creates the group", () =>
    Effect.gen(function* () {
      const store = storeOf()
      const key = freshKey()
      assert.isTrue(Option.isNone(yield* store.load(key)))
      assert.strictEqual(yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0)), 1)
      const loaded = Option.getOrThrow(yield* store.load(key))
      assert.strictEqual(loaded.storeRevision, 1)
      assert.strictEqual(loaded.config.stream, key.stream)
      assert.strictEqual(loaded.config.groupId, key.group)
    }),
  )

  it.live(
    "compare-and-set: a commit at a stale revision fails StaleRevision, nothing changes",
    () =>
      Effect.gen(function* () {
        const store = storeOf()
        const key = freshKey()
        yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
        yield* store.commit(key, 1, bump(1))
        for (const expected of [0, 1, 3]) {
          const records = expected === 0 ? Coordinator.createGroup(configFor(key), 0) : bump(9)
          const stale = yield* Effect.flip(store.commit(key, expected, records))
          assert.strictEqual(stale._tag, "StaleRevision")
          if (stale._tag === "StaleRevision") {
            assert.strictEqual(stale.expectedRevision, expected)
            assert.strictEqual(stale.actualRevision, 2)
          }
        }
        const loaded = Option.getOrThrow(yield* store.load(key))
        assert.strictEqual(loaded.storeRevision, 2)
        assert.strictEqual(loaded.groupEpoch, 1)
      }),
  )

  it.live("concurrent commits at one revision: exactly one wins", () =>
    Effect.gen(function* () {
      const store = storeOf()
      const key = freshKey()
      yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
      const results = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) => Effect.result(store.commit(key, 1, bump(i + 1)))),
        { concurrency: "unbounded" },
      )
      assert.strictEqual(results.filter((r) => r._tag === "Success").length, 1)
      assert.strictEqual(Option.getOrThrow(yield* store.load(key)).storeRevision, 2)
    }),
  )

  it.live("the first commit must be GroupCreated for that very group; nothing is stored", () =>
    Effect.gen(function* () {
      const store = storeOf()
      const key = freshKey()
      assert.strictEqual(
        (yield* Effect.flip(store.commit(key, 0, bump(1))))._tag,
        "CorruptSnapshot",
      )
      const other = { ...key, group: "other" }
      const foreign = yield* Effect.flip(
        store.commit(key, 0, Coordinator.createGroup(configFor(other), 0)),
      )
      assert.strictEqual(foreign._tag, "CorruptSnapshot")
      assert.isTrue(Option.isNone(yield* store.load(key)))
    }),
  )

  it.live("compaction every N batches: the state survives it; audit events go to the log", () =>
    Effect.gen(function* () {
      const store = storeOf(4)
      const key = freshKey()
      yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
      for (let i = 1; i <= 10; i++) assert.strictEqual(yield* store.commit(key, i, bump(i)), i + 1)
      const loaded = Option.getOrThrow(yield* store.load(key))
      assert.strictEqual(loaded.storeRevision, 11)
      assert.strictEqual(loaded.groupEpoch, 10)
      const raw = Option.getOrThrow(yield* subject().backend.load(key))
      assert.isDefined(raw.snapshot)
      assert.isBelow(raw.batches.length, 4)
      assert.strictEqual(raw.revision, 11)
      const audit = yield* subject().audit(key)
      assert.strictEqual(audit.length, 11)
      assert.include(audit[0]!, "GroupCreated")
      assert.include(audit[10]!, "bump 10")
    }),
  )

  it.live("replaceSnapshot is a strict compare-and-set on the revision", () =>
    Effect.gen(function* () {
      const { backend } = subject()
      const store = storeOf()
      const key = freshKey()
      assert.isFalse(yield* backend.replaceSnapshot(key, 0, "{}"))
      assert.isTrue(Option.isNone(yield* backend.load(key)))
      yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
      yield* store.commit(key, 1, bump(1))
      const good = Option.getOrThrow(yield* store.load(key))
      // a compaction computed at an older revision is refused
      assert.isFalse(yield* backend.replaceSnapshot(key, 1, "stale"))
      assert.strictEqual(Option.getOrThrow(yield* backend.load(key)).batches.length, 2)
      const appended = yield* backend.append(key, 2, { records: "[]", audit: [] })
      assert.deepStrictEqual(appended, { revision: 3, batches: 3 })
      const stale = yield* Effect.flip(backend.append(key, 2, { records: "[]", audit: [] }))
      assert.strictEqual(stale._tag, "StaleRevision")
      assert.strictEqual(Option.getOrThrow(yield* store.load(key)).groupEpoch, good.groupEpoch)
    }),
  )

  it.live("groups are independent: one group name on two streams, two names on one stream", () =>
    Effect.gen(function* () {
      const store = storeOf()
      const a = freshKey()
      const b = { stream: `${a.stream}-eu`, group: a.group }
      const c = { stream: a.stream, group: "auditors" }
      for (const key of [a, b, c])
        yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
      yield* store.commit(a, 1, bump(1))
      yield* store.commit(a, 2, bump(2))
      assert.strictEqual(Option.getOrThrow(yield* store.load(a)).storeRevision, 3)
      assert.strictEqual(Option.getOrThrow(yield* store.load(b)).storeRevision, 1)
      assert.strictEqual(Option.getOrThrow(yield* store.load(c)).storeRevision, 1)
      assert.strictEqual(Option.getOrThrow(yield* store.load(b)).groupEpoch, 0)
    }),
  )
}
