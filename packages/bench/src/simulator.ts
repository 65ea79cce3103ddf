/**
 * `pnpm --filter @shardline/bench bench:simulator [--full] [--rounds N]`
 *
 * Writes packages/bench/results/simulator.{json,md} (docs/simulator.md,
 * Speed). Each round measures, in this order and in one process: the bare
 * event loop, the 200 x 512 x 10 min swarm run and the 5,000 x 1,024 x 3 min
 * swarm run; the figures are the medians over the rounds (default 3), and
 * each ratio is taken within a round (a loaded machine slows both sides),
 * from wall time and again from the process's CPU time (which the other
 * engineers' load inflates less).
 * The 5,000 x 1,024 x 1 h figure is extrapolated from the 1 min and 3 min
 * runs (the marginal wall time per virtual second after the join storm);
 * with `--full` the hour is run for real, with the CLI command of
 * docs/simulator.md in its own Node process.
 * Each round also measures the cost of a steady event with the event mix
 * held equal (`steadyArgs` in simulator.bench.ts: no faults, no messages, the
 * marginal rate between a short and a long run) at 200 x 512 and at 5,000 x
 * 1,024.
 *
 * @module
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import {
  bareLoop,
  big,
  type CliRun,
  cliRun,
  HOUR_ARGS,
  type Marginal,
  marginal,
  mid,
  type Rate,
  type SimRun,
  simRun,
} from "./simulator.bench.js"

const full = process.argv.includes("--full")
const roundsAt = process.argv.indexOf("--rounds")
const ROUNDS = roundsAt >= 0 ? Number(process.argv[roundsAt + 1]) : 3
const HOUR = 3_600_000
const log = (s: string) => process.stderr.write(`${s}\n`)
const fmt = (n: number) => n.toLocaleString("en-US")
const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}
const r3 = (x: number) => Math.round(x * 1000) / 1000

interface Round {
  readonly bare: Rate
  readonly mid: SimRun
  readonly big: SimRun
  readonly midToBare: number
  readonly bigToMid: number
  /** The same ratios from events per CPU second (less sensitive to the other engineers' load). */
  readonly midToBareCpu: number
  readonly bigToMidCpu: number
  /** The same event mix (heartbeats only) at both sizes, marginal rates. */
  readonly steadyMid: Marginal
  readonly steadyBig: Marginal
  readonly steadyBigToMid: number
  readonly steadyBigToMidCpu: number
}

const loadBefore = loadavg()[0]!
const rounds: Array<Round> = []
for (let r = 1; r <= ROUNDS; r++) {
  log(`round ${r}/${ROUNDS}: bare event loop ...`)
  const bare = bareLoop(5_000_000)
  log(`  ${fmt(bare.eventsPerSec)} events/s`)
  log("  simulator, checkers on: swarm 200 members x 512 shards x 10 min ...")
  const m = simRun(mid)
  log(`  ${fmt(m.eventsPerSec)} events/s, ${m.violations} violations`)
  log("  simulator: swarm 5,000 members x 1,024 shards x 3 min ...")
  const b = simRun(big(180_000))
  log(`  ${fmt(b.eventsPerSec)} events/s, ${b.violations} violations`)
  log("  the same mix at both sizes (no faults, no messages): 200 x 512, 20 and 60 min ...")
  const sm = marginal(200, 512, 20, 60)
  log(`  ${fmt(sm.eventsPerSec)} events/s marginal; 5,000 x 1,024, 3 and 9 min ...`)
  const sb = marginal(5_000, 1_024, 3, 9)
  log(`  ${fmt(sb.eventsPerSec)} events/s marginal`)
  rounds.push({
    bare,
    mid: m,
    big: b,
    midToBare: r3(m.eventsPerSec / bare.eventsPerSec),
    bigToMid: r3(b.eventsPerSec / m.eventsPerSec),
    midToBareCpu: r3(m.eventsPerCpuSec / bare.eventsPerCpuSec),
    bigToMidCpu: r3(b.eventsPerCpuSec / m.eventsPerCpuSec),
    steadyMid: sm,
    steadyBig: sb,
    steadyBigToMid: r3(sb.eventsPerSec / sm.eventsPerSec),
    steadyBigToMidCpu: r3(sb.eventsPerCpuSec / sm.eventsPerCpuSec),
  })
}

