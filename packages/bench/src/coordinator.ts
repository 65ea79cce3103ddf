/**
 * Entry point: `pnpm --filter @shardline/bench run bench:coordinator`.
 * Writes results/coordinator.json and results/coordinator.md.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { runCoordinatorBench } from "./coordinator.bench.js"

const members = Number(process.env.BENCH_MEMBERS ?? 2_000)
const shards = Number(process.env.BENCH_SHARDS ?? 1_024)
const maxTimeSeconds = Number(process.env.BENCH_MAX_TIME ?? 3)

const results = await runCoordinatorBench({ members, shards, maxTimeSeconds })
const ops = (list: typeof results.steady, prefix: string) =>
  list.find((c) => c.name.startsWith(prefix))?.opsPerSec ?? Number.NaN
const bareSteady = ops(results.steady, "bare")
const hostSteady = ops(results.steady, "CoordinatorHost")
const bareJoin = ops(results.rebalance, "bare pure handler: join")
const barePair = ops(results.rebalance, "bare pure handler + replay")
const hostPair = ops(results.rebalance, "CoordinatorHost")
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100

const out = {
  command: "pnpm --filter @shardline/bench run bench:coordinator",
  date: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  ...results,
  ratios: {
    steadyHostOverBare: ratio(hostSteady, bareSteady),
    rebalancePairHostOverBare: ratio(hostPair, barePair),
  },
  costMs: {
    steadyBare: 1_000 / bareSteady,
    steadyHost: 1_000 / hostSteady,
    joinBare: 1_000 / bareJoin,
    joinLeavePairBare: 1_000 / barePair,
    joinLeavePairHost: 1_000 / hostPair,
  },
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("coordinator.json", dir), `${JSON.stringify(out, null, 2)}\n`)
const fmt = (n: number) => n.toLocaleString("en-US")
const row = (c: (typeof results.steady)[number]) =>
  `| ${c.name} | ${fmt(c.opsPerSec)} | ±${c.marginPct}% | ${(1_000 / c.opsPerSec).toFixed(4)} |`
const md = `# Coordinator benchmark

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores shared with other work, ${out.date}).
Group: ${members} members x ${shards} shards, settled (target == current, all confirmed).

## Steady heartbeats

| case | ops/s | margin | ms/op |
|---|---:|---:|---:|
${results.steady.map(row).join("\n")}

Host / bare: **${out.ratios.steadyHostOverBare}x** (throughput ratio). Store commits during the steady cases: **${results.steadyCommits}**.

## One rebalance step (a join into the steady group)

| case | ops/s | margin | ms/op |
|---|---:|---:|---:|
${results.rebalance.map(row).join("\n")}

Host / bare for a join+leave pair: **${out.ratios.rebalancePairHostOverBare}x**.
The join+leave cases apply their results (replay; the host also commits to the memory Store
and re-encodes the snapshot every 64 commits), so the group stays at ${members} members.
With ${shards} shards and ${members} members a joiner gets no shard, so the step is the
target recomputation (assignor over all shards and members) plus the records of the
membership change; the assignor is the placeholder round robin on this branch.
`
writeFileSync(new URL("coordinator.md", dir), md)
console.log(md)
