/**
 * `pnpm --filter @shardline/bench bench:simulator [--full]`
 *
 * Writes packages/bench/results/simulator.{json,md}. Without `--full`, the
 * 5,000 x 1,024 x 1 h figure is extrapolated from two shorter runs (the
 * marginal wall time per virtual second after the join storm); with
 * `--full` the hour is run for real.
 *
 * @module
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { bareLoop, big, mid, simRun } from "./simulator.bench.js"

const full = process.argv.includes("--full")
const HOUR = 3_600_000
const log = (s: string) => process.stderr.write(`${s}\n`)

log("bare event loop ...")
const bare = bareLoop(5_000_000)
log(`  ${bare.eventsPerSec.toLocaleString("en-US")} events/s`)
log("simulator, checkers on: swarm 200 members x 512 shards x 10 min ...")
const sim = simRun(mid)
log(`  ${sim.eventsPerSec.toLocaleString("en-US")} events/s, ${sim.violations} violations`)

let bigResult: Record<string, unknown>
if (full) {
  log("5,000 x 1,024 x 1 h (full) ...")
  const r = simRun(big(HOUR))
  bigResult = { mode: "measured", durationMs: HOUR, ...r }
} else {
  const d1 = 60_000
  const d2 = 180_000
  log("5,000 x 1,024 x 60 s ...")
  const a = simRun(big(d1))
  log(`  ${a.wallMs} ms wall, ${a.events} events`)
  log("5,000 x 1,024 x 180 s ...")
  const b = simRun(big(d2))
  log(`  ${b.wallMs} ms wall, ${b.events} events`)
  const perVirtualSec = (b.wallMs - a.wallMs) / ((d2 - d1) / 1000)
  const eventsPerVirtualSec = (b.events - a.events) / ((d2 - d1) / 1000)
  const wallHour = b.wallMs + perVirtualSec * ((HOUR - d2) / 1000)
  bigResult = {
    mode: "extrapolated",
    runs: [
      { durationMs: d1, ...a },
      { durationMs: d2, ...b },
    ],
    marginalWallMsPerVirtualSec: Math.round(perVirtualSec),
    marginalEventsPerVirtualSec: Math.round(eventsPerVirtualSec),
    extrapolatedWallMsForOneHour: Math.round(wallHour),
    extrapolatedEventsForOneHour: Math.round(b.events + eventsPerVirtualSec * ((HOUR - d2) / 1000)),
  }
}

const results = {
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, model: cpus()[0]?.model ?? "?", node: process.version },
  command: `pnpm --filter @shardline/bench bench:simulator${full ? " --full" : ""}`,
  bareLoop: bare,
  simulator: {
    shape: "swarm, 200 members x 512 shards x 4 workers x 10 min virtual",
    checkers:
      "all: intent, ownership, drain, lease, deadline, requests, runtime, message-loss, starvation, store-revision, convergence",
    ...sim,
  },
  ratioSimulatorToBare: Math.round((sim.eventsPerSec / bare.eventsPerSec) * 1000) / 1000,
  big5000x1024x1h: bigResult,
}
mkdirSync(new URL("../results/", import.meta.url), { recursive: true })
writeFileSync(
  new URL("../results/simulator.json", import.meta.url),
  `${JSON.stringify(results, null, 2)}\n`,
)
const fmt = (n: number) => n.toLocaleString("en-US")
const bigLine =
  bigResult.mode === "measured"
    ? `measured: ${fmt(Number(bigResult.wallMs))} ms wall, ${fmt(Number(bigResult.events))} events (${fmt(Number(bigResult.eventsPerSec))} events/s)`
    : `extrapolated: ~${fmt(Math.round(Number(bigResult.extrapolatedWallMsForOneHour) / 1000))} s wall, ~${fmt(Number(bigResult.extrapolatedEventsForOneHour))} events (from 60 s and 180 s runs; marginal ${fmt(Number(bigResult.marginalWallMsPerVirtualSec))} ms wall per virtual second)`
writeFileSync(
  new URL("../results/simulator.md", import.meta.url),
  `# Simulator benchmark

Command: \`${results.command}\` (${results.machine.cpus} CPUs, ${results.machine.model}, Node ${results.machine.node}, shared machine).

| what | events | wall | events/s |
|---|---:|---:|---:|
| bare event loop (same heap + PRNG, trivial handler) | ${fmt(bare.events)} | ${fmt(bare.wallMs)} ms | ${fmt(bare.eventsPerSec)} |
| simulator, every checker on (${results.simulator.shape}) | ${fmt(sim.events)} | ${fmt(sim.wallMs)} ms | ${fmt(sim.eventsPerSec)} |

Simulator / bare loop: ${results.ratioSimulatorToBare}. Checkers: ${results.simulator.checkers}.

5,000 members x 1,024 shards x 1 virtual hour, swarm fault mix (seed 1): ${bigLine}.
`,
)
console.log(JSON.stringify(results, null, 2))
