/**
 * docs/protocol.md rules 18 and 24 (issue 20, findings 2, 3 and 4): requests
 * and answers are ordered per process, and a process is (incarnation,
 * instance). A request older than (or a duplicate of) the newest one handled
 * for its process is answered from the standing state and never acted on, at
 * this leader and at the next (the seq is recorded with every change the
 * process's requests make); a leave is only ever the registered process's.
 */
import { describe, expect, it } from "vitest"
import type { HeartbeatRequest } from "../../src/index.js"
import { config, Harness, request, SimMember, shards } from "./harness.js"

/** Heartbeat every member until nothing changes (a few rounds). */
const settle = (h: Harness, ...members: Array<SimMember>) => {
  for (let i = 0; i < 4; i++) for (const m of members) m.onResponse(h.hb(m.request()).response)
}

describe("rule 18: a request older than the newest handled is never acted on", () => {
  it("issue 20 finding 2: a duplicate of request n (REVOKING) handled after n+1 (REVOKED, re-granted) fences no one", () => {
    const h = new Harness()
    const a = new SimMember("a")
    settle(h, a)
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response)
    const epoch = a.epoch
    const base = {
      memberId: "a",
      incarnation: 1,
      memberEpoch: epoch,
      assignmentEpoch: h.state.assignmentEpoch,
    }
    const tokenOf = (s: number) => h.state.current[s]!.token
    const n: HeartbeatRequest = request({
      ...base,
      seq: 100,
      ownedShards: [0, 1],
      revokingShards: [
        { shard: 2, state: "REVOKING", token: tokenOf(2) },
        { shard: 3, state: "REVOKING", token: tokenOf(3) },
      ],
    })
    const n1: HeartbeatRequest = request({
      ...base,
      seq: 101,
      ownedShards: [0, 1],
      revokingShards: [
        { shard: 2, state: "REVOKED", token: tokenOf(2) },
        { shard: 3, state: "REVOKED", token: tokenOf(3) },
      ],
    })
    expect(h.hb(n).response.errorCode).toBe("NONE")
    expect(h.hb(n1).response.errorCode).toBe("NONE")
    settle(h, b)
    expect(shards(h.hb(b.request()).response)).toEqual([2, 3])
    const before = h.snapshot()
    const dup = h.hb(n)
    expect(dup.response.errorCode).toBe("NONE")
    expect(dup.response.memberEpoch).toBe(epoch)
    expect(shards(dup.response)).toEqual([0, 1])
    expect(dup.records).toEqual([])
    expect(dup.fences).toEqual([])
    expect(h.snapshot()).toEqual(before)
    expect(h.state.members.has("a")).toBe(true)
  })

  it("... and across a failover: the seq recorded with the REVOKED's commit survives the load", () => {
    const h = new Harness()
    const a = new SimMember("a")
    settle(h, a)
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response)
    const tokenOf = (s: number) => h.state.current[s]!.token
    const base = {
      memberId: "a",
      incarnation: 1,
      memberEpoch: a.epoch,
      assignmentEpoch: h.state.assignmentEpoch,
      ownedShards: [0, 1],
    }
    const n = request({
      ...base,
      seq: 200,
      revokingShards: [2, 3].map((shard) => ({
        shard,
        state: "REVOKING" as const,
        token: tokenOf(shard),
      })),
    })
    const n1 = request({
      ...base,
      seq: 201,
      revokingShards: [2, 3].map((shard) => ({
        shard,
        state: "REVOKED" as const,
        token: tokenOf(shard),
      })),
    })
    h.hb(n)
    h.hb(n1)
    expect(h.stored().members.find((m) => m.memberId === "a")?.lastSeq).toBe(201)
    h.failover(7)
    settle(h, b)
    const dup = h.hb(n)
    expect(dup.response.errorCode).toBe("NONE")
    expect(dup.records).toEqual([])
    expect(h.state.members.has("a")).toBe(true)
    expect(shards(h.hb(b.request()).response)).toEqual([2, 3])
  })

  it("finding F2 (coordinator side): a duplicate handled after a newer request grants nothing", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    settle(h, a, b)
    const n = a.request()
    a.onResponse(h.hb(n).response)
    const n1 = a.request()
    a.onResponse(h.hb(n1).response) // steady: nothing recorded, only the volatile seq
    // b leaves: its shards are targeted to a, free, waiting for a's next heartbeat
    h.hb(b.leaveRequest())
    expect(h.notices).toContain("a")
    const dup = h.hb(n)
    expect(dup.records).toEqual([])
    expect(dup.fences).toEqual([])
    expect(shards(dup.response)).toEqual([...a.owned.keys()].sort())
    // a's next real request is granted them
    const next = h.hb(a.request())
    expect(shards(next.response)).toEqual([0, 1, 2, 3])
  })

  it("a join of a removed process older than its removal is stale (no phantom lifecycle)", () => {
    const h = new Harness()
    const j1 = request({ memberId: "a", seq: 1 })
    h.hb(j1)
    const a = h.state.members.get("a")!
    // an invalid report (REVOKING a shard that was not revoked) fences a at seq 5
    const fenced = h.hb(
      request({
        memberId: "a",
        seq: 5,
        memberEpoch: a.memberEpoch,
        assignmentEpoch: h.state.assignmentEpoch,
        ownedShards: [1, 2, 3],
        revokingShards: [{ shard: 0, state: "REVOKING", token: h.state.current[0]!.token }],
      }),
    )
    expect(fenced.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(h.state.members.has("a")).toBe(false)
    // a copy of its first join, delayed in the network past the removal
    const before = h.snapshot()
    const late = h.hb(j1)
    expect(late.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(late.response.errorMessage).toContain("stale join")
    expect(late.records).toEqual([])
    expect(h.snapshot()).toEqual(before)
    // a join newer than its removal is a rejoin as usual, and proves it stopped
    const rejoin = h.hb(request({ memberId: "a", seq: 9 }))
    expect(rejoin.response.errorCode).toBe("NONE")
    expect(shards(rejoin.response)).toEqual([0, 1, 2, 3])
  })
})

