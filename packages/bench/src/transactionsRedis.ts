/**
 * Entry point: `pnpm --filter @shardline/bench run bench:transactions-redis`.
 * Writes results/transactions-redis.json and .md: what a handler's
 * transaction costs against the plain ack in the same run
 * (docs/exactly-once.md, "Cost").
 *
 * Targets (`BENCH_TX_TARGETS`, default `redis7,redis8,cluster7,cluster8`):
 * one redis-server or a 3-node Redis Cluster of Redis 7.0 or 8.x
 * (~/.cache/shardline/redis-8, scripts/build-redis8.sh; a missing build is
 * skipped with a line), started through redis-store's test harness. On
 * each, `BENCH_TX_ROUNDS` (default 5) paired rounds: a fresh stream of
 * `BENCH_TX_SHARDS` shards (default 4) filled with `BENCH_TX_MESSAGES`
 * (default 20,000) is drained by one runtime (one member, embedded
 * coordinator, batches of `BENCH_TX_BATCH`, default 32) with, in an order
 * that alternates by round:
 * - `plain`: `eachMessage` without a transaction (its ack rides the next read);
 * - `tx`: `eachMessage` with a one-write transaction (INCR of a key in the
 *   shard's slot): the batch's transactions commit in one group commit;
 * - `txBatch`: `eachBatch` whose one transaction INCRs once per message;
 * - `txKeys`: as `tx`, but each message INCRs its routing key's own counter
 *   (1,000 keys): a batch's writes rarely touch one key twice, so the
 *   commit cannot merge them (docs/exactly-once.md, "The group as one
 *   part"). Reported beside the targets, which are set for `tx` and `txBatch`.
 * Per run: messages/s from the first handled message until nothing is
 * pending, and Redis CPU (INFO cpu, user + sys, summed over a cluster's
 * nodes) per message over the same span, and this process's CPU (the
 * member: user + system, process.cpuUsage) per message. Reported per target: each round's
 * figures and ratios (tx / plain, txBatch / plain, in the same round), and
 * their medians; with the load average (1 minute) at the start and end of
 * each target's rounds (the machine is shared: ratios within a round count).
 * `BENCH_TX_COMMANDSTATS=1` prints INFO commandstats per run (one node).
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { consumer, LayoutSource, start } from "@shardline/member-runtime"
import { Keys } from "@shardline/redis-store"
import {
  type ServerKind,
  ServerMissing,
  startRedis,
  startRedisCluster,
} from "@shardline/redis-store/testing"
import { Cluster, Redis } from "ioredis"

const ROUNDS = Number(process.env.BENCH_TX_ROUNDS ?? 5)
const MESSAGES = Number(process.env.BENCH_TX_MESSAGES ?? 20_000)
const SHARDS = Number(process.env.BENCH_TX_SHARDS ?? 4)
const BATCH = Number(process.env.BENCH_TX_BATCH ?? 32)
const COMMANDSTATS = process.env.BENCH_TX_COMMANDSTATS === "1"
const TARGETS = (process.env.BENCH_TX_TARGETS ?? "redis7,redis8,cluster7,cluster8")
  .split(",")
  .map((t) => t.trim())

type Mode = "plain" | "tx" | "txBatch" | "txKeys"

interface Run {
  readonly msgsPerSec: number
  /** Redis CPU µs per message. */
  readonly cpuUsPerMsg: number
  /** This process's CPU µs per message (the member's runtime, user + system). */
  readonly nodeCpuUsPerMsg: number
}

interface Round {
  readonly plain: Run
  readonly tx: Run
  readonly txBatch: Run
  readonly txKeys: Run
  /** Each mode / plain in this round: messages/s and Redis CPU per message. */
  readonly ratios: {
    readonly txThroughput: number
    readonly txBatchThroughput: number
    readonly txKeysThroughput: number
    readonly txCpu: number
    readonly txBatchCpu: number
    readonly txKeysCpu: number
  }
}

interface Target {
  readonly name: string
  readonly url?: string
  readonly nodes: ReadonlyArray<{ readonly host: string; readonly port: number }>
}

const cpuSeconds = async (nodes: Target["nodes"]): Promise<number> => {
  let total = 0
  for (const n of nodes) {
    const c = new Redis(n.port, n.host)
    try {
      const info = await c.info("cpu")
      total +=
        Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0) +
        Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0)
    } finally {
      c.disconnect()
    }
  }
  return total
}

