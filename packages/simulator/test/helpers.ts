import {
  defaultOptions,
  replayCommand,
  runSeed,
  type Scenario,
  type SimOptions,
  swarmOptions,
} from "../src/index.js"

/** Small, seed-varied shapes: 2..8 members, 4..32 shards, 1..3 workers. */
export const smallOptions = (
  scenario: Scenario,
  seed: number,
  extra: Partial<SimOptions> = {},
): SimOptions => ({
  ...defaultOptions,
  scenario,
  seed,
  members: 2 + (seed % 7),
  shards: 4 + ((seed * 7) % 29),
  workers: 1 + (seed % 3),
  durationMs: 60_000,
  ratePerShard: 2,
  ...extra,
})

/**
 * The churn shape the fault suites pin their seeds on (6 members, 16
 * shards, 60 s, 5 messages/s a shard, 2 workers), with their faults.
 */
export const churnOptions = (seed: number, extra: Partial<SimOptions> = {}): SimOptions => ({
  ...defaultOptions,
  scenario: "churn",
  seed,
  members: 6,
  shards: 16,
  workers: 2,
  durationMs: 60_000,
  ratePerShard: 5,
  ...extra,
})

/** A swarm seed with its shape drawn from the seed (as `--swarm` runs do). */
export const drawnOptions = (seed: number, extra: Partial<SimOptions> = {}): SimOptions =>
  swarmOptions({ ...defaultOptions, scenario: "swarm", ...extra }, seed)

export interface SetResult {
  /** One line per failing seed, with its replay command. */
  readonly failures: Array<string>
  /** Counters summed over the runs (fault paths reached, checker inputs). */
  readonly counters: Record<string, number>
  readonly exactRuns: number
  readonly runs: number
}

/** Runs every option set; collects failures (with their replay command) and counters. */
export const runSet = (list: ReadonlyArray<SimOptions>): SetResult => {
  const failures: Array<string> = []
  const counters: Record<string, number> = {}
  let exactRuns = 0
  for (const o of list) {
    const { summary } = runSeed(o)
    if (summary.exact) exactRuns++
    for (const [k, v] of Object.entries(summary.counters)) counters[k] = (counters[k] ?? 0) + v
    if (summary.violations.length > 0)
      failures.push(`${replayCommand(o)}: ${summary.violations.map((v) => v.message).join("; ")}`)
  }
  return { failures, counters, exactRuns, runs: list.length }
}

/** Runs the seeds of one scenario; returns one line per failing seed (with its replay command). */
export const failures = (scenario: Scenario, seeds: ReadonlyArray<number>): Array<string> =>
  runSet(seeds.map((seed) => smallOptions(scenario, seed))).failures

export const range = (from: number, count: number): Array<number> =>
  Array.from({ length: count }, (_, i) => from + i)
