/**
 * The CoordinatorLease contract on core's memory lease and on every Redis
 * target, then foreign values under the lease's keys.
 */
import { assert, it } from "@effect/vitest"
import { CoordinatorLease } from "@shardline/core"
import { Effect } from "effect"
import RedisMock from "ioredis-mock"
import { defaultKeys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisCoordinatorLease from "../src/RedisCoordinatorLease.js"
import { coordinatorLeaseContract } from "./contract/CoordinatorLease.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"

const { groupBase: groupTag, leaseCounterKey, leaseKey } = defaultKeys

/** Core's lease port reports a foreign value as StoreUnavailable caused by a ForeignValue. */
const assertForeign = (error: { readonly _tag: string; readonly cause?: unknown }, key: string) => {
  assert.strictEqual(error._tag, "StoreUnavailable")
  const cause = error.cause as { readonly _tag?: string; readonly key?: string } | undefined
  assert.strictEqual(cause?._tag, "ForeignValue")
  assert.strictEqual(cause?.key, key)
}

describeTarget(
  "CoordinatorLease contract",
  { name: "memory (core)" },
  CoordinatorLease.makeMemory,
  (subject) => coordinatorLeaseContract(subject),
)

for (const target of redisTargets()) {
  const acquire = Effect.map(connect(target), (connection) => ({
    connection,
    lease: RedisCoordinatorLease.makeWith(connection),
  }))

  describeTarget("CoordinatorLease contract", target, acquire, (subject) =>
    coordinatorLeaseContract(() => subject().lease),
  )

  describeTarget("CoordinatorLease bad input", target, acquire, (subject) => {
    const raw = () => subject().connection.client

    it.live(
      "a non-hash at the lease key is StoreUnavailable (a ForeignValue) for every operation; left as is",
      () =>
        Effect.gen(function* () {
          const { lease } = subject()
          const key = { stream: unique("bad"), group: "g" }
          const grant = { key, holder: "a", token: 1, expiresAt: 0 }
          yield* Effect.promise(() => raw().set(leaseKey(key), "not a hash"))
          for (const error of [
            yield* Effect.flip(lease.acquire(key, "b", 1_000)),
            yield* Effect.flip(lease.renew(grant, 1_000)),
            yield* Effect.flip(lease.check(grant)),
          ])
            assertForeign(error, leaseKey(key))
          // release is best effort: it never fails, and changes nothing here
          yield* lease.release(grant)
          assert.strictEqual(yield* Effect.promise(() => raw().get(leaseKey(key))), "not a hash")
        }),
    )

    it.live(
      "a lease hash without a holder and integer token is refused on acquire; left as is",
      () =>
        Effect.gen(function* () {
          const { lease } = subject()
          const cases: ReadonlyArray<Record<string, string>> = [
            { holder: "a" },
            { holder: "a", token: "x" },
            { token: "3" },
          ]
          for (const fields of cases) {
            const key = { stream: unique("bad"), group: "g" }
            yield* Effect.promise(() => raw().hset(leaseKey(key), fields))
            assertForeign(yield* Effect.flip(lease.acquire(key, "b", 1_000)), leaseKey(key))
            assert.deepStrictEqual(
              yield* Effect.promise(() => raw().hgetall(leaseKey(key))),
              fields,
            )
            assert.strictEqual(yield* Effect.promise(() => raw().exists(leaseCounterKey(key))), 0)
          }
        }),
    )

    it.live("a counter that is not an integer is refused and is not overwritten", () =>
      Effect.gen(function* () {
        const { lease } = subject()
        const key = { stream: unique("bad"), group: "g" }
        yield* Effect.promise(() => raw().set(leaseCounterKey(key), "seven"))
        assertForeign(yield* Effect.flip(lease.acquire(key, "a", 1_000)), leaseCounterKey(key))
        assert.strictEqual(yield* Effect.promise(() => raw().get(leaseCounterKey(key))), "seven")
        assert.strictEqual(yield* Effect.promise(() => raw().exists(leaseKey(key))), 0)
      }),
    )

    it.live("a counter reset below a live lease's token never hands that token out again", () =>
      Effect.gen(function* () {
        const { lease } = subject()
        const key = { stream: unique("reset"), group: "g" }
        const a = yield* lease.acquire(key, "a", 5_000)
        const a2 = yield* lease.acquire(key, "a", 5_000)
        yield* Effect.promise(() => raw().del(leaseCounterKey(key)))
        const a3 = yield* lease.acquire(key, "a", 5_000)
        assert.isAbove(a3.token, a2.token)
        assert.isAbove(a2.token, a.token)
      }),
    )

    it.live(
      "the lease keys share the group's hash tag; names with ':' or braces cannot collide",
      () =>
        Effect.gen(function* () {
          const { lease } = subject()
          const s = unique("a")
          const k1 = { stream: `${s}:b`, group: "c" }
          const k2 = { stream: s, group: "b:c" }
          assert.notStrictEqual(groupTag(k1), groupTag(k2))
          assert.strictEqual(
            groupTag({ stream: "orders", group: "workers" }),
            "shardline:group:{orders:workers}",
          )
          assert.isTrue(leaseKey(k1).startsWith(groupTag(k1)))
          yield* lease.acquire(k1, "x", 5_000)
          yield* lease.acquire(k2, "y", 5_000)
          const odd = { stream: `${s}}{`, group: "}" }
          assert.strictEqual((yield* lease.acquire(odd, "z", 5_000)).holder, "z")
        }),
    )

    it.live("ttlMs must be a positive integer", () =>
      Effect.gen(function* () {
        const { lease } = subject()
        const key = { stream: unique("ttl"), group: "g" }
        for (const ttl of [0, -5, 1.5, Number.NaN]) {
          const error = yield* Effect.flip(lease.acquire(key, "a", ttl))
          assert.strictEqual(error._tag, "StoreUnavailable")
          if (error._tag === "StoreUnavailable")
            assert.strictEqual((error.cause as { _tag: string })._tag, "InvalidArgument")
        }
      }),
    )
  })
}

// ioredis-mock (no server): the lease's scripts use only HMGET, EXISTS,
// PTTL, GET, INCR, SET, HSET, PEXPIRE and DEL, which it implements.
describeTarget(
  "CoordinatorLease contract",
  { name: "ioredis-mock" },
  Effect.gen(function* () {
    const client = new RedisMock()
    yield* Effect.addFinalizer(() => Effect.promise(() => client.quit()))
    const connection = yield* RedisConnection.fromClient(client, {
      server: "unknown",
      version: "ioredis-mock",
      xackdel: false,
      readClaim: false,
    })
    return RedisCoordinatorLease.makeWith(connection)
  }),
  (subject) => coordinatorLeaseContract(subject),
)
