/**
 * `shardline migrate-keys` (src/MigrateKeys.ts; docs/redis.md, "The key
 * schema's version") on every kind of server: an earlier version's keys
 * (schema 1, unprefixed) move into the namespace with the group's state,
 * owner tokens, unread and pending entries, dead letters, seals and the
 * idempotency window; a dry run moves nothing; a live coordinator of the
 * earlier version is refused; a second run has nothing to move. The
 * schema check itself: redis-store's test/KeySchema.test.ts.
 */
import { assert, it } from "@effect/vitest"
import { Coordinator, Layout, ShardStreams } from "@shardline/core"
import {
  KeySchema,
  Keys,
  RedisConnection,
  RedisShardStreams,
  RedisStore,
  RedisStreamLayouts,
} from "@shardline/redis-store"
import { Effect, Option } from "effect"
import { Cluster, type Redis } from "ioredis"
import { bump, configFor } from "../../redis-store/test/contract/Store.js"
import {
  connect,
  describeTarget,
  redisTargets,
  unique,
} from "../../redis-store/test/support/targets.js"
import * as MigrateKeys from "../src/MigrateKeys.js"

const { SCHEMA_VERSION, schema1Keys } = Keys

for (const target of redisTargets()) {
  describeTarget("migrate-keys", target, connect(target), (subject) => {
    const admin = () => subject().client
    /** A connection to the same server in namespace `prefix`, closed with the test's scope. */
    const inNamespace = (prefix: string) =>
      RedisConnection.make({ ...target.options, keyPrefix: prefix })
    const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.map(
        Effect.flip(effect),
        (e) => e as { readonly _tag: string; readonly message: string },
      )

    /** Every key `prefix` holds, renamed to its schema-1 name (what an earlier version wrote). */
    const toSchema1 = (prefix: string) =>
      Effect.promise(async () => {
        const client = admin()
        const nodes: ReadonlyArray<Redis> =
          client instanceof Cluster ? client.nodes("master") : [client as Redis]
        const keys = (await Promise.all(nodes.map((n) => n.keys(`${prefix}*`)))).flat()
        for (const key of keys) {
          const rest = key.slice(prefix.length)
          const old = rest.startsWith("group:{")
            ? `{shardline:${rest.slice("group:{".length)}`
            : rest.startsWith("stream:{")
              ? `{shardline:${rest.slice("stream:{".length)}`
              : rest === "schema"
                ? undefined
                : rest
          if (old === undefined) {
            await client.del(key)
            continue
          }
          const payload = await client.dumpBuffer(key)
          const ttl = await client.pttl(key)
          await client.restore(old, Math.max(ttl, 0), payload!)
          await client.del(key)
        }
      })

    it.live(
      "migrate-keys: an earlier version's keys move into the namespace with state, tokens and unread entries",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            // an earlier version's group, built with the ports, then renamed to schema 1's names
            const scratch = `${unique("scratch")}:`
            const stream = unique("upgrade")
            const key = { stream, group: "billing" }
            const base = { stream, shard: 0, group: "billing" }
            const old = yield* inNamespace(scratch)
            const s = RedisShardStreams.makeWith(old)
            yield* s.setOwnerToken({ ...base, token: 7 })
            for (const n of ["1", "2", "3", "4"]) yield* s.append(stream, 0, { n })
            const sent = yield* s.append(
              stream,
              1,
              { n: "x" },
              { idempotency: { producerId: "p", messageId: "m1" } },
            )
            const [first] = yield* s.read({ ...base, consumer: "c", token: 7, count: 2 })
            yield* s.deadLetter({ ...base, token: 7, id: first!.id, reason: "poison" })
            yield* s.seal(stream, 1)
            yield* RedisStore.makeWith(old).commit(
              key,
              0,
              Coordinator.createGroup(configFor(key), 0),
            )
            yield* RedisStore.makeWith(old).commit(key, 1, bump(1))
            yield* RedisStreamLayouts.makeWith(old).save(
              stream,
              0,
              Layout.StreamLayout.create(stream, 2),
            )
            yield* toSchema1(scratch)
            assert.strictEqual(yield* Effect.promise(() => admin().type(`{${stream}:0}`)), "stream")

            const prefix = `${unique("ns")}:`
            const connection = yield* inNamespace(prefix)
            assert.strictEqual(
              (yield* failure(KeySchema.ensure(connection, [key])))._tag,
              "KeySchemaMismatch",
            )
            // a dry run moves nothing
            const dry = yield* MigrateKeys.migrate(connection, { stream, dryRun: true })
            assert.isAbove(dry.moved.length, 6)
            assert.deepStrictEqual(dry.groups, ["billing"])
            assert.strictEqual(yield* Effect.promise(() => admin().type(`{${stream}:0}`)), "stream")
            // a live coordinator of the earlier version: refused
            const lease = `{shardline:${stream}:billing}:lease`
            yield* Effect.promise(() => admin().hset(lease, "holder", "old", "token", "1"))
            const live = yield* failure(MigrateKeys.migrate(connection, { stream }))
            assert.strictEqual(live._tag, "AdminRefused")
            assert.include(live.message, lease)
            yield* Effect.promise(() => admin().del(lease))

            const done = yield* MigrateKeys.migrate(connection, { stream })
            assert.deepStrictEqual(done.conflicts, [])
            assert.deepStrictEqual(
              done.moved.map((m) => m.from).sort(),
              dry.moved.map((m) => m.from).sort(),
            )
            assert.strictEqual(
              yield* Effect.promise(() => admin().get(`${prefix}schema`)),
              String(SCHEMA_VERSION),
            )
            yield* KeySchema.ensure(connection, [key])
            // nothing of schema 1 is left
            for (const k of [
              ...schema1Keys(stream, "billing"),
              `{${stream}:0}`,
              `{${stream}:0}:dlq`,
            ])
              assert.strictEqual(yield* Effect.promise(() => admin().exists(k)), 0, k)

            // and everything is where this version looks for it
            const streams = RedisShardStreams.makeWith(connection)
            assert.strictEqual(yield* streams.ownerToken(base), 7)
            assert.strictEqual(
              (yield* Effect.flip(streams.read({ ...base, consumer: "c", token: 6, count: 9 })))
                ._tag,
              "StaleOwner",
            )
            const pending = yield* streams.read({
              ...base,
              consumer: "c",
              token: 7,
              count: 9,
              from: "pending",
            })
            assert.deepStrictEqual(
              pending.map((m) => m.fields.n),
              ["2"],
            )
            const unread = yield* streams.read({ ...base, consumer: "c", token: 7, count: 9 })
            assert.deepStrictEqual(
              unread.map((m) => m.fields.n),
              ["3", "4"],
            )
            const dlq = yield* streams.range(ShardStreams.deadLetterKey(stream, 0))
            assert.strictEqual(dlq[0]!.fields[ShardStreams.DeadLetterFields.reason], "poison")
            assert.isTrue((yield* streams.drainState({ ...base, shard: 1 })).sealed)
            // the idempotency window came along: a retried send is not stored twice
            assert.strictEqual(
              (yield* Effect.flip(
                streams.append(
                  stream,
                  1,
                  { n: "x" },
                  { idempotency: { producerId: "p", messageId: "m2" } },
                ),
              ))._tag,
              "ShardSealed",
            )
            const resent = yield* streams.append(
              stream,
              1,
              { n: "x" },
              { idempotency: { producerId: "p", messageId: "m1" } },
            )
            assert.strictEqual(resent, sent)
            assert.strictEqual(
              Option.getOrThrow(yield* RedisStore.makeWith(connection).load(key)).storeRevision,
              2,
            )
            assert.strictEqual(
              Option.getOrThrow(yield* RedisStreamLayouts.makeWith(connection).load(stream)).record
                .generations[0]!.shardCount,
              2,
            )
            // run again: nothing left to move
            assert.deepStrictEqual((yield* MigrateKeys.migrate(connection, { stream })).moved, [])
          }),
        ),
    )
  })
}
