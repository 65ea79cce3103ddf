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
  FAULT_KINDS,
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

/** Every kind but `coord-stop` and `outbox-relay`: the issue 34 sweep's list. */
const sweepKinds = [
  ...SWARM_FAULT_KINDS,
  "hung-store",
  "handler-ignores-abort",
  "refused",
  "store-rewind",
].join(",")

const sweep = (seed: number, workers: number, ratePerShard: number): SimOptions => ({
  ...defaultOptions,
  scenario: "swarm",
  seed,
  members: 4,
  shards: 64,
  workers,
  durationMs: 300_000,
  faults: sweepKinds,
  ratePerShard,
})

// Issue 34's sweep (4 x 64 x 5 min). The liveness checker measured a stall
// from the last NONE answer even when no live member asked anything after
// it: seed 9168, the last answer at 51.5 s, every member then partitioned,
// crashed or gone until a join sent at 77.1 s, which the leader's hung store
// command (5 s to its deadline, then a step-down) held: reported at 79 s as
// 27.5 s unanswered. Seed 9075: the last answer at 77.9 s, the next live
// requests from 90.8 s, again into a hung store command. The clock now starts
// at the first live request after the answer (docs/simulator.md, Checkers).
const idleGaps: ReadonlyArray<readonly [string, SimOptions]> = [
  ["swarm 9168, 4 x 64 x 5 min: 25.6 s nobody asked, then a hung store", sweep(9168, 4, 3.3)],
  ["swarm 9075, 4 x 64 x 5 min: 12.9 s nobody asked, then a hung store", sweep(9075, 6, 5.5)],
]

describe("pinned seeds: an idle gap is no coordinator stall", () => {
  it.each(idleGaps)("%s", (_, o) => {
    const { summary } = runSeed(o)
    expect(summary.violations, replayCommand(o)).toEqual([])
    expect(summary.counters["hungStore:deadlinePassed"]).toBeGreaterThan(0)
    expect(summary.counters["liveness:worstStallMs"]).toBeLessThan(5_000)
  })
})

// Found by a sweep with every kind on and transactional handlers (`swarm
// --swarm 100 --from-seed 9800 --members 8 --shards 32 --duration 5m --tx
// --faults <every kind>`: 17 of 100 failed before these fixes, 0 after).
describe("pinned seeds: every kind with transactional handlers", () => {
  it("swarm 9823 (8 x 32, handler-ignores-abort with --tx): a late handler's ack is its commit, never an ack alone", () => {
    // The model acked a handler that ran on past its abort with a plain ack
    // even under --tx: its messages were acknowledged with no effect (the
    // transactions checker: "never applied"). With transactional handlers
    // the runtime's late ack is the handler's commit (docs/exactly-once.md).
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "swarm",
      seed: 9823,
      members: 8,
      shards: 32,
      workers: 2,
      ratePerShard: 2.9,
      durationMs: 300_000,
      tx: true,
      faults: "handler-ignores-abort,crash,burst",
    }
    const { summary } = runSeed(o)
    expect(summary.violations, replayCommand(o)).toEqual([])
    expect(summary.counters["ignoresAbort:lateAckAccepted"]).toBeGreaterThan(0)
  })

  it("swarm 9807 (8 x 32, every kind, --tx): a graceful coordinator stop in an OOM episode is not held to the handover bound", () => {
    // The stop at 82.2 s came while `refused` refused every write (OOM): no
    // successor could commit its election until the episode ended (served
    // 4 s later). The handover checker judged it as if a standby could take
    // over at once; it now judges a stop only when Redis takes writes.
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "swarm",
      seed: 9807,
      members: 8,
      shards: 32,
      workers: 3,
      ratePerShard: 2.4,
      durationMs: 300_000,
      tx: true,
      // every kind there was when it was found (`fence-hang` draws after them)
      faults: FAULT_KINDS.filter((k) => k !== "fence-hang").join(","),
    }
    const { summary } = runSeed(o)
    expect(summary.violations, replayCommand(o)).toEqual([])
  })
})
