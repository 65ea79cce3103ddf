/**
 * Store on Redis (docs/redis.md, "Store"): core's byte-level `Store.Encoded`
 * backend, turned into a `Store` by `Store.makeEncoded` (core's one decoder,
 * `GroupCreated` rule and compaction policy).
 *
 * Keys, all under the group's `<prefix>group:{<stream>:<group>}` (one slot; src/keys.ts):
 * - `:store:revision`  the stored revision (decimal string)
 * - `:store:snapshot`  the snapshot at `revision - LLEN batches` (after the first compaction)
 * - `:store:batches`   one record batch per revision since the snapshot (list)
 * - `:audit`           the audit events (stream, `MAXLEN ~ auditMaxLen`)
 *
 * `append` is ONE script: with a lease fence, a check that the group's lease
 * key (`:lease`, same slot) is still held under the fence's token
 * (docs/protocol.md rule 32), compare-and-set on the revision, RPUSH of the
 * batch, XADD of its audit events; its cost is the change's, never the
 * group's (no snapshot is read or written). `replaceSnapshot` is a strict
 * compare-and-set on the revision too. A value Shardline did not write under
 * these keys (a wrong type, a revision that is not an integer, batches
 * without a revision) is `CorruptSnapshot`, and nothing is overwritten;
 * bytes that do not decode are `CorruptSnapshot` from core's decoder.
 */
import {
  type BackendUnavailable,
  CorruptSnapshot,
  type ForeignValue,
  type GroupKey,
  LeaseLost,
  StaleRevision,
  Store,
  StoreUnavailable,
} from "@shardline/core"
import { Effect, Layer, Option } from "effect"
import { Code, evalScript, noReplicasOf } from "./internal/reply.js"
import * as RedisConnection from "./RedisConnection.js"
import { Scripts } from "./scripts.js"

export interface RedisStoreOptions {
  /** Audit events kept per group, approximately (XADD MAXLEN ~). Default 10,000. */
  readonly auditMaxLen?: number
  /** Compact once this many batches are stored after the snapshot (core's policy). Default 64. */
  readonly compactEvery?: number
}

const storeKeys = (connection: RedisConnection.RedisConnectionShape, key: GroupKey) => [
  connection.keys.storeRevisionKey(key),
  connection.keys.storeSnapshotKey(key),
  connection.keys.storeBatchesKey(key),
]

/**
 * Redis failures as the Store port's errors: our data foreign -> corrupt,
 * else unavailable. A write the master refused for want of replicas
 * (NOREPLICAS, `min-replicas-to-write`; docs/redis.md) is unavailable with
 * `NotEnoughReplicas` as its cause: nothing was written, and the coordinator
 * host steps down as for any other backend failure.
 */
const storeError =
  (key: GroupKey, revisionKey?: string) =>
  (error: BackendUnavailable | ForeignValue): CorruptSnapshot | StoreUnavailable => {
    if (error._tag === "ForeignValue")
      return new CorruptSnapshot({
        stream: key.stream,
        group: key.group,
        message: `${error.key}: ${error.message}`,
      })
    const noReplicas =
      revisionKey === undefined ? undefined : noReplicasOf(error.operation, revisionKey, error)
    return new StoreUnavailable({
      stream: key.stream,
      group: key.group,
      message: `${error.operation}: ${noReplicas?.message ?? error.message}`,
      cause: noReplicas ?? error,
    })
  }

