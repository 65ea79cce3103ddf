/**
 * Each shard stream's entries as a producer process wrote them
 * (test/redis/procs/producer.ts): the `n` and routing key of each, in stream
 * order, for `storedChecks` (support/groupChecks.ts).
 */
import { Keys } from "@shardline/redis-store"
import type { Cluster, Redis } from "ioredis"

export const shardEntries = async (
  client: Redis | Cluster,
  stream: string,
  shards: number,
): Promise<Array<Array<{ n: number; key: string }>>> => {
  const byShard: Array<Array<{ n: number; key: string }>> = []
  for (let s = 0; s < shards; s++) {
    const entries = (await client.xrange(Keys.defaultKeys.shardKey(stream, s), "-", "+")) as Array<
      [string, Array<string>]
    >
    byShard.push(
      entries.map(([, fields]) => ({
        n: Number(fields[fields.indexOf("n") + 1]),
        key: fields[fields.indexOf("shardline-key") + 1] ?? "",
      })),
    )
  }
  return byShard
}
