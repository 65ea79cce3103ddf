/**
 * Store port: load a group's snapshot, commit records with a compare-and-set
 * on `storeRevision`. The memory implementation keeps the ENCODED snapshot
 * plus the encoded record batches committed since (cost of a commit is
 * proportional to the change), and compacts with the same `replay` the
 * coordinator uses. Corrupt bytes are a `CorruptSnapshot` and are never
 * overwritten.
 */
import { Context, Effect, Layer, Option, Result, Schema } from "effect"
import {
  checkSnapshot,
  fromSnapshot,
  initialState,
  replayAll,
  toSnapshot,
} from "./coordinator/CoordinatorState.js"
import { type AuditEvent, CoordinatorRecord } from "./coordinator/Records.js"
import { type Snapshot, SnapshotJson } from "./coordinator/Snapshot.js"
import { CorruptSnapshot, StaleRevision, type StoreUnavailable } from "./Errors.js"

export interface StoreShape {
  /** The group's snapshot, or none when the group was never created. */
  readonly load: (
    group: string,
  ) => Effect.Effect<Option.Option<Snapshot>, CorruptSnapshot | StoreUnavailable>
  /**
   * Append records atomically if the stored revision equals `expectedRevision`;
   * returns the new revision (expectedRevision + 1). The first commit of a group
   * (expectedRevision 0) must start with `GroupCreated`.
   */
  readonly commit: (
    group: string,
    expectedRevision: number,
    records: ReadonlyArray<CoordinatorRecord>,
  ) => Effect.Effect<number, StaleRevision | CorruptSnapshot | StoreUnavailable>
}

/** Memory store with test hooks. */
export interface MemoryStore extends StoreShape {
  /** Replace the stored snapshot bytes (test hook: simulate corruption). */
  readonly corrupt: (group: string, bytes: string) => void
  /** The stored snapshot bytes and the number of uncompacted record batches. */
  readonly raw: (
    group: string,
  ) => { readonly snapshot: string; readonly batches: number } | undefined
  /** Append-only audit events committed for the group. */
  readonly auditLog: (group: string) => ReadonlyArray<AuditEvent>
  /** Stored revision (0 when absent). */
  readonly revision: (group: string) => number
}

const RecordsJson = Schema.fromJsonString(Schema.Array(CoordinatorRecord))
const encodeRecords = Schema.encodeSync(RecordsJson)
const decodeRecords = Schema.decodeUnknownResult(RecordsJson)
const encodeSnapshot = Schema.encodeSync(SnapshotJson)
const decodeSnapshot = Schema.decodeUnknownResult(SnapshotJson)

interface Entry {
  snapshot: string
  batches: Array<string>
  revision: number
  readonly audit: Array<AuditEvent>
}

const COMPACT_EVERY = 64

/** Decode the stored bytes into a snapshot at the stored revision. */
const materialize = (group: string, e: Entry): Result.Result<Snapshot, CorruptSnapshot> => {
  const decoded = decodeSnapshot(e.snapshot)
  if (Result.isFailure(decoded))
    return Result.fail(new CorruptSnapshot({ group, message: decoded.failure.message }))
  const problem = checkSnapshot(decoded.success)
  if (problem !== undefined) return Result.fail(new CorruptSnapshot({ group, message: problem }))
  if (e.batches.length === 0)
    return Result.succeed({ ...decoded.success, storeRevision: e.revision })
  const state = fromSnapshot(decoded.success)
  for (const batch of e.batches) {
    const records = decodeRecords(batch)
    if (Result.isFailure(records))
      return Result.fail(new CorruptSnapshot({ group, message: records.failure.message }))
    replayAll(state, records.success)
  }
  state.storeRevision = e.revision
  return Result.succeed(toSnapshot(state))
}

export const makeMemoryUnsafe = (): MemoryStore => {
  const groups = new Map<string, Entry>()
  const commitSync = (
    group: string,
    expectedRevision: number,
    records: ReadonlyArray<CoordinatorRecord>,
  ): Result.Result<number, StaleRevision | CorruptSnapshot> => {
    const e = groups.get(group)
    const actual = e?.revision ?? 0
    if (actual !== expectedRevision)
      return Result.fail(new StaleRevision({ group, expectedRevision, actualRevision: actual }))
    const audits = records.flatMap((r) => (r._tag === "Audit" ? [r.event] : []))
    if (e === undefined) {
      const first = records[0]
      if (first?._tag !== "GroupCreated")
        return Result.fail(
          new CorruptSnapshot({
            group,
            message: "the first commit of a group must be GroupCreated",
          }),
        )
      const state = initialState(first.config)
      replayAll(state, records)
      state.storeRevision = 1
      groups.set(group, {
        snapshot: encodeSnapshot(toSnapshot(state)),
        batches: [],
        revision: 1,
        audit: audits,
      })
      return Result.succeed(1)
    }
    e.batches.push(encodeRecords(records))
    e.revision += 1
    e.audit.push(...audits)
    if (e.batches.length >= COMPACT_EVERY) {
      const compacted = materialize(group, e)
      // A corrupt base is left as it is: the next load reports it.
      if (Result.isSuccess(compacted)) {
        e.snapshot = encodeSnapshot(compacted.success)
        e.batches = []
      }
    }
    return Result.succeed(e.revision)
  }
  return {
    load: (group) =>
      Effect.suspend(() => {
        const e = groups.get(group)
        if (e === undefined) return Effect.succeed(Option.none())
        const r = materialize(group, e)
        return Result.isSuccess(r) ? Effect.succeed(Option.some(r.success)) : Effect.fail(r.failure)
      }),
    commit: (group, expectedRevision, records) =>
      Effect.suspend(() => {
        const r = commitSync(group, expectedRevision, records)
        return Result.isSuccess(r) ? Effect.succeed(r.success) : Effect.fail(r.failure)
      }),
    corrupt: (group, bytes) => {
      const e = groups.get(group)
      if (e === undefined)
        groups.set(group, { snapshot: bytes, batches: [], revision: 1, audit: [] })
      else {
        e.snapshot = bytes
        e.batches = []
      }
    },
    raw: (group) => {
      const e = groups.get(group)
      return e === undefined ? undefined : { snapshot: e.snapshot, batches: e.batches.length }
    },
    auditLog: (group) => groups.get(group)?.audit ?? [],
    revision: (group) => groups.get(group)?.revision ?? 0,
  }
}

export class Store extends Context.Service<Store, StoreShape>()("@shardline/core/Store") {
  /** A fresh memory store (with test hooks). */
  static readonly makeMemory: Effect.Effect<MemoryStore> = Effect.sync(makeMemoryUnsafe)
  /** Layer with a fresh memory store. */
  static readonly layerMemory: Layer.Layer<Store> = Layer.effect(Store, Store.makeMemory)
  /** Layer serving a given (memory) store, e.g. one the test keeps a handle on. */
  static readonly layerWith = (store: StoreShape): Layer.Layer<Store> => Layer.succeed(Store, store)
}

/** Unused-import guard for `StoreUnavailable` in the port signature. */
export type StoreError = CorruptSnapshot | StaleRevision | StoreUnavailable
