/**
 * The CoordinatorLease contract, run unchanged on every implementation
 * (test/CoordinatorLease.test.ts). Live clock: TTLs are real milliseconds.
 */
import { assert, it } from "@effect/vitest"
import type { CoordinatorLease } from "@shardline/core"
import { Effect } from "effect"
import { unique } from "../support/targets.js"

type Lease = CoordinatorLease.CoordinatorLeaseShape

/** Whether the grant is still held (`check` fails LeaseLost otherwise; never extends it). */
const holds = (lease: Lease, grant: CoordinatorLease.LeaseGrant) =>
  lease.check(grant).pipe(
    Effect.as(true),
    Effect.catchTag("LeaseLost", (e) => {
      assert.strictEqual(e.token, grant.token)
      assert.strictEqual(e.stream, grant.key.stream)
      assert.strictEqual(e.group, grant.key.group)
      return Effect.succeed(false)
    }),
  )

const group = () => ({ stream: unique("orders"), group: "workers" })

export const coordinatorLeaseContract = (subject: () => Lease) => {
  it.live("one holder at a time; tokens grow on every acquisition; renew keeps the token", () =>
    Effect.gen(function* () {
      const lease = subject()
      const key = group()
      const a = yield* lease.acquire(key, "a", 5_000)
      assert.deepStrictEqual(a.key, key)
      assert.strictEqual(a.holder, "a")
      const held = yield* Effect.flip(lease.acquire(key, "b", 5_000))
      assert.strictEqual(held._tag, "LeaseHeld")
      if (held._tag === "LeaseHeld") {
        assert.strictEqual(held.holder, "a")
        assert.isAbove(held.expiresAt, 0)
      }
      const renewed = yield* lease.renew(a, 5_000)
      assert.strictEqual(renewed.token, a.token)
      assert.isAtLeast(renewed.expiresAt, a.expiresAt)
      assert.isTrue(yield* holds(lease, renewed))
      // the holder acquiring again is a new acquisition: a new, larger token
      const again = yield* lease.acquire(key, "a", 5_000)
      assert.isAbove(again.token, a.token)
      assert.isFalse(yield* holds(lease, a))
      assert.strictEqual((yield* Effect.flip(lease.renew(a, 5_000)))._tag, "LeaseLost")
      yield* lease.release(again)
      const b = yield* lease.acquire(key, "b", 5_000)
      assert.isAbove(b.token, again.token)
    }),
  )

  it.live("a paused ex-holder: its TTL passes, another takes over, its renew fails LeaseLost", () =>
    Effect.gen(function* () {
      const lease = subject()
      const key = group()
      const a = yield* lease.acquire(key, "a", 100)
      yield* Effect.sleep(150) // a is paused past its TTL
      assert.isFalse(yield* holds(lease, a))
      const lost = yield* Effect.flip(lease.renew(a, 5_000))
      assert.strictEqual(lost._tag, "LeaseLost")
      if (lost._tag === "LeaseLost") assert.strictEqual(lost.token, a.token)
      const b = yield* lease.acquire(key, "b", 5_000)
      assert.isAbove(b.token, a.token)
      assert.strictEqual((yield* Effect.flip(lease.renew(a, 5_000)))._tag, "LeaseLost")
      // a's release with its stale token changes nothing
      yield* lease.release(a)
      assert.isTrue(yield* holds(lease, b))
      assert.strictEqual((yield* Effect.flip(lease.acquire(key, "c", 5_000)))._tag, "LeaseHeld")
    }),
  )

  // a check 700 ms into a 1.5 s lease that extended it would keep it past
  // 1.6 s; a loaded machine may stall 800 ms before that check
  it.live("check does not extend the lease", () =>
    Effect.gen(function* () {
      const lease = subject()
      const key = group()
      const a = yield* lease.acquire(key, "a", 1_500)
      assert.isTrue(yield* holds(lease, a))
      yield* Effect.sleep(700)
      assert.isTrue(yield* holds(lease, a))
      yield* Effect.sleep(900)
      assert.isFalse(yield* holds(lease, a))
      const b = yield* lease.acquire(key, "b", 5_000)
      assert.isAbove(b.token, a.token)
    }),
  )

  // Robust to a stalled machine: each check needs only a lower bound on the
  // time that passed (a stall makes an expiry more certain, never less).
  it.live("renew sets the TTL from now: longer than the grant's, and shorter too", () =>
    Effect.gen(function* () {
      const lease = subject()
      const key = group()
      // longer: a 2 s grant renewed to 60 s is still held past its first 2 s
      let grant = yield* lease.acquire(key, "a", 2_000)
      grant = yield* lease.renew(grant, 60_000)
      yield* Effect.sleep(2_100)
      assert.isTrue(yield* holds(lease, grant))
      assert.strictEqual((yield* Effect.flip(lease.acquire(key, "b", 400)))._tag, "LeaseHeld")
      // shorter: renewed to 300 ms with ~58 s left, it is gone 400 ms later
      grant = yield* lease.renew(grant, 300)
      yield* Effect.sleep(400)
      assert.isFalse(yield* holds(lease, grant))
      const b = yield* lease.acquire(key, "b", 5_000)
      assert.isAbove(b.token, grant.token)
    }),
  )

  it.live(
    "groups are independent: same group name on two streams, two leases and two token sequences",
    () =>
      Effect.gen(function* () {
        const lease = subject()
        const stream = unique("orders")
        const k1 = { stream, group: "workers" }
        const k2 = { stream: `${stream}-eu`, group: "workers" }
        const k3 = { stream, group: "auditors" }
        const a = yield* lease.acquire(k1, "a", 5_000)
        const b = yield* lease.acquire(k2, "b", 5_000)
        const c = yield* lease.acquire(k3, "c", 5_000)
        assert.strictEqual(a.token, b.token)
        assert.strictEqual(a.token, c.token)
        yield* lease.release(b)
        assert.isTrue(yield* holds(lease, a))
        assert.isTrue(yield* holds(lease, c))
        assert.isFalse(yield* holds(lease, b))
      }),
  )
}
