/**
 * Typed errors of `@shardline/member-runtime` (one module per package, as in
 * core). Every error is a `Schema.TaggedError`: match it with
 * `Effect.catchTag`, or with `error._tag` from the Promise API.
 */
import { Schema } from "effect"

/**
 * A runtime, consumer, listener or producer option failed validation at
 * start, before anything connected. `field` names the option
 * (`consumers[0].concurrency`, `ack`, `heartbeatIntervalMs`, ...).
 */
export class InvalidRuntimeConfig extends Schema.TaggedError<InvalidRuntimeConfig>()(
  "InvalidRuntimeConfig",
  {
    field: Schema.String,
    message: Schema.String,
  },
) {}

/**
 * Thrown (or failed with, in the Effect form) by a handler: the message is
 * not worth retrying (BullMQ's `UnrecoverableError`). It goes straight to
 * the dead letters with this error's message as the reason, whatever its
 * delivery count and `maxDeliveries`, and an open circuit breaker does not
 * hold it (docs/runtime.md, "Errors not worth retrying"). A batch handler's
 * is the first message it did not resolve.
 *
 * @example
 * eachMessage: async (message) => {
 *   if (message.fields.amount === undefined)
 *     throw new NonRetryableError({ message: "no amount: this order never bills" })
 *   await bill(message)
 * }
 * // the Effect form
 * eachMessage: (message) => Effect.fail(new NonRetryableError({ message: "no amount" }))
 */
export class NonRetryableError extends Schema.TaggedError<NonRetryableError>()(
  "NonRetryableError",
  {
    message: Schema.String,
    cause: Schema.optional(Schema.Defect()),
  },
) {}

/** A handler's error is a `NonRetryableError` (of this copy of the package or another). */
export const isNonRetryable = (error: unknown): error is NonRetryableError =>
  error instanceof NonRetryableError ||
  (typeof error === "object" &&
    error !== null &&
    (error as { _tag?: unknown })._tag === "NonRetryableError" &&
    typeof (error as { message?: unknown }).message === "string")

/** `pause`, `resume` or `seek` named a shard no logical member of this process owns now. */
export class ShardNotOwned extends Schema.TaggedError<ShardNotOwned>()("ShardNotOwned", {
  stream: Schema.String,
  group: Schema.String,
  shard: Schema.Number,
}) {}

/**
 * A handler (or hook) kept running past its drain budget after its signal
 * was aborted: its shard is not reported REVOKED (nor handed to the next
 * owner) until it returns. Surfaced as the member's `lastError` and a
 * `handlerStuck` event (docs/runtime.md, "A handler past its drain").
 */
export class HandlerStuck extends Schema.TaggedError<HandlerStuck>()("HandlerStuck", {
  stream: Schema.String,
  group: Schema.String,
  memberId: Schema.String,
  shard: Schema.Number,
  message: Schema.String,
}) {}

/** The runtime (or the producer) is stopping or stopped: nothing new is accepted. */
export class RuntimeStopped extends Schema.TaggedError<RuntimeStopped>()("RuntimeStopped", {
  message: Schema.String,
}) {}

/**
 * The producer knows no layout for the stream (its `LayoutSource` has none):
 * no group has created the stream yet and the producer was given no layout.
 * The message says what to do (start a consumer first, or give the producer
 * a `layout`).
 */
export class UnknownStream extends Schema.TaggedError<UnknownStream>()("UnknownStream", {
  stream: Schema.String,
  message: Schema.String,
}) {}

/**
 * A producer of its own (`createProducer`, `makeStreamProducer`) was given a
 * `shardCount` that is not the stream's: `stored` is the shard count of the
 * stream's stored layout (its newest generation). Routing by another count
 * would send keys to shards their consumers do not read for them.
 */
export class ShardCountMismatch extends Schema.TaggedError<ShardCountMismatch>()(
  "ShardCountMismatch",
  {
    stream: Schema.String,
    given: Schema.Number,
    stored: Schema.Number,
    message: Schema.String,
  },
) {}

