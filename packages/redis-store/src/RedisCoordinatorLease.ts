/**
 * CoordinatorLease on Redis (docs/redis.md, "CoordinatorLease").
 *
 * The lease is a hash `<prefix>group:{<stream>:<group>}:lease` (holder,
 * token) whose TTL lives in Redis (PEXPIRE); the fencing token is an INCR of
 * `...:lease:counter` (src/keys.ts), so every acquisition gets a
 * larger token than any before it. acquire, renew and release are
 * compare-on-token Lua scripts; `check` is one HMGET and never extends the
 * TTL. A paused ex-holder whose TTL ran out finds the lease gone or taken:
 * its renew and its check fail LeaseLost.
 *
 * Core's lease port fails with `StoreUnavailable` for anything that is not
 * about the lease itself: Redis unreachable (`cause`: the BackendUnavailable),
 * a foreign value under the lease's keys (`cause`: the ForeignValue; nothing
 * is overwritten), a TTL Redis cannot hold (`cause`: InvalidArgument), an
 * acquisition or renewal the master refused for want of replicas
 * (`cause`: NotEnoughReplicas, NOREPLICAS; docs/redis.md,
 * "`min-replicas-to-write`").
 */
import {
  CoordinatorLease,
  type GroupKey,
  InvalidArgument,
  LeaseHeld,
  LeaseLost,
  StoreUnavailable,
  Time,
} from "@shardline/core"
import { Effect, Layer } from "effect"
import { Code, evalScript, keyCommand, noReplicasOf } from "./internal/reply.js"
import * as RedisConnection from "./RedisConnection.js"
import { Scripts } from "./scripts.js"

type LeaseGrant = CoordinatorLease.LeaseGrant

const unavailable =
  (key: GroupKey, written?: { readonly operation: string; readonly key: string }) =>
  (cause: { readonly _tag: string; readonly message: string }): StoreUnavailable => {
    const noReplicas =
      written === undefined ? undefined : noReplicasOf(written.operation, written.key, cause)
    const reported = noReplicas ?? cause
    return new StoreUnavailable({
      stream: key.stream,
      group: key.group,
      message: `${reported._tag}: ${reported.message}`,
      cause: reported,
    })
  }

const checkTtl = (key: GroupKey, ttlMs: number) =>
  Number.isSafeInteger(ttlMs) && ttlMs >= 1
    ? Effect.void
    : Effect.fail(
        unavailable(key)(
          new InvalidArgument({ message: `ttlMs must be a positive integer, got ${ttlMs}` }),
        ),
      )

export const makeWith = (
  connection: RedisConnection.RedisConnectionShape,
): CoordinatorLease.CoordinatorLeaseShape => {
  const { leaseCounterKey, leaseKey } = connection.keys
  const lost = (grant: LeaseGrant) =>
    new LeaseLost({
      stream: grant.key.stream,
      group: grant.key.group,
      holder: grant.holder,
      token: grant.token,
    })

  return {
    acquire: (key, holder, ttlMs) =>
      Effect.gen(function* () {
        yield* checkTtl(key, ttlMs)
        // the local expiry is measured from the send time, on the monotonic
        // clock: never after Redis's, whatever the wall clock does (rule 21)
        const sentAt = yield* Time.monotonicMillis
        const reply = yield* evalScript(
          connection,
          "lease acquire",
          Scripts.leaseAcquire,
          [leaseKey(key), leaseCounterKey(key)],
          [holder, String(ttlMs)],
        ).pipe(
          Effect.mapError(unavailable(key, { operation: "lease acquire", key: leaseKey(key) })),
        )
        if (reply[0] === Code.Held)
          return yield* new LeaseHeld({
            stream: key.stream,
            group: key.group,
            holder: String(reply[1]),
            expiresAt: sentAt + Math.max(0, Number(reply[2])),
          })
        return { key, holder, token: Number(reply[1]), expiresAt: sentAt + ttlMs }
      }),

    renew: (grant, ttlMs) =>
      Effect.gen(function* () {
        yield* checkTtl(grant.key, ttlMs)
        const sentAt = yield* Time.monotonicMillis
        const reply = yield* evalScript(
          connection,
          "lease renew",
          Scripts.leaseRenew,
          [leaseKey(grant.key)],
          [grant.holder, String(grant.token), "renew", String(ttlMs)],
        ).pipe(
          Effect.mapError(
            unavailable(grant.key, { operation: "lease renew", key: leaseKey(grant.key) }),
          ),
        )
        if (reply[0] === Code.Lost) return yield* lost(grant)
        return { ...grant, expiresAt: sentAt + ttlMs }
      }),

    // best effort: a release that does not reach Redis lets the TTL run out
    release: (grant) =>
      Effect.ignore(
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
        Effect.mapError(unavailable(grant.key)),
        Effect.flatMap(([holder, token]) =>
          holder === grant.holder && token === String(grant.token)
            ? Effect.void
            : Effect.fail(lost(grant)),
        ),
      )
    },
  }
}

/** CoordinatorLease on the `RedisConnection` in context. */
export const make: Effect.Effect<
  CoordinatorLease.CoordinatorLeaseShape,
  never,
  RedisConnection.RedisConnection
> = RedisConnection.RedisConnection.useSync(makeWith)

export const layerFromConnection: Layer.Layer<
  CoordinatorLease.CoordinatorLease,
  never,
  RedisConnection.RedisConnection
> = Layer.effect(CoordinatorLease.CoordinatorLease, make)

/** `CoordinatorLease` on a connection of its own (closed with the layer). */
export const layer = (
  options: RedisConnection.RedisConnectionOptions,
): Layer.Layer<CoordinatorLease.CoordinatorLease, RedisConnection.ConnectError> =>
  layerFromConnection.pipe(Layer.provide(RedisConnection.layer(options)))
