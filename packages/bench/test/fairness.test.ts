import { describe, expect, it } from "vitest"
import { jainIndex, serviceCounts, skewedBacklog, worstWaitRounds } from "../src/fairness.js"

describe("fairness metrics", () => {
  it("Jain's index is 1 for equal service and 1/n when one shard gets everything", () => {
    expect(jainIndex([3, 3, 3, 3])).toBe(1)
    expect(jainIndex([12, 0, 0, 0])).toBeCloseTo(0.25)
    expect(jainIndex([])).toBe(1)
  })

  it("worst wait counts other shards' turns between two turns of a backlogged shard, in rounds", () => {
    // round robin over 4 shards: 3 other turns between two turns = 0.75 rounds
    const rr = [0, 1, 2, 3, 0, 1, 2, 3]
    expect(
      worstWaitRounds(
        rr,
        new Map([
          [0, 2],
          [1, 2],
          [2, 2],
          [3, 2],
        ]),
        4,
      ),
    ).toBe(0.75)
    // lowest index first: shard 3 waits for everything before it
    const lif = [0, 0, 1, 1, 2, 2, 3, 3]
    expect(
      worstWaitRounds(
        lif,
        new Map([
          [0, 2],
          [1, 2],
          [2, 2],
          [3, 2],
        ]),
        4,
      ),
    ).toBe(1.5)
    // a shard never served waited the whole run
    expect(
      worstWaitRounds(
        [0, 0, 0, 0],
        new Map([
          [0, 4],
          [1, 1],
        ]),
        2,
      ),
    ).toBe(2)
  })

  it("service counts in a window and skewed backlogs", () => {
    expect(serviceCounts([0, 1, 1, 2, 0], 3, 4)).toEqual([1, 2, 1])
    const backlog = skewedBacklog(64, 8, 8)
    expect(backlog).toHaveLength(64)
    expect(Math.min(...backlog)).toBeGreaterThanOrEqual(64)
    expect(backlog[63]).toBe(8 * 8 * 20)
  })
})
