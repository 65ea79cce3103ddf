/**
 * Seeds that once failed, each kept with the shape it failed at (its replay
 * command) and why it failed, so the fix stays in place. docs/simulator.md,
 * Findings, says more about each.
 *
 * @module
 */
import { describe, expect, it } from "vitest"
import {
  defaultOptions,
  replayCommand,
  runSeed,
  type SimOptions,
  SWARM_FAULT_KINDS,
} from "../src/index.js"

const every = SWARM_FAULT_KINDS.join(",")

const pinned: ReadonlyArray<readonly [string, SimOptions]> = [
  // Issue 34. A session deadline came due during a Redis outage shorter than
  // the coordinator lease; the simulated leader's commit of the expiry
  // failed, yet it kept its shell, from which `dueTimer` had already taken
  // that deadline. Back on Redis it served on and never expired
  // sim-0109-m0 (epoch 229), whose process had exited: the deadline checker,
  // 11.1 s unanswered at 597 s. A failed commit now makes the candidate step
  // down, as CoordinatorHost does.
  [
    "swarm 7305, 120 x 96 x 15 min, the swarm mix: a deadline due in a Redis outage",
    {
      ...defaultOptions,
      scenario: "swarm",
      seed: 7305,
      members: 120,
      shards: 96,
      workers: 2,
      durationMs: 900_000,
      ratePerShard: 1,
    },
  ],
  // The same fault, found by the sweep after it at a small shape: sim-0006-m0
  // (epoch 60), paused at 190 s, due at 199.7 s in the outage of 198.7-199.9 s.
  [
    "swarm 12, 20 x 16 x 5 min, every fault kind: a deadline due in a Redis outage",
    {
      ...defaultOptions,
      scenario: "swarm",
      seed: 12,
      members: 20,
      shards: 16,
      workers: 8,
      durationMs: 300_000,
      faults: every,
      ratePerShard: 0.4,
    },
  ],
]

describe("pinned seeds that once failed", () => {
  it.each(pinned)("%s", (_, o) => {
    const { summary } = runSeed(o)
    expect(summary.violations, replayCommand(o)).toEqual([])
    // the outage's failed commit, which the fix turns into a step-down
    expect(summary.counters["redis:commitsFailed"]).toBeGreaterThan(0)
  })
})
