/**
 * `pnpm --filter @shardline/bench bench:simulator-reshard`
 *
 * The reshard scenarios in the simulator's virtual time: how long a key's
 * consumption pauses at the cutover (per key and newer generation reached:
 * from the later of its last old-generation acknowledgement and its first
 * new-generation append, to that message's first delivery; measured by the
 * simulator's key-order checker), with no faults and with each scenario's
 * fault mix, and how fast the runs are. Writes
 * packages/bench/results/simulator-reshard.{json,md}.
 *
 * @module
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { reshardShape, runSeed, type Scenario } from "@shardline/simulator"

const SEEDS = 50
const scenarios: ReadonlyArray<Scenario> = ["reshard-up", "reshard-down", "reshard-rollback"]
const pct = (a: ReadonlyArray<number>, p: number) =>
  a.length === 0 ? 0 : a[Math.min(a.length - 1, Math.max(0, Math.ceil((p / 100) * a.length) - 1))]!
const r0 = (x: number) => Math.round(x)

interface Row {
  readonly scenario: Scenario
  readonly faults: string
  readonly runs: number
  readonly violations: number
  readonly keys: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly waitedKeys: number
  readonly waitedP50Ms: number
  readonly waitedP99Ms: number
  readonly events: number
  readonly wallMs: number
}

const rows: Array<Row> = []
for (const faults of ["none", "default"])
  for (const scenario of scenarios) {
    const pauses: Array<number> = []
    let violations = 0
    let events = 0
    const t0 = performance.now()
    for (let seed = 1; seed <= SEEDS; seed++) {
      const { result, summary } = runSeed(reshardShape(scenario, seed, { faults }))
      pauses.push(...result.keyPausesMs)
      violations += summary.violations.length
      events += summary.events
    }
    const wallMs = r0(performance.now() - t0)
    pauses.sort((a, b) => a - b)
    const waited = pauses.filter((x) => x > 0)
    const row: Row = {
      scenario,
      faults,
      runs: SEEDS,
      violations,
      keys: pauses.length,
      p50Ms: r0(pct(pauses, 50)),
      p99Ms: r0(pct(pauses, 99)),
      maxMs: r0(pauses[pauses.length - 1] ?? 0),
      waitedKeys: waited.length,
      waitedP50Ms: r0(pct(waited, 50)),
      waitedP99Ms: r0(pct(waited, 99)),
      events,
      wallMs,
    }
    rows.push(row)
    process.stderr.write(`${faults} ${scenario}: ${JSON.stringify(row)}\n`)
  }

const results = {
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, model: cpus()[0]?.model ?? "?", node: process.version },
  command: "pnpm --filter @shardline/bench bench:simulator-reshard",
  shape:
    "per scenario 50 seeds: 2-6 members, 1-3 workers, 4 shards (8 for reshard-down), 5 messages/s per shard, 60 s safety phase + liveness; 300 messages per old shard (at most 1,000 per worker) appended just before the reshard",
  rows,
}
mkdirSync("results", { recursive: true })
writeFileSync("results/simulator-reshard.json", `${JSON.stringify(results, null, 2)}\n`)
const fmt = (n: number) => n.toLocaleString("en-US")
writeFileSync(
  "results/simulator-reshard.md",
  `# Resharding in the simulator (virtual time)

Command: \`${results.command}\` (${results.machine.cpus} CPUs, ${results.machine.model}, Node ${results.machine.node}, shared machine).
Shape: ${results.shape}.

Key pause: per key and newer generation it reached, from the later of its last acknowledgement under an earlier
generation and its first append under the newer one, to that message's first delivery (the simulator's key-order
checker). "Waited": the keys whose pause was above 0 (the others' first new message came after the cutover).

| faults | scenario | runs | violations | keys | pause p50 | p99 | max | keys that waited | their p50 | their p99 | events | wall |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
${rows
  .map(
    (r) =>
      `| ${r.faults} | ${r.scenario} | ${r.runs} | ${r.violations} | ${fmt(r.keys)} | ${fmt(r.p50Ms)} ms | ${fmt(r.p99Ms)} ms | ${fmt(r.maxMs)} ms | ${fmt(r.waitedKeys)} | ${fmt(r.waitedP50Ms)} ms | ${fmt(r.waitedP99Ms)} ms | ${fmt(r.events)} | ${fmt(r.wallMs)} ms |`,
  )
  .join("\n")}
`,
)