/** The byte-level backend (`Store.Encoded`) over a connection. */
export const makeEncodedWith = (
  connection: RedisConnection.RedisConnectionShape,
  options: RedisStoreOptions = {},
): Store.Encoded => {
  const auditMaxLen = String(Math.max(1, Math.floor(options.auditMaxLen ?? 10_000)))
  return {
    load: (key) =>
      evalScript(connection, "store load", Scripts.storeLoad, storeKeys(connection, key), []).pipe(
        Effect.mapError(storeError(key)),
        Effect.map((reply): Option.Option<Store.EncodedGroup> => {
          const revision = Number(reply[1])
          if (revision === 0) return Option.none()
          const snapshot = typeof reply[2] === "string" ? reply[2] : undefined
          const batches = (Array.isArray(reply[3]) ? reply[3] : []).map(String)
          return Option.some({ snapshot, batches, revision })
        }),
      ),

    append: (key, expectedRevision, batch, fence) =>
      evalScript(
        connection,
        "store append",
        Scripts.storeAppend,
        [
          ...storeKeys(connection, key),
          connection.keys.auditKey(key),
          connection.keys.leaseKey(key),
        ],
        [
          String(expectedRevision),
          batch.records,
          auditMaxLen,
          fence?.holder ?? "",
          fence === undefined ? "" : String(fence.token),
          ...batch.audit,
        ],
      ).pipe(
        Effect.mapError(storeError(key, connection.keys.storeRevisionKey(key))),
        Effect.flatMap(
          (
            reply,
          ): Effect.Effect<
            { revision: number; batches: number },
            StaleRevision | LeaseLost | StoreUnavailable
          > =>
            // the lease fence refused it (docs/protocol.md rule 32): nothing written
            reply[0] === Code.Lost
              ? Effect.fail(
                  new LeaseLost({
                    stream: key.stream,
                    group: key.group,
                    holder: fence?.holder ?? "",
                    token: fence?.token ?? 0,
                  }),
                )
              : reply[0] === Code.Stale
                ? Effect.fail(
                    new StaleRevision({
                      stream: key.stream,
                      group: key.group,
                      expectedRevision,
                      actualRevision: Number(reply[1]),
                    }),
                  )
                : // with `durability`: a commit whose loss would rewind the group
                  // (and its owner tokens, docs/protocol.md rule 23) is confirmed
                  // once the replicas have it; not confirmed, the coordinator
                  // steps down and its successor reloads whatever survived
                  Effect.as(
                    Effect.mapError(
                      connection.confirmReplicated(
                        "store commit",
                        connection.keys.storeRevisionKey(key),
                      ),
                      (error) =>
                        new StoreUnavailable({
                          stream: key.stream,
                          group: key.group,
                          message: error.message,
                          cause: error,
                        }),
                    ),
                    { revision: Number(reply[1]), batches: Number(reply[2]) },
                  ),
        ),
      ),

    replaceSnapshot: (key, revision, snapshot) =>
      evalScript(
        connection,
        "store replaceSnapshot",
        Scripts.storeReplace,
        storeKeys(connection, key),
        [String(revision), snapshot],
      ).pipe(
        Effect.mapError(storeError(key, connection.keys.storeRevisionKey(key))),
        Effect.map((reply) => Number(reply[1]) === 1),
      ),
  }
}

/** The group's last `count` audit events as stored (encoded JSON), oldest first. */
export const auditEvents = (
  connection: RedisConnection.RedisConnectionShape,
  key: GroupKey,
  count: number,
): Effect.Effect<
  ReadonlyArray<{ readonly id: string; readonly event: string }>,
  StoreUnavailable | CorruptSnapshot
> => {
  const audit = connection.keys.auditKey(key)
  return connection
    .command("audit (XREVRANGE)", (c) => c.xrevrange(audit, "+", "-", "COUNT", count))
    .pipe(
      Effect.map((entries) =>
        entries
          .map(([id, flat]) => ({ id, event: String(flat[flat.indexOf("event") + 1] ?? "") }))
          .reverse(),
      ),
      Effect.catchTag("BackendUnavailable", (error) =>
        Effect.fail(
          error.message.startsWith("WRONGTYPE")
            ? new CorruptSnapshot({
                stream: key.stream,
                group: key.group,
                message: `${audit}: ${error.message}`,
              })
            : storeError(key)(error),
        ),
      ),
    )
}

/** A `Store` over a connection: the Redis bytes behind core's decoder. */
export const makeWith = (
  connection: RedisConnection.RedisConnectionShape,
  options: RedisStoreOptions = {},
): Store.StoreShape =>
  Store.makeEncoded(
    makeEncodedWith(connection, options),
    options.compactEvery === undefined ? {} : { compactEvery: options.compactEvery },
  )

/** `Store` on the `RedisConnection` in context. */
export const make = (
  options: RedisStoreOptions = {},
): Effect.Effect<Store.StoreShape, never, RedisConnection.RedisConnection> =>
  RedisConnection.RedisConnection.useSync((connection) => makeWith(connection, options))

export const layerFromConnection = (
  options: RedisStoreOptions = {},
): Layer.Layer<Store.Store, never, RedisConnection.RedisConnection> =>
  Layer.effect(Store.Store, make(options))

/** `Store` on a connection of its own (closed with the layer). */
export const layer = (
  options: RedisConnection.RedisConnectionOptions & { readonly store?: RedisStoreOptions },
): Layer.Layer<Store.Store, RedisConnection.ConnectError> =>
  layerFromConnection(options.store).pipe(Layer.provide(RedisConnection.layer(options)))
