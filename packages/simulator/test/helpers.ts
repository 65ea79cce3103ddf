import {
  defaultOptions,
  replayCommand,
  runSeed,
  type Scenario,
  type SimOptions,
} from "../src/index.js"

/** Small, seed-varied shapes: 2..8 members, 4..32 shards, 1..3 workers. */
export const smallOptions = (scenario: Scenario, seed: number): SimOptions => ({
  ...defaultOptions,
  scenario,
  seed,
  members: 2 + (seed % 7),
  shards: 4 + ((seed * 7) % 29),
  workers: 1 + (seed % 3),
  durationMs: 60_000,
  ratePerShard: 2,
})

/** Runs the seeds; returns one line per failing seed (with its replay command). */
export const failures = (scenario: Scenario, seeds: ReadonlyArray<number>): Array<string> => {
  const out: Array<string> = []
  for (const seed of seeds) {
    const o = smallOptions(scenario, seed)
    const { summary } = runSeed(o)
    if (summary.violations.length > 0)
      out.push(`${replayCommand(o)}: ${summary.violations.map((v) => v.message).join("; ")}`)
  }
  return out
}

export const range = (from: number, count: number): Array<number> =>
  Array.from({ length: count }, (_, i) => from + i)
