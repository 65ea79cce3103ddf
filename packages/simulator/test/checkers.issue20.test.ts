/**
 * Hand-made traces for the checkers of issues 19 and 20 (docs/simulator.md,
 * Checkers): owner tokens, collateral ownership loss, unusable leases.
 */
import type { CoordinatorRecord } from "@shardline/core"
import { describe, expect, it } from "vitest"
import {
  CollateralChecker,
  defaultOptions,
  FanOutChecker,
  isCollateralFree,
  LeaseConfigChecker,
  TokenChecker,
  type Violation,
} from "../src/index.js"
import { drawFaults } from "../src/options.js"

const collect = () => {
  const out: Array<Violation> = []
  return { out, report: (v: Violation) => out.push(v) }
}

const owners = (shards: Array<[number, string | null, number]>): CoordinatorRecord =>
  ({
    _tag: "ShardOwnersChanged",
    shards: shards.map(([shard, memberId, token]) => ({
      shard,
      owner: memberId === null ? null : { memberId, memberEpoch: 1, token, confirmed: false },
    })),
  }) as unknown as CoordinatorRecord

const held = (shard: number, token: number): CoordinatorRecord =>
  ({
    _tag: "HeldChanged",
    shards: [
      {
        shard,
        held: { memberId: "a", incarnation: 1, instance: "", joinSeq: 1, token, reason: "fenced" },
      },
    ],
  }) as unknown as CoordinatorRecord

describe("TokenChecker", () => {
  it("accepts rising tokens, a grant's confirmation and a takeover's re-commit", () => {
    const { out, report } = collect()
    const t = new TokenChecker(4, report)
    t.committed([owners([[0, "a", 10]])], 1)
    t.committed([owners([[0, "a", 10]])], 2) // the same grant again
    t.committed([owners([[0, null, 0]])], 3)
    t.committed([owners([[0, "b", 11]])], 4)
    t.fenceWrite(0, 10, 1)
    t.fenceWrite(0, 11, 4)
    t.fenceWrite(0, 11, 5) // a takeover re-fences the same token
    expect(out).toEqual([])
    expect(t.grants).toBe(2)
  })

  it("flags a re-grant that keeps the previous owner token, to another member or after a release", () => {
    const { out, report } = collect()
    const t = new TokenChecker(4, report)
    t.committed([owners([[1, "a", 10]])], 1)
    t.committed([owners([[1, null, 0]])], 2)
    t.committed([owners([[1, "b", 10]])], 3)
    t.committed([owners([[2, "a", 20]])], 4)
    t.committed([owners([[2, "b", 20]])], 5)
    expect(out.map((v) => v.shard)).toEqual([1, 2])
    expect(out[0]!.checker).toBe("tokens")
  })

  it("flags a token below one the shard had (a clock stepped back), held tokens included", () => {
    const { out, report } = collect()
    const t = new TokenChecker(4, report)
    t.committed([held(3, 50)], 1)
    t.committed([owners([[3, "b", 40]])], 2)
    expect(out).toHaveLength(1)
    expect(out[0]!.message).toContain("not above 50")
  })

  it("flags storage's token going down and a read with a token storage never got", () => {
    const { out, report } = collect()
    const t = new TokenChecker(4, report)
    t.fenceWrite(0, 30, 1)
    t.fenceWrite(0, 29, 2)
    t.unwritten(1, 7, 0, 3)
    expect(out.map((v) => v.message)).toEqual([
      expect.stringContaining("OwnerTokenRegression"),
      expect.stringContaining("never written"),
    ])
  })
})

describe("CollateralChecker", () => {
  const make = (lost: Record<string, Array<number>>) => {
    const { out, report } = collect()
    const c = new CollateralChecker(
      report,
      "loss",
      (id, since) => (lost[id] ?? []).filter((t) => t >= since).length,
      6_500,
      10_000,
    )
    return { out, c }
  }

  it("flags a fence when at most one of the member's messages was lost, and the drop it causes", () => {
    const { out, c } = make({ a: [9_000] })
    c.ended("a", "MemberFenced", 10_000)
    c.memberStopped("a", "unknown-member", 10_100)
    expect(out).toHaveLength(2)
    expect(out[0]!.checker).toBe("collateral")
  })

  it("excuses a fence after two lost messages in its window, and the drop it causes once", () => {
    const { out, c } = make({ a: [2_000, 6_000, 8_000] })
    c.ended("a", "MemberFenced", 10_000)
    c.memberStopped("a", "fenced", 10_100)
    expect(out).toEqual([])
    expect(c.excused).toBe(1)
    c.memberStopped("a", "unknown-member", 10_200)
    expect(out).toHaveLength(1)
  })

  it("ignores losses older than the window, and leaves, rejoins, replacements and suspensions", () => {
    const { out, c } = make({ a: [1_000, 2_000] })
    c.ended("a", "MemberFenced", 10_000)
    expect(out).toHaveLength(1)
    c.ended("b", "MemberLeft", 1)
    c.ended("b", "MemberRejoined", 1)
    c.ended("b", "MemberReplaced", 1)
    c.memberStopped("b", "lease-lost", 1)
    c.memberStopped("b", "left", 1)
    expect(out).toHaveLength(1)
  })

  it("applies to runs whose faults all spare the members' processes", () => {
    const mix = (faults: string) => drawFaults({ ...defaultOptions, seed: 1, faults })
    expect(isCollateralFree(mix("loss,dup,delay,replay"))).toBe(true)
    expect(isCollateralFree(mix("coord-crash,clock-step,redis-outage"))).toBe(true)
    expect(isCollateralFree(mix("burst,weights"))).toBe(false) // nothing disturbs: exactness covers it
    expect(isCollateralFree(mix("loss,partition"))).toBe(false)
    expect(isCollateralFree(mix("collide"))).toBe(false)
  })
})

describe("LeaseConfigChecker", () => {
  it("flags a member reading with a lease not longer than a heartbeat interval", () => {
    const { out, report } = collect()
    const l = new LeaseConfigChecker(report, 10_000, 1_000)
    l.started(1, "a", 0, 1_500)
    l.started(1, "a", 0, 7_000) // a lease of 3 heartbeat intervals: fine
    expect(out).toEqual([])
    l.started(2, "b", 1, 9_000)
    expect(out).toHaveLength(1)
    expect(out[0]!.checker).toBe("lease-config")
  })
})

describe("FanOutChecker", () => {
  it("flags an entry deleted before every group acknowledged it", () => {
    const { out, report } = collect()
    const f = new FanOutChecker(report, 2, 2, ["ack", "xackdel"])
    f.acked(1, 0, 5)
    f.deleted(0, 5, 10)
    expect(out).toHaveLength(1)
    expect(out[0]!.message).toContain("group 0 (ack) had not acknowledged it")
    f.acked(0, 0, 6)
    f.acked(1, 0, 6)
    f.deleted(0, 6, 11)
    expect(out).toHaveLength(1)
  })

  it("flags a fan-out group that never acknowledged what was produced", () => {
    const { out, report } = collect()
    const f = new FanOutChecker(report, 2, 2, ["xackdel", "ack"])
    f.acked(1, 0, 0)
    f.finish(100, (s) => (s === 0 ? 2 : 0))
    expect(out).toHaveLength(1)
    expect(out[0]!.message).toContain("never acknowledged 1 entries on 1 shard(s)")
  })
})
