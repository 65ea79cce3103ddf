/** The failover benchmark's measures (src/failoverMetrics.ts) on hand-made lines. */
import { describe, expect, it } from "vitest"
import {
  collateral,
  handoffsFrom,
  heldThroughout,
  isCoordinator,
  type Line,
  longestGap,
  quantile,
} from "../src/failoverMetrics.js"

const line = (proc: string, t: number, ev: string, more: Partial<Line> = {}): Line => ({
  proc,
  t,
  ev,
  ...more,
})

describe("failover measures", () => {
  it("the coordinator is the pod whose latest coordinator event is an election", () => {
    expect(isCoordinator([line("a", 1, "coordinatorElected")])).toBe(true)
    expect(
      isCoordinator([line("a", 1, "coordinatorElected"), line("a", 2, "coordinatorResigned")]),
    ).toBe(false)
    expect(isCoordinator([line("a", 1, "batch", { shard: 0 })])).toBe(false)
  })

  it("held throughout: owned at the start and neither revoked nor lost in the window", () => {
    const lines = [
      line("a", 0, "assigned", { shard: 0 }),
      line("a", 0, "assigned", { shard: 1 }),
      line("a", 0, "assigned", { shard: 2 }),
      line("a", 15, "revoking", { shard: 1 }),
      line("a", 16, "leaseLost", { shards: [2] }),
      line("a", 30, "revoking", { shard: 0 }),
    ]
    expect(heldThroughout(lines, 10, 20)).toEqual([0])
    expect(heldThroughout(lines, 10, 40)).toEqual([])
  })

  it("the longest gap counts only shards held throughout, from leadMs before the window", () => {
    const a = [
      line("a", 0, "assigned", { shard: 0 }),
      line("a", 0, "assigned", { shard: 1 }),
      line("a", 90, "batch", { shard: 0 }),
      line("a", 100, "batch", { shard: 0 }),
      line("a", 400, "batch", { shard: 0 }),
      line("a", 420, "batch", { shard: 0 }),
      // shard 1 stalls longer but is revoked in the window: not counted
      line("a", 100, "batch", { shard: 1 }),
      line("a", 300, "revoking", { shard: 1 }),
      line("a", 900, "batch", { shard: 1 }),
    ]
    expect(longestGap([a], 200, 1_000, 100)).toBe(300)
    // without the lead the batch at 100 is outside: 400 -> 420 only
    expect(longestGap([a], 200, 1_000, 0)).toBe(20)
  })

  it("handoffs: revoked to the next owner's assigned and first batch", () => {
    const lines = [
      line("a", 100, "revoking", { shard: 3 }),
      line("a", 110, "revoked", { shard: 3 }),
      line("b", 105, "assigned", { shard: 3 }), // before the revoke: an earlier grant, ignored
      line("c", 140, "assigned", { shard: 3 }),
      line("c", 150, "batch", { shard: 3 }),
      line("a", 120, "revoked", { shard: 4 }), // nobody took it yet: no sample
    ]
    expect(handoffsFrom(lines, "a", 0)).toEqual([{ shard: 3, assignedMs: 30, firstReadMs: 40 }])
    expect(handoffsFrom(lines, "a", 115)).toEqual([])
  })

  it("collateral counts revocations, losses, lapsed leases and rejoins in the window", () => {
    const lines = [
      line("b", 5, "joined"),
      line("b", 20, "assigned", { shard: 1 }),
      line("b", 30, "leaseLost", { shards: [1] }),
      line("b", 40, "revoking", { shard: 1 }),
    ]
    expect(collateral(lines, 10).map((l) => l.ev)).toEqual(["leaseLost", "revoking"])
    expect(collateral(lines, 10, 35).map((l) => l.ev)).toEqual(["leaseLost"])
  })

  it("quantiles are nearest-rank, NaN left out", () => {
    const xs = [5, 1, Number.NaN, 3, 2, 4]
    expect(quantile(xs, 0.5)).toBe(3)
    expect(quantile(xs, 0.99)).toBe(5)
    expect(quantile([], 0.5)).toBeNaN()
  })
})
