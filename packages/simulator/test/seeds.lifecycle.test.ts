import { describe, expect, it } from "vitest"
import { range, runSet, smallOptions } from "./helpers.js"

// Membership scenarios without disruptive faults (churn adds bursts of
// back-to-back rebalances and extreme weights): every run is held to
// exactness (zero duplicates, fenced reads and acks, fences, expiries,
// self-fences; convergence within 1.5 heartbeat intervals of the last change;
// a one-change rebalance moves exactly the lower bound). Half the runs with
// the storage fence off: the protocol alone must be exact.
describe("fixed seeds: exact scenarios", () => {
  for (const scenario of ["steady", "rolling-restart", "scale-out", "scale-in", "churn"] as const)
    it(`${scenario}: 100 seeds, exact, zero violations`, () => {
      const set = runSet(
        range(1, 100).map((seed) =>
          smallOptions(scenario, seed, {
            ...(seed % 4 === 0 ? { ratePerShard: 10, workers: 4 } : {}),
            fence: seed % 2 === 0 ? "on" : "off",
          }),
        ),
      )
      expect(set.failures).toEqual([])
      expect(set.exactRuns).toBe(set.runs)
      if (scenario !== "steady")
        expect(set.counters["exact:singleChangeEpisodes"]).toBeGreaterThan(50)
      if (scenario === "churn") {
        expect(set.counters["burst:episodes"]).toBeGreaterThan(50)
        expect(set.counters["members:weightAtBound"]).toBeGreaterThan(10)
      }
      if (scenario === "scale-in" || scenario === "rolling-restart")
        expect(set.counters["member:leavesWithBatchInFlight"]).toBeGreaterThan(0)
    })
})
