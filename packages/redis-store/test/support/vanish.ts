/**
 * What a deletion or an eviction does to what an implementation stores
 * (docs/protocol.md rule 26), for the ShardStreams and transaction
 * contracts: on Redis DEL and XGROUP DESTROY of the namespace's keys, in
 * memory core's test hooks.
 */
import type { ShardStreams } from "@shardline/core/testing"
import { Effect } from "effect"
import type { RedisConnectionShape } from "../../src/RedisConnection.js"
import type { Vanish } from "../contract/ShardStreams.js"

export const redisVanish = (connection: RedisConnectionShape): Vanish => {
  const { ownerTokenKey, shardKey } = connection.keys
  const run = (name: string, f: (c: RedisConnectionShape["client"]) => Promise<unknown>) =>
    Effect.orDie(Effect.asVoid(connection.command(name, f)))
  return {
    deleteStream: (stream, shard) => run("DEL", (c) => c.del(shardKey(stream, shard))),
    destroyGroup: (stream, shard, group) =>
      run("XGROUP DESTROY", (c) => c.xgroup("DESTROY", shardKey(stream, shard), group)),
    deleteOwnerToken: (stream, shard, group) =>
      run("DEL", (c) => c.del(ownerTokenKey(stream, shard, group))),
  }
}

export const memoryVanish = (hooks: ShardStreams.MemoryShardStreamsHooks): Vanish => ({
  deleteStream: (stream, shard) => Effect.sync(() => hooks.deleteStream(stream, shard)),
  destroyGroup: (stream, shard, group) =>
    Effect.sync(() => hooks.destroyGroup(stream, shard, group)),
  deleteOwnerToken: (stream, shard, group) =>
    Effect.sync(() => hooks.deleteOwnerToken(stream, shard, group)),
})
