/**
 * CoordinatorLease on Redis (docs/redis.md, "CoordinatorLease").
 *
 * The lease is a hash `{shardline:<stream>:<group>}:lease` (holder, token)
 * whose TTL lives in Redis (PEXPIRE); the fencing token is an INCR of
 * `{shardline:<stream>:<group>}:lease:counter`, so every acquisition gets a
 * larger token than any before it. acquire, renew and release are
 * compare-on-token Lua scripts; `check` is one HMGET and never extends the
 * TTL. A paused ex-holder whose TTL ran out finds the lease gone or taken:
 * its renew fails LeaseLost.
 */
import { LeaseHeld, LeaseLost } from "@shardline/core"
import { Clock, Effect } from "effect"
import { InvalidArgument, type RedisStoreError } from "./Errors.js"
import { Code, evalScript, keyCommand } from "./internal/reply.js"
import { leaseCounterKey, leaseKey } from "./keys.js"
import type { CoordinatorLeaseShape, LeaseGrant } from "./ports.js"
import { RedisConnection, type RedisConnectionShape } from "./RedisConnection.js"
import { Scripts } from "./scripts.js"

export type RedisCoordinatorLease = CoordinatorLeaseShape<RedisStoreError>

const checkTtl = (ttlMs: number) =>
  Number.isSafeInteger(ttlMs) && ttlMs >= 1
    ? Effect.void
    : Effect.fail(
        new InvalidArgument({ message: `ttlMs must be a positive integer, got ${ttlMs}` }),
      )

export const makeWith = (connection: RedisConnectionShape): RedisCoordinatorLease => {
  const lost = (grant: LeaseGrant) =>
    new LeaseLost({ group: grant.key.group, holder: grant.holder, token: grant.token })

  return {
    acquire: (key, holder, ttlMs) =>
      Effect.gen(function* () {
        yield* checkTtl(ttlMs)
        // the local expiry is measured from the send time: never after Redis's
        const sentAt = yield* Clock.currentTimeMillis
        const reply = yield* evalScript(
          connection,
          "lease acquire",
          Scripts.leaseAcquire,
          [leaseKey(key), leaseCounterKey(key)],
          [holder, String(ttlMs)],
        )
        if (reply[0] === Code.Held)
          return yield* new LeaseHeld({
            group: key.group,
            holder: String(reply[1]),
            expiresAt: sentAt + Math.max(0, Number(reply[2])),
          })
        return { key, holder, token: Number(reply[1]), expiresAt: sentAt + ttlMs }
      }),

    renew: (grant, ttlMs) =>
      Effect.gen(function* () {
        yield* checkTtl(ttlMs)
        const sentAt = yield* Clock.currentTimeMillis
        const reply = yield* evalScript(
          connection,
          "lease renew",
          Scripts.leaseRenew,
          [leaseKey(grant.key)],
          [grant.holder, String(grant.token), "renew", String(ttlMs)],
        )
        if (reply[0] === Code.Lost) return yield* lost(grant)
        return { ...grant, expiresAt: sentAt + ttlMs }
      }),

    release: (grant) =>
      Effect.asVoid(
        evalScript(
          connection,
          "lease release",
          Scripts.leaseRenew,
          [leaseKey(grant.key)],
          [grant.holder, String(grant.token), "release", "0"],
        ),
      ),

    check: (grant) => {
      const key = leaseKey(grant.key)
      return keyCommand(connection, "lease check (HMGET)", key, (c) =>
        c.hmget(key, "holder", "token"),
      ).pipe(
        Effect.map(([holder, token]) => holder === grant.holder && token === String(grant.token)),
      )
    },
  }
}

/** CoordinatorLease on the `RedisConnection` in context. */
export const make: Effect.Effect<RedisCoordinatorLease, never, RedisConnection> = Effect.gen(
  function* () {
    return makeWith(yield* RedisConnection)
  },
)
