/**
 * Running one seed, and the command line that replays it.
 *
 * @module
 */
import type { SimOptions } from "./options.js"
import { type RunHooks, runSimulation, type SimResult } from "./Simulation.js"
import { type Summary, summarize } from "./summary.js"

export interface Run {
  readonly result: SimResult
  readonly summary: Summary
}

export const runSeed = (options: SimOptions, hooks: RunHooks = {}): Run => {
  const t0 = performance.now()
  const result = runSimulation(options, hooks)
  const wall = performance.now() - t0
  return { result, summary: summarize(result, wall) }
}

/** The command line that replays `options` exactly (every shape dimension explicit). */
export const replayCommand = (o: SimOptions): string => {
  const args = [
    "node packages/simulator/dist/cli.js",
    o.scenario,
    `--seed ${o.seed}`,
    `--members ${o.members}`,
    `--shards ${o.shards}`,
    `--workers ${o.workers}`,
    `--duration ${o.durationMs}ms`,
    `--faults ${o.faults}`,
    `--rate ${o.ratePerShard}`,
  ]
  if ((o.groups ?? 1) > 1) args.push(`--groups ${o.groups}`)
  if (o.fence === "off") args.push("--fence off")
  if (o.tx === true) args.push("--tx")
  if (o.broken !== undefined) args.push(`--broken ${o.broken}`)
  if (o.strict === false) args.push("--lenient")
  return args.join(" ")
}
