/**
 * The namespace (src/keys.ts) and the key schema's version (src/KeySchema.ts;
 * docs/redis.md, "Keys"), on every Redis target: a prefix that cannot name a
 * namespace, and ioredis' own keyPrefix, are refused before anything
 * connects; another schema recorded in the namespace is refused at connect;
 * an earlier version's unprefixed keys of a group are refused at start and
 * nothing is written; `migrate-keys` moves them into the namespace with
 * their state, tokens and unread entries; two namespaces on one server never
 * see each other.
 */
import { assert, describe, it } from "@effect/vitest"
import { Coordinator, ShardStreams } from "@shardline/core"
import { Effect, Option } from "effect"
import { Cluster, type Redis } from "ioredis"
import * as KeySchema from "../src/KeySchema.js"
import { make as keySpace, prefixProblem, SCHEMA_VERSION, schema1Keys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import * as RedisStore from "../src/RedisStore.js"
import { configFor } from "./contract/Store.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"

describe("key prefixes (src/keys.ts)", () => {
  it("a namespace prefix is 1 to 64 safe characters: no glob, brace or space", () => {
    for (const ok of ["shardline:", "tenant-a:", "a", "app/orders.v2@eu_1:", "x".repeat(64)])
      assert.isUndefined(prefixProblem(ok), ok)
    for (const bad of ["", "a*", "a?", "a[b]", "a\\b", "{t}:", "a}", "a b", "x".repeat(65), "é:"])
      assert.isString(prefixProblem(bad), JSON.stringify(bad))
  })

  it("every key and channel is under the prefix, outside its hash tag", () => {
    const k = keySpace("tenant-a:")
    const group = { stream: "orders", group: "billing" }
    assert.strictEqual(k.shardKey("orders", 3), "tenant-a:{orders:3}")
    assert.strictEqual(k.ownerTokenKey("orders", 3, "billing"), "tenant-a:{orders:3}:owner:billing")
    assert.strictEqual(k.gateKey("orders", 3), "tenant-a:{orders:3}:gate")
    assert.strictEqual(k.leaseKey(group), "tenant-a:group:{orders:billing}:lease")
    assert.strictEqual(k.noticeChannel(group, "m0"), "tenant-a:group:{orders:billing}:notice:m0")
    assert.strictEqual(k.layoutKey("orders"), "tenant-a:stream:{orders}:layout")
    assert.strictEqual(k.schema, "tenant-a:schema")
    assert.strictEqual(
      k.namespaced(ShardStreams.deadLetterKey("orders", 3)),
      k.deadLetterKey("orders", 3),
    )
    // names are URI-encoded inside the control-plane tags: two groups stay two
    assert.notStrictEqual(
      k.leaseKey({ stream: "a:b", group: "c" }),
      k.leaseKey({ stream: "a", group: "b:c" }),
    )
    assert.deepStrictEqual(
      k.groupOfRevisionKey(k.storeRevisionKey({ stream: "a:b", group: "c{d" })),
      {
        stream: "a:b",
        group: "c{d",
      },
    )
    assert.throws(() => keySpace("a*"))
  })

  it("schema 1's keys under a prefix never include a key of this schema", () => {
    const k = keySpace("shardline:")
    const mine = new Set([
      k.shardKey("s", 0),
      k.ownerTokenKey("s", 0, "g"),
      k.leaseKey({ stream: "s", group: "g" }),
      k.storeRevisionKey({ stream: "s", group: "g" }),
      k.layoutKey("s"),
    ])
    for (const old of [...schema1Keys("s", "g"), ...schema1Keys("s", "g", "shardline:")])
      assert.isFalse(mine.has(old), old)
  })
})

for (const target of redisTargets()) {
  describeTarget("the namespace and its key schema", target, connect(target), (subject) => {
    const admin = () => subject().client
    /** A connection to the same server in namespace `prefix`, closed with the test's scope. */
    const inNamespace = (prefix: string) =>
      RedisConnection.make({ ...target.options, keyPrefix: prefix })
    const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.map(
        Effect.flip(effect),
        (e) => e as { readonly _tag: string; readonly message: string },
      )

    it.live("a prefix that cannot name a namespace, or ioredis' keyPrefix: InvalidKeyPrefix", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const bad = yield* failure(inNamespace("tenant*"))
          assert.strictEqual(bad._tag, "InvalidKeyPrefix")
          const ioredis =
            target.kind === "cluster7"
              ? yield* failure(
                  RedisConnection.make({
                    cluster: {
                      ...target.options!.cluster!,
                      options: { keyPrefix: "app:" },
                    },
                  }),
                )
              : yield* failure(
                  RedisConnection.make({ ...target.options, redis: { keyPrefix: "app:" } }),
                )
          assert.strictEqual(ioredis._tag, "InvalidKeyPrefix")
          assert.include(ioredis.message, "keyPrefix")
        }),
      ),
    )

    it.live("another schema recorded in the namespace: KeySchemaMismatch at connect", () =>
      Effect.scoped(
        Effect.gen(function* () {
          for (const stored of ["3", "1", "not a version"]) {
            const prefix = `${unique("ns")}:`
            yield* Effect.promise(() => admin().set(`${prefix}schema`, stored))
            const e = yield* failure(inNamespace(prefix))
            assert.strictEqual(e._tag, "KeySchemaMismatch", stored)
            assert.strictEqual((e as unknown as { found: string }).found, stored)
            assert.include(e.message, `${prefix}schema`)
            assert.include(e.message, "namespace of its own")
            // and left as it was
            assert.strictEqual(yield* Effect.promise(() => admin().get(`${prefix}schema`)), stored)
          }
          // this version's own: fine
          const prefix = `${unique("ns")}:`
          yield* Effect.promise(() => admin().set(`${prefix}schema`, String(SCHEMA_VERSION)))
          yield* inNamespace(prefix)
        }),
      ),
    )

    it.live("a fresh namespace: ensure records this version; read-only records nothing", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const prefix = `${unique("ns")}:`
          const connection = yield* inNamespace(prefix)
          const targets = [{ stream: unique("s"), group: "g" }]
          yield* KeySchema.ensure(connection, targets, { readOnly: true })
          assert.strictEqual(yield* Effect.promise(() => admin().exists(`${prefix}schema`)), 0)
          yield* KeySchema.ensure(connection, targets)
          assert.strictEqual(
            yield* Effect.promise(() => admin().get(`${prefix}schema`)),
            String(SCHEMA_VERSION),
          )
          // recorded: a later start is one GET
          yield* KeySchema.ensure(connection, targets)
        }),
      ),
    )

    it.live(
      "a group's keys in the unprefixed layout (schema 1): KeySchemaMismatch naming them, nothing written",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const stream = unique("old")
            const group = { stream, group: "billing" }
            const tag = `{shardline:${stream}:billing}`
            // what an earlier version left: a Store revision, an owner token, a layout record
            const cases: ReadonlyArray<[string, string, (c: Redis | Cluster) => Promise<unknown>]> =
              [
                ["the Store", `${tag}:store:revision`, (c) => c.set(`${tag}:store:revision`, "4")],
                [
                  "an owner token",
                  `{${stream}:0}:owner:billing`,
                  (c) => c.set(`{${stream}:0}:owner:billing`, "7"),
                ],
                [
                  "the layout",
                  `{shardline:${stream}}:layout`,
                  (c) => c.hset(`{shardline:${stream}}:layout`, "record", "{}", "revision", "1"),
                ],
                [
                  "the lease under the prefix (ioredis' keyPrefix)",
                  `shardline-old:${tag}:lease`,
                  (c) => c.hset(`shardline-old:${tag}:lease`, "holder", "h", "token", "1"),
                ],
              ]
            for (const [what, key, write] of cases) {
              const prefix = key.startsWith("shardline-old:")
                ? "shardline-old:"
                : `${unique("ns")}:`
              yield* Effect.promise(() => write(admin()))
              const connection = yield* inNamespace(prefix)
              const e = yield* failure(KeySchema.ensure(connection, [group]))
              assert.strictEqual(e._tag, "KeySchemaMismatch", what)
              assert.include(e.message, key, what)
              assert.include(e.message, "migrate-keys", what)
              assert.deepStrictEqual((e as unknown as { keys: Array<string> }).keys, [key])
              // nothing recorded, so the next start is refused too
              assert.strictEqual(yield* Effect.promise(() => admin().exists(`${prefix}schema`)), 0)
              yield* Effect.promise(() => admin().del(key))
              yield* KeySchema.ensure(connection, [group])
              yield* Effect.promise(() => admin().del(`${prefix}schema`))
            }
            // another group's old keys do not stop this group
            const prefix = `${unique("ns")}:`
            yield* Effect.promise(() =>
              admin().set(`{shardline:${stream}:other}:store:revision`, "1"),
            )
            yield* KeySchema.ensure(yield* inNamespace(prefix), [group])
            yield* Effect.promise(() => admin().del(`{shardline:${stream}:other}:store:revision`))
          }),
        ),
    )

    it.live("two namespaces on one server: same stream and group, nothing shared", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const [a, b] = [`${unique("ta")}:`, `${unique("tb")}:`]
          const ca = yield* inNamespace(a)
          const cb = yield* inNamespace(b)
          const sa = RedisShardStreams.makeWith(ca)
          const sb = RedisShardStreams.makeWith(cb)
          const base = { stream: "orders", shard: 0, group: "billing" }
          yield* sa.setOwnerToken({ ...base, token: 5 })
          yield* sa.append("orders", 0, { from: "a" })
          yield* sb.append("orders", 0, { from: "b" })
          yield* sb.append("orders", 0, { from: "b" })
          // b's owner token is its own: none until b's coordinator grants it 1
          assert.strictEqual(yield* sb.ownerToken(base), 0)
          yield* sb.setOwnerToken({ ...base, token: 1 })
          const readA = yield* sa.read({ ...base, consumer: "c", token: 5, count: 10 })
          const readB = yield* sb.read({ ...base, consumer: "c", token: 1, count: 10 })
          assert.deepStrictEqual(
            readA.map((m) => m.fields.from),
            ["a"],
          )
          assert.deepStrictEqual(
            readB.map((m) => m.fields.from),
            ["b", "b"],
          )
          // the Store too
          const key = { stream: "orders", group: "billing" }
          yield* RedisStore.makeWith(ca).commit(key, 0, Coordinator.createGroup(configFor(key), 0))
          assert.isTrue(Option.isNone(yield* RedisStore.makeWith(cb).load(key)))
          // every key each wrote is under its prefix
          const nodes =
            admin() instanceof Cluster ? (admin() as Cluster).nodes("master") : [admin() as Redis]
          for (const prefix of [a, b]) {
            const keys = (yield* Effect.promise(() =>
              Promise.all(nodes.map((n) => n.keys(`*${prefix}*`))),
            )).flat()
            assert.isAbove(keys.length, 0)
            assert.isTrue(
              keys.every((k) => k.startsWith(prefix)),
              keys.join(" "),
            )
          }
        }),
      ),
    )
  })
}
