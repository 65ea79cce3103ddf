import { describe, expect, it } from "vitest"
import { defaultOptions, replayCommand, runSeed, type SimOptions } from "../src/index.js"

describe("one larger seed", () => {
  it("swarm, 200 members x 512 shards x 10 virtual minutes: zero violations, converges", () => {
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "swarm",
      seed: 1,
      members: 200,
      shards: 512,
      workers: 4,
      durationMs: 600_000,
      ratePerShard: 1,
    }
    const { summary } = runSeed(o)
    expect(summary.violations, replayCommand(o)).toEqual([])
    expect(summary.convergence.livenessMs).not.toBeNull()
    expect(summary.lost).toBe(0)
    expect(summary.acked).toBe(summary.produced)
    expect(summary.events).toBeGreaterThan(1_000_000)
  })

  it("determinism: a larger shape run twice gives the same digest", () => {
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "swarm",
      seed: 9,
      members: 50,
      shards: 128,
      workers: 2,
      durationMs: 120_000,
      faults: "swarm",
    }
    const a = runSeed(o).summary
    const b = runSeed(o).summary
    expect(b.digest).toBe(a.digest)
    expect(b.events).toBe(a.events)
  })
})
