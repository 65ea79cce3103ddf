import type { HeartbeatRequest, HeartbeatResponse } from "@shardline/core"
import { describe, expect, it } from "vitest"
import {
  balanced,
  CommittedView,
  ConvergenceChecker,
  DeadlineChecker,
  DrainChecker,
  ExactnessChecker,
  type Holder,
  IntentChecker,
  KeyOrderChecker,
  LeaseChecker,
  MessageChecker,
  OwnershipChecker,
  RequestChecker,
  RevisionChecker,
  RuntimeChecker,
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

  it("reports a loss once, with every message and every shard counted (issue 20: not 'lost 5')", () => {
    const c = new MessageChecker(8)
    for (let s = 0; s < 8; s++) for (let i = 0; i <= s; i++) c.produce(s)
    c.ack(0, 0) // shard 0 complete; shards 1..7 have 2..8 messages, all but one unacknowledged
    for (let s = 1; s < 8; s++) c.ack(s, 0)
    const { out, report } = collect()
    expect(c.finish(1000, report)).toBe(28)
    expect(c.lostMessages).toBe(28)
    expect(c.lostShards).toBe(7)
    expect(out).toHaveLength(1)
    expect(out[0]!.shard).toBe(1)
    expect(out[0]!.message).toBe(
      "28 message(s) on 7 shard(s) never acknowledged: shard 1: 1 (first id 1), shard 2: 2 (first id 1), shard 3: 3 (first id 1), shard 4: 4 (first id 1), shard 5: 5 (first id 1), and 2 more shard(s)",
    )
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

// ---------------------------------------------------------------- checkers of intent

const holder = (
  proc: number,
  memberId: string,
  token: number,
  grantRev: number | undefined,
  active = () => true,
  epoch = 1,
): Holder => ({ proc, label: `#${proc}`, memberId, epoch, token, grantRev, active })

describe("IntentChecker", () => {
  it("flags two processes that both hold a valid grant of a shard, even if storage would refuse one", () => {
    const { out, report } = collect()
    const c = new IntentChecker(4, report)
    c.hold(1, holder(0, "a", 1, 1))
    c.hold(1, holder(1, "b", 2, 2))
    c.act(100, 1, holder(1, "b", 2, 2))
    expect(out).toHaveLength(1)
    expect(out[0]!.checker).toBe("intent")
  })

  it("ignores a holder whose grant is no longer valid (lease expired, loop ended)", () => {
    const { out, report } = collect()
    const c = new IntentChecker(4, report)
    c.hold(
      1,
      holder(0, "a", 1, 1, () => false),
    )
    c.hold(1, holder(1, "b", 2, 2))
    c.act(100, 1, holder(1, "b", 2, 2))
    c.release(1, 0)
    c.release(1, 1) // b's loop ended (drained)
    c.hold(1, holder(2, "c", 3, 3))
    c.act(200, 1, holder(2, "c", 3, 3))
    expect(out).toEqual([])
  })

  it("excuses no zombie (rule 19): a holder fenced or replaced before the other's grant is a violation too", () => {
    const { out, report } = collect()
    const c = new IntentChecker(4, report)
    c.hold(0, holder(0, "a", 1, 1))
    c.hold(0, holder(1, "b", 2, 6))
    c.act(10, 0, holder(1, "b", 2, 6))
    expect(out).toHaveLength(1)
  })
})

describe("DrainChecker", () => {
  it("flags a REVOKED accepted while the member still has a batch in flight or still reads", () => {
    const { out, report } = collect()
    const c = new DrainChecker(report)
    c.check(10, 3, "a", "revoked", [{ label: "a", state: "idle" }])
    expect(out).toEqual([])
    c.check(20, 3, "a", "revoked", [{ label: "a", state: "draining" }])
    c.check(30, 4, "a", "left", [{ label: "a", state: "reading" }])
    expect(out.map((v) => v.checker)).toEqual(["drain", "drain"])
  })
})

describe("LeaseChecker", () => {
  it("flags an expiry while the member's process still holds shards with lease left", () => {
    const { out, report } = collect()
    const c = new LeaseChecker(report)
    c.expired(10, "a", 3, [{ label: "a", shards: 2, leaseLeftMs: -5 }])
    c.expired(10, "b", 3, [{ label: "b", shards: 0, leaseLeftMs: 500 }])
    expect(out).toEqual([])
    c.expired(10, "c", 3, [{ label: "c", shards: 2, leaseLeftMs: 500 }])
    expect(out).toHaveLength(1)
  })
})

/** A committed view fed with hand-made record batches. */
const viewOf = (shards: number) =>
  new CommittedView(shards, { released: () => undefined, ended: () => undefined })

const member = (memberId: string, memberEpoch: number, incarnation = 1, joinSeq = 1) => ({
  _tag: "MemberUpserted" as const,
  member: {
    memberId,
    memberEpoch,
    incarnation,
    joinSeq,
    state: "STABLE" as const,
    weight: 1,
    memberInfo: { consumerName: memberId, host: "h" },
  },
})

describe("DeadlineChecker", () => {
  it("flags a revocation, an unconfirmed grant and a silent member past their deadlines while a leader serves", () => {
    const { out, report } = collect()
    const view = viewOf(2)
    view.ingest(
      [
        member("a", 1),
        {
          _tag: "ShardOwnersChanged",
          shards: [
            { shard: 0, owner: { memberId: "a", memberEpoch: 1, token: 1, confirmed: false } },
          ],
        },
        {
          _tag: "RevocationsChanged",
          shards: [{ shard: 1, revocation: { memberId: "a", memberEpoch: 1 } }],
        },
      ],
      1,
      0,
    )
    const c = new DeadlineChecker(report)
    c.sample(4_000, view, 0)
    c.sample(60_000, view, undefined) // nobody serves: nothing can be due
    expect(out).toEqual([])
    c.sample(5_300, view, 0)
    expect(out).toHaveLength(2) // revocation of 1, grant of 0
    c.sample(5_300, view, 3_000) // a new leader restarted the deadlines
    view.touch("a", 1, 9_000)
    c.sample(19_000, view, 0)
    expect(out).toHaveLength(2)
    c.sample(19_200, view, 0)
    expect(out).toHaveLength(3)
    expect(out.every((v) => v.checker === "deadline")).toBe(true)
  })
})

describe("RequestChecker", () => {
  const response = (errorCode: HeartbeatResponse["errorCode"]): HeartbeatResponse => ({
    errorCode,
    memberId: "a",
    memberEpoch: 2,
    assignmentEpoch: 1,
    assigned: [],
    pending: [],
    heartbeatIntervalMs: 1000,
    sessionTimeoutMs: 10000,
    rebalanceTimeoutMs: 5000,
  })
  const request = (over: Partial<HeartbeatRequest>): HeartbeatRequest => ({
    group: "g",
    stream: "g",
    memberId: "a",
    incarnation: 2,
    seq: 10,
    memberEpoch: 2,
    assignmentEpoch: 1,
    metadataVersion: 0,
    ownedShards: [],
    revokingShards: [],
    ...over,
  })
  const setup = () => {
    const view = viewOf(4)
    view.ingest([member("a", 2, 2, 5)], 1, 0)
    const { out, report } = collect()
    return { view, out, c: new RequestChecker(report) }
  }
  const none = { records: [], response: response("NONE") }

  it("a request of a superseded process or lifecycle, or an older join, must change nothing", () => {
    const { view, out, c } = setup()
    c.judge(
      1,
      request({ incarnation: 1 }),
      undefined,
      view,
      { records: [], response: response("FENCED_INSTANCE_ID") },
      true,
      true,
    )
    c.judge(
      1,
      request({ memberEpoch: 1 }),
      undefined,
      view,
      { records: [], response: response("FENCED_MEMBER_EPOCH") },
      true,
      true,
    )
    expect(out).toEqual([])
    c.judge(1, request({ incarnation: 1 }), undefined, view, none, true, true)
    c.judge(
      1,
      request({ memberEpoch: 0, seq: 4, memberInfo: { consumerName: "a", host: "h" } }),
      undefined,
      view,
      { records: [member("a", 3, 2, 4)], response: response("NONE") },
      true,
      true,
    )
    expect(out.map((v) => v.checker)).toEqual(["requests", "requests"])
  })

  it("the join that started the lifecycle, received again, starts no other", () => {
    const { view, out, c } = setup()
    const join = request({ memberEpoch: 0, seq: 5, memberInfo: { consumerName: "a", host: "h" } })
    c.judge(1, join, undefined, view, none, false, true)
    expect(out).toEqual([])
    c.judge(
      1,
      join,
      undefined,
      view,
      { records: [member("a", 3, 2, 5)], response: response("NONE") },
      false,
      true,
    )
    expect(out).toHaveLength(1)
  })

  it("a forged claim must fence; an honest in-order report must not be fenced", () => {
    const { view, out, c } = setup()
    const forged = { claims: [3], revoking: [], revokedWhileReading: [] }
    const fence = {
      records: [{ _tag: "MemberRemoved" as const, memberId: "a" }],
      response: response("FENCED_MEMBER_EPOCH"),
    }
    c.judge(1, request({ ownedShards: [3] }), forged, view, fence, true, false)
    expect(out).toEqual([])
    expect(c.forgedFenced).toBe(1)
    c.judge(2, request({ ownedShards: [3] }), forged, view, none, true, false)
    expect(out).toHaveLength(1)
    c.judge(3, request({}), undefined, view, fence, true, true)
    expect(out).toHaveLength(2)
    c.judge(4, request({}), undefined, view, fence, false, true) // a straggler may be fenced
    expect(out).toHaveLength(2)
  })
})

describe("RuntimeChecker and ExactnessChecker", () => {
  it("report what they are told", () => {
    const { out, report } = collect()
    const r = new RuntimeChecker(report)
    r.secondRequest(1, "a", 3)
    r.startWithoutLayout(1, "a", 0, "none")
    r.startWithoutLease(1, "a", 0)
    r.startWhileRunning(1, "a", 0)
    const e = new ExactnessChecker(report, 1_500)
    e.episode(1, 1_000, 1, 3, 3)
    expect(out).toHaveLength(4)
    e.episode(1, 1_600, 2, 5, 3) // too slow; two changes: movement not judged
    e.episode(1, 1_000, 1, 4, 3) // one change, moved more than the bound
    e.finish(1, {
      duplicates: 0,
      fencedReads: 1,
      fencedAcks: 0,
      fences: 0,
      expiries: 0,
      replaced: 0,
      rejoined: 0,
      selfFences: 0,
      staleCommits: 0,
    })
    expect(out.slice(4).map((v) => v.checker)).toEqual(["exactness", "exactness", "exactness"])
  })
})

describe("balanced() with weights", () => {
  it("holds each member to floor or ceil of its weighted quota", () => {
    // 4 shards, weights 3:1 -> quotas 3 and 1
    expect(balanced([1, 1, 1, 1], [0, 0, 0, 1], [0, 1], [3, 1]).ok).toBe(true)
    expect(balanced([1, 1, 1, 1], [0, 0, 1, 1], [0, 1], [3, 1]).ok).toBe(false)
    // extreme weights: the light member's quota is ~1e-11: 0 or 1 shard
    expect(balanced([1, 1], [0, 0], [0, 1], [1e6, 1e-6]).ok).toBe(true)
    expect(balanced([1, 1], [0, 1], [0, 1], [1e6, 1e-6]).ok).toBe(true)
    expect(balanced([1, 1], [1, 1], [0, 1], [1e6, 1e-6]).ok).toBe(false)
  })
})

describe("KeyOrderChecker", () => {
  // shards 0-1: generation 0; shards 2-5: generation 1; key 0 and key 1
  const setup = () => {
    const { out, report } = collect()
    const c = new KeyOrderChecker(6, 2, report, (k) => `k${k}`)
    c.produced(0, 0, 0, 0) // key 0, seq 0, old shard 0
    c.produced(0, 1, 1, 0) // key 1, seq 0
    c.produced(0, 2, 0, 0) // key 0, seq 1
    c.produced(3, 0, 0, 1) // key 0, seq 2, new shard 3 (after the cutover)
    return { c, out }
  }

  it("accepts a cutover after the old generation's messages of the key were acknowledged", () => {
    const { c, out } = setup()
    for (const id of [0, 1, 2]) c.deliver(10, 0, id)
    for (const id of [0, 1, 2]) c.handle(20, 0, id)
    for (const id of [0, 1, 2]) c.acked(0, id)
    c.deliver(30, 3, 0)
    c.handle(40, 3, 0)
    expect(out).toEqual([])
    expect(c.crossGeneration).toBe(1)
  })

  it("flags a new-generation message delivered while an old one of its key is unacknowledged", () => {
    const { c, out } = setup()
    c.deliver(10, 0, 0)
    c.handle(20, 0, 0)
    c.acked(0, 0) // key 0 seq 1 (shard 0, id 2) is still unacknowledged
    c.deliver(30, 3, 0)
    expect(out).toHaveLength(1)
    expect(out[0]!.checker).toBe("key-order")
    expect(out[0]!.message).toContain("key k0")
    expect(out[0]!.message).toContain("1 of its 2 message(s) written under generation 0")
  })

  it("ignores other keys' unacknowledged messages", () => {
    const { c, out } = setup()
    c.acked(0, 0)
    c.acked(0, 2) // key 1's message (id 1) stays unacknowledged
    c.deliver(30, 3, 0)
    expect(out).toEqual([])
  })

  it("flags a message handled before an earlier one of its key was ever handled", () => {
    const { c, out } = setup()
    c.handle(10, 0, 2) // key 0 seq 1 before seq 0
    expect(out).toHaveLength(1)
    expect(out[0]!.message).toContain("before message 0 of the key was ever handled")
  })

  it("allows a re-delivered prefix (at least once)", () => {
    const { c, out } = setup()
    c.handle(10, 0, 0)
    c.handle(11, 0, 2)
    c.handle(12, 0, 0) // the batch again, after a fenced ack
    c.handle(13, 0, 2)
    expect(out).toEqual([])
  })
})

describe("balanced with a reshard (expect)", () => {
  it("requires the earlier generation unread and the current one read once each", () => {
    const expect01 = [0, 0, 1, 1]
    expect(balanced([0, 0, 1, 1], [-1, -1, 0, 1], [0, 1], undefined, expect01).ok).toBe(true)
    const still = balanced([1, 0, 1, 1], [0, -1, 0, 1], [0, 1], undefined, expect01)
    expect(still.ok).toBe(false)
    expect(still.why).toContain("earlier generation")
    expect(balanced([0, 0, 1, 0], [-1, -1, 0, -1], [0, 1], undefined, expect01).ok).toBe(false)
  })
})