let hour: Record<string, unknown>
if (full) {
  log(`5,000 x 1,024 x 1 h: node ${HOUR_ARGS.join(" ")} ...`)
  const h: CliRun = cliRun(HOUR_ARGS)
  log(
    `  ${fmt(h.wallMs)} ms wall, ${fmt(h.cpuMs)} ms CPU, ${fmt(h.events)} events, ${h.violations} violations`,
  )
  hour = { mode: "measured", durationMs: HOUR, ...h }
} else {
  log("5,000 x 1,024 x 1 min ...")
  const a = simRun(big(60_000))
  const b = rounds[rounds.length - 1]!.big
  const d = (180_000 - 60_000) / 1000
  const perVirtualSec = (b.wallMs - a.wallMs) / d
  const eventsPerVirtualSec = (b.events - a.events) / d
  hour = {
    mode: "extrapolated",
    runs: [
      { durationMs: 60_000, ...a },
      { durationMs: 180_000, ...b },
    ],
    marginalWallMsPerVirtualSec: Math.round(perVirtualSec),
    marginalEventsPerVirtualSec: Math.round(eventsPerVirtualSec),
    extrapolatedWallMsForOneHour: Math.round(b.wallMs + perVirtualSec * ((HOUR - 180_000) / 1000)),
    extrapolatedEventsForOneHour: Math.round(
      b.events + eventsPerVirtualSec * ((HOUR - 180_000) / 1000),
    ),
  }
}

const results = {
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, model: cpus()[0]?.model ?? "?", node: process.version },
  loadAverage1m: { before: r3(loadBefore), after: r3(loadavg()[0]!) },
  command: `pnpm --filter @shardline/bench bench:simulator${full ? " --full" : ""}${roundsAt >= 0 ? ` --rounds ${ROUNDS}` : ""}`,
  rounds: ROUNDS,
  shapes: {
    mid: "swarm, 200 members x 512 shards x 4 workers x 10 min virtual, seed 1",
    big: "swarm, 5,000 members x 1,024 shards x 2 workers x 3 min virtual, seed 1",
    steady:
      "swarm without faults or messages (`--faults none --rate 0`), 2 workers, seed 1, each run the CLI in a process of its own: 200 x 512 between 20 and 60 min virtual, 5,000 x 1,024 between 3 and 9 min",
  },
  checkers:
    "all: intent, ownership, drain, lease, deadline, requests, runtime, message-loss, starvation, store-revision, convergence",
  median: {
    bareEventsPerSec: median(rounds.map((r) => r.bare.eventsPerSec)),
    midEventsPerSec: median(rounds.map((r) => r.mid.eventsPerSec)),
    bigEventsPerSec: median(rounds.map((r) => r.big.eventsPerSec)),
    midToBare: median(rounds.map((r) => r.midToBare)),
    bigToMid: median(rounds.map((r) => r.bigToMid)),
    bareEventsPerCpuSec: median(rounds.map((r) => r.bare.eventsPerCpuSec)),
    midEventsPerCpuSec: median(rounds.map((r) => r.mid.eventsPerCpuSec)),
    bigEventsPerCpuSec: median(rounds.map((r) => r.big.eventsPerCpuSec)),
    midToBareCpu: median(rounds.map((r) => r.midToBareCpu)),
    bigToMidCpu: median(rounds.map((r) => r.bigToMidCpu)),
    steadyMidEventsPerSec: median(rounds.map((r) => r.steadyMid.eventsPerSec)),
    steadyBigEventsPerSec: median(rounds.map((r) => r.steadyBig.eventsPerSec)),
    steadyBigToMid: median(rounds.map((r) => r.steadyBigToMid)),
    steadyBigToMidCpu: median(rounds.map((r) => r.steadyBigToMidCpu)),
  },
  perRound: rounds,
  big5000x1024x1h: hour,
}
mkdirSync(new URL("../results/", import.meta.url), { recursive: true })
writeFileSync(
  new URL("../results/simulator.json", import.meta.url),
  `${JSON.stringify(results, null, 2)}\n`,
)
const md = results.median
const hourLine =
  hour.mode === "measured"
    ? `measured with \`${String(hour.command)}\`: **${fmt(Math.round(Number(hour.wallMs) / 1000))} s wall**, ${fmt(Math.round(Number(hour.cpuMs) / 1000))} s CPU, ${fmt(Number(hour.events))} events (${fmt(Number(hour.eventsPerSec))} events/s), ${String(hour.violations)} violations, digest ${String(hour.digest)}`
    : `extrapolated: ~${fmt(Math.round(Number(hour.extrapolatedWallMsForOneHour) / 1000))} s wall, ~${fmt(Number(hour.extrapolatedEventsForOneHour))} events (from the 1 min and 3 min runs; marginal ${fmt(Number(hour.marginalWallMsPerVirtualSec))} ms wall per virtual second)`
