/**
 * Operating a stream's layout (docs/resharding.md): create it, reshard,
 * roll back, seal earlier generations, record a group's progress and retire
 * generations every group has drained. Effects over the `StreamLayouts` and
 * `ShardStreams` ports; the decisions are the pure functions of
 * `StreamLayout`.
 *
 * @example
 * const record = yield* Reshard.reshardStream("orders", 32)   // ReshardRefused on bad input
 * // every group's coordinator follows it; producers re-route on ShardSealed
 */
import { Effect, Option, Result } from "effect"
import {
  type BackendUnavailable,
  type CorruptLayout,
  type DataPlaneError,
  ReshardRefused,
  type StaleLayout,
} from "../Errors.js"
import { ShardStreams } from "../ports/ShardStreams.js"
import { type StoredLayout, StreamLayouts } from "../ports/StreamLayouts.js"
import * as StreamLayout from "./StreamLayout.js"

/** How often a read-modify-write retries after another writer changed the layout. */
const ATTEMPTS = 5

export type LayoutError = CorruptLayout | StaleLayout | BackendUnavailable

/**
 * Read-modify-write the stream's layout with a compare-and-set: `change`
 * returns the new record, the same record (nothing to write) or a refusal.
 */
export const update = <E = never, R = never>(
  stream: string,
  change: (
    record: StreamLayout.StreamLayoutRecord,
  ) => Result.Result<StreamLayout.StreamLayoutRecord, StreamLayout.Refused>,
  /** Runs with the new record before it is saved (again on each retry). */
  beforeSave?: (record: StreamLayout.StreamLayoutRecord) => Effect.Effect<void, E, R>,
): Effect.Effect<StoredLayout, ReshardRefused | LayoutError | E, StreamLayouts | R> =>
  Effect.gen(function* () {
    const layouts = yield* StreamLayouts
    for (let attempt = 1; ; attempt++) {
      const stored = yield* layouts.load(stream)
      if (Option.isNone(stored))
        return yield* new ReshardRefused({
          stream,
          reason: "UnknownStream",
          message: `stream ${stream} has no layout yet: a coordinator creates it with the group`,
        })
      const next = change(stored.value.record)
      if (Result.isFailure(next)) return yield* new ReshardRefused({ stream, ...next.failure })
      if (next.success === stored.value.record) return stored.value
      if (beforeSave !== undefined) yield* beforeSave(next.success)
      const saved = yield* Effect.result(layouts.save(stream, stored.value.revision, next.success))
      if (Result.isSuccess(saved)) return { record: next.success, revision: saved.success }
      if (saved.failure._tag !== "StaleLayout" || attempt >= ATTEMPTS)
        return yield* Effect.fail(saved.failure)
    }
  })

/** The stream's layout, created with `shardCount` shards when it has none. */
export const loadOrCreate = (
  stream: string,
  shardCount: number,
): Effect.Effect<StoredLayout, LayoutError, StreamLayouts> =>
  Effect.gen(function* () {
    const layouts = yield* StreamLayouts
    for (let attempt = 1; ; attempt++) {
      const stored = yield* layouts.load(stream)
      if (Option.isSome(stored)) return stored.value
      const record = StreamLayout.create(stream, shardCount)
      const saved = yield* Effect.result(layouts.save(stream, 0, record))
      if (Result.isSuccess(saved)) return { record, revision: saved.success }
      if (saved.failure._tag !== "StaleLayout" || attempt >= ATTEMPTS)
        return yield* Effect.fail(saved.failure)
    }
  })

/** Seal every shard of every earlier generation: appends to them are refused. Idempotent. */
export const sealEarlier = (
  record: StreamLayout.StreamLayoutRecord,
): Effect.Effect<void, DataPlaneError, ShardStreams> =>
  Effect.gen(function* () {
    const streams = yield* ShardStreams
    for (const g of record.generations.slice(0, -1))
      for (let s = g.firstShard; s < g.firstShard + g.shardCount; s++)
        yield* streams.seal(record.stream, s)
  })

/**
 * Create every registered group on every shard of the newest generation
 * (at 0, through `setOwnerToken` with token 0, which grants nothing), before
 * the record that producers route by names it. A group granted those shards
 * only after draining the earlier generation then finds every entry there:
 * another group's `xackdel` keeps what it has not acknowledged
 * (docs/runtime.md, "Ack policies and other groups"). A shard that already
 * has a token (granted: its group exists) refuses token 0; that is fine.
 */
export const createGroupsOnNewest = (
  record: StreamLayout.StreamLayoutRecord,
): Effect.Effect<void, DataPlaneError, ShardStreams> =>
  Effect.gen(function* () {
    const streams = yield* ShardStreams
    const newest = StreamLayout.current(record)
    for (const group of Object.keys(record.groups))
      for (let s = newest.firstShard; s < newest.firstShard + newest.shardCount; s++)
        yield* streams
          .setOwnerToken({ stream: record.stream, shard: s, group, token: 0 })
          .pipe(Effect.catchTag("OwnerTokenRegression", () => Effect.void))
  })

/**
 * Change the stream's shard count: a new generation producers write to at
 * once (every registered group created on its shards first); the current
 * one is sealed, and every group drains it before reading the keys it held
 * under the new layout.
 */
export const reshardStream = (stream: string, shardCount: number) =>
  Effect.tap(
    update(stream, (r) => StreamLayout.reshard(r, shardCount), createGroupsOnNewest),
    (s) => sealEarlier(s.record),
  )

/** Roll a running reshard back: one more generation with the previous shard count. */
export const rollbackStream = (stream: string) =>
  Effect.tap(update(stream, StreamLayout.rollback, createGroupsOnNewest), (s) =>
    sealEarlier(s.record),
  )

/**
 * A group has drained every generation below `generation`; generations every
 * registered group is past are retired: their shard streams deleted, then
 * dropped from the record.
 */
export const groupDrainedBelow = (stream: string, group: string, generation: number) =>
  Effect.gen(function* () {
    const stored = yield* update(stream, (r) =>
      Result.succeed(StreamLayout.groupDrainedBelow(r, group, generation)),
    )
    const retiring = StreamLayout.retirable(stored.record)
    if (retiring.length === 0) return stored
    const streams = yield* ShardStreams
    const groups = Object.keys(stored.record.groups)
    for (const g of retiring)
      for (let s = g.firstShard; s < g.firstShard + g.shardCount; s++)
        yield* streams.retireShard(stream, s, groups)
    return yield* update(stream, (r) => Result.succeed(StreamLayout.retire(r)))
  })

/** Register a consuming group on the stream (idempotent). */
export const registerGroup = (stream: string, group: string) =>
  update(stream, (r) => Result.succeed(StreamLayout.registerGroup(r, group)))
