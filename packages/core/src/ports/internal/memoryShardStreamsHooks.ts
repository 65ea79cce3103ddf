/**
 * What the memory `ShardStreams` lets a test do to its data (the tests of
 * docs/protocol.md rule 26: something Shardline stored vanishes), registered
 * per instance by `ShardStreams.makeMemory` and exported only from
 * `@shardline/core/testing`.
 */
export interface MemoryShardStreamsHooks {
  /** The shard's stream goes, with its consumer groups and pending entries (DEL, an eviction). */
  readonly deleteStream: (stream: string, shard: number) => void
  /** The group's consumer group goes from the shard's stream (XGROUP DESTROY). */
  readonly destroyGroup: (stream: string, shard: number, group: string) => void
  /** The group's owner token of the shard goes (DEL, an eviction). */
  readonly deleteOwnerToken: (stream: string, shard: number, group: string) => void
}

export const memoryShardStreamsHooks = new WeakMap<object, MemoryShardStreamsHooks>()
