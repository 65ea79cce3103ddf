/**
 * Store port: load a group's snapshot, commit records with a compare-and-set
 * on `storeRevision`.
 *
 * Two layers, as effect's `RunnerStorage` / `RunnerStorage.Encoded`:
 * - `Store`, what the coordinator uses: typed snapshots and records.
 * - `Encoded`, what a backend implements: bytes only. It keeps a snapshot, the
 *   record batches committed since (one per revision) and an audit log, and
 *   offers three operations: load the bytes, CAS-append one batch (with its
 *   audit events), and replace the snapshot at a revision (compaction).
 *
 * `makeEncoded(backend)` turns a backend into a `Store`, so every backend
 * shares ONE decoder (schema decoding, `checkSnapshot`, `replay`), the
 * first-commit-must-be-`GroupCreated` rule and the compaction policy. Bytes
 * that do not decode or do not add up are a `CorruptSnapshot` and are never
 * overwritten: compaction runs only from bytes that decoded, and only if the
 * stored revision is still the one it decoded.
 *
 * @example
 * const store = yield* Store.Store
 * const key = { stream: "orders", group: "workers" }
 * const revision = yield* store.commit(key, 0, Coordinator.createGroup(config, now))
 * const snapshot = yield* store.load(key) // Option<Snapshot>
 *
 * @example
 * // a backend (e.g. Redis) provides bytes; the shared decoder does the rest
 * const layer = Layer.effect(Store.Store, Effect.map(makeRedisBackend, Store.makeEncoded))
 */
import { Context, Effect, Layer, Option, Result } from "effect"
import type { CoordinatorRecord } from "../coordinator/Records.js"
import type { Snapshot } from "../coordinator/Snapshot.js"
import {
  CorruptSnapshot,
  type LeaseLost,
  type StaleRevision,
  type StoreUnavailable,
} from "../Errors.js"
import type { CoordinatorLeaseShape } from "./CoordinatorLease.js"
import type { GroupKey } from "./GroupKey.js"
import { makeMemoryStoreBackend } from "./internal/memoryStoreBackend.js"
import {
  decodeGroup,
  type EncodedBatch,
  type EncodedGroup,
  encodeBatch,
  encodeSnapshot,
  notAGroupCreation,
} from "./internal/storeCodec.js"

export type { EncodedBatch, EncodedGroup } from "./internal/storeCodec.js"

/**
 * The coordinator lease a commit is made under (docs/protocol.md rule 32): a
 * `LeaseGrant` is one. With it, the Store commits only while the group's
 * lease is still held by `holder` under `token`, in the same atomic step as
 * the compare-and-set (on Redis the lease key shares the Store's hash slot),
 * and fails `LeaseLost` otherwise, writing nothing.
 *
 * @example
 * const grant = yield* leases.acquire(key, "pod-1", 6_000)
 * yield* store.commit(key, revision, records, grant) // LeaseLost once another holder took it
 */
export interface CommitFence {
  readonly holder: string
  readonly token: number
}

export interface StoreShape {
  /** The group's snapshot at the stored revision, or none when the group was never created. */
  readonly load: (
    key: GroupKey,
  ) => Effect.Effect<Option.Option<Snapshot>, CorruptSnapshot | StoreUnavailable>
  /**
   * Append records atomically if the stored revision equals `expectedRevision`;
   * returns the new revision (expectedRevision + 1). The first commit of a group
   * (expectedRevision 0) must start with `GroupCreated` for that group.
   * With `fence`, also only while the group's coordinator lease is held by
   * `fence.holder` under `fence.token` (`LeaseLost` otherwise, nothing
   * written): the revision alone does not stop a paused ex-leader after the
   * Store rewound to its revision (docs/protocol.md rule 32).
   */
  readonly commit: (
    key: GroupKey,
    expectedRevision: number,
    records: ReadonlyArray<CoordinatorRecord>,
    fence?: CommitFence,
  ) => Effect.Effect<number, StaleRevision | LeaseLost | CorruptSnapshot | StoreUnavailable>
}

export class Store extends Context.Service<Store, StoreShape>()("@shardline/core/Store") {}

/** What `Encoded.append` reports. */
export interface Appended {
  /** The new stored revision. */
  readonly revision: number
  /** How many batches are now stored after the snapshot (drives compaction). */
  readonly batches: number
}

