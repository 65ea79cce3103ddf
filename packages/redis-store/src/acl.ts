/**
 * The least-privilege ACL rules of a Shardline user (docs/redis.md, "ACL"):
 * every command the ports send, directly or from their Lua scripts (Redis
 * checks a script's commands against the caller's ACL), and every key and
 * channel pattern they touch.
 *
 *   ACL SETUSER shardline on >secret resetkeys resetchannels -@all <rules...>
 */
export interface AclOptions {
  /** The server has XACKDEL (Redis >= 8.2): older servers refuse the rule. */
  readonly xackdel: boolean
  /** Add what a Redis Cluster client needs (CLUSTER SLOTS, and CLUSTER INFO for its ready check). */
  readonly cluster?: boolean
}

/** Key patterns: shard streams, owner tokens, dead-letter streams, group control keys. */
export const aclKeyPatterns: ReadonlyArray<string> = [
  "{*:*}", // shard stream {<stream>:<shard>}
  "{*:*}:owner:*", // owner token per group
  "{*:*}:dlq", // dead-letter stream
  "{*:*}:sealed", // seal marker of a shard of an earlier layout generation
  "{*:*}:idmp:*", // a producer's idempotency window on a shard (idempotent appends)
  "{*:*}:gate", // the shard stream's name inside a gated read's MULTI (never seen outside it)
  "{shardline:*}:*", // lease, heartbeat queues, presence, reply lists, Store, audit, layouts
]

export const aclChannelPatterns: ReadonlyArray<string> = ["{shardline:*}:notice:*"]

export const aclCommands = (options: AclOptions): ReadonlyArray<string> => [
  // connection: ioredis's ready check, the feature probe, scripts
  "info",
  "ping",
  "select",
  "client|setname",
  "command|docs",
  "evalsha",
  "eval",
  // the gated fence of ShardStreams.read (MULTI, the gate script's RENAME, XREADGROUP,
  // RENAMENX, EXEC) and the optimistic one (WATCH, GET, MULTI, XREADGROUP, EXEC)
  "watch",
  "unwatch",
  "multi",
  "exec",
  "rename",
  "renamenx",
  // ShardStreams (direct, and inside read/ack/nack/claim/dead-letter scripts)
  "xadd",
  "xrange",
  "xrevrange",
  "xread",
  "xreadgroup",
  "xgroup|create",
  "xgroup|createconsumer",
  "xgroup|setid",
  "xack",
  "xdel",
  ...(options.xackdel ? ["xackdel"] : []),
  "xclaim",
  "xautoclaim",
  "xpending",
  "xinfo|stream",
  "xinfo|groups",
  "xinfo|consumers",
  "get",
  "set",
  "type",
  "exists",
  "del",
  // idempotent appends: the producer's window (a hash, in the append script)
  "hgetall",
  "hdel",
  "hincrby",
  // CoordinatorLease
  "hmget",
  "hset",
  "pttl",
  "incr",
  "pexpire",
  // Store (revision, snapshot, batches, audit stream) and StreamLayouts (a hash)
  "lrange",
  "hget",
  // CoordinatorTransport
  "lpush",
  "ltrim",
  "rpush",
  "blmpop",
  "publish",
  "subscribe",
  "unsubscribe",
  "spublish",
  "ssubscribe",
  "sunsubscribe",
  ...(options.cluster ? ["cluster|slots", "cluster|info"] : []),
]

/** The arguments after `ACL SETUSER <name> on ><password>`. */
export const aclRules = (options: AclOptions): ReadonlyArray<string> => [
  "resetkeys",
  "resetchannels",
  "-@all",
  ...aclKeyPatterns.map((p) => `~${p}`),
  ...aclChannelPatterns.map((p) => `&${p}`),
  ...aclCommands(options).map((c) => `+${c}`),
]

/**
 * The commands `shardline inspect` and `shardline dashboard` send (directly
 * and from the drainState script): reads only. A user with these rules can
 * watch every group and change nothing (docs/observability.md, "The
 * dashboard"; a script's commands are checked against the caller's ACL too,
 * so EVAL cannot write either).
 */
export const readOnlyCommands = (
  options: Pick<AclOptions, "cluster"> = {},
): ReadonlyArray<string> => [
  // connection: ioredis's ready check, the feature probe
  "info",
  "ping",
  "select",
  "client|setname",
  "command|docs",
  // drainState's script (XINFO GROUPS, EXISTS, TYPE, XRANGE inside)
  "evalsha",
  "eval",
  // the groups on the server, the snapshot, layouts, lease, audit log
  "scan",
  "get",
  "hget",
  "hmget",
  "hgetall",
  "lrange",
  "pttl",
  "type",
  "exists",
  // shards, their groups and dead-letter streams
  "xrange",
  "xrevrange",
  "xpending",
  "xinfo|stream",
  "xinfo|groups",
  "xinfo|consumers",
  ...(options.cluster ? ["cluster|slots", "cluster|info"] : []),
]

/** The arguments after `ACL SETUSER <name> on ><password>` for a read-only (dashboard) user. */
export const readOnlyRules = (options: Pick<AclOptions, "cluster"> = {}): ReadonlyArray<string> => [
  "resetkeys",
  "resetchannels",
  "-@all",
  ...aclKeyPatterns.map((p) => `~${p}`),
  ...readOnlyCommands(options).map((c) => `+${c}`),
]
