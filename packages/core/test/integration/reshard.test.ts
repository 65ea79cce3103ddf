/**
 * Resharding end to end (in-memory, docs/resharding.md): the operator
 * reshards the stream while a keyed producer writes; the real CoordinatorHost
 * follows the stream's layout at its next lease renewal, seals the earlier
 * generation, and grants new shards only once the earlier shards overlapping
 * them are drained (read loops find them drained via `drainState` and the
 * member machines report them). Checked from the event log: per-key order,
 * one reader per shard, every message acked.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import {
  type Cluster,
  makeCluster,
  makeSharedPorts,
  overlappingOwnership,
  perKeyOrder,
} from "./cluster.js"

const keys = Array.from({ length: 24 }, (_, i) => `customer-${i}`)

const started = (
  shardCount: number,
  group = "g",
  shared?: Parameters<typeof makeCluster>[0]["shared"],
) =>
  Effect.gen(function* () {
    const c = yield* makeCluster({
      shardCount,
      group,
      leaseTtlMs: 3_000,
      ...(shared !== undefined ? { shared } : {}),
    })
    const { host } = yield* c.startHost(`${group}-c1`)
    yield* c.serve(host)
    for (const id of ["a", "b", "c"]) yield* c.addMember(`${group}-${id}`)
    yield* c.runUntilSettled(host)
    return { c, host }
  })

const streamRecord = (c: Cluster) =>
  Effect.map(Effect.orDie(c.shared.layouts.load("orders")), (o) => Option.getOrThrow(o).record)

describe("resharding end to end (in-memory)", () => {
  it.effect(
    "4 -> 8 while a keyed producer writes: per-key order, one reader per shard, nothing lost, the old generation retires",
    () =>
      Effect.gen(function* () {
        const { c, host } = yield* started(4)
        yield* c.runRounds(10, () => c.produceKeyed(keys))
        yield* c.reshard(8)
        yield* c.runRounds(80, () => c.produceKeyed(keys))
        yield* c.runUntil("all acked", c.allAcked, 2_000)
        yield* c.runUntilSettled(host, 2_000)
        assert.deepStrictEqual(perKeyOrder(c.events), [])
        assert.deepStrictEqual(overlappingOwnership(c.events), [])
        const state = yield* c.coordinatorState(host)
        assert.deepStrictEqual(state.layout, { generation: 1, firstShard: 4, shardCount: 8 })
        assert.strictEqual(state.resharding._tag, "Idle")
        // every old shard was found drained by its owner
        assert.strictEqual(c.events.filter((e) => e.kind === "exhausted").length, 4)
        // the group reported it; generation 0 retired (its streams deleted)
        yield* c.runRounds(20)
        const record = yield* streamRecord(c)
        assert.deepStrictEqual(
          record.generations.map((g) => g.generation),
          [1],
        )
        assert.strictEqual(record.groups.g?.drainedBelow, 1)
        assert.strictEqual((yield* c.streams.info("orders", 0)).length, 0)
      }),
  )

  it.effect("a rollback in the middle (4 -> 8 -> 4): per-key order holds in both directions", () =>
    Effect.gen(function* () {
      const { c, host } = yield* started(4)
      yield* c.runRounds(5, () => c.produceKeyed(keys))
      yield* c.reshard(8)
      yield* c.runRounds(8, () => c.produceKeyed(keys))
      yield* c.rollback
      yield* c.runRounds(60, () => c.produceKeyed(keys))
      yield* c.runUntil("all acked", c.allAcked, 3_000)
      yield* c.runUntilSettled(host, 3_000)
      assert.deepStrictEqual(perKeyOrder(c.events), [])
      assert.deepStrictEqual(overlappingOwnership(c.events), [])
      const state = yield* c.coordinatorState(host)
      assert.deepStrictEqual(state.layout, { generation: 2, firstShard: 12, shardCount: 4 })
      assert.strictEqual(state.resharding._tag, "Idle")
    }),
  )

  it.effect("two groups on the stream: the old generation retires only when both drained it", () =>
    Effect.gen(function* () {
      const shared = yield* makeSharedPorts()
      const one = yield* started(4, "g1", shared)
      const two = yield* started(4, "g2", shared)
      yield* one.c.produceKeyed(keys)
      yield* one.c.reshard(8)
      // only g1 runs: it drains generation 0, but g2 has not yet
      yield* one.c.runUntil(
        "g1 done",
        () => one.c.events.filter((e) => e.kind === "exhausted").length === 4,
        2_000,
      )
      yield* one.c.runRounds(40)
      let record = yield* streamRecord(one.c)
      assert.strictEqual(record.groups.g1?.drainedBelow, 1)
      assert.strictEqual(record.groups.g2?.drainedBelow, 0)
      assert.deepStrictEqual(
        record.generations.map((g) => g.generation),
        [0, 1],
      )
      // g2 catches up: now generation 0 retires
      yield* two.c.runUntilSettled(two.host, 2_000)
      yield* two.c.runRounds(60)
      yield* two.c.runUntilSettled(two.host, 2_000)
      record = yield* streamRecord(two.c)
      assert.deepStrictEqual(
        record.generations.map((g) => g.generation),
        [1],
      )
      assert.deepStrictEqual(perKeyOrder(two.c.events), [])
      assert.deepStrictEqual(perKeyOrder(one.c.events), [])
    }),
  )
})