/**
 * A byte-level Store backend. Everything it returns is decoded by
 * `makeEncoded`; it never interprets the bytes itself. A backend may fail
 * with `CorruptSnapshot` for data that is not its own (e.g. a Redis key of
 * the wrong type).
 */
export interface Encoded {
  /** The group's bytes, or none when nothing was ever committed. */
  readonly load: (
    key: GroupKey,
  ) => Effect.Effect<Option.Option<EncodedGroup>, CorruptSnapshot | StoreUnavailable>
  /**
   * If the stored revision (0 when absent) equals `expectedRevision`: append
   * `batch.records` as the batch of revision expectedRevision + 1 and its
   * `batch.audit` events to the audit log, atomically. Otherwise StaleRevision
   * and nothing changes. With `fence`, the same step first checks that the
   * group's coordinator lease is held by `fence.holder` under `fence.token`:
   * otherwise LeaseLost and nothing changes (docs/protocol.md rule 32).
   */
  readonly append: (
    key: GroupKey,
    expectedRevision: number,
    batch: EncodedBatch,
    fence?: CommitFence,
  ) => Effect.Effect<Appended, StaleRevision | LeaseLost | CorruptSnapshot | StoreUnavailable>
  /**
   * Compaction: if the stored revision is still `revision`, replace the
   * snapshot with `snapshot` (the state at `revision`) and drop every batch.
   * Returns false, changing nothing, when the revision moved on.
   */
  readonly replaceSnapshot: (
    key: GroupKey,
    revision: number,
    snapshot: string,
  ) => Effect.Effect<boolean, CorruptSnapshot | StoreUnavailable>
}

export interface EncodedOptions {
  /** Compact (rewrite the snapshot) once this many batches are stored after it. Default 64. */
  readonly compactEvery?: number
}

/** A `Store` over a byte-level backend: the one decoder and compaction policy. */
export const makeEncoded = (backend: Encoded, options: EncodedOptions = {}): StoreShape => {
  const compactEvery = Math.max(1, options.compactEvery ?? 64)

  const load = (key: GroupKey) =>
    Effect.flatMap(backend.load(key), (stored) => {
      if (Option.isNone(stored)) return Effect.succeed(Option.none<Snapshot>())
      const decoded = decodeGroup(key, stored.value)
      return Result.isSuccess(decoded)
        ? Effect.succeed(Option.some(decoded.success))
        : Effect.fail(decoded.failure)
    })

  /** Rewrite the snapshot from bytes that decode; anything else is left as it is. */
  const compact = (key: GroupKey) =>
    Effect.ignore(
      Effect.flatMap(load(key), (snapshot) =>
        Option.isNone(snapshot)
          ? Effect.void
          : backend.replaceSnapshot(
              key,
              snapshot.value.storeRevision,
              encodeSnapshot(snapshot.value),
            ),
      ),
    )

  return {
    load,
    commit: (key, expectedRevision, records, fence) =>
      Effect.suspend(() => {
        if (expectedRevision === 0) {
          const problem = notAGroupCreation(key, records)
          if (problem !== undefined)
            return Effect.fail(
              new CorruptSnapshot({ stream: key.stream, group: key.group, message: problem }),
            )
        }
        return Effect.flatMap(
          backend.append(key, expectedRevision, encodeBatch(records), fence),
          (appended) =>
            appended.batches >= compactEvery
              ? Effect.as(compact(key), appended.revision)
              : Effect.succeed(appended.revision),
        )
      }),
  }
}

export interface MemoryOptions extends EncodedOptions {
  /**
   * The lease table a commit's `fence` is checked against (docs/protocol.md
   * rule 32); without it a memory store ignores fences.
   *
   * @example
   * const lease = yield* CoordinatorLease.makeMemory
   * const store = yield* Store.makeMemoryWith({ lease })
   */
  readonly lease?: CoordinatorLeaseShape
}

/** A fresh memory store: the memory byte backend behind `makeEncoded`. */
export const makeMemoryWith = (options: MemoryOptions): Effect.Effect<StoreShape> =>
  Effect.sync(() => makeEncoded(makeMemoryStoreBackend(options.lease), options))

export const makeMemory: Effect.Effect<StoreShape> = makeMemoryWith({})

export const layerMemoryWith = (options: MemoryOptions): Layer.Layer<Store> =>
  Layer.effect(Store, makeMemoryWith(options))

/** Layer with a fresh memory store. */
export const layerMemory: Layer.Layer<Store> = layerMemoryWith({})
