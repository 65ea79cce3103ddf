/**
 * docs/protocol.md rule 19 (issue 19, finding 4): a fence, a revoke or
 * confirmation timeout, or the replacement by a newer process frees a shard
 * for a new owner only once the old holder's lease has provably ended (its
 * session deadline) or that very process proved it stopped (a newer join, a
 * leave, a superseded join), whatever the configured timeouts. Storage
 * fencing is the last line, never the plan. Real member machines where the
 * member's own lease matters.
 */
import { describe, expect, it } from "vitest"
import { MemberMachine } from "../../src/index.js"
import { config, Harness, request, SimMember, shards } from "./harness.js"

const settle = (h: Harness, ...members: Array<SimMember>) => {
  for (let i = 0; i < 4; i++) for (const m of members) m.onResponse(h.hb(m.request()).response)
}

const heldFor = (h: Harness, memberId: string) =>
  h.state.held.flatMap((x, s) => (x?.memberId === memberId ? [s] : []))

describe("rule 19: held shards", () => {
  it("issue 19 finding 4: rebalanceTimeoutMs (10 s) below the session (30 s): a member cut off while revoking keeps its shards held until its own lease has ended", () => {
    const h = new Harness(config({ sessionTimeoutMs: 30_000, rebalanceTimeoutMs: 10_000 }))
    // a is a real member machine: its lease is what must have ended
    const a = MemberMachine.make(
      {
        group: "g",
        stream: "orders",
        memberId: "a",
        incarnation: 1,
        memberInfo: { consumerName: "a", host: "h" },
      },
      0,
    )
    const send = () => {
      const { seq, request: req } = MemberMachine.nextRequest(a, h.now)
      const commands = MemberMachine.step(a, {
        _tag: "ResponseReceived",
        seq,
        response: h.hb(req).response,
        now: h.now,
      })
      for (const c of commands)
        if (c._tag === "StartShard") MemberMachine.step(a, { _tag: "ShardStarted", shard: c.shard })
    }
    send()
    expect(MemberMachine.ownedShards(a)).toEqual([0, 1, 2, 3])
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response) // 2, 3 revoked from a
    // a is cut off from here on: it never hears of the revocation
    h.advance(10_001)
    expect(h.state.members.has("a")).toBe(false) // fenced at the revoke timeout
    expect(heldFor(h, "a")).toEqual([0, 1, 2, 3])
    // b is granted nothing while a may still read under its lease
    const lease = MemberMachine.leaseExpiresAt(a)!
    expect(lease).toBe(24_000)
    for (let t = 12_000; t < 30_000; t += 3_000) {
      h.advance(t - h.now)
      const r = h.hb(b.request())
      b.onResponse(r.response)
      expect(shards(r.response), `at ${t} ms`).toEqual([])
      // whenever b could read, a's lease (by its own clock) has ended
      expect(MemberMachine.leaseValid(a, h.now) && b.owned.size > 0).toBe(false)
    }
    h.advance(30_000 - h.now)
    expect(heldFor(h, "a")).toEqual([])
    settle(h, b)
    expect([...b.owned.keys()].sort()).toEqual([0, 1, 2, 3])
    expect(MemberMachine.leaseValid(a, h.now)).toBe(false)
  })

  it("an invalid report fences: held; the fenced process's rejoin proves it stopped and releases them at once", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    settle(h, a, b)
    const aShards = [...a.owned.keys()].sort()
    // a claims one of b's shards: a violation
    const bShard = [...b.owned.keys()][0]!
    const r = h.hb({ ...a.request(), ownedShards: [...aShards, bShard].sort() })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(heldFor(h, "a")).toEqual(aShards)
    settle(h, b)
    // b is the target of a's shards now, but they are held for a
    expect(aShards.every((s) => h.state.target[s] === "b")).toBe(true)
    expect(aShards.some((s) => b.owned.has(s))).toBe(false)
    // a drops everything and rejoins: released, and the sticky target gives them back to a
    a.reset()
    const rejoin = h.hb(a.request())
    expect(rejoin.response.errorCode).toBe("NONE")
    expect(heldFor(h, "a")).toEqual([])
  })

  it("a rejoin whose seq is not above the held lifecycle's join releases nothing (a delayed copy)", () => {
    const h = new Harness()
    const first = request({ memberId: "a", seq: 10 })
    h.hb(first)
    const a = h.state.members.get("a")!
    h.hb(
      request({
        memberId: "a",
        seq: 11,
        memberEpoch: a.memberEpoch,
        assignmentEpoch: h.state.assignmentEpoch,
        ownedShards: [1, 2, 3],
        revokingShards: [{ shard: 0, state: "REVOKING", token: h.state.current[0]!.token }],
      }),
    )
    expect(heldFor(h, "a")).toEqual([0, 1, 2, 3])
    // the departed check refuses the delayed copy outright...
    expect(h.hb(first).response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(heldFor(h, "a")).toEqual([0, 1, 2, 3])
    // ... and after a failover (the departed process is forgotten) the held
    // lifecycle's own join seq still refuses it as proof
    h.failover(3)
    h.hb(first)
    expect(h.state.held.filter((x) => x !== null).map((x) => x!.joinSeq)).toEqual([10, 10, 10, 10])
  })

  it("a grant never confirmed: the member is fenced after the revoke timeout; its shards are held until its session ends", () => {
    const h = new Harness(config({ rebalanceTimeoutMs: 10_000 }))
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response) // granted 0..3, never reports them owned
    h.advance(10_001)
    expect(h.state.members.has("a")).toBe(false)
    expect(heldFor(h, "a")).toEqual([0, 1, 2, 3])
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response)
    expect(b.owned.size).toBe(0)
    h.advance(30_000 - h.now)
    settle(h, b)
    expect(b.owned.size).toBe(4)
  })

  it("held shards survive a failover: the new leader holds them for a whole session from its load", () => {
    const h = new Harness(config({ rebalanceTimeoutMs: 10_000 }))
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response)
    h.advance(10_001) // a fenced, held until t=30s
    h.advance(5_000)
    h.failover(2)
    expect(heldFor(h, "a")).toEqual([0, 1, 2, 3])
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response)
    // the old leader would have released at 30 s; the new one cannot know
    // when a's last answer went out, so it waits a session from its load
    h.advance(30_000 - h.now)
    settle(h, b)
    expect(b.owned.size).toBe(0)
    h.advance(15_001 + 30_000 - h.now)
    settle(h, b)
    expect(b.owned.size).toBe(4)
  })

  it("a leave (epoch -1) of the held process releases its shards: it sends one only once everything stopped", () => {
    const h = new Harness(config({ rebalanceTimeoutMs: 10_000 }))
    const a = new SimMember("a")
    settle(h, a)
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response)
    h.advance(10_001) // a never reports REVOKED: fenced, held
    expect(heldFor(h, "a")).toEqual([0, 1, 2, 3])
    const left = h.hb(a.leaveRequest())
    expect(left.response.memberEpoch).toBe(-1)
    expect(heldFor(h, "a")).toEqual([])
    settle(h, b)
    expect(b.owned.size).toBe(4)
  })
})

