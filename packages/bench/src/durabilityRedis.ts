/**
 * Entry point: `pnpm --filter @shardline/bench run bench:durability-redis`.
 * Writes results/durability-redis.json and .md: what `durability: {
 * replicas: 1 }` costs producer sends and transactional commits against the
 * same without it, on one primary and its replica, as paired rounds
 * (src/durability.bench.ts; docs/redis.md, "Cost of durability").
 * `BENCH_DURABILITY_ROUNDS` (default 5), `BENCH_DURABILITY_SENDS` (default
 * 2,000), `BENCH_DURABILITY_COMMITS` (default 1,000).
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { durabilityMarkdown, runDurabilityBench } from "./durability.bench.js"

const options = {
  rounds: Number(process.env.BENCH_DURABILITY_ROUNDS ?? 5),
  sends: Number(process.env.BENCH_DURABILITY_SENDS ?? 2_000),
  commits: Number(process.env.BENCH_DURABILITY_COMMITS ?? 1_000),
}
const summary = await runDurabilityBench(options, (line) => console.log(line))
const machine = `${cpus().length} cores (${cpus()[0]?.model ?? "unknown"})`
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(
  new URL("durability-redis.json", dir),
  `${JSON.stringify({ date: new Date().toISOString(), machine, options, ...summary }, null, 2)}\n`,
)
writeFileSync(new URL("durability-redis.md", dir), durabilityMarkdown(summary, options, machine))
console.log(JSON.stringify(summary.median))
