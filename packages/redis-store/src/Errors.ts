/**
 * Typed errors of `@shardline/redis-store` (one module per package, STYLE.md).
 * The ports' own errors (`StaleOwner`, `LeaseHeld`, `TransportError`, ...)
 * come from `@shardline/core`; these are what only a real store can raise.
 */
import { Schema } from "effect"

/**
 * Redis could not be reached, or refused a command for a reason that is not
 * about our data (connection closed, NOPERM, OOM, unexpected reply). Whether
 * the command ran is unknown: callers retry idempotent operations only.
 */
export class RedisUnavailable extends Schema.TaggedError<RedisUnavailable>()("RedisUnavailable", {
  operation: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/**
 * A key Shardline owns holds a value Shardline did not write (a string where
 * a stream belongs, a non-integer owner token, ...). Nothing was changed:
 * every script checks before it writes, and the value is never overwritten.
 */
export class ForeignValue extends Schema.TaggedError<ForeignValue>()("ForeignValue", {
  key: Schema.String,
  message: Schema.String,
}) {}

/** An argument Redis cannot represent (an entry without fields, a fractional token, ...). */
export class InvalidArgument extends Schema.TaggedError<InvalidArgument>()("InvalidArgument", {
  message: Schema.String,
}) {}

export type RedisStoreError = RedisUnavailable | ForeignValue | InvalidArgument
