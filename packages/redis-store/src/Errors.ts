/**
 * Errors of `@shardline/redis-store`: the ports' errors are core's
 * (`StaleOwner`, `LeaseHeld`, `StoreUnavailable`, `CorruptSnapshot`, ...),
 * and so are the three a real backend adds to the data plane
 * (`BackendUnavailable`, `ForeignValue`, `InvalidArgument`). This module
 * re-exports those three under the names this package used before, and
 * adds the two a connection can fail with before any port runs:
 * `PermissionDenied` (the ACL user lacks a command, key or channel
 * Shardline needs: docs/redis.md, "ACL") and `InvalidDatabase`, and the
 * administration's refusals (`AdminRefused`).
 */
export {
  BackendUnavailable,
  type DataPlaneError,
  ForeignValue,
  InvalidArgument,
} from "@shardline/core"

import type { DataPlaneError } from "@shardline/core"
import { Schema } from "effect"

/** What any Redis data-plane operation may fail with besides its own errors. */
export type RedisStoreError = DataPlaneError

/** One thing the ACL user may not do. */
export const MissingPermission = Schema.Struct({
  /** A command (or subcommand), a key, or a pub/sub channel. */
  kind: Schema.Literals(["command", "key", "channel"]),
  /** The ACL name of the command the probe ran (`xautoclaim`, `xgroup|create`). */
  command: Schema.String,
  /** The key or channel the probe used, for `key` and `channel`. */
  target: Schema.optional(Schema.String),
  /** The rule that grants it (`+xautoclaim`, `~{*:*}:dlq`, `&{shardline:*}:notice:*`). */
  rule: Schema.String,
})
export type MissingPermission = typeof MissingPermission.Type

/**
 * The Redis user may not run a command, or touch a key or channel, that
 * Shardline needs. `missing` lists each with the rule that grants it; the
 * message names them and the `ACL SETUSER` line that adds them.
 */
export class PermissionDenied extends Schema.TaggedError<PermissionDenied>()("PermissionDenied", {
  user: Schema.String,
  missing: Schema.Array(MissingPermission),
  message: Schema.String,
}) {}

/** The connection names a database the server does not have (`redis://host/99` on a 16-database server). */
export class InvalidDatabase extends Schema.TaggedError<InvalidDatabase>()("InvalidDatabase", {
  db: Schema.Number,
  message: Schema.String,
}) {}

/**
 * An administration request the data does not allow (src/Admin.ts, the
 * `shardline dlq` and `groups` commands): an unknown stream or group, a
 * live group to delete without `force`, a dead letter that is not there,
 * dead-letter ids without their shard.
 * The message says why.
 */
export class AdminRefused extends Schema.TaggedError<AdminRefused>()("AdminRefused", {
  reason: Schema.Literals([
    "UnknownStream",
    "GroupLive",
    "UnknownGroup",
    "NotFound",
    "InvalidRequest",
  ]),
  message: Schema.String,
}) {}
