/**
 * Entry point: `pnpm --filter @shardline/bench run bench:runtime`.
 * Writes results/runtime.json and results/runtime.md. BENCH_MESSAGES (default
 * 100,000) and BENCH_RUNS (default 3) size the throughput runs.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { runRuntimeBench } from "./runtime.bench.js"

const messages = Number(process.env.BENCH_MESSAGES ?? 100_000)
const runs = Number(process.env.BENCH_RUNS ?? 3)
const results = await runRuntimeBench({ messages, runs })
const ratio = (a: number, b: number) => Math.round((a / b) * 1000) / 1000
const t = results.throughput
const out = {
  command: "pnpm --filter @shardline/bench run bench:runtime",
  date: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  ...results,
  ratios: {
    runtimeOverBare: ratio(t.runtimeMsgsPerSec, t.bareMsgsPerSec),
    runtimeBatchOverBare: ratio(t.runtimeBatchMsgsPerSec, t.bareMsgsPerSec),
    producerOverBareAppend: ratio(t.producerMsgsPerSec, t.bareAppendMsgsPerSec),
    fairness: results.fairness.map((f) => ({
      workers: f.runtime.workers,
      jainRuntimeOverBaseline: ratio(f.runtime.jain, f.lowestIndexFirst.jain),
      worstWaitBaselineOverRuntime: ratio(
        f.lowestIndexFirst.worstWaitRounds,
        f.runtime.worstWaitRounds,
      ),
    })),
  },
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("runtime.json", dir), `${JSON.stringify(out, null, 2)}\n`)
const fmt = (n: number) => n.toLocaleString("en-US")
const fair = results.fairness
  .map(
    (f) =>
      `| ${f.runtime.workers} x ${f.runtime.shards} | runtime (FIFO rotation) | ${f.runtime.jain.toFixed(4)} | ${f.runtime.worstWaitRounds.toFixed(2)} | ${f.runtime.highestShardFirstTurn} |\n` +
      `| ${f.runtime.workers} x ${f.runtime.shards} | baseline: lowest index first | ${f.lowestIndexFirst.jain.toFixed(4)} | ${f.lowestIndexFirst.worstWaitRounds.toFixed(2)} | ${f.lowestIndexFirst.highestShardFirstTurn} |`,
  )
  .join("\n")
const md = `# Member runtime benchmark (in memory)

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores shared with other work, ${out.date}).
Medians of ${runs} runs of ${fmt(messages)} messages; every case and its baseline ran in the same process.

## Throughput

| case | messages/s |
|---|---:|
| the demo's group: 2 runtimes (pod-a: 2 listener members, pod-b: 1 member x 2 workers), 16 shards, embedded coordinator, no-op \`eachMessage\` | ${fmt(t.runtimeMsgsPerSec)} |
| the same group with no-op \`eachBatch\` (batches of 32) | ${fmt(t.runtimeBatchMsgsPerSec)} |
| baseline: one bare loop reading (32) and acking every shard on the same memory data plane | ${fmt(t.bareMsgsPerSec)} |
| producer: \`sendBatch\` of 1,000 (routing, batching, key field) | ${fmt(t.producerMsgsPerSec)} |
| baseline: bare \`append\` of the same entries | ${fmt(t.bareAppendMsgsPerSec)} |

Runtime / bare loop: **${out.ratios.runtimeOverBare}x** (\`eachMessage\`), **${out.ratios.runtimeBatchOverBare}x** (\`eachBatch\`). Producer / bare append: **${out.ratios.producerOverBareAppend}x**.
Samples (messages/s): runtime ${results.samples.runtimeRates.map(fmt).join(", ")}; batch ${results.samples.batchRates.map(fmt).join(", ")}; bare ${results.samples.bareRates.map(fmt).join(", ")}.
Measured from resuming every shard of the settled group (paused while the backlog was produced) to the last handled message.

## Fairness: 64 shards, skewed backlogs (the last shard 20x the first), batches of 8

Jain's index of service counted while every shard still has backlog (the first 8 rounds = 512 turns).
Worst wait: the most turns of other shards a backlogged shard waited (before its first turn, or between two),
over the whole run, in rounds of 64 turns.

| workers x shards | scheduler | Jain's index | worst wait (rounds) | first turn of shard 63 |
|---|---|---:|---:|---:|
${fair}

${out.ratios.fairness.map((f) => `${f.workers} worker(s): Jain runtime / baseline **${f.jainRuntimeOverBaseline}x**; worst wait baseline / runtime **${f.worstWaitBaselineOverRuntime}x**.`).join("\n")}
`
writeFileSync(new URL("runtime.md", dir), md)
console.log(md)