const rows = rounds
  .map(
    (r, i) =>
      `| ${i + 1} | ${fmt(r.bare.eventsPerSec)} | ${fmt(r.mid.eventsPerSec)} | ${fmt(r.big.eventsPerSec)} | ${r.midToBare} | ${r.bigToMid} |`,
  )
  .join("\n")
const cpuRows = rounds
  .map(
    (r, i) =>
      `| ${i + 1} | ${fmt(r.bare.eventsPerCpuSec)} | ${fmt(r.mid.eventsPerCpuSec)} | ${fmt(r.big.eventsPerCpuSec)} | ${r.midToBareCpu} | ${r.bigToMidCpu} |`,
  )
  .join("\n")
const steadyRows = rounds
  .map(
    (r, i) =>
      `| ${i + 1} | ${fmt(r.steadyMid.eventsPerSec)} | ${fmt(r.steadyBig.eventsPerSec)} | ${r.steadyBigToMid} | ${r.steadyBigToMidCpu} |`,
  )
  .join("\n")
writeFileSync(
  new URL("../results/simulator.md", import.meta.url),
  `# Simulator benchmark

Command: \`${results.command}\` (${results.machine.cpus} CPUs, ${results.machine.model}, Node ${results.machine.node}, shared machine; 1-minute load average ${results.loadAverage1m.before} before, ${results.loadAverage1m.after} after).

Each round, in one process: the bare event loop (same queue and PRNG, a trivial handler, 5,000,000 events, 10,000
pending), then the simulator with every checker on (${results.checkers}) on
${results.shapes.mid} and on ${results.shapes.big}. Ratios are taken within a round; the table's last line is
the median over ${ROUNDS} rounds.

| round | bare loop events/s | 200 x 512 events/s | 5,000 x 1,024 events/s | 200 x 512 / bare | 5,000 x 1,024 / 200 x 512 |
|---|---:|---:|---:|---:|---:|
${rows}
| median | ${fmt(md.bareEventsPerSec)} | ${fmt(md.midEventsPerSec)} | ${fmt(md.bigEventsPerSec)} | ${md.midToBare} | ${md.bigToMid} |

The same runs per CPU second of the process (every thread, V8's concurrent collector included; a process waiting
for a core on the shared machine loses wall time, not CPU time):

| round | bare loop events/CPU s | 200 x 512 events/CPU s | 5,000 x 1,024 events/CPU s | 200 x 512 / bare | 5,000 x 1,024 / 200 x 512 |
|---|---:|---:|---:|---:|---:|
${cpuRows}
| median | ${fmt(md.bareEventsPerCpuSec)} | ${fmt(md.midEventsPerCpuSec)} | ${fmt(md.bigEventsPerCpuSec)} | ${md.midToBareCpu} | ${md.bigToMidCpu} |

The same event mix at both sizes: ${results.shapes.steady}. Nearly every event is a heartbeat's; the
marginal rate leaves out the join storm at the start. This separates what the second table's last column mixes:
the cost of an event at a size, and the size's event mix (the swarm's 5,000 x 1,024 run is mostly heartbeats and
membership changes, its 200 x 512 run mostly messages).

| round | 200 x 512 events/s | 5,000 x 1,024 events/s | 5,000 x 1,024 / 200 x 512 | the same per CPU second |
|---|---:|---:|---:|---:|
${steadyRows}
| median | ${fmt(md.steadyMidEventsPerSec)} | ${fmt(md.steadyBigEventsPerSec)} | ${md.steadyBigToMid} | ${md.steadyBigToMidCpu} |

5,000 members x 1,024 shards x 1 virtual hour, swarm fault mix (seed 1): ${hourLine}.
`,
)
console.log(JSON.stringify(results, null, 2))
