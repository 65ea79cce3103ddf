/**
 * Every Redis key and channel Shardline uses (docs/redis.md, "Keys"), all in
 * one namespace: a prefix (`shardline:` by default, `keyPrefix` of
 * `RedisConnectionOptions`) that one ACL key pattern and one channel
 * pattern name exactly (`~shardline:*`, `&shardline:*`), so two
 * applications or tenants share a Redis with users of their own. The prefix
 * stands outside every hash tag, so the slots are those of the tags:
 *
 * - data plane, one hash slot per shard (`{<stream>:<shard>}`): the shard
 *   stream `<prefix>{<stream>:<shard>}`, the owner token per group
 *   `...:owner:<group>`, the dead-letter stream `...:dlq` (and `dlq replay`'s
 *   routes `...:dlq:replays` and marks `...:dlq:replayed`), the seal marker
 *   `...:sealed`, a producer's idempotency window `...:idmp:<producer>`
 *   and the gate key `...:gate` (the gated fence's RENAMENX target);
 * - control plane, one hash slot per group: `<prefix>group:{<stream>:<group>}:...`
 *   (lease, heartbeat lists, notices, the Store's revision, snapshot,
 *   batches and audit stream); the stream's layout record
 *   `<prefix>stream:{<stream>}:layout`;
 * - `<prefix>schema`: the key schema's version (`SCHEMA_VERSION`), checked
 *   at connect (src/KeySchema.ts).
 *
 * Stream and group are URI-encoded inside the control-plane tags so that
 * `a:b` + `c` and `a` + `b:c` are two groups, and a brace in a name cannot
 * end the tag early; plain names are unchanged. The shard streams keep core's
 * names (`ShardStreams.shardKey`) after the prefix, so a key named by core's
 * helpers is this namespace's key once prefixed (`namespaced`).
 */
import type { GroupKey } from "@shardline/core"
import { ShardStreams, Transaction } from "@shardline/core"

/**
 * The key schema this version writes. 1 was the unprefixed layout
 * (`{<stream>:<shard>}`, `{shardline:<stream>:<group>}:...`); 2 puts every
 * key under a prefix.
 */
export const SCHEMA_VERSION = 2

/** The namespace when none is configured. */
export const DEFAULT_PREFIX = "shardline:"

const PREFIX = /^[A-Za-z0-9_.:/@-]{1,64}$/

/**
 * Why `prefix` cannot be a namespace, or undefined when it can: 1 to 64 of
 * `A-Z a-z 0-9 _ . : / @ -`. No glob character (`* ? [ ] \`), so the ACL
 * pattern `~<prefix>*` matches exactly the namespace; no brace, so the
 * prefix never becomes a key's hash tag; no space, so an ACL rule is one word.
 */
export const prefixProblem = (prefix: string): string | undefined =>
  PREFIX.test(prefix)
    ? undefined
    : `a key prefix is 1 to 64 of the characters A-Z a-z 0-9 _ . : / @ - (no glob character, brace or space, so that the ACL pattern ~<prefix>* names exactly Shardline's keys), got ${JSON.stringify(prefix)}`

/** Redis' glob with every special character of `literal` escaped (SCAN MATCH, ACL patterns). */
export const globEscape = (literal: string): string => literal.replace(/[*?[\]\\]/g, "\\$&")