/**
 * A send could not be appended: the shard stayed sealed after the layout was
 * refreshed `attempts` times, or the data plane failed (`cause`).
 */
export class SendFailed extends Schema.TaggedError<SendFailed>()("SendFailed", {
  stream: Schema.String,
  key: Schema.String,
  attempts: Schema.Number,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/** A seek could not be applied: the owner lost the shard first, or the data plane refused it. */
export class SeekFailed extends Schema.TaggedError<SeekFailed>()("SeekFailed", {
  stream: Schema.String,
  group: Schema.String,
  shard: Schema.Number,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/** The stream's layout could not be read (backend unavailable, corrupt record). */
export class LayoutUnavailable extends Schema.TaggedError<LayoutUnavailable>()(
  "LayoutUnavailable",
  {
    stream: Schema.String,
    message: Schema.String,
    cause: Schema.optional(Schema.Defect()),
  },
) {}

/**
 * No coordinator serves the group: its members run with `coordinator:
 * "standalone"` and no coordinator process holds the group. The message
 * says how to start one (`shardline coordinator ...` with the group's
 * settings, or `startCoordinator`). The members keep trying; they join as
 * soon as one serves.
 */
export class NoCoordinator extends Schema.TaggedError<NoCoordinator>()("NoCoordinator", {
  stream: Schema.String,
  group: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/** `pause`, `resume`, `seek` or `resetCircuit` named a group this runtime does not consume. */
export class UnknownGroup extends Schema.TaggedError<UnknownGroup>()("UnknownGroup", {
  stream: Schema.String,
  group: Schema.String,
  message: Schema.String,
}) {}

/**
 * A handler's transaction was refused (docs/exactly-once.md, "Refusals"):
 * core's error, thrown by the transaction handle at the call that breaks a
 * rule, or the reason a commit was refused; nothing of the transaction is
 * committed.
 */
/**
 * What connecting to Redis fails with (`start({ redis })`, `createProducer`,
 * `redisPorts`), re-exported so an app matches them without importing
 * redis-store or core: `BackendUnavailable` (the server cannot be reached or
 * never answers; the message names the address and the cause),
 * `PermissionDenied` (the ACL user lacks a command, key or channel;
 * docs/redis.md, "ACL") and `InvalidDatabase` (a database the server does
 * not have).
 *
 * @example
 * try {
 *   await start({ redis: { url: "redis://127.0.0.1:6379/99" } })
 * } catch (error) {
 *   if (error instanceof InvalidDatabase) console.error(error.db, error.message)
 * }
 */
export {
  BackendUnavailable,
  TransactionRefused,
  type TransactionRefusedReason,
} from "@shardline/core"
/**
 * `start({ redis })` (any Redis-backed runtime, producer-only included) was
 * refused: the server, or a master of the cluster, evicts keys
 * (`maxmemory-policy` is not `noeviction`), which would delete Shardline's
 * streams, groups and owner tokens without a word. The message names the
 * setting and both ways out: `CONFIG SET maxmemory-policy noeviction`, or
 * `redis: { allowEviction: true }` (docs/redis.md, "Eviction"). redis-store's
 * error, re-exported.
 */
export { EvictionPolicyRefused, InvalidDatabase, PermissionDenied } from "@shardline/redis-store"

/**
 * The health endpoint (`http` option, `runtime.serveHealth`) could not
 * listen: the port is taken (EADDRINUSE), the host is not this machine's,
 * or the process may not bind it (docs/runtime.md, "Health").
 */
export class HealthServerFailed extends Schema.TaggedError<HealthServerFailed>()(
  "HealthServerFailed",
  {
    port: Schema.Number,
    host: Schema.optional(Schema.String),
    message: Schema.String,
    cause: Schema.optional(Schema.Defect()),
  },
) {}
