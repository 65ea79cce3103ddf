import { describe, expect, it } from "vitest"
import { defaultOptions, runSeed } from "../src/index.js"
import { failures, range } from "./helpers.js"

// Fault scenarios: 3 x 100 small seeds, each with its own swarm-drawn fault mix.
describe("fixed seeds: fault scenarios", () => {
  for (const scenario of ["partition-storm", "coordinator-failover", "swarm"] as const)
    it(`${scenario}: 100 seeds, zero violations`, () => {
      expect(failures(scenario, range(1, 100))).toEqual([])
    })
})

describe("regressions found by swarm runs", () => {
  it("swarm seed 2236: a zombie's StartShard + StopAll must not leave a stale reader behind", () => {
    const { summary } = runSeed({ ...defaultOptions, scenario: "swarm", seed: 2236 })
    expect(summary.violations).toEqual([])
  })

  it("swarm seed 14 (100 x 256, 5 min): a member resumed from a pause reads the backlog that arrived while it was paused", () => {
    // Before the fix: the owner was paused with both workers idle, produce()
    // does not wake a paused process, and resuming it (here: the liveness
    // phase at 300 s) woke no worker, so three of its shards waited 4 s for
    // their next message although the lease was valid.
    const { summary } = runSeed({
      ...defaultOptions,
      scenario: "swarm",
      seed: 14,
      members: 100,
      shards: 256,
      workers: 2,
      durationMs: 300_000,
    })
    expect(summary.violations).toEqual([])
  })
})
