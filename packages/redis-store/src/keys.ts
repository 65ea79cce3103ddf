/**
 * Every Redis key and channel Shardline uses (docs/redis.md, "Keys").
 *
 * Data plane, one hash slot per shard (core's `ShardStreams` key helpers):
 * the shard stream `{<stream>:<shard>}`, its owner token per group
 * `{<stream>:<shard>}:owner:<group>`, its dead-letter stream
 * `{<stream>:<shard>}:dlq` and its seal marker `{<stream>:<shard>}:sealed`.
 *
 * Control plane, one hash slot per group: everything under
 * `{shardline:<stream>:<group>}` (lease, heartbeat queues, notices, the
 * Store's snapshot, batches, revision and audit stream). The stream's layout
 * record is under `{shardline:<stream>}`. Stream and group are URI-encoded
 * inside the tags so that `a:b` + `c` and `a` + `b:c` are two groups, and a
 * brace in a name cannot end the tag early; plain names are unchanged.
 */
import { type GroupKey, ShardStreams } from "@shardline/core"

export const { shardKey, ownerTokenKey, deadLetterKey } = ShardStreams

/** The seal marker of a shard of an earlier layout generation: appends are refused. */
export const sealedKey = (stream: string, shard: number): string =>
  `${shardKey(stream, shard)}:sealed`

/** A producer's idempotency window on a shard (a hash; see src/lua/append.lua). */
export const idempotencyKey = (stream: string, shard: number, producerId: string): string =>
  `${shardKey(stream, shard)}:idmp:${producerId}`

/** The hash tag of a group's control-plane keys: `{shardline:<stream>:<group>}`. */
export const groupTag = (key: GroupKey): string =>
  `{shardline:${encodeURIComponent(key.stream)}:${encodeURIComponent(key.group)}}`

export const leaseKey = (key: GroupKey): string => `${groupTag(key)}:lease`
export const leaseCounterKey = (key: GroupKey): string => `${groupTag(key)}:lease:counter`
export const requestsKey = (key: GroupKey): string => `${groupTag(key)}:hb:requests`
export const servingKey = (key: GroupKey): string => `${groupTag(key)}:hb:serving`
export const replyKey = (key: GroupKey, requestId: string): string =>
  `${groupTag(key)}:hb:reply:${requestId}`
/** A member-side transport's reply list for the group: answers `{"id", "response"}` to its requests. */
export const inboxKey = (key: GroupKey, inboxId: string): string =>
  `${groupTag(key)}:hb:inbox:${inboxId}`
/** Pub/sub channel of a member's notices (SPUBLISH in a cluster: it hashes like a key). */
export const noticeChannel = (key: GroupKey, memberId: string): string =>
  `${groupTag(key)}:notice:${memberId}`
/** Pub/sub channel of the group's coordinator candidates: "the lease was just released". */
export const handoverChannel = (key: GroupKey): string => `${groupTag(key)}:handover`

// Store (one group's coordinator state)

/** The stored revision (decimal string); absent before the first commit. */
export const storeRevisionKey = (key: GroupKey): string => `${groupTag(key)}:store:revision`
/** The snapshot at `revision - LLEN batches` (string); absent before the first compaction. */
export const storeSnapshotKey = (key: GroupKey): string => `${groupTag(key)}:store:snapshot`
/** The record batches committed after the snapshot (list, one per revision, oldest first). */
export const storeBatchesKey = (key: GroupKey): string => `${groupTag(key)}:store:batches`
/** The group's audit events (stream, capped with MAXLEN ~). */
export const auditKey = (key: GroupKey): string => `${groupTag(key)}:audit`

// StreamLayouts (one per stream, shared by its groups and producers)

/** The hash tag of a stream's shared keys: `{shardline:<stream>}`. */
export const streamTag = (stream: string): string => `{shardline:${encodeURIComponent(stream)}}`
/** The stream's layout record: a hash { record (JSON), revision }. */
export const layoutKey = (stream: string): string => `${streamTag(stream)}:layout`
