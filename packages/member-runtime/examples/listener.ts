/**
 * Example: `@StreamListener` with listener concurrency (docs/runtime.md).
 * `concurrency: 2` creates two logical members in this process, `<base>-m0`
 * and `<base>-m1`, each with its own heartbeat loop, consumer name, epoch and
 * shards. Per-shard state is flushed in `onRevoked`, before the shard is
 * released to its next owner.
 *
 * Run: pnpm --filter @shardline/member-runtime example listener
 */
import { pathToFileURL } from "node:url"
import {
  type Message,
  type MessageContext,
  type ShardHookInfo,
  StreamListener,
  start,
} from "@shardline/member-runtime"

/** Running totals per customer, kept per shard (a shard's keys are all here). */
const totals = new Map<number, Map<string, number>>()
/** Where flushed totals go (a database in real life). */
const database = new Map<string, number>()

const flush = (shard: number) => {
  for (const [customer, amount] of totals.get(shard) ?? [])
    database.set(customer, (database.get(customer) ?? 0) + amount)
  totals.delete(shard)
}

class Billing {
  @StreamListener({
    stream: "orders",
    group: "billing",
    concurrency: 2,
    shardCount: 8,
    heartbeatIntervalMs: 200,
    sessionTimeoutMs: 3_000,
    // flush the shard's state before another member takes it over
    onRevoked: async ({ shard }: ShardHookInfo) => flush(shard),
  })
  async onOrder(message: Message, { signal }: MessageContext) {
    if (signal.aborted) return // revoked past its drain deadline, or fenced
    const perShard = totals.get(message.shard) ?? new Map<string, number>()
    totals.set(message.shard, perShard)
    perShard.set(message.key!, (perShard.get(message.key!) ?? 0) + Number(message.fields.amount))
  }
}

export const main = async (messages = 200): Promise<number> => {
  const runtime = await start({ listeners: [new Billing()], handleSignals: false })
  console.log(runtime.members().map((m) => m.memberId)) // [ '<base>-m0', '<base>-m1' ]
  const producer = runtime.producer("orders")
  for (let i = 0; i < messages; i++) await producer.send(`customer-${i % 10}`, { amount: "1" })
  // wait until every order is counted
  const counted = () =>
    [...database.values(), ...[...totals.values()].flatMap((m) => [...m.values()])].reduce(
      (a, b) => a + b,
      0,
    )
  while (counted() < messages) await new Promise((resolve) => setTimeout(resolve, 10))
  await runtime.stop() // revokes (and so flushes) every shard while leaving
  console.log(`counted ${counted()} orders, ${totals.size} shards still in memory`)
  return counted()
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) await main()