const pendingTotal = async (client: Redis | Cluster, stream: string): Promise<number> => {
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
    .slice(0, 12)
    .map(
      (c) =>
        `  ${c.name.padEnd(22)} ${String(c.calls).padStart(8)} calls ${c.per.padStart(8)} µs/call ${(c.usec / MESSAGES).toFixed(2).padStart(7)} µs/msg`,
    )
    .join("\n")

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const redisOption = (t: Target) => (t.url !== undefined ? { url: t.url } : { nodes: t.nodes })

let streams = 0

const runOnce = async (target: Target, client: Redis | Cluster, mode: Mode): Promise<Run> => {
  const stream = `txbench-${mode}-${process.pid}-${++streams}`
  // fill the stream first (its own runtime), so the run measures consuming only
  const filler = await start({
    redis: redisOption(target),
    handleSignals: false,
    logLevel: "silent",
  })
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
  if (COMMANDSTATS && client instanceof Redis) await client.config("RESETSTAT")

  let handled = 0
  let first: { at: number; cpu: number; node: NodeJS.CpuUsage } | undefined
  let markFirst: Promise<void> | undefined
  const onFirst = () => {
    if (markFirst !== undefined) return
    const at = performance.now()
    const node = process.cpuUsage()
    markFirst = cpuSeconds(target.nodes).then((cpu) => {
      first = { at, cpu, node }
    })
  }
  const runtime = await start({
    redis: redisOption(target),
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
            : mode === "txKeys"
              ? {
                  eachMessage: (m, { transaction: tx }) => {
                    onFirst()
                    tx.incr(tx.key(`n:${m.key}`))
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
    while (handled < MESSAGES || (await pendingTotal(client, stream)) > 0) await sleep(5)
    const end = performance.now()
    const node = process.cpuUsage(first?.node)
    const cpu = await cpuSeconds(target.nodes)
    if (COMMANDSTATS && client instanceof Redis)
      console.log(`  ${mode} commandstats:\n${commandStats(await client.info("commandstats"))}`)
    await markFirst
    return {
      msgsPerSec: MESSAGES / ((end - first!.at) / 1_000),
      cpuUsPerMsg: ((cpu - first!.cpu) * 1e6) / MESSAGES,
      nodeCpuUsPerMsg: (node.user + node.system) / MESSAGES,
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
const r2 = (n: number) => Math.round(n * 100) / 100

const measure = async (target: Target) => {
  const client =
    target.url !== undefined
      ? new Redis(target.url)
      : new Cluster(target.nodes.map((n) => ({ host: n.host, port: n.port })))
  const loadBefore = r2(loadavg()[0]!)
  const rounds: Array<Round> = []
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const order: Array<Mode> =
        r % 2 === 0 ? ["plain", "tx", "txBatch", "txKeys"] : ["txKeys", "txBatch", "tx", "plain"]
      const runs: Partial<Record<Mode, Run>> = {}
      for (const mode of order) runs[mode] = await runOnce(target, client, mode)
      const { plain, tx, txBatch, txKeys } = runs as Record<Mode, Run>
      const round: Round = {
        plain,
        tx,
        txBatch,
        txKeys,
        ratios: {
          txThroughput: r2(tx.msgsPerSec / plain.msgsPerSec),
          txBatchThroughput: r2(txBatch.msgsPerSec / plain.msgsPerSec),
          txKeysThroughput: r2(txKeys.msgsPerSec / plain.msgsPerSec),
          txCpu: r2(tx.cpuUsPerMsg / plain.cpuUsPerMsg),
          txBatchCpu: r2(txBatch.cpuUsPerMsg / plain.cpuUsPerMsg),
          txKeysCpu: r2(txKeys.cpuUsPerMsg / plain.cpuUsPerMsg),
        },
      }
      rounds.push(round)
      console.log(
        `  round ${r + 1}: plain ${plain.msgsPerSec.toFixed(0)} msg/s ${plain.cpuUsPerMsg.toFixed(1)} µs/msg; tx ${tx.msgsPerSec.toFixed(0)} (${round.ratios.txThroughput}x) ${tx.cpuUsPerMsg.toFixed(1)} µs/msg (${round.ratios.txCpu}x); txBatch ${txBatch.msgsPerSec.toFixed(0)} (${round.ratios.txBatchThroughput}x) ${txBatch.cpuUsPerMsg.toFixed(1)} µs/msg (${round.ratios.txBatchCpu}x); txKeys ${txKeys.msgsPerSec.toFixed(0)} (${round.ratios.txKeysThroughput}x) ${txKeys.cpuUsPerMsg.toFixed(1)} µs/msg (${round.ratios.txKeysCpu}x); member CPU µs/msg plain ${plain.nodeCpuUsPerMsg.toFixed(1)}, tx ${tx.nodeCpuUsPerMsg.toFixed(1)}, txBatch ${txBatch.nodeCpuUsPerMsg.toFixed(1)}, txKeys ${txKeys.nodeCpuUsPerMsg.toFixed(1)}`,
      )
    }
  } finally {
    client.disconnect()
  }
  const of = (f: (r: Round) => number) => r2(median(rounds.map(f)))
  return {
    target: target.name,
    loadAverage: { before: loadBefore, after: r2(loadavg()[0]!) },
    median: {
      plainMsgsPerSec: of((r) => r.plain.msgsPerSec),
      txMsgsPerSec: of((r) => r.tx.msgsPerSec),
      txBatchMsgsPerSec: of((r) => r.txBatch.msgsPerSec),
      txKeysMsgsPerSec: of((r) => r.txKeys.msgsPerSec),
      plainCpuUsPerMsg: of((r) => r.plain.cpuUsPerMsg),
      txCpuUsPerMsg: of((r) => r.tx.cpuUsPerMsg),
      txBatchCpuUsPerMsg: of((r) => r.txBatch.cpuUsPerMsg),
      txKeysCpuUsPerMsg: of((r) => r.txKeys.cpuUsPerMsg),
      /** The member's own CPU (this process) per message. */
      plainNodeCpuUsPerMsg: of((r) => r.plain.nodeCpuUsPerMsg),
      txNodeCpuUsPerMsg: of((r) => r.tx.nodeCpuUsPerMsg),
      txBatchNodeCpuUsPerMsg: of((r) => r.txBatch.nodeCpuUsPerMsg),
      txKeysNodeCpuUsPerMsg: of((r) => r.txKeys.nodeCpuUsPerMsg),
      /** Medians of the per-round ratios (each round's runs back to back). */
      txThroughputRatio: of((r) => r.ratios.txThroughput),
      txBatchThroughputRatio: of((r) => r.ratios.txBatchThroughput),
      txKeysThroughputRatio: of((r) => r.ratios.txKeysThroughput),
      txCpuRatio: of((r) => r.ratios.txCpu),
      txBatchCpuRatio: of((r) => r.ratios.txBatchCpu),
      txKeysCpuRatio: of((r) => r.ratios.txKeysCpu),
    },
    rounds,
  }
}

type Result = Awaited<ReturnType<typeof measure>>
const results: Array<Result> = []
for (const name of TARGETS) {
  const m = /^(redis7|redis8)$|^cluster(7|8)$/.exec(name)
  if (m === null) throw new Error(`BENCH_TX_TARGETS: unknown target ${JSON.stringify(name)}`)
  const kind: ServerKind =
    m[1] !== undefined ? (m[1] as ServerKind) : m[2] === "7" ? "redis7" : "redis8"
  try {
    if (m[1] !== undefined) {
      const server = await startRedis({ kind })
      const label = `Redis ${server.version}, one node`
      console.log(`on ${label}`)
      try {
        results.push(
          await measure({
            name: label,
            url: server.url,
            nodes: [{ host: server.host, port: server.port }],
          }),
        )
      } finally {
        await server.stop()
      }
    } else {
      const cluster = await startRedisCluster({ kind })
      const label = `Redis ${cluster.version}, cluster of ${cluster.nodes.length}`
      console.log(`on ${label}`)
      try {
        results.push(await measure({ name: label, nodes: cluster.nodes }))
      } finally {
        await cluster.stop()
      }
    }
  } catch (error) {
    if (error instanceof ServerMissing && kind === "redis8") {
      console.log(`skipping ${name}: ${error.message}`)
      continue
    }
    throw error
  }
}

const command = `${process.env.BENCH_TX_TARGETS ? `BENCH_TX_TARGETS=${process.env.BENCH_TX_TARGETS} ` : ""}${ROUNDS === 5 ? "" : `BENCH_TX_ROUNDS=${ROUNDS} `}${MESSAGES === 20_000 ? "" : `BENCH_TX_MESSAGES=${MESSAGES} `}pnpm --filter @shardline/bench run bench:transactions-redis`
const summary = {
  command,
  date: new Date().toISOString(),
  node: process.version,
  cpu: cpus()[0]?.model ?? "unknown",
  cores: cpus().length,
  messages: MESSAGES,
  shards: SHARDS,
  batchSize: BATCH,
  roundsPerTarget: ROUNDS,
  targets: results,
}

const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("transactions-redis.json", dir), `${JSON.stringify(summary, null, 2)}\n`)
const f0 = (n: number) => n.toFixed(0)
const f1 = (n: number) => n.toFixed(1)
writeFileSync(
  new URL("transactions-redis.md", dir),
  `# Transactions against the plain ack (Redis)

\`${command}\` (src/transactionsRedis.ts; docs/exactly-once.md, "Cost"),
${summary.date}, Node ${summary.node}, ${summary.cores} cores (${summary.cpu}), shared with other
work (load average per target below: compare within a round). ${ROUNDS} paired rounds per
target, each draining ${MESSAGES} messages on ${SHARDS} shards with batches of ${BATCH}: \`plain\`
(\`eachMessage\`, no transaction), \`tx\` (\`eachMessage\`, one INCR per message in a
transaction: one group commit per batch) and \`txBatch\` (\`eachBatch\`, one transaction per
batch, one INCR per message), and \`txKeys\` (as \`tx\`, each message INCRing its routing
key's counter, 1,000 keys: the writes a commit cannot merge), in an order alternating by
round. Targets: tx / plain >= 0.5, txBatch / plain >= 0.8, Redis CPU per message <= 2x plain.

| target | load avg | plain msg/s | tx msg/s | tx / plain | txBatch msg/s | txBatch / plain | txKeys msg/s | txKeys / plain | plain CPU µs/msg | tx CPU µs/msg | tx / plain | txBatch CPU µs/msg | txBatch / plain | txKeys CPU µs/msg | txKeys / plain |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
${results
  .map((t) =>
    [
      ...t.rounds.map(
        (r, i) =>
          `| ${t.target}, round ${i + 1} | | ${f0(r.plain.msgsPerSec)} | ${f0(r.tx.msgsPerSec)} | ${r.ratios.txThroughput} | ${f0(r.txBatch.msgsPerSec)} | ${r.ratios.txBatchThroughput} | ${f0(r.txKeys.msgsPerSec)} | ${r.ratios.txKeysThroughput} | ${f1(r.plain.cpuUsPerMsg)} | ${f1(r.tx.cpuUsPerMsg)} | ${r.ratios.txCpu} | ${f1(r.txBatch.cpuUsPerMsg)} | ${r.ratios.txBatchCpu} | ${f1(r.txKeys.cpuUsPerMsg)} | ${r.ratios.txKeysCpu} |`,
      ),
      `| **${t.target}, median** | ${t.loadAverage.before} -> ${t.loadAverage.after} | ${f0(t.median.plainMsgsPerSec)} | ${f0(t.median.txMsgsPerSec)} | **${t.median.txThroughputRatio}** | ${f0(t.median.txBatchMsgsPerSec)} | **${t.median.txBatchThroughputRatio}** | ${f0(t.median.txKeysMsgsPerSec)} | ${t.median.txKeysThroughputRatio} | ${f1(t.median.plainCpuUsPerMsg)} | ${f1(t.median.txCpuUsPerMsg)} | **${t.median.txCpuRatio}** | ${f1(t.median.txBatchCpuUsPerMsg)} | **${t.median.txBatchCpuRatio}** | ${f1(t.median.txKeysCpuUsPerMsg)} | ${t.median.txKeysCpuRatio} |`,
    ].join("\n"),
  )
  .join("\n")}

Ratios are per round (the runs of a round back to back), then their median; the
median rows' absolute figures are medians of their own column. Plain runs are short
(a fraction of a second), so their CPU figure is coarse (INFO cpu's resolution).
`,
)
console.log(
  JSON.stringify(results.map((t) => ({ target: t.target, load: t.loadAverage, ...t.median }))),
)
