/**
 * docs/protocol.md rule 17: a grant whose answer was lost, then revoked before
 * the member heard of it. Found by the member runtime's rolling-restart
 * process test: the coordinator that granted a shard stopped before its answer
 * went out, the next leader moved the shard on, and the member, which never
 * read it, had nothing to report REVOKED; the revocation timed out and fenced
 * a healthy member. Real member machines against the coordinator shell.
 */
import { describe, expect, it } from "vitest"
import { type HeartbeatResponse, MemberMachine } from "../../src/index.js"
import { config, Harness } from "./harness.js"

const memberConfig = (memberId: string): MemberMachine.MemberConfig => ({
  group: "g",
  stream: "orders",
  memberId,
  incarnation: 1,
  memberInfo: { consumerName: memberId, host: "h" },
  safetyMarginMs: 2_000,
})

/** A member machine whose commands are carried out at once (loops start and drain instantly). */
const machine = (h: Harness, memberId: string) => {
  const state = MemberMachine.make(memberConfig(memberId), h.now)
  const run = (commands: ReadonlyArray<MemberMachine.MemberCommand>) => {
    for (const c of commands) {
      if (c._tag === "StartShard")
        run(MemberMachine.step(state, { _tag: "ShardStarted", shard: c.shard }))
      if (c._tag === "StopShard")
        run(MemberMachine.step(state, { _tag: "ShardDrained", shard: c.shard }))
    }
  }
  return {
    state,
    /** One heartbeat; `lose` drops its answer after the coordinator handled (and committed) it. */
    heartbeat(lose = false): HeartbeatResponse {
      const { seq, request } = MemberMachine.nextRequest(state, h.now)
      const { response } = h.hb(request)
      run(
        MemberMachine.step(
          state,
          lose
            ? { _tag: "HeartbeatFailed", seq, now: h.now }
            : { _tag: "ResponseReceived", seq, response, now: h.now },
        ),
      )
      return response
    },
    /** Apply an event and carry out its commands. */
    step: (event: MemberMachine.MemberEvent) => run(MemberMachine.step(state, event)),
    owned: () => MemberMachine.ownedShards(state),
  }
}

/** a owns 0..3 with c gone; the answer granting c's former shards to a is lost. */
const lostGrant = () => {
  const h = new Harness(config({ shardCount: 4, rebalanceTimeoutMs: 10_000 }))
  const a = machine(h, "a")
  const c = machine(h, "c")
  a.heartbeat()
  c.heartbeat()
  for (let i = 0; i < 4; i++) {
    h.now += 100
    a.heartbeat()
    c.heartbeat()
  }
  expect(a.owned()).toHaveLength(2)
  expect(c.owned()).toHaveLength(2)
  const cShards = c.owned()
  c.step({ _tag: "LeaveRequested", now: h.now })
  for (let i = 0; i < 6 && h.state.members.has("c"); i++) {
    h.now += 100
    c.heartbeat()
  }
  expect(h.state.members.has("c")).toBe(false)
  h.now += 100
  // the coordinator grants c's shards to a, commits, and the answer is lost
  const lost = a.heartbeat(true)
  expect(lost.assigned.map((g) => g.shard)).toEqual(expect.arrayContaining(cShards))
  expect(a.owned()).toHaveLength(2)
  return { h, a, cShards }
}

describe("a lost grant, then revoked (docs/protocol.md rule 17)", () => {
  it("the answer lists the revocation; the member reports it REVOKED at once; nobody is fenced", () => {
    const { h, a, cShards } = lostGrant()
    const b = machine(h, "b")
    h.now += 100
    b.heartbeat()
    // b's join moved shards off a, among them some a never heard it was granted
    const revokedFromA = [...(h.state.revokingFrom.get("a") ?? [])]
    const neverHeard = revokedFromA.filter((s) => cShards.includes(s))
    expect(neverHeard.length).toBeGreaterThan(0)
    h.now += 100
    const answer = a.heartbeat()
    expect(answer.revoking?.map((g) => g.shard)).toEqual(expect.arrayContaining(neverHeard))
    for (const g of answer.revoking ?? []) expect(g.token).toBe(h.state.current[g.shard]?.token)
    // the next request reports each of them REVOKED with the revoked grant's token
    h.now += 100
    const { request } = MemberMachine.nextRequest(a.state, h.now)
    for (const s of neverHeard)
      expect(request.revokingShards).toContainEqual({
        shard: s,
        state: "REVOKED",
        token: h.state.current[s]!.token,
      })
    a.state.inFlightSeq = 0 // that request is only inspected; send a real one
    a.heartbeat()
    for (const s of neverHeard) expect(h.owner(s)).not.toBe("a")
    h.now += 100
    b.heartbeat()
    h.now += 100
    b.heartbeat()
    for (const s of neverHeard) expect(h.owner(s)).toBe("b")
    // past the revoke timeout nobody is fenced
    for (let i = 0; i < 40; i++) {
      h.now += 300
      a.heartbeat()
      b.heartbeat()
    }
    const kinds = h.store.auditLog("g").map((e) => e.kind)
    expect(kinds).not.toContain("MemberFenced")
    expect(a.state.lifecycle).toBe("active")
    expect(a.owned().length + b.owned().length).toBe(4)
  })

  it("the lost answer arriving after that is stale: the shard is never started", () => {
    const { h, a } = lostGrant()
    const { seq, request } = MemberMachine.nextRequest(a.state, h.now)
    const late = h.hb(request).response // answered, then delayed
    MemberMachine.step(a.state, { _tag: "HeartbeatFailed", seq, now: h.now })
    const b = machine(h, "b")
    h.now += 100
    b.heartbeat()
    h.now += 100
    a.heartbeat()
    h.now += 100
    a.heartbeat()
    const held = new Set(a.owned())
    const commands = MemberMachine.step(a.state, {
      _tag: "ResponseReceived",
      seq,
      response: late,
      now: h.now,
    })
    expect(commands.filter((c) => c._tag === "StartShard")).toEqual([])
    expect(new Set(a.owned())).toEqual(held)
  })

  it("a shard the member holds is not reported REVOKED before it drained", () => {
    const h = new Harness(config({ shardCount: 2 }))
    const a = MemberMachine.make(memberConfig("a"), 0)
    const first = MemberMachine.nextRequest(a, 0)
    MemberMachine.step(a, {
      _tag: "ResponseReceived",
      seq: first.seq,
      response: h.hb(first.request).response,
      now: 0,
    })
    for (const shard of [0, 1]) MemberMachine.step(a, { _tag: "ShardStarted", shard })
    const token = a.shards.get(1)!.token
    const second = MemberMachine.nextRequest(a, 10)
    const commands = MemberMachine.step(a, {
      _tag: "ResponseReceived",
      seq: second.seq,
      now: 10,
      response: {
        ...h.hb(second.request).response,
        assigned: [{ shard: 0, token: a.shards.get(0)!.token }],
        revoking: [{ shard: 1, token }],
      },
    })
    expect(commands).toContainEqual({ _tag: "StopShard", shard: 1 })
    expect(MemberMachine.revokingShards(a)).toEqual([{ shard: 1, state: "REVOKING", token }])
  })
})
