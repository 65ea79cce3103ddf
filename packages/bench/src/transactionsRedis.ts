/**
 * Entry point: `pnpm --filter @shardline/bench run bench:transactions-redis`.
 * Writes results/transactions-redis.json and .md: what a handler's
 * transaction costs (docs/exactly-once.md, "Cost"). Paired rounds on one
 * redis-server (redis-store's test harness): in each round, a fresh stream of
 * `BENCH_TX_SHARDS` shards is filled with `BENCH_TX_MESSAGES` messages, then
 * one runtime (one member, embedded coordinator) drains it three times,
 * in alternating order: with a plain handler (its ack rides the next read) and
 * with a handler that makes a one-write transaction (`INCR` of a key in the
 * shard's slot, committed with the ack: one script call per message), and
 * with a batch handler whose one transaction per batch INCRs once per
 * message (one script call per batch). Per
 * run: messages/s from the first handled message until nothing is pending,
 * and Redis CPU (`used_cpu_user` + `used_cpu_sys` of INFO cpu) per message
 * over the same span. Reported: medians and the ratio tx / plain per round.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { consumer, LayoutSource, start } from "@shardline/member-runtime"
import { Keys } from "@shardline/redis-store"
import { startRedis } from "@shardline/redis-store/testing"
import { Redis } from "ioredis"

const ROUNDS = Number(process.env.BENCH_TX_ROUNDS ?? 3)
const MESSAGES = Number(process.env.BENCH_TX_MESSAGES ?? 20_000)
const SHARDS = Number(process.env.BENCH_TX_SHARDS ?? 4)
const BATCH = Number(process.env.BENCH_TX_BATCH ?? 32)
/** Print each run's INFO commandstats (calls, µs per call; a script's own commands counted too). */
const COMMANDSTATS = process.env.BENCH_TX_COMMANDSTATS === "1"

type Mode = "plain" | "tx" | "txBatch"

interface Run {
  readonly mode: Mode
  readonly msgsPerSec: number
  /** Redis CPU µs per message. */
  readonly cpuUsPerMsg: number
}

const cpuSeconds = async (client: Redis): Promise<number> => {
  const info = await client.info("cpu")
  const user = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0)
  const sys = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0)
  return user + sys
}

const pendingTotal = async (client: Redis, stream: string): Promise<number> => {
  let total = 0
  for (let s = 0; s < SHARDS; s++) {
    const reply = (await client.xpending(Keys.defaultKeys.shardKey(stream, s), "g")) as [number]
    total += Number(reply[0])
  }
  return total
}

/** INFO commandstats as lines `command calls usec_per_call total_usec/message`, the costliest first. */
const commandStats = (info: string): string =>
  info
    .split("\n")
    .flatMap((line) => {
      const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(line.trim())
      return m === null
        ? []
        : [{ name: m[1]!, calls: Number(m[2]), usec: Number(m[3]), per: m[4]! }]
    })
    .sort((a, b) => b.usec - a.usec)
    .map(
      (c) =>
        `  ${c.name.padEnd(22)} ${String(c.calls).padStart(8)} calls ${c.per.padStart(8)} µs/call ${(c.usec / MESSAGES).toFixed(2).padStart(7)} µs/msg`,
    )
    .join("\n")

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

let streams = 0

const runOnce = async (url: string, raw: Redis, mode: Mode): Promise<Run> => {
  const stream = `txbench-${mode}-${process.pid}-${++streams}`
  // fill the stream first (its own runtime), so the run measures consuming only
  const filler = await start({ redis: { url }, handleSignals: false, logLevel: "silent" })
  const producer = filler.producer(stream, { layout: LayoutSource.fixed({ [stream]: SHARDS }) })
  for (let i = 0; i < MESSAGES; i += 1_000)
    await producer.sendBatch(
      Array.from({ length: Math.min(1_000, MESSAGES - i) }, (_, j) => ({
        key: `k${(i + j) % 1_000}`,
        fields: { n: String(i + j) },
      })),
    )
  await producer.flush()
  await filler.stop()
  if (COMMANDSTATS) await raw.config("RESETSTAT")

  let handled = 0
  let first: { at: number; cpu: number } | undefined
  let markFirst: Promise<void> | undefined
  const onFirst = () => {
    if (markFirst !== undefined) return
    const at = performance.now()
    markFirst = cpuSeconds(raw).then((cpu) => {
      first = { at, cpu }
    })
  }
  const runtime = await start({
    redis: { url },
    handleSignals: false,
    logLevel: "silent",
    consumers: [
      consumer({
        stream,
        group: "g",
        shardCount: SHARDS,
        batchSize: BATCH,
        ...(mode === "plain"
          ? {
              eachMessage: () => {
                onFirst()
                handled++
              },
            }
          : mode === "tx"
            ? {
                eachMessage: (_m, { transaction: tx }) => {
                  onFirst()
                  tx.incr(tx.key("n"))
                  handled++
                },
              }
            : {
                eachBatch: (batch, { transaction: tx }) => {
                  onFirst()
                  for (const _m of batch.messages) tx.incr(tx.key("n"))
                  handled += batch.messages.length
                },
              }),
      }),
    ],
  })
  try {
    while (handled < MESSAGES || (await pendingTotal(raw, stream)) > 0) await sleep(5)
    const end = performance.now()
    const cpu = await cpuSeconds(raw)
    if (COMMANDSTATS)
      console.log(`${mode} commandstats:\n${commandStats(await raw.info("commandstats"))}`)
    await markFirst
    const seconds = (end - first!.at) / 1_000
    return {
      mode,
      msgsPerSec: MESSAGES / seconds,
      cpuUsPerMsg: ((cpu - first!.cpu) * 1e6) / MESSAGES,
    }
  } finally {
    await runtime.stop()
  }
}

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