/** Every key and channel of one namespace. */
export interface KeySpace {
  /** The namespace: every key and channel below starts with it. */
  readonly prefix: string
  /** The key schema's version (a decimal string): `<prefix>schema`. */
  readonly schema: string
  /** A key named by core's helpers (`ShardStreams.shardKey`, `deadLetterKey`), in this namespace. */
  readonly namespaced: (key: string) => string
  /** The shard stream `<prefix>{<stream>:<shard>}`. */
  readonly shardKey: (stream: string, shard: number) => string
  /** The group's owner token on the shard: `<shard>:owner:<group>` (same slot). */
  readonly ownerTokenKey: (stream: string, shard: number, group: string) => string
  /** The shard's dead-letter stream `<shard>:dlq` (same slot). */
  readonly deadLetterKey: (stream: string, shard: number) => string
  /**
   * Where the shard's dead letters are being replayed to (a hash: dead-letter
   * id -> target shard), `<shard>:dlq:replays`: recorded by `dlq replay`'s
   * first append of a letter, removed with the letter (src/lua/dlq-replay-route.lua).
   */
  readonly replayRoutesKey: (stream: string, shard: number) => string
  /**
   * The dead letters replayed into the shard (a hash:
   * `<group>/<dead-letter shard>/<dead-letter id>` -> the appended entry's
   * id), `<shard>:dlq:replayed`: each appended once (src/lua/dlq-replay-append.lua).
   */
  readonly replayMarksKey: (stream: string, shard: number) => string
  /** The seal marker of a shard of an earlier layout generation: appends are refused. */
  readonly sealedKey: (stream: string, shard: number) => string
  /** A producer's idempotency window on a shard (a hash; see src/lua/append.lua). */
  readonly idempotencyKey: (stream: string, shard: number, producerId: string) => string
  /** The gate key: the shard stream's name while a gated read's MULTI holds it (same slot). */
  readonly gateKey: (stream: string, shard: number) => string
  /**
   * A key of the shard's hash slot for a transaction's writes (docs/exactly-once.md):
   * `<shard>:data:<name>`, the application's (not Shardline's) though in the namespace.
   */
  readonly dataKey: (stream: string, shard: number, name: string) => string
  /**
   * Whether a transaction may not write `key` (docs/exactly-once.md): every
   * key of this namespace except the data keys, and every key core's
   * `Transaction.isReservedKey` names (schema 1's, unprefixed shard keys).
   */
  readonly isShardlineKey: (key: string) => boolean
  /**
   * A group's outbox on a shard (Redis Cluster): a stream of sends committed
   * with their messages' acks, waiting to be relayed to their target shards.
   * Never deleted (entries are, once relayed): its last id keeps growing.
   */
  readonly outboxKey: (stream: string, shard: number, group: string) => string
  /** Outbox entries re-routed after their target shard was sealed: a hash, entry id -> shard. */
  readonly outboxRoutesKey: (stream: string, shard: number, group: string) => string
  /**
   * In a target shard's slot: the last outbox id of one source outbox
   * delivered to that shard (a string `<ms>-<seq>`): an entry at or below it
   * is not appended again. One per (source stream, shard, group); never expires.
   */
  readonly relayMarkKey: (
    targetStream: string,
    targetShard: number,
    source: { readonly stream: string; readonly shard: number; readonly group: string },
  ) => string
  /** The start of every control-plane key of a group: `<prefix>group:{<stream>:<group>}`. */
  readonly groupBase: (key: GroupKey) => string
  readonly leaseKey: (key: GroupKey) => string
  readonly leaseCounterKey: (key: GroupKey) => string
  readonly requestsKey: (key: GroupKey) => string
  readonly servingKey: (key: GroupKey) => string
  /**
   * The group's members' last heartbeat: refreshed by every push of
   * members' heartbeats, served or not (a string holding its TTL in ms, PX
   * that TTL; the time since the last push is that TTL less PTTL). Read by
   * `groups list` / `delete` (@shardline/tools src/Admin.ts).
   */
  readonly lastHeartbeatKey: (key: GroupKey) => string
  readonly replyKey: (key: GroupKey, requestId: string) => string
  /** A member-side transport's reply list for the group: answers `{"id", "response"}` to its requests. */
  readonly inboxKey: (key: GroupKey, inboxId: string) => string
  /** Pub/sub channel of a member's notices (SPUBLISH in a cluster: it hashes like a key). */
  readonly noticeChannel: (key: GroupKey, memberId: string) => string
  /** Pub/sub channel of the group's coordinator candidates: "the lease was just released". */
  readonly handoverChannel: (key: GroupKey) => string
  /** The Store's revision (decimal string); absent before the first commit. */
  readonly storeRevisionKey: (key: GroupKey) => string
  /** The snapshot at `revision - LLEN batches` (string); absent before the first compaction. */
  readonly storeSnapshotKey: (key: GroupKey) => string
  /** The record batches committed after the snapshot (list, one per revision, oldest first). */
  readonly storeBatchesKey: (key: GroupKey) => string
  /** The group's audit events (stream, capped with MAXLEN ~). */
  readonly auditKey: (key: GroupKey) => string
  /** The stream's layout record: a hash { record (JSON), revision }, shared by its groups. */
  readonly layoutKey: (stream: string) => string
  /** SCAN pattern of every group's Store revision key (`groupOfRevisionKey` reads the group back). */
  readonly revisionKeyPattern: string
  /** The group a key matched by `revisionKeyPattern` belongs to. */
  readonly groupOfRevisionKey: (key: string) => GroupKey | undefined
}

const REVISION_SUFFIX = ":store:revision"

/**
 * The keys of one namespace. Throws on a prefix `prefixProblem` refuses
 * (`RedisConnection.make` checks it first and fails `InvalidKeyPrefix`).
 *
 * @example
 * const keys = Keys.make("tenant-a:")
 * keys.shardKey("orders", 3) // "tenant-a:{orders:3}"
 * keys.leaseKey({ stream: "orders", group: "billing" }) // "tenant-a:group:{orders:billing}:lease"
 */
