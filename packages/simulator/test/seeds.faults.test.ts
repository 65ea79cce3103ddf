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
})
