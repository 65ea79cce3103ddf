/**
 * Errors of `@shardline/redis-store`: the ports' errors are core's
 * (`StaleOwner`, `LeaseHeld`, `StoreUnavailable`, `CorruptSnapshot`, ...),
 * and so are the three a real backend adds to the data plane
 * (`BackendUnavailable`, `ForeignValue`, `InvalidArgument`). This module
 * re-exports those three under the names this package used before, and
 * adds the two a connection can fail with before any port runs:
 * `PermissionDenied` (the ACL user lacks a command, key or channel
 * Shardline needs: docs/redis.md, "ACL") and `InvalidDatabase`, the
 * namespace's two (`InvalidKeyPrefix`, `KeySchemaMismatch`: docs/redis.md,
 * "Keys"), the deployment's (`TopologyMismatch`: a single-node URL aimed
 * at a cluster node, cluster nodes that are no cluster, a URL naming a
 * Sentinel), a server that evicts keys (`EvictionPolicyRefused`:
 * docs/redis.md, "Eviction"), and the administration's refusals
 * (`AdminRefused`).
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
  /** The rule that grants it (`+xautoclaim`, `~shardline:*`, `&shardline:*`). */
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
 * The key prefix (Shardline's `keyPrefix`) cannot name a namespace, or the
 * options set ioredis' own `keyPrefix`, which Shardline does not use: it
 * prefixes keys and sharded channels but not PUBLISH / SUBSCRIBE channels
 * nor SCAN patterns, so no one ACL pattern could name what it makes
 * (docs/redis.md, "Keys").
 */
export class InvalidKeyPrefix extends Schema.TaggedError<InvalidKeyPrefix>()("InvalidKeyPrefix", {
  prefix: Schema.String,
  message: Schema.String,
}) {}

/**
 * The namespace holds keys of another key schema than this version's
 * (`Keys.SCHEMA_VERSION`): `<prefix>schema` records another version, or
 * the group's keys exist in the unprefixed layout of earlier versions
 * (schema 1). Nothing was written; the message says what to do.
 */
export class KeySchemaMismatch extends Schema.TaggedError<KeySchemaMismatch>()(
  "KeySchemaMismatch",
  {
    prefix: Schema.String,
    /** The version this one writes. */
    expected: Schema.Number,
    /** What was found: the stored version (or value), or `1` for unprefixed keys. */
    found: Schema.String,
    /** The keys that show it. */
    keys: Schema.Array(Schema.String),
    message: Schema.String,
  },
) {}

/**
 * The options name one kind of deployment and the server is another: a
 * single-node URL (or host/port) aimed at a Redis Cluster node, which would
 * answer MOVED for every key of another node's slots (`expected`
 * `standalone`, `found` `cluster`); cluster nodes that are one server with
 * cluster support disabled (`cluster`, `standalone`); a URL that names a
 * Redis Sentinel, which holds no data (`standalone`, `sentinel`). Nothing was
 * written; the message names the address and the option to use instead
 * (docs/redis.md, "Connections").
 */
export class TopologyMismatch extends Schema.TaggedError<TopologyMismatch>()("TopologyMismatch", {
  /** What the options asked for: one server (`url`, host/port), `cluster` (`nodes`) or `sentinel`. */
  expected: Schema.Literals(["standalone", "cluster", "sentinel"]),
  /** What the server is. */
  found: Schema.Literals(["standalone", "cluster", "sentinel"]),
  /** The server's address as the options gave it (`host:port`, or the cluster nodes). */
  address: Schema.String,
  message: Schema.String,
}) {}

/**
 * The server (in a cluster: a master) evicts keys under memory pressure:
 * its `maxmemory-policy` is not `noeviction`, so it could delete
 * Shardline's shard streams, consumer groups and owner tokens without a
 * word (docs/redis.md, "Eviction"; docs/protocol.md rule 26). Refused when
 * the connection is made, before any port runs, unless the connection's
 * options opt in (`allowEviction: true`; a runtime's `redis: {
 * allowEviction: true }`; the CLI's `--allow-eviction`). The message names
 * the setting and both ways out.
 */
export class EvictionPolicyRefused extends Schema.TaggedError<EvictionPolicyRefused>()(
  "EvictionPolicyRefused",
  {
    /** The policy found (`allkeys-lru`, `volatile-ttl`, ...): the first node's that evicts. */
    policy: Schema.String,
    /** Every node that evicts, `host:port (policy)`. */
    nodes: Schema.Array(Schema.String),
    message: Schema.String,
  },
) {}

/**
 * An administration request the data does not allow (@shardline/tools src/Admin.ts, the
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
