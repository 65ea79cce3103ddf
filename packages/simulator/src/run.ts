/**
 * Running one seed, with the real machines and the assignor's movement oracle.
 *
 * @module
 */
import type { SimOptions } from "./config.js"
import { lowerBound, realMachines } from "./machines.js"
import { type RunHooks, runSimulation, type SimResult } from "./Simulation.js"
import { type Summary, summarize } from "./summary.js"

export interface Run {
  readonly result: SimResult
  readonly summary: Summary
}

export const runSeed = (options: SimOptions, hooks: Omit<RunHooks, "lowerBound"> = {}): Run => {
  const t0 = performance.now()
  const result = runSimulation(options, realMachines, {
    ...hooks,
    ...(lowerBound !== undefined ? { lowerBound } : {}),
  })
  const wall = performance.now() - t0
  return { result, summary: summarize(result, wall) }
}

/** The command line that replays `options` exactly. */
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
  if (o.broken !== undefined) args.push(`--broken ${o.broken}`)
  return args.join(" ")
}
