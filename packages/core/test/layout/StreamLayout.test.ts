import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Result } from "effect"
import { Layout, ShardStreams, StreamLayouts } from "../../src/index.js"

const { StreamLayout, Reshard } = Layout

const refusal = (r: Result.Result<unknown, { reason: string }>) =>
  Result.isFailure(r) ? r.failure.reason : "ok"

describe("StreamLayout (pure)", () => {
  const base = StreamLayout.create("orders", 16)

  it("reshard adds a generation whose shard ids follow the current ones", () => {
    const r = StreamLayout.reshard(base, 32)
    assert.isTrue(Result.isSuccess(r))
    if (Result.isFailure(r)) return
    assert.deepStrictEqual(StreamLayout.current(r.success), {
      generation: 1,
      firstShard: 16,
      shardCount: 32,
    })
    assert.strictEqual(r.success.lastChange, "reshard")
  })

  it("bad input is refused with a reason and changes nothing", () => {
    assert.strictEqual(refusal(StreamLayout.reshard(base, 0)), "InvalidShardCount")
    assert.strictEqual(refusal(StreamLayout.reshard(base, -3)), "InvalidShardCount")
    assert.strictEqual(refusal(StreamLayout.reshard(base, 2.5)), "InvalidShardCount")
    assert.strictEqual(refusal(StreamLayout.reshard(base, 65_537)), "InvalidShardCount")
    assert.strictEqual(refusal(StreamLayout.reshard(base, 16)), "SameShardCount")
    assert.strictEqual(refusal(StreamLayout.rollback(base)), "NoMigration")
    const running = Result.getOrThrow(StreamLayout.reshard(base, 32))
    assert.strictEqual(refusal(StreamLayout.reshard(running, 8)), "MigrationRunning")
    const rolled = Result.getOrThrow(StreamLayout.rollback(running))
    assert.strictEqual(refusal(StreamLayout.rollback(rolled)), "RollbackRunning")
    assert.strictEqual(StreamLayout.current(rolled).shardCount, 16)
    assert.deepStrictEqual(
      rolled.generations.map((g) => g.firstShard),
      [0, 16, 48],
    )
  })

  it("a generation retires only once every registered group drained it", () => {
    let r = Result.getOrThrow(StreamLayout.reshard(base, 8))
    assert.deepStrictEqual(StreamLayout.retirable(r), []) // no group: nobody read it
    r = StreamLayout.registerGroup(StreamLayout.registerGroup(r, "a"), "b")
    r = StreamLayout.groupDrainedBelow(r, "a", 1)
    assert.deepStrictEqual(StreamLayout.retirable(r), [])
    r = StreamLayout.groupDrainedBelow(r, "b", 1)
    assert.deepStrictEqual(
      StreamLayout.retirable(r).map((g) => g.generation),
      [0],
    )
    const retired = StreamLayout.retire(r)
    assert.deepStrictEqual(
      retired.generations.map((g) => g.generation),
      [1],
    )
    assert.strictEqual(retired.lastChange, "none")
    // and a new migration may start
    assert.isTrue(Result.isSuccess(StreamLayout.reshard(retired, 16)))
  })
})

const ports = Layer.mergeAll(StreamLayouts.layerMemory, ShardStreams.layerMemory)

