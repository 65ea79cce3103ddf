/**
 * CoordinatorLease port: one coordinator per group (stream, group) at a time.
 * Every acquire hands out a strictly larger fencing token for the group;
 * renew keeps the token and extends the TTL; check asks whether the grant is
 * still held without extending it; a lease whose TTL passed can be taken by
 * anyone. Expiry times are the holder's MONOTONIC clock (docs/protocol.md
 * rule 21): a step of the wall clock neither extends nor shortens a lease.
 * The memory implementation reads effect's `Clock`.
 *
 * @example
 * const leases = yield* CoordinatorLease.CoordinatorLease
 * const grant = yield* leases.acquire({ stream: "orders", group: "workers" }, "pod-1", 30_000)
 * yield* leases.check(grant)          // still ours? (does not extend it)
 * const later = yield* leases.renew(grant, 30_000)
 * yield* leases.release(later)
 */
import { Context, Effect, Layer } from "effect"
import { LeaseHeld, LeaseLost, type StoreUnavailable } from "../Errors.js"
import { monotonicMillis } from "../time/Instant.js"
import { type GroupKey, groupKeyString } from "./GroupKey.js"

export interface LeaseGrant {
  readonly key: GroupKey
  readonly holder: string
  /** Fencing token; strictly increasing per group across acquisitions. */
  readonly token: number
  /** When the lease runs out unless renewed (the holder's monotonic clock, ms). */
  readonly expiresAt: number
}

export interface CoordinatorLeaseShape {
  /** Take the group's lease (a holder may re-acquire its own); fails if another holder has it. */
  readonly acquire: (
    key: GroupKey,
    holder: string,
    ttlMs: number,
  ) => Effect.Effect<LeaseGrant, LeaseHeld | StoreUnavailable>
  /** Extend a lease still held with this token; the result carries the new `expiresAt`. */
  readonly renew: (
    grant: LeaseGrant,
    ttlMs: number,
  ) => Effect.Effect<LeaseGrant, LeaseLost | StoreUnavailable>
  /** Succeed if the lease is still held with this token; never extends it (a read). */
  readonly check: (grant: LeaseGrant) => Effect.Effect<void, LeaseLost | StoreUnavailable>
  /** Release if still held with this token; otherwise a no-op. Best effort. */
  readonly release: (grant: LeaseGrant) => Effect.Effect<void>
}

export class CoordinatorLease extends Context.Service<CoordinatorLease, CoordinatorLeaseShape>()(
  "@shardline/core/CoordinatorLease",
) {}

const lost = (grant: LeaseGrant) =>
  new LeaseLost({
    stream: grant.key.stream,
    group: grant.key.group,
    holder: grant.holder,
    token: grant.token,
  })

/** A fresh memory lease table (one lease and one token counter per group). */
export const makeMemory: Effect.Effect<CoordinatorLeaseShape> = Effect.sync(() => {
  const leases = new Map<string, LeaseGrant>()
  const tokens = new Map<string, number>()
  /** The grant, if it is the live lease of its group at `now`. */
  const live = (grant: LeaseGrant, now: number): LeaseGrant | undefined => {
    const cur = leases.get(groupKeyString(grant.key))
    return cur !== undefined && cur.token === grant.token && cur.expiresAt > now ? cur : undefined
  }
  const lease: CoordinatorLeaseShape = {
    acquire: (key, holder, ttlMs) =>
      Effect.flatMap(monotonicMillis, (now) => {
        const k = groupKeyString(key)
        const cur = leases.get(k)
        if (cur !== undefined && cur.expiresAt > now && cur.holder !== holder)
          return Effect.fail(
            new LeaseHeld({
              stream: key.stream,
              group: key.group,
              holder: cur.holder,
              expiresAt: cur.expiresAt,
            }),
          )
        const token = (tokens.get(k) ?? 0) + 1
        tokens.set(k, token)
        const grant: LeaseGrant = { key, holder, token, expiresAt: now + ttlMs }
        leases.set(k, grant)
        return Effect.succeed(grant)
      }),
    renew: (grant, ttlMs) =>
      Effect.flatMap(monotonicMillis, (now) => {
        const cur = live(grant, now)
        if (cur === undefined) return Effect.fail(lost(grant))
        const renewed: LeaseGrant = { ...cur, expiresAt: now + ttlMs }
        leases.set(groupKeyString(grant.key), renewed)
        return Effect.succeed(renewed)
      }),
    check: (grant) =>
      Effect.flatMap(monotonicMillis, (now) =>
        live(grant, now) === undefined ? Effect.fail(lost(grant)) : Effect.void,
      ),
    release: (grant) =>
      Effect.sync(() => {
        const k = groupKeyString(grant.key)
        if (leases.get(k)?.token === grant.token) leases.delete(k)
      }),
  }
  return lease
})

/** Layer with a fresh memory lease table. */
export const layerMemory: Layer.Layer<CoordinatorLease> = Layer.effect(CoordinatorLease, makeMemory)
