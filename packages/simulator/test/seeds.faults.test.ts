import { describe, expect, it } from "vitest"
import { failures, range } from "./helpers.js"

// Fault scenarios: 3 x 100 small seeds, each with its own swarm-drawn fault mix.
describe("fixed seeds: fault scenarios", () => {
  for (const scenario of ["partition-storm", "coordinator-failover", "swarm"] as const)
    it(`${scenario}: 100 seeds, zero violations`, () => {
      expect(failures(scenario, range(1, 100))).toEqual([])
    })
})
