/**
 * CoordinatorLease port: one coordinator per group at a time. Every acquire
 * hands out a strictly larger fencing token; renew keeps the token and
 * extends the TTL; a lease whose TTL passed can be taken by anyone. The
 * memory implementation reads time from effect's `Clock`.
 */
import { Clock, Context, Effect, Layer } from "effect"
import { LeaseHeld, LeaseLost } from "./Errors.js"

export interface LeaseGrant {
  readonly group: string
  readonly holder: string
  /** Fencing token; strictly increasing per group across acquisitions. */
  readonly token: number
  readonly expiresAt: number
}

export interface CoordinatorLeaseShape {
  readonly acquire: (
    group: string,
    holder: string,
    ttlMs: number,
  ) => Effect.Effect<LeaseGrant, LeaseHeld>
  readonly renew: (lease: LeaseGrant, ttlMs: number) => Effect.Effect<LeaseGrant, LeaseLost>
  /** Release if still held with this token; otherwise a no-op. */
  readonly release: (lease: LeaseGrant) => Effect.Effect<void>
}

export const makeMemoryUnsafe = (): CoordinatorLeaseShape => {
  const leases = new Map<string, LeaseGrant>()
  const tokens = new Map<string, number>()
  return {
    acquire: (group, holder, ttlMs) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const cur = leases.get(group)
        if (cur !== undefined && cur.expiresAt > now && cur.holder !== holder)
          return Effect.fail(new LeaseHeld({ group, holder: cur.holder, expiresAt: cur.expiresAt }))
        const token = (tokens.get(group) ?? 0) + 1
        tokens.set(group, token)
        const grant: LeaseGrant = { group, holder, token, expiresAt: now + ttlMs }
        leases.set(group, grant)
        return Effect.succeed(grant)
      }),
    renew: (lease, ttlMs) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const cur = leases.get(lease.group)
        if (cur === undefined || cur.token !== lease.token || cur.expiresAt <= now)
          return Effect.fail(
            new LeaseLost({ group: lease.group, holder: lease.holder, token: lease.token }),
          )
        const grant: LeaseGrant = { ...cur, expiresAt: now + ttlMs }
        leases.set(lease.group, grant)
        return Effect.succeed(grant)
      }),
    release: (lease) =>
      Effect.sync(() => {
        if (leases.get(lease.group)?.token === lease.token) leases.delete(lease.group)
      }),
  }
}

export class CoordinatorLease extends Context.Service<CoordinatorLease, CoordinatorLeaseShape>()(
  "@shardline/core/CoordinatorLease",
) {
  static readonly makeMemory: Effect.Effect<CoordinatorLeaseShape> = Effect.sync(makeMemoryUnsafe)
  static readonly layerMemory: Layer.Layer<CoordinatorLease> = Layer.effect(
    CoordinatorLease,
    CoordinatorLease.makeMemory,
  )
  static readonly layerWith = (lease: CoordinatorLeaseShape): Layer.Layer<CoordinatorLease> =>
    Layer.succeed(CoordinatorLease, lease)
}
