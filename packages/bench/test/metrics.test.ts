import { movementLowerBound, stickyAssign } from "@shardline/core"
import { describe, expect, it } from "vitest"
import { hashRingAssign, makeRing, roundRobin } from "../src/baselines.js"
import { balance, countMoved, memberIds, scenario } from "../src/metrics.js"
import type { AlgorithmResult, AssignorReport } from "../src/report.js"
import { renderMarkdown, speedup } from "../src/report.js"

describe("metrics", () => {
  it("countMoved ignores null previous owners and shards beyond the previous array", () => {
    expect(countMoved(["a", null, "b", "a"], ["a", "c", "c", "b", "z"])).toBe(2)
    expect(countMoved([], ["a"])).toBe(0)
  })

  it("balance counts live members that own nothing as 0", () => {
    expect(balance(["a", "b"], ["a", "a", "b"])).toBe(1)
    expect(balance(["a", "b", "c"], ["a", "a", "b"])).toBe(2)
    expect(balance([], [null])).toBe(0)
  })

  it("memberIds sort in numeric order", () => {
    const ids = memberIds(12)
    expect([...ids].sort()).toEqual(ids)
    expect(memberIds(1, 10)).toEqual(["member-000010"])
  })

  it("scenarios: initial from empty, join adds one new id, leave drops the middle one", () => {
    expect(scenario("initial", 3)).toEqual({ before: [], after: memberIds(3) })
    const join = scenario("join", 3)
    expect(join.after).toEqual([...memberIds(3), "member-000003"])
    const leave = scenario("leave", 4)
    expect(leave.before).toEqual(memberIds(4))
    expect(leave.after).toEqual(["member-000000", "member-000001", "member-000003"])
  })
})

describe("baselines", () => {
  it("round robin is shard % members over ids sorted", () => {
    expect(roundRobin(5, ["b", "a"])).toEqual(["a", "b", "a", "b", "a"])
    expect(roundRobin(2, [])).toEqual([null, null])
  })

  it("round robin moves far more than the lower bound on a join", () => {
    const { before, after } = scenario("join", 10)
    const previous = roundRobin(256, before)
    const owners = roundRobin(256, after)
    const bound = movementLowerBound({
      shardCount: 256,
      members: after.map((id) => ({ id })),
      previous,
    })
    expect(countMoved(previous, owners)).toBeGreaterThan(bound)
  })

  it("HashRing assigns every shard to a ring member, deterministically", () => {
    const ids = memberIds(10)
    const owners = hashRingAssign(makeRing(ids), 256)
    expect(owners).toHaveLength(256)
    for (const owner of owners) expect(ids).toContain(owner)
    expect(hashRingAssign(makeRing([...ids].reverse()), 256)).toEqual(owners)
    expect(hashRingAssign(makeRing([]), 3)).toEqual([null, null, null])
  })

  it("sticky meets the lower bound on the bench scenarios", () => {
    for (const op of ["join", "leave"] as const) {
      const { before, after } = scenario(op, 10)
      const previous = stickyAssign({ shardCount: 256, members: before.map((id) => ({ id })) })
      const input = { shardCount: 256, members: after.map((id) => ({ id })), previous }
      expect(countMoved(previous, stickyAssign(input))).toBe(movementLowerBound(input))
    }
  })
})

describe("report", () => {
  const result = (meanMs: number): AlgorithmResult => ({
    opsPerSec: 1000 / meanMs,
    meanMs,
    rmePercent: 1,
    samples: 5,
    moved: 3,
    lowerBound: 2,
    balance: 1,
  })

  it("speedup is baseline mean / ours", () => {
    expect(speedup(result(2), result(10))).toBe(5)
  })

  it("renders one row per case with ratios and moved / bound", () => {
    const report: AssignorReport = {
      suite: "assignor",
      date: "2026-01-01T00:00:00.000Z",
      node: "v20",
      cpus: 2,
      benny: { minSamples: 5, maxTime: 0.5 },
      cases: [
        {
          shards: 10_000,
          members: 1_000,
          operation: "join",
          results: { sticky: result(0.5), hashRing: result(50), roundRobin: result(0.25) },
        },
      ],
    }
    const md = renderMarkdown(report)
    const row = md.split("\n").find((l) => l.startsWith("| 10,000 × 1,000 | join"))
    expect(row).toBe(
      "| 10,000 × 1,000 | join | 0.500 ±1% | 50.00 ±1% | 0.250 ±1% | 100× | 0.5× | 3 / 2 | 3 / 2 | 3 / 2 | 1 | 1 | 1 |",
    )
  })
})
