/**
 * The coordinator on real Redis, end to end: CoordinatorHost over the Redis
 * ports (RedisPorts), core's MemberMachine driven by test/support/driver.ts,
 * heartbeats and notices through the Redis transport, reads and acks through
 * the fenced Redis ShardStreams. On Redis 7.0 and on the 3-node cluster
 * (shards spread over its nodes, every group's control keys in one slot).
 */
import { assert, it } from "@effect/vitest"
import { Layout, MemberMachine, ShardStreams, StreamLayouts } from "@shardline/core"
import { Context, Effect, Option } from "effect"
import {
  makeGroup,
  makeLog,
  makeProducer,
  overlappingOwnership,
  perKeyOrder,
  redisPorts,
  runUntil,
} from "./support/driver.js"
import { describeTarget, redisTargets, unique } from "./support/targets.js"

const keys = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `k${(from + i) % 40}`)

for (const target of redisTargets())
  if (target.kind === "redis7" || target.kind === "cluster7")
    describeTarget("coordinator end to end", target, redisPorts(target.options ?? {}), (ports) => {
      it.live(
        "two groups with the same name on two streams stay independent",
        () =>
          Effect.gen(function* () {
            const log = makeLog()
            const base = unique("orders")
            const a = yield* makeGroup(ports(), log, {
              stream: base,
              group: "workers",
              shardCount: 4,
            })
            const b = yield* makeGroup(ports(), log, {
              stream: `${base}-eu`,
              group: "workers",
              shardCount: 2,
            })
            const hostA = yield* a.startHost("coord-a")
            const hostB = yield* b.startHost("coord-b")
            for (const id of ["m1", "m2"]) yield* a.addMember(id)
            yield* b.addMember("m1")
            yield* runUntil([a, b], "both settled", () => a.settled() && b.settled())
            assert.deepStrictEqual([...a.ownership().values()].flat().sort(), [0, 1, 2, 3])
            assert.deepStrictEqual(b.ownership().get("m1"), [0, 1])
            // two coordinators, two snapshots, two token sequences
            const sa = Option.getOrThrow(yield* hostA.host.state)
            const sb = Option.getOrThrow(yield* hostB.host.state)
            assert.strictEqual(sa.config.stream, base)
            assert.strictEqual(sb.config.stream, `${base}-eu`)
            // m1 of stream b dying changes nothing on stream a (once a is quiet)
            const revisionOfA = Effect.map(
              hostA.host.state,
              (st) => Option.getOrThrow(st).storeRevision,
            )
            let seen = -1
            yield* runUntil([a, b], "group a quiet", () =>
              Effect.gen(function* () {
                const now = yield* revisionOfA
                const mon = Option.getOrThrow(yield* hostA.host.monitor)
                const quiet =
                  now === seen &&
                  !mon.rebalanceInProgress &&
                  mon.pendingRevokes === 0 &&
                  a.settled()
                seen = now
                yield* Effect.sleep(400)
                return quiet
              }),
            )
            const revision = yield* revisionOfA
            const owners = a.ownership()
            const eventsBefore = log.events.length
            b.crash("m1")
            yield* runUntil([a, b], "b's member expired", () =>
              Effect.map(hostB.host.monitor, (m) => Option.isSome(m) && m.value.memberCount === 0),
            )
            assert.strictEqual(Option.getOrThrow(yield* hostA.host.state).storeRevision, revision)
            assert.isTrue(a.settled())
            assert.deepStrictEqual(a.ownership(), owners)
            assert.deepStrictEqual(
              log.events
                .slice(eventsBefore)
                .filter(
                  (e) =>
                    e.group === "workers" &&
                    e.member !== "m1" &&
                    e.kind !== "read" &&
                    e.kind !== "handle",
                ),
              [],
            )
            const twoOwners = overlappingOwnership(log.events)
            assert.deepStrictEqual(twoOwners, [], `two owners: ${JSON.stringify(twoOwners)}`)
          }),
        60_000,
      )

      it.live(
        "two groups consume one stream (fan-out): each handles every message once, neither is fenced",
        () =>
          Effect.gen(function* () {
            const log = makeLog()
            const stream = unique("fanout")
            const g1 = yield* makeGroup(ports(), log, { stream, group: "billing", shardCount: 4 })
            const g2 = yield* makeGroup(ports(), log, { stream, group: "search", shardCount: 4 })
            yield* g1.startHost("coord-billing")
            yield* g2.startHost("coord-search")
            for (const id of ["a", "b"]) yield* g1.addMember(id)
            for (const id of ["a", "b", "c"]) yield* g2.addMember(id)
            const producer = makeProducer(ports(), stream, 4)
            yield* runUntil([g1, g2], "both settled", () => g1.settled() && g2.settled())
            yield* producer.produce(keys(200))
            // a rebalance in one group while both consume
            yield* g1.addMember("c")
            yield* producer.produce(keys(200, 7))
            const done = () =>
              producer.produced.every((k) => g1.acked.has(k) && g2.acked.has(k)) &&
              g1.settled() &&
              g2.settled()
            // a liveness deadline, not a timing check: the tick-driven groups
            // took over 30 s once on a machine loaded by other suites
            yield* runUntil([g1, g2], "every message acked by both groups", done, { maxMs: 90_000 })
            for (const g of [g1, g2]) {
              assert.strictEqual(g.acked.size, producer.produced.length)
              for (const k of producer.produced) assert.strictEqual(g.handled.get(k), 1, k)
            }
            assert.deepStrictEqual(
              log.events.filter((e) => e.kind === "staleOwner"),
              [],
            )
            const twoOwners = overlappingOwnership(log.events)
            assert.deepStrictEqual(twoOwners, [], `two owners: ${JSON.stringify(twoOwners)}`)
            for (const group of ["billing", "search"])
              assert.deepStrictEqual(
                perKeyOrder(log.events.filter((e) => e.group === group)),
                [],
                "per-key order",
              )
            // per-group owner tokens on every shard
            const streams = Context.get(
              ports(),
              ShardStreams.ShardStreams as never,
            ) as ShardStreams.ShardStreamsShape
            for (let shard = 0; shard < 4; shard++) {
              const info = yield* streams.info(stream, shard)
              assert.deepStrictEqual(info.groups.map((g) => g.name).sort(), ["billing", "search"])
              for (const g of info.groups) assert.isAbove(g.ownerToken, 0)
            }
          }),
        150_000,
      )

      it.live(
        "reshard 4 -> 8 under a keyed producer, two groups: per-key order, no loss, retired after both drained",
        () =>
          Effect.gen(function* () {
            const log = makeLog()
            const stream = unique("reshard")
            const opts = { stream, shardCount: 4, heartbeatIntervalMs: 200 }
            const g1 = yield* makeGroup(ports(), log, { ...opts, group: "g1" })
            const g2 = yield* makeGroup(ports(), log, { ...opts, group: "g2" })
            const h1 = yield* g1.startHost("coord-1")
            const h2 = yield* g2.startHost("coord-2")
            for (const id of ["a", "b"]) {
              yield* g1.addMember(id)
              yield* g2.addMember(id)
            }
            const producer = makeProducer(ports(), stream, 4)
            yield* runUntil([g1, g2], "both settled", () => g1.settled() && g2.settled())
            yield* producer.produce(keys(120))
            const layouts = Context.get(
              ports(),
              StreamLayouts.StreamLayouts as never,
            ) as StreamLayouts.StreamLayoutsShape
            const streams = Context.get(
              ports(),
              ShardStreams.ShardStreams as never,
            ) as ShardStreams.ShardStreamsShape
            const reshard = yield* Layout.Reshard.reshardStream(stream, 8).pipe(
              Effect.provideService(StreamLayouts.StreamLayouts, layouts),
              Effect.provideService(ShardStreams.ShardStreams, streams),
            )
            assert.strictEqual(reshard.record.generations.length, 2)
            // the keyed producer keeps writing during the migration
            let batches = 0
            const retired = Effect.map(
              layouts.load(stream),
              (s) => Option.isSome(s) && s.value.record.generations.length === 1,
            )
            const watch = { drainedBoth: false, retiredEarly: false }
            yield* runUntil(
              [g1, g2],
              "old generation retired, every message acked by both groups",
              () =>
                Effect.gen(function* () {
                  const record = Option.getOrThrow(yield* Effect.orDie(layouts.load(stream))).record
                  const below = (g: string) => record.groups[g]?.drainedBelow ?? 0
                  if (record.generations.length === 1 && !(below("g1") >= 1 && below("g2") >= 1))
                    watch.retiredEarly = true
                  const all = producer.produced.every((k) => g1.acked.has(k) && g2.acked.has(k))
                  return all && (yield* retired) && batches >= 10
                }),
              {
                maxMs: 45_000,
                each: Effect.suspend(() =>
                  batches++ < 10 ? producer.produce(keys(12, batches * 3)) : Effect.void,
                ),
              },
            )
            assert.isFalse(watch.retiredEarly)
            const record = Option.getOrThrow(yield* layouts.load(stream)).record
            assert.deepStrictEqual(
              record.generations.map((g) => [g.firstShard, g.shardCount]),
              [[4, 8]],
            )
            assert.isAtLeast(record.groups.g1!.drainedBelow, 1)
            assert.isAtLeast(record.groups.g2!.drainedBelow, 1)
            for (const g of [g1, g2]) {
              for (const k of producer.produced) assert.isTrue(g.acked.has(k), k)
              const order = perKeyOrder(log.events.filter((e) => e.group === g.key.group))
              assert.deepStrictEqual(order, [], `per-key order: ${JSON.stringify(order)}`)
            }
            const twoOwners = overlappingOwnership(log.events)
            assert.deepStrictEqual(twoOwners, [], `two owners: ${JSON.stringify(twoOwners)}`)
            // the old shards are gone, sealed (late producers refused), their tokens dropped
            for (let shard = 0; shard < 4; shard++) {
              assert.strictEqual((yield* streams.info(stream, shard)).length, 0)
              assert.strictEqual(
                (yield* Effect.flip(streams.append(stream, shard, { k: "late" })))._tag,
                "ShardSealed",
              )
              assert.strictEqual(yield* streams.ownerToken({ stream, shard, group: "g1" }), 0)
            }
            yield* g1.refreshShards
            yield* g2.refreshShards
            yield* runUntil([g1, g2], "settled on generation 1", () => g1.settled() && g2.settled())
            for (const m of g1.live())
              for (const s of MemberMachine.ownedShards(m.machine)) assert.isAtLeast(s, 4)
            assert.isTrue(Option.isSome(yield* h1.host.monitor))
            assert.isTrue(Option.isSome(yield* h2.host.monitor))
          }),
        90_000,
      )
    })
