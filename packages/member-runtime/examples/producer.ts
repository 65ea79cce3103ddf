/**
 * Example: the producer on its own: keyed routing (`Layout.shardOf`),
 * batching, trimming and idempotent sends, with an explicit `LayoutSource`.
 *
 * Run: pnpm --filter @shardline/member-runtime example producer
 */
import { pathToFileURL } from "node:url"
import { LayoutSource, start } from "@shardline/member-runtime"

export const main = async () => {
  // a producer-only process: no consumers, no coordinator
  const runtime = await start({ handleSignals: false, coordinator: "standalone" })
  const producer = runtime.producer("clicks", {
    layout: LayoutSource.fixed({ clicks: 32 }),
    lingerMs: 5, // wait up to 5 ms to fill a batch
    maxBatch: 500,
    trim: { maxLen: 10_000, approximate: true }, // XADD MAXLEN ~ 10000
    idempotent: true, // retried appends are never stored twice (XADD IDMP)
  })
  const sent = await producer.sendBatch(
    Array.from({ length: 1_000 }, (_, i) => ({
      key: `user-${i % 50}`,
      fields: { page: `/p/${i}` },
    })),
  )
  // every send of one key went to one shard, in order
  const shardsOfUser0 = new Set(sent.filter((_, i) => i % 50 === 0).map((s) => s.shard))
  console.log(`${sent.length} sent; user-0 always on shard ${[...shardsOfUser0].join(",")}`)
  await producer.close()
  await runtime.stop()
  return { sent: sent.length, shardsOfUser0: shardsOfUser0.size }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) await main()
