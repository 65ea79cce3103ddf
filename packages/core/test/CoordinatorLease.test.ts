import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { CoordinatorLease } from "../src/index.js"

describe("CoordinatorLease (memory)", () => {
  it.effect("one holder at a time; tokens increase on every acquisition; expiry via Clock", () =>
    Effect.gen(function* () {
      const lease = yield* CoordinatorLease.makeMemory
      const a = yield* lease.acquire("g", "a", 1_000)
      assert.strictEqual(a.token, 1)
      const held = yield* Effect.flip(lease.acquire("g", "b", 1_000))
      assert.strictEqual(held._tag, "LeaseHeld")
      yield* TestClock.adjust(500)
      const renewed = yield* lease.renew(a, 1_000)
      assert.strictEqual(renewed.token, 1)
      assert.strictEqual(renewed.expiresAt, 1_500)
      yield* TestClock.adjust(1_500)
      const b = yield* lease.acquire("g", "b", 1_000)
      assert.strictEqual(b.token, 2)
      const lost = yield* Effect.flip(lease.renew(renewed, 1_000))
      assert.strictEqual(lost._tag, "LeaseLost")
      yield* lease.release(renewed) // stale token: no effect
      assert.strictEqual((yield* Effect.flip(lease.acquire("g", "c", 1_000)))._tag, "LeaseHeld")
      yield* lease.release(b)
      assert.strictEqual((yield* lease.acquire("g", "c", 1_000)).token, 3)
    }),
  )
})
