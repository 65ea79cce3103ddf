/**
 * The layout of a stream, shared by its producers and every group that
 * consumes it (docs/resharding.md). Pure: the `StreamLayouts` port stores it
 * with a compare-and-set on its revision.
 *
 * - `generations`: the live generations, oldest first; producers write to the
 *   last one; the earlier ones are sealed (appends refused) and drained by
 *   every group before they retire.
 * - `groups`: each consuming group and the generation it has drained
 *   everything below, so an earlier generation retires (its shard streams are
 *   deleted) only once every group is past it.
 */
import { Result, Schema } from "effect"
import { MAX_SHARD_COUNT, ShardLayout } from "../protocol/Heartbeat.js"
import { next } from "./Generations.js"

const Int0 = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

export const StreamLayoutRecord = Schema.Struct({
  version: Schema.Literal(1),
  stream: Schema.NonEmptyString,
  generations: Schema.NonEmptyArray(ShardLayout),
  /** The last change: a rollback may only follow a reshard that is still running. */
  lastChange: Schema.Literals(["none", "reshard", "rollback"]),
  /** group -> the generation below which it has drained everything. */
  groups: Schema.Record(Schema.String, Schema.Struct({ drainedBelow: Int0 })),
})
export type StreamLayoutRecord = typeof StreamLayoutRecord.Type

/** Why a layout change was refused; the record is left as it is. */
export type LayoutRefusal =
  | "InvalidShardCount"
  | "SameShardCount"
  | "MigrationRunning"
  | "NoMigration"
  | "RollbackRunning"

export interface Refused {
  readonly reason: LayoutRefusal
  readonly message: string
}

/** The generation producers write to. */
export const current = (record: StreamLayoutRecord): ShardLayout =>
  record.generations[record.generations.length - 1]!

/** A new stream with `shardCount` shards at generation 0. */
export const create = (stream: string, shardCount: number): StreamLayoutRecord => ({
  version: 1,
  stream,
  generations: [{ generation: 0, firstShard: 0, shardCount }],
  lastChange: "none",
  groups: {},
})

const refuse = (reason: LayoutRefusal, message: string) => Result.fail<Refused>({ reason, message })

/**
 * Change the shard count to `shardCount`: a new generation that producers
 * write to from now on; the current one will be sealed and drained by every
 * group. Refused (nothing changes) for a count outside 1..MAX_SHARD_COUNT, the
 * current count, or while an earlier migration is still running.
 */
export const reshard = (
  record: StreamLayoutRecord,
  shardCount: number,
): Result.Result<StreamLayoutRecord, Refused> => {
  if (!Number.isInteger(shardCount) || shardCount < 1 || shardCount > MAX_SHARD_COUNT)
    return refuse(
      "InvalidShardCount",
      `the shard count must be an integer from 1 to ${MAX_SHARD_COUNT}, got ${shardCount}`,
    )
  const now = current(record)
  if (record.generations.length > 1)
    return refuse(
      "MigrationRunning",
      `a migration to generation ${now.generation} is still running (${record.generations.length - 1} earlier generation(s) not yet retired): roll it back or let every group drain it`,
    )
  if (shardCount === now.shardCount)
    return refuse("SameShardCount", `stream ${record.stream} already has ${shardCount} shards`)
  return Result.succeed({
    ...record,
    generations: [...record.generations, next(now, shardCount)],
    lastChange: "reshard",
  })
}

/**
 * Roll back a running reshard: one more generation with the shard count the
 * stream had before it, so the guarantee holds in this direction too (every
 * message of a key written under the reshard's layout is acknowledged before
 * any later one is delivered). Refused when no reshard is running, or when a
 * rollback already is.
 */
export const rollback = (
  record: StreamLayoutRecord,
): Result.Result<StreamLayoutRecord, Refused> => {
  if (record.generations.length < 2)
    return refuse("NoMigration", `no migration is running on stream ${record.stream}`)
  if (record.lastChange === "rollback")
    return refuse("RollbackRunning", `a rollback is already running on stream ${record.stream}`)
  const before = record.generations[record.generations.length - 2]!
  return Result.succeed({
    ...record,
    generations: [...record.generations, next(current(record), before.shardCount)],
    lastChange: "rollback",
  })
}

/** Register a consuming group (it starts with every live generation to drain). */
export const registerGroup = (record: StreamLayoutRecord, group: string): StreamLayoutRecord =>
  record.groups[group] !== undefined
    ? record
    : {
        ...record,
        groups: { ...record.groups, [group]: { drainedBelow: record.generations[0]!.generation } },
      }

/** The group has drained every generation below `generation` (its migration completed). */
export const groupDrainedBelow = (
  record: StreamLayoutRecord,
  group: string,
  generation: number,
): StreamLayoutRecord => {
  const was = record.groups[group]?.drainedBelow ?? 0
  return generation <= was
    ? record
    : { ...record, groups: { ...record.groups, [group]: { drainedBelow: generation } } }
}

/**
 * Generations every registered group has drained: their shard streams may be
 * deleted. Never the current generation; none while no group is registered
 * (nobody would have read them).
 */
export const retirable = (record: StreamLayoutRecord): ReadonlyArray<ShardLayout> => {
  const marks = Object.values(record.groups).map((g) => g.drainedBelow)
  if (marks.length === 0) return []
  const below = Math.min(...marks)
  return record.generations.slice(0, -1).filter((g) => g.generation < below)
}

/** Drop the retirable generations from the record (after their streams were deleted). */
export const retire = (record: StreamLayoutRecord): StreamLayoutRecord => {
  const gone = new Set(retirable(record).map((g) => g.generation))
  if (gone.size === 0) return record
  const generations = record.generations.filter((g) => !gone.has(g.generation))
  return {
    ...record,
    generations: generations as unknown as StreamLayoutRecord["generations"],
    lastChange: generations.length === 1 ? "none" : record.lastChange,
  }
}
