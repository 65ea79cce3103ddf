/**
 * Bad input against the coordinator on real Redis (Redis 7.0): foreign
 * values, truncated JSON and another schema version under the group's keys,
 * forged heartbeats (another epoch, another group's name) through the Redis
 * transport, and owner tokens lower than the stored ones. Each is a typed
 * error or error code, and nothing stored changes.
 */
import { assert, it } from "@effect/vitest"
import {
  CoordinatorTransport,
  makeCoordinatorHost,
  OwnerFence,
  ShardStreams,
  SnapshotJson,
  Store,
} from "@shardline/core"
import { Context, Effect, Option, Schema } from "effect"
import { defaultKeys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import { makeGroup, makeLog, redisPorts, runUntil } from "./support/driver.js"
import { describeTarget, redisTargets, unique } from "./support/targets.js"

const { storeBatchesKey, storeRevisionKey, storeSnapshotKey } = defaultKeys

const encodeSnapshot = Schema.encodeSync(SnapshotJson)

for (const target of redisTargets())
  if (target.kind === "redis7")
    describeTarget(
      "bad input through the coordinator",
      target,
      redisPorts(target.options ?? {}),
      (ports) => {
        const raw = () => Context.get(ports(), RedisConnection.RedisConnection).client
        const store = () => Context.get(ports(), Store.Store)

        /** A running group (coordinator + one member) and its key. */
        const running = Effect.gen(function* () {
          const stream = unique("bad")
          const log = makeLog()
          const group = yield* makeGroup(ports(), log, { stream, group: "workers", shardCount: 2 })
          const host = yield* group.startHost("coord")
          yield* group.addMember("m1")
          yield* runUntil([group], "settled", group.settled)
          return { key: group.key, group, host, log }
        })

        /** Every stored key of the group, to check nothing changed. */
        const dump = (key: { stream: string; group: string }) =>
          Effect.promise(async () => {
            const c = raw()
            return {
              revision: await c.get(storeRevisionKey(key)).catch((e: Error) => e.message),
              snapshot: await c.get(storeSnapshotKey(key)).catch((e: Error) => e.message),
              batches: await c.lrange(storeBatchesKey(key), 0, -1).catch((e: Error) => e.message),
            }
          })

        /** A new coordinator candidate for `key` (the old one gone): must refuse to serve. */
        const candidate = (key: { stream: string; group: string }) =>
          makeCoordinatorHost({
            config: {
              groupId: key.group,
              stream: key.stream,
              shardCount: 2,
              sessionTimeoutMs: 3_000,
              rebalanceTimeoutMs: 3_000,
              heartbeatIntervalMs: 300,
            },
            holder: `candidate-${unique("c")}`,
          }).pipe(Effect.provide(ports()))

        it.live(
          "a foreign value, truncated JSON or another schema version: the coordinator refuses to serve, nothing changes",
          () =>
            Effect.gen(function* () {
              for (const damage of ["foreign", "truncated", "version"] as const) {
                const { key, host } = yield* running
                // compact, so the snapshot key holds the state
                const loaded = Option.getOrThrow(yield* store().load(key))
                yield* Effect.promise(async () => {
                  await raw().set(storeSnapshotKey(key), encodeSnapshot(loaded))
                  await raw().del(storeBatchesKey(key))
                  await raw().set(storeRevisionKey(key), String(loaded.storeRevision))
                })
                const text = encodeSnapshot(loaded)
                yield* Effect.promise(async () => {
                  if (damage === "foreign") {
                    await raw().del(storeSnapshotKey(key))
                    await raw().hset(storeSnapshotKey(key), "not", "ours")
                  } else if (damage === "truncated")
                    await raw().set(storeSnapshotKey(key), text.slice(0, text.length - 7))
                  else
                    await raw().set(
                      storeSnapshotKey(key),
                      JSON.stringify({ ...JSON.parse(text), version: 1 }),
                    )
                })
                yield* host.close
                // the lease of the closed host was released: a new candidate loads, and refuses
                const before = yield* dump(key)
                const c = yield* candidate(key)
                assert.isFalse(yield* c.elect, damage)
                const reason = Option.getOrThrow(yield* c.lastError)
                assert.include(reason, "CorruptSnapshot", damage)
                const answer = yield* c.heartbeat({
                  stream: key.stream,
                  group: key.group,
                  memberId: "m9",
                  incarnation: 1,
                  seq: 1,
                  memberEpoch: 0,
                  assignmentEpoch: 0,
                  metadataVersion: 0,
                  ownedShards: [],
                  revokingShards: [],
                  memberInfo: { consumerName: "m9", host: "h" },
                })
                assert.strictEqual(answer.errorCode, "NOT_COORDINATOR", damage)
                assert.deepStrictEqual(yield* dump(key), before, damage)
              }
            }).pipe(Effect.scoped),
        )

        it.live(
          "forged heartbeats through the Redis transport: typed error codes, nothing committed",
          () =>
            Effect.gen(function* () {
              const { key, host } = yield* running
              const transport = Context.get(ports(), CoordinatorTransport.CoordinatorTransport)
              const state = Option.getOrThrow(yield* host.host.state)
              const m1 = [...state.members.values()][0]!
              const before = yield* dump(key)
              const base = {
                stream: key.stream,
                group: key.group,
                memberId: "m1",
                incarnation: 1,
                seq: 10_000,
                assignmentEpoch: state.assignmentEpoch,
                metadataVersion: 0,
                ownedShards: [],
                revokingShards: [],
              }
              // an epoch the coordinator never issued
              const forged = yield* transport.heartbeat({
                ...base,
                memberEpoch: m1.memberEpoch + 7,
              })
              assert.strictEqual(forged.errorCode, "FENCED_MEMBER_EPOCH")
              // another group's name on this group's queue: the host refuses it
              const other = yield* host.host.heartbeat({
                ...base,
                group: "someone-else",
                memberEpoch: m1.memberEpoch,
              })
              assert.strictEqual(other.errorCode, "INVALID_REQUEST")
              // not a heartbeat at all
              const junk = yield* host.host.heartbeat({ hello: "world" })
              assert.strictEqual(junk.errorCode, "INVALID_REQUEST")
              const after = yield* dump(key)
              assert.deepStrictEqual(after, before)
              const stored = Option.getOrThrow(yield* store().load(key))
              assert.isTrue(stored.members.every((m) => m.memberId !== "someone-else"))
              yield* host.close
            }).pipe(Effect.scoped),
        )

        it.live("tokens lower than the stored ones: refused, nothing changes", () =>
          Effect.gen(function* () {
            const { key, host } = yield* running
            const streams = Context.get(ports(), ShardStreams.ShardStreams)
            const fence = Context.get(ports(), OwnerFence.OwnerFence)
            const address = { stream: key.stream, shard: 0, group: key.group }
            const current = yield* streams.ownerToken(address)
            assert.isAbove(current, 0)
            yield* streams.append(key.stream, 0, { k: "v" })
            const regression = yield* Effect.flip(
              streams.setOwnerToken({ ...address, token: current - 1 }),
            )
            assert.strictEqual(regression._tag, "OwnerTokenRegression")
            const fenceError = yield* Effect.flip(
              fence.write(key, [{ shard: 0, token: current - 1, memberId: "x" }]),
            )
            assert.strictEqual(fenceError._tag, "FenceWriteFailed")
            const read = yield* Effect.flip(
              streams.read({ ...address, consumer: "intruder", token: current - 1, count: 10 }),
            )
            assert.strictEqual(read._tag, "StaleOwner")
            assert.strictEqual(yield* streams.ownerToken(address), current)
            const info = yield* streams.info(key.stream, 0)
            assert.isFalse(info.groups.some((g) => g.consumers.includes("intruder")))
            yield* host.close
          }).pipe(Effect.scoped),
        )
      },
    )