describe("rule 23: a metadata rewind", () => {
  it("issue 19 finding 5: storage holds tokens above the state's: the shards are held one session, their recorded owners fenced, audited; the next grant goes above storage and the group recovers", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    settle(h, a, b)
    const recorded = [...h.state.tokens]
    // the lost commits granted shard 0 (a's) and 3 (b's) again, higher
    const stored = [
      { shard: 0, token: recorded[0]! + 50 },
      { shard: 1, token: recorded[1]! },
      { shard: 3, token: recorded[3]! + 70 },
    ]
    const step = h.failoverWith(9, stored)
    expect(step).toBeDefined()
    const audit = h.store.auditLog("g").find((e) => e.kind === "MetadataRewindDetected")
    expect(audit?.shards).toEqual([0, 3])
    // both recorded owners are fenced; every shard they held is held one session
    expect(h.state.members.has("a")).toBe(false)
    expect(h.state.members.has("b")).toBe(false)
    expect(h.state.held.every((x) => x !== null)).toBe(true)
    expect(h.state.held[0]?.reason).toBe("rewind")
    expect(h.state.tokens[0]).toBe(recorded[0]! + 50)
    // they rejoin; the rewind holds are released only by time
    a.reset()
    b.reset()
    settle(h, a, b)
    expect(a.owned.has(0) || b.owned.has(0)).toBe(false)
    expect(a.owned.has(3) || b.owned.has(3)).toBe(false)
    h.advance(30_000)
    settle(h, a, b)
    const owners = [0, 1, 2, 3].map((s) => h.state.current[s]?.memberId ?? null)
    expect(owners.every((o) => o !== null)).toBe(true)
    expect(h.state.current[0]!.token).toBeGreaterThan(recorded[0]! + 50)
    expect(h.state.current[3]!.token).toBeGreaterThan(recorded[3]! + 70)
  })

  it("a rewind with a shard whose token storage lost (evicted): that shard is held too, its next grant above every token storage holds (docs/simulator.md, swarm 9071)", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    settle(h, a, b)
    const recorded = [...h.state.tokens]
    const ownerOf2 = h.owner(2)
    // the lost commits granted shard 0 again, higher; shard 2's token, maybe
    // from those commits too, was evicted: storage reads none for it
    const stored = [
      { shard: 0, token: recorded[0]! + 50 },
      { shard: 1, token: recorded[1]! },
      { shard: 2, token: 0 },
      { shard: 3, token: recorded[3]! },
    ]
    expect(h.failoverWith(9, stored)).toBeDefined()
    const audit = h.store.auditLog("g").find((e) => e.kind === "MetadataRewindDetected")
    expect(audit?.shards).toEqual([0, 2])
    // not re-fenced with the state's token: held, its recorded owner fenced
    expect(h.state.current[2]).toBeNull()
    expect(h.state.held[2]?.reason).toBe("rewind")
    expect(h.state.members.has(ownerOf2!)).toBe(false)
    expect(h.state.tokens[2]).toBe(recorded[0]! + 50)
    h.advance(30_000)
    a.reset()
    b.reset()
    settle(h, a, b)
    expect(h.state.current[2]!.token).toBeGreaterThan(recorded[0]! + 50)
  })

  it("a token storage lost without a rewind is no rewind: rule 30 writes it again", () => {
    const h = new Harness()
    const a = new SimMember("a")
    settle(h, a)
    const stored = h.state.tokens.map((token, shard) => ({ shard, token: shard === 1 ? 0 : token }))
    expect(h.failoverWith(4, stored)).toBeUndefined()
    expect(h.state.members.has("a")).toBe(true)
    expect(h.owner(1)).toBe("a")
  })

  it("storage at or below the state's tokens: nothing to do", () => {
    const h = new Harness()
    const a = new SimMember("a")
    settle(h, a)
    const stored = h.state.tokens.map((token, shard) => ({ shard, token }))
    expect(h.failoverWith(4, stored)).toBeUndefined()
    expect(h.state.members.has("a")).toBe(true)
  })
})