describe("rule 24: a process is (incarnation, instance)", () => {
  it("issue 20 finding 4: a second process with the same incarnation and seq is not taken for a resend of the first's join", () => {
    const h = new Harness(config({ shardCount: 2 }))
    const first = h.hb(request({ memberId: "pod-a", incarnation: 5, instance: "aaaa", seq: 1 }))
    expect(shards(first.response)).toEqual([0, 1])
    const second = h.hb(request({ memberId: "pod-a", incarnation: 5, instance: "bbbb", seq: 1 }))
    expect(second.response.errorCode).toBe("NONE")
    // a new lifecycle, not the first's answer again: a new epoch, and the
    // first's shards held until it stops (it may be reading them)
    expect(second.response.memberEpoch).toBeGreaterThan(first.response.memberEpoch)
    expect(shards(second.response)).toEqual([])
    expect(second.response.pending).toEqual([0, 1])
    expect(h.state.members.get("pod-a")?.instance).toBe("bbbb")
    // the first is the older process now (same incarnation, lower instance)
    const old = h.hb(
      request({
        memberId: "pod-a",
        incarnation: 5,
        instance: "aaaa",
        seq: 2,
        memberEpoch: first.response.memberEpoch,
        ownedShards: [0, 1],
      }),
    )
    expect(old.response.errorCode).toBe("FENCED_INSTANCE_ID")
    expect(old.records).toEqual([])
  })

  it("the order is (incarnation, instance): a lower instance of the same incarnation cannot replace a higher one", () => {
    const h = new Harness(config({ shardCount: 2 }))
    h.hb(request({ memberId: "pod-a", incarnation: 5, instance: "bbbb", seq: 1 }))
    const lower = h.hb(request({ memberId: "pod-a", incarnation: 5, instance: "aaaa", seq: 1 }))
    expect(lower.response.errorCode).toBe("FENCED_INSTANCE_ID")
    expect(h.state.members.get("pod-a")?.instance).toBe("bbbb")
  })

  it("issue 20 finding 2: a retried leave of a newer process, whose first answer was lost, does not remove the older process that registered since", () => {
    const h = new Harness()
    const p1 = new SimMember("pod-a", undefined, 100)
    settle(h, p1)
    const p2 = new SimMember("pod-a", undefined, 200)
    settle(h, p2)
    // p1 (superseded) stops, proves it, and waits as a standby
    p1.reset()
    expect(h.hb(p1.request()).response.errorCode).toBe("FENCED_INSTANCE_ID")
    settle(h, p2)
    const leave = p2.leaveRequest()
    h.hb(leave) // its answer is lost
    expect(h.state.members.has("pod-a")).toBe(false)
    // the older process registers again
    settle(h, p1)
    expect(h.state.members.get("pod-a")?.incarnation).toBe(100)
    const owned = [...p1.owned.keys()]
    expect(owned).toEqual([0, 1, 2, 3])
    // the retried leave (a new seq: the member resends with its next request)
    const retried = h.hb({ ...leave, seq: leave.seq! + 1 })
    expect(retried.response.errorCode).toBe("NONE")
    expect(retried.response.memberEpoch).toBe(-1)
    expect(h.state.members.get("pod-a")?.incarnation).toBe(100)
    expect(h.state.current.every((o) => o?.memberId === "pod-a")).toBe(true)
    expect(h.hb(p1.request()).response.errorCode).toBe("NONE")
  })
})