const server = await startRedis({ kind: "redis7" })
const raw = new Redis(server.port, server.host)
const rounds: Array<{ plain: Run; tx: Run; txBatch: Run }> = []
try {
  for (let r = 0; r < ROUNDS; r++) {
    const order: Array<Mode> = r % 2 === 0 ? ["plain", "tx", "txBatch"] : ["txBatch", "tx", "plain"]
    const runs: Partial<Record<Mode, Run>> = {}
    for (const mode of order) runs[mode] = await runOnce(server.url, raw, mode)
    rounds.push({ plain: runs.plain!, tx: runs.tx!, txBatch: runs.txBatch! })
    console.log(
      `round ${r + 1}: plain ${runs.plain!.msgsPerSec.toFixed(0)} msg/s ${runs.plain!.cpuUsPerMsg.toFixed(1)} µs/msg; tx ${runs.tx!.msgsPerSec.toFixed(0)} msg/s ${runs.tx!.cpuUsPerMsg.toFixed(1)} µs/msg; batch tx ${runs.txBatch!.msgsPerSec.toFixed(0)} msg/s ${runs.txBatch!.cpuUsPerMsg.toFixed(1)} µs/msg`,
    )
  }
} finally {
  raw.disconnect()
  await server.stop()
}

const summary = {
  server: `redis7 ${server.version}`,
  cpu: cpus()[0]?.model ?? "unknown",
  cores: cpus().length,
  messages: MESSAGES,
  shards: SHARDS,
  batchSize: BATCH,
  rounds,
  median: {
    plainMsgsPerSec: median(rounds.map((r) => r.plain.msgsPerSec)),
    txMsgsPerSec: median(rounds.map((r) => r.tx.msgsPerSec)),
    plainCpuUsPerMsg: median(rounds.map((r) => r.plain.cpuUsPerMsg)),
    txCpuUsPerMsg: median(rounds.map((r) => r.tx.cpuUsPerMsg)),
    throughputRatio: median(rounds.map((r) => r.tx.msgsPerSec / r.plain.msgsPerSec)),
    cpuRatio: median(rounds.map((r) => r.tx.cpuUsPerMsg / r.plain.cpuUsPerMsg)),
    txBatchMsgsPerSec: median(rounds.map((r) => r.txBatch.msgsPerSec)),
    txBatchCpuUsPerMsg: median(rounds.map((r) => r.txBatch.cpuUsPerMsg)),
    batchThroughputRatio: median(rounds.map((r) => r.txBatch.msgsPerSec / r.plain.msgsPerSec)),
    batchCpuRatio: median(rounds.map((r) => r.txBatch.cpuUsPerMsg / r.plain.cpuUsPerMsg)),
  },
}

const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("transactions-redis.json", dir), `${JSON.stringify(summary, null, 2)}\n`)
const m = summary.median
writeFileSync(
  new URL("transactions-redis.md", dir),
  `# A one-write transaction against the plain ack (Redis)

\`pnpm --filter @shardline/bench run bench:transactions-redis\` (src/transactionsRedis.ts;
docs/exactly-once.md, "Cost"). ${summary.server}, ${summary.cores} cores (${summary.cpu}),
shared with other work. ${ROUNDS} paired rounds, each draining ${MESSAGES} messages on
${SHARDS} shards with batches of ${BATCH}, plain and transactional in alternating order.

| round | plain msg/s | tx msg/s | tx / plain | batch tx msg/s | batch tx / plain | plain Redis CPU µs/msg | tx Redis CPU µs/msg | tx / plain | batch tx Redis CPU µs/msg | batch tx / plain |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
${rounds
  .map(
    (r, i) =>
      `| ${i + 1} | ${r.plain.msgsPerSec.toFixed(0)} | ${r.tx.msgsPerSec.toFixed(0)} | ${(r.tx.msgsPerSec / r.plain.msgsPerSec).toFixed(2)} | ${r.txBatch.msgsPerSec.toFixed(0)} | ${(r.txBatch.msgsPerSec / r.plain.msgsPerSec).toFixed(2)} | ${r.plain.cpuUsPerMsg.toFixed(1)} | ${r.tx.cpuUsPerMsg.toFixed(1)} | ${(r.tx.cpuUsPerMsg / r.plain.cpuUsPerMsg).toFixed(2)} | ${r.txBatch.cpuUsPerMsg.toFixed(1)} | ${(r.txBatch.cpuUsPerMsg / r.plain.cpuUsPerMsg).toFixed(2)} |`,
  )
  .join("\n")}
| median | ${m.plainMsgsPerSec.toFixed(0)} | ${m.txMsgsPerSec.toFixed(0)} | ${m.throughputRatio.toFixed(2)} | ${m.txBatchMsgsPerSec.toFixed(0)} | ${m.batchThroughputRatio.toFixed(2)} | ${m.plainCpuUsPerMsg.toFixed(1)} | ${m.txCpuUsPerMsg.toFixed(1)} | ${m.cpuRatio.toFixed(2)} | ${m.txBatchCpuUsPerMsg.toFixed(1)} | ${m.batchCpuRatio.toFixed(2)} |

The plain handler's acks ride the shard's next read (one fenced call per
batch); a per-message transaction (\`eachMessage\`) commits with its
message's ack in one script call per message (the owner token, the message
pending, the write checked, then the write and the ack), awaited before the
shard's next message; a batch transaction (\`eachBatch\`, one INCR per
message) commits once per batch. Plain runs are short (a fraction of a
second), so their CPU figure is coarse (INFO cpu's resolution).
`,
)
console.log(JSON.stringify(summary.median))
