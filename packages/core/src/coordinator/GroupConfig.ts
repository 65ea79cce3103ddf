/**
 * Static configuration of one consumer group, validated with Effect Schema.
 * Bad configuration is a typed `InvalidGroupConfig` error, never a crash.
 */
import { Effect, Result, Schema } from "effect"
import { InvalidGroupConfig } from "../Errors.js"
import { MAX_SHARD_COUNT, MemberWeight } from "../protocol/Heartbeat.js"

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
const Id = Schema.NonEmptyString.check(Schema.isMaxLength(256))

/** A new group's start on each shard: `earliest`, `latest`, or an entry id (`<ms>-<seq>` or `<ms>`). */
export const StartAt = Schema.Union([
  Schema.Literals(["earliest", "latest"]),
  Schema.String.check(
    Schema.isPattern(/^\d{1,20}(-\d{1,20})?$/, {
      message: 'must be "earliest", "latest" or an entry id (<ms>-<seq> or <ms>)',
    }),
  ),
])
export type StartAt = typeof StartAt.Type

export const GroupConfig = Schema.Struct({
  groupId: Id,
  stream: Id,
  /** Initial shard count of the layout (generation 0). */
  shardCount: PositiveInt.check(Schema.isLessThanOrEqualTo(MAX_SHARD_COUNT)),
  /** A member that does not heartbeat for this long is expired. */
  sessionTimeoutMs: PositiveInt,
  /** Revoke timeout: a member must report REVOKED within this long or it is fenced. */
  rebalanceTimeoutMs: PositiveInt,
  heartbeatIntervalMs: PositiveInt,
  /** Configured assignment weight per memberId; overrides the weight a member reports. */
  memberWeights: Schema.optional(Schema.Record(Schema.String, MemberWeight)),
  /**
   * Where the group starts on a shard it is created on (docs/runtime.md,
   * "Where a new group starts"): `earliest` (absent: the default, every
   * entry the shard holds), `latest` (entries appended after its first
   * grant of the shard) or an entry id (`<ms>-<seq>` or `<ms>`: entries
   * after it). Only a shard's first grant creates the group there, so a
   * group that exists keeps its position whatever this says.
   */
  startAt: Schema.optional(StartAt),
}).check(
  Schema.makeFilter((c) =>
    c.heartbeatIntervalMs < c.sessionTimeoutMs
      ? undefined
      : {
          path: ["heartbeatIntervalMs"],
          issue: "heartbeatIntervalMs must be less than sessionTimeoutMs",
        },
  ),
)
export type GroupConfig = typeof GroupConfig.Type

const decodeResult = Schema.decodeUnknownResult(GroupConfig)

/** Decode and validate an untrusted GroupConfig. */
export const decodeGroupConfig = (input: unknown): Effect.Effect<GroupConfig, InvalidGroupConfig> =>
  Effect.suspend(() => {
    const r = decodeResult(input)
    return Result.isSuccess(r)
      ? Effect.succeed(r.success)
      : Effect.fail(new InvalidGroupConfig({ message: r.failure.message }))
  })

/** Synchronous variant for non-Effect callers: throws `InvalidGroupConfig`. */
export const makeGroupConfig = (input: unknown): GroupConfig => {
  const r = decodeResult(input)
  if (Result.isFailure(r)) throw new InvalidGroupConfig({ message: r.failure.message })
  return r.success
}
