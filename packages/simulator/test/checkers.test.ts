import { describe, expect, it } from "vitest"
import {
  balanced,
  ConvergenceChecker,
  MessageChecker,
  OwnershipChecker,
  RevisionChecker,
  StarvationChecker,
  type Violation,
} from "../src/index.js"

const collect = () => {
  const out: Array<Violation> = []
  return { out, report: (v: Violation) => out.push(v) }
}

describe("OwnershipChecker", () => {
  it("flags two members processing one shard at the same instant", () => {
    const { out, report } = collect()
    const c = new OwnershipChecker(4, report)
    c.batch(2, 0, 100, 150)
    c.batch(2, 1, 140, 200)
    expect(out).toHaveLength(1)
    expect(out[0]!.checker).toBe("ownership")
    expect(out[0]!.shard).toBe(2)
  })

  it("accepts a clean handoff, back-to-back intervals and one member's successive batches", () => {
    const { out, report } = collect()
    const c = new OwnershipChecker(4, report)
    c.batch(1, 0, 0, 50)
    c.batch(1, 0, 50, 90)
    c.batch(1, 1, 90, 120) // half-open: [50,90) and [90,120) do not overlap
    c.batch(1, 2, 300, 400)
    c.batch(3, 2, 100, 130) // another shard
    expect(out).toEqual([])
  })

  it("catches an overlap with an older interval of a third member", () => {
    const { out, report } = collect()
    const c = new OwnershipChecker(1, report)
    c.batch(0, 0, 0, 1000) // long zombie batch, acknowledged late
    c.batch(0, 1, 10, 20)
    expect(out).toHaveLength(1)
  })
})

describe("MessageChecker", () => {
  it("reports unacknowledged messages and counts duplicates", () => {
    const c = new MessageChecker(2)
    const a = c.produce(0)
    const b = c.produce(0)
    const d = c.produce(1)
    c.handle(0, a)
    c.ack(0, a)
    c.handle(0, b)
    c.handle(0, b) // redelivered after a failed ack
    c.ack(0, b)
    c.handle(1, d)
    const { out, report } = collect()
    expect(c.finish(1000, report)).toBe(1)
    expect(out).toHaveLength(1)
    expect(out[0]!.shard).toBe(1)
    expect(c.duplicates).toBe(1)
    expect(c.ackedTotal).toBe(2)
  })

  it("passes when everything is acknowledged (duplicates allowed)", () => {
    const c = new MessageChecker(1)
    for (let i = 0; i < 100; i++) c.produce(0)
    for (let i = 0; i < 100; i++) {
      c.handle(0, i)
      c.ack(0, i)
      c.ack(0, i)
    }
    const { out, report } = collect()
    expect(c.finish(0, report)).toBe(0)
    expect(out).toEqual([])
  })
})

describe("StarvationChecker", () => {
  it("flags a shard waiting past its bound only", () => {
    const { out, report } = collect()
    const c = new StarvationChecker(report)
    c.sample(5_000, 3, 1_000, 5_000)
    expect(out).toEqual([])
    c.sample(7_000, 3, 1_000, 5_000)
    expect(out).toHaveLength(1)
    expect(c.worstWaitMs).toBe(6_000)
  })
})

describe("RevisionChecker", () => {
  it("flags a write based on a stale revision", () => {
    const { out, report } = collect()
    const c = new RevisionChecker(report)
    c.commit(0, 0, 1)
    c.commit(1, 1, 2)
    expect(out).toEqual([])
    c.commit(2, 1, 2) // a stale snapshot overwrote revision 2
    expect(out).toHaveLength(1)
    expect(out[0]!.checker).toBe("store-revision")
  })

  it("flags a skipped revision", () => {
    const { out, report } = collect()
    const c = new RevisionChecker(report)
    c.commit(0, 0, 2)
    expect(out).toHaveLength(1)
  })
})

describe("ConvergenceChecker and balanced()", () => {
  it("measures unbalanced stretches and reports non-convergence", () => {
    const { out, report } = collect()
    const c = new ConvergenceChecker(report)
    c.change(1_000)
    c.sample(2_000, false)
    c.sample(3_500, true)
    expect(c.durations).toEqual([2_500])
    c.notConverged(60_000, 30_000, "imbalance")
    expect(out).toHaveLength(1)
  })

  it("balanced: one reader per shard, counts within one", () => {
    expect(balanced([1, 1, 1, 1], [0, 1, 0, 1], [0, 1]).ok).toBe(true)
    expect(balanced([1, 1, 1, 1], [0, 0, 0, 1], [0, 1]).ok).toBe(false)
    expect(balanced([1, 2, 1, 1], [0, 1, 0, 1], [0, 1]).ok).toBe(false) // two readers
    expect(balanced([1, 0, 1, 1], [0, -1, 0, 1], [0, 1]).ok).toBe(false) // unowned
    expect(balanced([1, 1], [0, 2], [0, 1]).ok).toBe(false) // non-live reader
  })
})
