/**
 * Typed errors of @shardline/core. One file per package (STYLE.md); other
 * areas add their own section under a comment header.
 */
import { Schema } from "effect"

// ---------------------------------------------------------------------------
// Coordinator, Store and CoordinatorLease errors
// ---------------------------------------------------------------------------

/** A GroupConfig failed validation (positive ints, heartbeat < session timeout, ...). */
export class InvalidGroupConfig extends Schema.TaggedError<InvalidGroupConfig>()(
  "InvalidGroupConfig",
  { message: Schema.String },
) {}

/** The stored snapshot (or a stored record) could not be decoded; it is left untouched. */
export class CorruptSnapshot extends Schema.TaggedError<CorruptSnapshot>()("CorruptSnapshot", {
  group: Schema.String,
  message: Schema.String,
}) {}

/** The store could not be reached or failed unexpectedly. */
export class StoreUnavailable extends Schema.TaggedError<StoreUnavailable>()("StoreUnavailable", {
  group: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

/** A commit's compare-and-set on `storeRevision` failed: someone else committed first. */
export class StaleRevision extends Schema.TaggedError<StaleRevision>()("StaleRevision", {
  group: Schema.String,
  expectedRevision: Schema.Int,
  actualRevision: Schema.Int,
}) {}

/** The coordinator lease of a group is held by another holder. */
export class LeaseHeld extends Schema.TaggedError<LeaseHeld>()("LeaseHeld", {
  group: Schema.String,
  holder: Schema.String,
  expiresAt: Schema.Number,
}) {}

/** The caller no longer holds the lease (expired, taken over, or a stale fencing token). */
export class LeaseLost extends Schema.TaggedError<LeaseLost>()("LeaseLost", {
  group: Schema.String,
  holder: Schema.String,
  token: Schema.Int,
}) {}

/** Writing per-shard owner fences to storage failed. */
export class FenceWriteFailed extends Schema.TaggedError<FenceWriteFailed>()("FenceWriteFailed", {
  group: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}