describe("StreamLayouts port and Reshard operations (memory)", () => {
  it.effect("reshardStream writes the new generation and seals the earlier shards", () =>
    Effect.gen(function* () {
      const streams = yield* ShardStreams.ShardStreams
      yield* Reshard.loadOrCreate("orders", 2)
      yield* streams.append("orders", 0, { k: "before" })
      const stored = yield* Reshard.reshardStream("orders", 4)
      assert.strictEqual(stored.record.generations.length, 2)
      const late = yield* Effect.flip(streams.append("orders", 0, { k: "late" }))
      assert.strictEqual(late._tag, "ShardSealed")
      assert.isString(yield* streams.append("orders", 2, { k: "new" })) // generation 1's shard
      const twice = yield* Effect.flip(Reshard.reshardStream("orders", 8))
      assert.strictEqual(twice._tag === "ReshardRefused" && twice.reason, "MigrationRunning")
      const unknown = yield* Effect.flip(Reshard.rollbackStream("payments"))
      assert.strictEqual(unknown._tag === "ReshardRefused" && unknown.reason, "UnknownStream")
    }).pipe(Effect.provide(ports)),
  )

  it.effect(
    "reshardStream and rollbackStream create every registered group on the new shards first: a group held back keeps what another group's xackdel acked there",
    () =>
      Effect.gen(function* () {
        const streams = yield* ShardStreams.ShardStreams
        yield* Reshard.loadOrCreate("orders", 2)
        for (const group of ["a", "b"]) yield* Reshard.registerGroup("orders", group)
        const stored = yield* Reshard.reshardStream("orders", 4)
        const groupsOn = (shard: number) =>
          Effect.map(streams.info("orders", shard), (i) => i.groups.map((g) => g.name).sort())
        for (let shard = 2; shard < 6; shard++)
          assert.deepStrictEqual(yield* groupsOn(shard), ["a", "b"])
        assert.strictEqual(stored.record.generations.length, 2)
        // a producer writes to the new shard 2; group a (already past the old
        // generation) is granted it and acks with xackdel; b is still held back
        yield* streams.append("orders", 2, { k: "new" })
        yield* streams.setOwnerToken({ stream: "orders", shard: 2, group: "a", token: 7 })
        const a = { stream: "orders", shard: 2, group: "a", token: 7 }
        const batch = yield* streams.read({ ...a, consumer: "ca", count: 10 })
        yield* streams.ack({ ...a, ids: batch.map((m) => m.id), mode: "xackdel" })
        // b, granted later, reads it
        yield* streams.setOwnerToken({ stream: "orders", shard: 2, group: "b", token: 9 })
        const b = yield* streams.read({
          stream: "orders",
          shard: 2,
          group: "b",
          consumer: "cb",
          token: 9,
          count: 10,
        })
        assert.deepStrictEqual(
          b.map((m) => m.fields.k),
          ["new"],
        )
        // a rollback's generation too (shards 6 and 7); a's token on shard 2 is untouched
        yield* Reshard.rollbackStream("orders")
        for (const shard of [6, 7]) assert.deepStrictEqual(yield* groupsOn(shard), ["a", "b"])
        assert.strictEqual(yield* streams.ownerToken({ stream: "orders", shard: 2, group: "a" }), 7)
      }).pipe(Effect.provide(ports)),
  )

  it.effect(
    "a stale write is refused; a corrupt or foreign record is a CorruptLayout, never overwritten",
    () =>
      Effect.gen(function* () {
        const encoded = StreamLayouts.makeMemoryEncoded()
        const layouts = StreamLayouts.makeEncoded(encoded)
        const record = StreamLayout.create("orders", 4)
        assert.strictEqual(yield* layouts.save("orders", 0, record), 1)
        const stale = yield* Effect.flip(layouts.save("orders", 0, record))
        assert.strictEqual(stale._tag, "StaleLayout")
        encoded.corrupt("orders", "{not json")
        const corrupt = yield* Effect.flip(layouts.load("orders"))
        assert.strictEqual(corrupt._tag, "CorruptLayout")
        encoded.corrupt("orders", JSON.stringify(StreamLayout.create("payments", 4)))
        const foreign = yield* Effect.flip(layouts.load("orders"))
        assert.include(foreign._tag === "CorruptLayout" ? foreign.message : "", "payments")
        const refused = yield* Effect.flip(
          Reshard.reshardStream("orders", 8).pipe(
            Effect.provideService(StreamLayouts.StreamLayouts, layouts),
            Effect.provide(ShardStreams.layerMemory),
          ),
        )
        assert.strictEqual(refused._tag, "CorruptLayout")
        assert.isTrue(Option.isNone(yield* Effect.option(layouts.load("orders"))))
      }),
  )

  it.effect(
    "groupDrainedBelow retires a generation every group drained: its streams are deleted",
    () =>
      Effect.gen(function* () {
        const streams = yield* ShardStreams.ShardStreams
        yield* Reshard.loadOrCreate("orders", 2)
        yield* Reshard.registerGroup("orders", "g")
        yield* streams.append("orders", 1, { k: "x" })
        yield* Reshard.reshardStream("orders", 4)
        const stored = yield* Reshard.groupDrainedBelow("orders", "g", 1)
        assert.deepStrictEqual(
          stored.record.generations.map((g) => g.generation),
          [1],
        )
        assert.strictEqual((yield* streams.info("orders", 1)).length, 0)
      }).pipe(Effect.provide(ports)),
  )
})
