/**
 * docs/protocol.md rule 30 (issue 34): an owner token that vanished
 * (deleted, evicted) is written again for its owner. Every fenced call
 * refuses a missing token (rule 26), and a steady group writes no token by
 * itself, so the shard would wait for its next move or a takeover. The
 * owner reports it (`missingTokens`); the coordinator re-writes the SAME
 * token for the shard's current owner under that grant, as a fence (before
 * the answer), with no record and no new grant. Anything else is stale and
 * changes nothing.
 */
import { describe, expect, it } from "vitest"
import { MemberMachine } from "../../src/index.js"
import { Harness, SimMember, shards } from "./harness.js"

/** A steady group of one member `a` owning every shard (4), and its tokens. */
const steady = () => {
  const h = new Harness()
  const a = new SimMember("a")
  a.onResponse(h.hb(a.request()).response)
  a.onResponse(h.hb(a.request()).response)
  expect([...a.owned.keys()].sort()).toEqual([0, 1, 2, 3])
  return { h, a }
}

describe("rule 30: a missing owner token is written again for its owner", () => {
  it("the owner's report: the same token is re-fenced before the answer, with no record and no grant", () => {
    const { h, a } = steady()
    const token = a.owned.get(1)!
    h.storageTokens.delete(1) // evicted
    const epochs = [h.state.groupEpoch, h.state.assignmentEpoch]
    const r = h.hb({ ...a.request(), missingTokens: [{ shard: 1, token }] })
    expect(r.response.errorCode).toBe("NONE")
    expect(r.records).toEqual([])
    expect(r.fences).toEqual([{ shard: 1, token, memberId: "a", restore: true }])
    expect(h.storageTokens.get(1)).toBe(token)
    // nothing moved: same grants, same epochs, the same owner
    expect(shards(r.response)).toEqual([0, 1, 2, 3])
    expect(r.response.assigned.find((g) => g.shard === 1)?.token).toBe(token)
    expect([h.state.groupEpoch, h.state.assignmentEpoch]).toEqual(epochs)
    expect(h.owner(1)).toBe("a")
  })

  it("a report about another grant (an older token) writes nothing", () => {
    const { h, a } = steady()
    const token = a.owned.get(2)!
    const r = h.hb({ ...a.request(), missingTokens: [{ shard: 2, token: token - 1 }] })
    expect(r.response.errorCode).toBe("NONE")
    expect(r.fences).toEqual([])
  })

  it("a shard being revoked from its reporter: its current grant's token is still its own, written again", () => {
    const { h, a } = steady()
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response) // a's 2 and 3 are being revoked
    expect(h.state.revocations[2]?.memberId).toBe("a")
    const token = a.owned.get(2)!
    h.storageTokens.delete(2)
    const r = h.hb({ ...a.request(), missingTokens: [{ shard: 2, token }] })
    expect(r.fences).toEqual([{ shard: 2, token, memberId: "a", restore: true }])
    // never a grant to b while a holds it
    expect(h.owner(2)).toBe("a")
  })

  it("a report of a shard the reporter does not list as owned is INVALID_REQUEST, and so is one listed twice", () => {
    const { h, a } = steady()
    const token = a.owned.get(1)!
    const req = a.request()
    const notOwned = h.hb({
      ...req,
      ownedShards: [0, 2, 3],
      missingTokens: [{ shard: 1, token }],
    })
    expect(notOwned.response.errorCode).toBe("INVALID_REQUEST")
    expect(notOwned.response.errorMessage).toContain("not owned")
    expect(notOwned.fences).toEqual([])
    const twice = h.hb({
      ...a.request(),
      missingTokens: [
        { shard: 1, token },
        { shard: 1, token },
      ],
    })
    expect(twice.response.errorCode).toBe("INVALID_REQUEST")
    expect(twice.fences).toEqual([])
  })
})

describe("rule 30: the member reports a missing token until its loop reads again", () => {
  const config: MemberMachine.MemberConfig = {
    group: "g",
    stream: "orders",
    memberId: "pod-1-m0",
    incarnation: 1,
    memberInfo: { consumerName: "pod-1-m0", host: "10.0.0.1" },
    safetyMarginMs: 2_000,
    heartbeatIntervalMs: 1_000,
    retryBackoffInitialMs: 100,
    retryBackoffMaxMs: 1_000,
  }
  const answer = (state: MemberMachine.MemberState, now: number) => {
    const { seq } = MemberMachine.nextRequest(state, now)
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq,
      now,
      response: {
        errorCode: "NONE",
        memberId: config.memberId,
        memberEpoch: 1,
        assignmentEpoch: 1,
        assigned: [
          { shard: 0, token: 7 },
          { shard: 1, token: 8 },
        ],
        pending: [],
        heartbeatIntervalMs: 1_000,
        sessionTimeoutMs: 10_000,
        rebalanceTimeoutMs: 10_000,
      },
    })
  }
  /** Reads shards 0 and 1; its ownership report answered: nothing outstanding. */
  const reading = () => {
    const state = MemberMachine.make(config, 0)
    answer(state, 0)
    for (const shard of [0, 1]) MemberMachine.step(state, { _tag: "ShardStarted", shard })
    answer(state, 10)
    return state
  }

  it("ShardTokenMissing asks for a heartbeat now and the request carries the shard with its token, until ShardTokenBack", () => {
    const state = reading()
    expect(MemberMachine.buildRequest(state).missingTokens).toBeUndefined()
    const out = MemberMachine.step(state, { _tag: "ShardTokenMissing", shard: 1, token: 8 })
    expect(out.map((c) => c._tag)).toContain("SendHeartbeat")
    expect(MemberMachine.buildRequest(state).missingTokens).toEqual([{ shard: 1, token: 8 }])
    // said again by the loop's next refused call: no second send
    expect(MemberMachine.step(state, { _tag: "ShardTokenMissing", shard: 1, token: 8 })).toEqual([])
    MemberMachine.step(state, { _tag: "ShardTokenBack", shard: 1 })
    expect(MemberMachine.buildRequest(state).missingTokens).toBeUndefined()
  })

  it("a report under a token the member does not read with is ignored", () => {
    const state = reading()
    expect(MemberMachine.step(state, { _tag: "ShardTokenMissing", shard: 1, token: 3 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "ShardTokenMissing", shard: 5, token: 3 })).toEqual([])
    expect(MemberMachine.buildRequest(state).missingTokens).toBeUndefined()
  })
})