export const make = (prefix: string = DEFAULT_PREFIX): KeySpace => {
  const problem = prefixProblem(prefix)
  if (problem !== undefined) throw new Error(problem)
  const shardKey = (stream: string, shard: number) => prefix + ShardStreams.shardKey(stream, shard)
  const groupBase = (key: GroupKey) =>
    `${prefix}group:{${encodeURIComponent(key.stream)}:${encodeURIComponent(key.group)}}`
  const groupTagStart = `${prefix}group:{`
  return {
    prefix,
    schema: `${prefix}schema`,
    namespaced: (key) => prefix + key,
    shardKey,
    ownerTokenKey: (stream, shard, group) => `${shardKey(stream, shard)}:owner:${group}`,
    deadLetterKey: (stream, shard) => `${shardKey(stream, shard)}:dlq`,
    replayRoutesKey: (stream, shard) => `${shardKey(stream, shard)}:dlq:replays`,
    replayMarksKey: (stream, shard) => `${shardKey(stream, shard)}:dlq:replayed`,
    sealedKey: (stream, shard) => `${shardKey(stream, shard)}:sealed`,
    idempotencyKey: (stream, shard, producerId) => `${shardKey(stream, shard)}:idmp:${producerId}`,
    gateKey: (stream, shard) => `${shardKey(stream, shard)}:gate`,
    dataKey: (stream, shard, name) => prefix + Transaction.dataKey(stream, shard, name),
    isShardlineKey: (key) =>
      Transaction.isReservedKey(key) ||
      (key.startsWith(prefix) && !Transaction.isDataKey(key, prefix.length)),
    outboxKey: (stream, shard, group) => `${shardKey(stream, shard)}:outbox:${group}`,
    outboxRoutesKey: (stream, shard, group) => `${shardKey(stream, shard)}:outbox-routes:${group}`,
    relayMarkKey: (targetStream, targetShard, source) =>
      `${shardKey(targetStream, targetShard)}:relayed:${encodeURIComponent(source.stream)}:${source.shard}:${encodeURIComponent(source.group)}`,
    groupBase,
    leaseKey: (key) => `${groupBase(key)}:lease`,
    leaseCounterKey: (key) => `${groupBase(key)}:lease:counter`,
    requestsKey: (key) => `${groupBase(key)}:hb:requests`,
    servingKey: (key) => `${groupBase(key)}:hb:serving`,
    lastHeartbeatKey: (key) => `${groupBase(key)}:hb:last`,
    replyKey: (key, requestId) => `${groupBase(key)}:hb:reply:${requestId}`,
    inboxKey: (key, inboxId) => `${groupBase(key)}:hb:inbox:${inboxId}`,
    noticeChannel: (key, memberId) => `${groupBase(key)}:notice:${memberId}`,
    handoverChannel: (key) => `${groupBase(key)}:handover`,
    storeRevisionKey: (key) => `${groupBase(key)}${REVISION_SUFFIX}`,
    storeSnapshotKey: (key) => `${groupBase(key)}:store:snapshot`,
    storeBatchesKey: (key) => `${groupBase(key)}:store:batches`,
    auditKey: (key) => `${groupBase(key)}:audit`,
    layoutKey: (stream) => `${prefix}stream:{${encodeURIComponent(stream)}}:layout`,
    revisionKeyPattern: `${globEscape(groupTagStart)}*}${REVISION_SUFFIX}`,
    groupOfRevisionKey: (key) => {
      if (!key.startsWith(groupTagStart) || !key.endsWith(`}${REVISION_SUFFIX}`)) return undefined
      const inner = key.slice(groupTagStart.length, key.length - REVISION_SUFFIX.length - 1)
      // both parts are URI-encoded: the one ":" between them is the separator
      const parts = inner.split(":")
      if (parts.length !== 2) return undefined
      try {
        return { stream: decodeURIComponent(parts[0]!), group: decodeURIComponent(parts[1]!) }
      } catch {
        return undefined
      }
    },
  }
}

/** The keys of the default namespace (`shardline:`). */
export const defaultKeys: KeySpace = make()

// ---------------------------------------------------------------------------
// schema 1: the unprefixed layout of earlier versions, for KeySchema's check

/**
 * Keys that only Shardline's schema-1 layout writes, for one group of a
 * stream (or the stream alone): its Store revision, its lease, its owner
 * token on shard 0, and the stream's layout record. `under` is a prefix they
 * may have been written under (an earlier version run with ioredis'
 * `keyPrefix` option); "" for none. Under a prefix, a schema-1 shard key is
 * this schema's own (`<prefix>{<stream>:<shard>}`), so only the control
 * plane's keys (`{shardline:...}`) tell the two apart.
 */
export const schema1Keys = (
  stream: string,
  group: string | undefined,
  under = "",
): ReadonlyArray<string> => {
  const streamTag = `{shardline:${encodeURIComponent(stream)}}`
  const keys = [`${under}${streamTag}:layout`]
  if (group !== undefined) {
    const tag = `{shardline:${encodeURIComponent(stream)}:${encodeURIComponent(group)}}`
    keys.push(`${under}${tag}${REVISION_SUFFIX}`, `${under}${tag}:lease`)
    if (under === "") keys.push(`${ShardStreams.shardKey(stream, 0)}:owner:${group}`)
  }
  return keys
}
