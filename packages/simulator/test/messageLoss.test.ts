import { describe, expect, it } from "vitest"
import { defaultOptions, replayCommand, runSeed, type SimOptions } from "../src/index.js"

// Slow is not lost (issue 20): a group with more work than its members can
// serve works off its backlog in the quiet tail after the liveness phase; a
// loss is reported with its full counts (messages, shards), once.
describe("message loss: the quiet tail and the counts", () => {
  it("an overloaded swarm seed (every shard on one member, extreme weights) drains in the tail: no loss", () => {
    // Failed before the tail: 1,726 messages still in the backlog at the end,
    // reported as "lost 5" (five shards listed, 854 messages).
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "swarm",
      seed: 20126,
      members: 15,
      shards: 148,
      workers: 1,
      durationMs: 180_000,
      ratePerShard: 1.5,
      faults: "swarm",
    }
    const { summary } = runSeed(o)
    expect(summary.violations, replayCommand(o)).toEqual([])
    expect(summary.acked).toBe(summary.produced)
    expect(summary.counters["run:drainTailMs"]).toBeGreaterThan(0)
  })

  it("a backlog the tail cannot work off is lost: one violation with every message and shard counted", () => {
    // One member, one worker, ~3x more arrivals than it can handle; the tail
    // runs at most the safety phase's length again.
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "steady",
      seed: 3,
      members: 1,
      shards: 64,
      workers: 1,
      durationMs: 10_000,
      ratePerShard: 10,
      faults: "none",
    }
    const { summary } = runSeed(o)
    const loss = summary.violations.filter((v) => v.checker === "message-loss")
    expect(loss).toHaveLength(1)
    expect(summary.lost).toBe(summary.produced - summary.acked)
    expect(summary.lost).toBeGreaterThan(1_000)
    expect(summary.lostShards).toBeGreaterThan(5)
    expect(loss[0]!.message).toContain(
      `${summary.lost} message(s) on ${summary.lostShards} shard(s)`,
    )
    expect(loss[0]!.message).toContain("still draining when the tail ended")
    expect(loss[0]!.message).toContain(`and ${summary.lostShards - 5} more shard(s)`)
    expect(summary.counters["run:drainTailMs"]).toBeGreaterThanOrEqual(10_000)
  })

  it("a run with nothing left to acknowledge has no tail", () => {
    const o: SimOptions = {
      ...defaultOptions,
      scenario: "steady",
      seed: 3,
      members: 3,
      shards: 8,
      durationMs: 10_000,
    }
    const { summary } = runSeed(o)
    expect(summary.violations).toEqual([])
    expect(summary.counters["run:drainTailMs"]).toBeUndefined()
  })
})
