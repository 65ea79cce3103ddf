/**
 * Example: one explicit member with local workers (`runtimeMaxConcurrency`),
 * a batch handler with per-message resolve, `xackdel`, and a poison message
 * that goes to the shard's dead-letter stream after `maxDeliveries`.
 *
 * Run: pnpm --filter @shardline/member-runtime example explicitMember
 */
import { pathToFileURL } from "node:url"
import { ShardStreams } from "@shardline/core"
import { consumer, memoryPorts, start } from "@shardline/member-runtime"
import { Effect } from "effect"

export const main = async (messages = 100) => {
  const ports = memoryPorts()
  let handled = 0
  const deadLettered: Array<string> = []
  const runtime = await start({
    ports,
    handleSignals: false,
    consumers: [
      consumer({
        stream: "payments",
        group: "ledger",
        memberId: "ledger-1",
        // four local workers for one member: it still owns all 16 shards
        runtimeMaxConcurrency: 4,
        shardCount: 16,
        heartbeatIntervalMs: 200,
        sessionTimeoutMs: 3_000,
        ack: "xackdel",
        maxDeliveries: 3,
        retryBackoff: { initialMs: 20, maxMs: 200 },
        eachBatch: async (batch, { resolve }) => {
          for (const message of batch.messages) {
            if (message.fields.poison === "yes") throw new Error("cannot parse payment")
            handled++
            resolve(message) // acknowledged even if a later message throws
          }
        },
      }),
    ],
  })
  runtime.on((event) => {
    if (event.type === "deadLettered") deadLettered.push(event.messageId)
  })
  const producer = runtime.producer("payments")
  for (let i = 0; i < messages; i++) await producer.send(`account-${i % 7}`, { cents: String(i) })
  const poison = await producer.send("account-3", { poison: "yes" })
  while (handled < messages || deadLettered.length < 1)
    await new Promise((resolve) => setTimeout(resolve, 10))
  // the dead-letter stream of the poison message's shard: {payments:<shard>}:dlq
  const dlq = await Effect.runPromise(
    ports.streams.range(ShardStreams.deadLetterKey("payments", poison.shard)),
  )
  console.log(
    `${handled} handled, dead-lettered: ${dlq.map((e) => e.fields[ShardStreams.DeadLetterFields.reason]).join("; ")}`,
  )
  console.log(runtime.members()) // one member, 4 workers, 16 shards
  await runtime.stop()
  return { handled, deadLettered: dlq.length }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) await main()
