import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { CoordinatorLease } from "../src/index.js"

const g = { stream: "orders", group: "g" }

describe("CoordinatorLease (memory)", () => {
  it.effect("one holder at a time; tokens increase on every acquisition; expiry via Clock", () =>
    Effect.gen(function* () {
      const lease = yield* CoordinatorLease.makeMemory
      const a = yield* lease.acquire(g, "a", 1_000)
      assert.strictEqual(a.token, 1)
      assert.deepStrictEqual(a.key, g)
      const held = yield* Effect.flip(lease.acquire(g, "b", 1_000))
      assert.strictEqual(held._tag, "LeaseHeld")
      yield* TestClock.adjust(500)
      const renewed = yield* lease.renew(a, 1_000)
      assert.strictEqual(renewed.token, 1)
      assert.strictEqual(renewed.expiresAt, 1_500)
      yield* TestClock.adjust(1_500)
      const b = yield* lease.acquire(g, "b", 1_000)
      assert.strictEqual(b.token, 2)
      const lost = yield* Effect.flip(lease.renew(renewed, 1_000))
      assert.strictEqual(lost._tag, "LeaseLost")
      yield* lease.release(renewed) // stale token: no effect
      assert.strictEqual((yield* Effect.flip(lease.acquire(g, "c", 1_000)))._tag, "LeaseHeld")
      yield* lease.release(b)
      assert.strictEqual((yield* lease.acquire(g, "c", 1_000)).token, 3)
    }),
  )

  it.effect("check: succeeds while held with this token, never extends the TTL", () =>
    Effect.gen(function* () {
      const lease = yield* CoordinatorLease.makeMemory
      const a = yield* lease.acquire(g, "a", 1_000)
      yield* TestClock.adjust(600)
      yield* lease.check(a)
      yield* TestClock.adjust(300)
      yield* lease.check(a)
      yield* TestClock.adjust(100) // 1000 ms after the acquire: the checks did not extend it
      assert.strictEqual((yield* Effect.flip(lease.check(a)))._tag, "LeaseLost")
      const b = yield* lease.acquire(g, "b", 1_000)
      assert.strictEqual((yield* Effect.flip(lease.check(a)))._tag, "LeaseLost")
      yield* lease.check(b)
      yield* lease.release(b)
      assert.strictEqual((yield* Effect.flip(lease.check(b)))._tag, "LeaseLost")
    }),
  )

  it.effect(
    "leases are per (stream, group): the same group name on two streams is two leases",
    () =>
      Effect.gen(function* () {
        const lease = yield* CoordinatorLease.makeMemory
        const orders = yield* lease.acquire(g, "a", 1_000)
        const payments = yield* lease.acquire({ stream: "payments", group: "g" }, "b", 1_000)
        assert.strictEqual(orders.token, 1)
        assert.strictEqual(payments.token, 1)
        const held = yield* Effect.flip(lease.acquire(g, "b", 1_000))
        assert.deepStrictEqual(
          held._tag === "LeaseHeld" && [held.stream, held.group, held.holder],
          ["orders", "g", "a"],
        )
        yield* lease.release(payments)
        yield* lease.check(orders)
        assert.strictEqual(
          (yield* lease.acquire({ stream: "payments", group: "g" }, "c", 1)).token,
          2,
        )
      }),
  )
})
