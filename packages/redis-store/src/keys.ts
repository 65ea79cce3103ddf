/**
 * Every Redis key and channel Shardline uses (docs/redis.md, "Keys").
 *
 * Data plane, one hash slot per shard: the shard stream `{<stream>:<shard>}`,
 * its owner token per group `{<stream>:<shard>}:owner:<group>` and its
 * dead-letter stream `{<stream>:<shard>}:dlq`.
 *
 * Control plane, one hash slot per group: everything under
 * `{shardline:<stream>:<group>}` (lease, heartbeat queues, notices; the
 * Store's keys share the tag). Stream and group are URI-encoded inside the
 * tag so that `a:b` + `c` and `a` + `b:c` are two groups, and a brace in a
 * name cannot end the tag early; plain names are unchanged.
 */
import type { GroupKey } from "./ports.js"

export const shardKey = (stream: string, shard: number): string => `{${stream}:${shard}}`

export const ownerTokenKey = (stream: string, shard: number, group: string): string =>
  `${shardKey(stream, shard)}:owner:${group}`

export const deadLetterKey = (stream: string, shard: number): string =>
  `${shardKey(stream, shard)}:dlq`

/** The hash tag of a group's control-plane keys: `{shardline:<stream>:<group>}`. */
export const groupTag = (key: GroupKey): string =>
  `{shardline:${encodeURIComponent(key.stream)}:${encodeURIComponent(key.group)}}`

export const leaseKey = (key: GroupKey): string => `${groupTag(key)}:lease`
export const leaseCounterKey = (key: GroupKey): string => `${groupTag(key)}:lease:counter`
export const requestsKey = (key: GroupKey): string => `${groupTag(key)}:hb:requests`
export const servingKey = (key: GroupKey): string => `${groupTag(key)}:hb:serving`
export const replyKey = (key: GroupKey, requestId: string): string =>
  `${groupTag(key)}:hb:reply:${requestId}`
/** Pub/sub channel of a member's notices (SPUBLISH in a cluster: it hashes like a key). */
export const noticeChannel = (key: GroupKey, memberId: string): string =>
  `${groupTag(key)}:notice:${memberId}`
