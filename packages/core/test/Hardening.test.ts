/**
 * Regression tests for the protocol-hardening review: one `describe` per
 * finding, each written against the public API of `Coordinator` (through the
 * test harness, which applies results as a host does) and `MemberMachine`.
 * docs/protocol.md states the rules they pin down.
 */
import { assert, it as effectIt } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Schema, Scope } from "effect"
import { describe, expect, it } from "vitest"
import {
  Coordinator,
  CoordinatorLease,
  GroupConfig,
  HeartbeatRequest,
  type HeartbeatResponse,
  InvalidMemberConfig,
  MAX_MEMBER_WEIGHT,
  MemberMachine,
  MIN_MEMBER_WEIGHT,
  makeCoordinatorHost,
  OwnerFence,
  ShardStreams,
  Store,
} from "../src/index.js"
import { Store as TestingStore } from "../src/testing.js"
import { config, Harness, info, request, SimMember, shards } from "./coordinator/harness.js"

const revokedFrom = (h: Harness): Array<string | null> =>
  h.state.revocations.map((r) => r?.memberId ?? null)

/** Heartbeat `m` until its answer stops changing what it owns (a few rounds). */
const settle = (h: Harness, ...members: Array<SimMember>) => {
  for (let i = 0; i < 4; i++) for (const m of members) m.onResponse(h.hb(m.request()).response)
}

describe("finding 1: two live processes with one member id", () => {
  it("the newer incarnation's join fences the older: its shards are held until the older proves it stopped; then new tokens", () => {
    const h = new Harness()
    const p1 = new SimMember("pod-a", undefined, 100)
    settle(h, p1)
    expect([...p1.owned.keys()]).toEqual([0, 1, 2, 3])
    const oldTokens = new Map(p1.owned)

    const p2 = new SimMember("pod-a", undefined, 200)
    const join = h.hb(p2.request())
    expect(join.response.errorCode).toBe("NONE")
    expect(join.response.memberEpoch).toBeGreaterThan(p1.epoch)
    // rule 19: the older process does not know yet and may still read: held, not granted
    expect(shards(join.response)).toEqual([])
    expect(join.response.pending).toEqual([0, 1, 2, 3])
    expect(h.state.held.map((x) => x?.incarnation)).toEqual([100, 100, 100, 100])
    p2.onResponse(join.response)
    expect(h.state.members.get("pod-a")?.incarnation).toBe(200)

    const before = h.snapshot()
    for (const stale of [
      p1.request(), // its steady heartbeat
      { ...p1.request(), memberEpoch: p2.epoch }, // with the new epoch guessed
    ]) {
      const r = h.hb(stale)
      expect(r.response.errorCode).toBe("FENCED_INSTANCE_ID")
      expect(r.records).toEqual([])
      expect(r.fences).toEqual([])
    }
    expect(h.snapshot()).toEqual(before)
    expect(shards(h.hb(p2.request()).response)).toEqual([])

    // the older process dropped everything and joins (as a standby): proof it stopped
    p1.reset()
    const proof = h.hb(p1.request())
    expect(proof.response.errorCode).toBe("FENCED_INSTANCE_ID")
    expect(h.state.held.every((x) => x === null)).toBe(true)
    expect(proof.notices).toEqual(["pod-a"])
    const granted = h.hb(p2.request())
    expect(shards(granted.response)).toEqual([0, 1, 2, 3])
    // the storage refuses the old process: every token moved above its own
    for (const [shard, token] of oldTokens)
      expect(h.storageTokens.get(shard)).toBeGreaterThan(token)
  })

  it("a replaced process that never answers: its shards are held until its session deadline", () => {
    const h = new Harness()
    const p1 = new SimMember("pod-a", undefined, 100)
    settle(h, p1) // last answered at t=0: its lease ends before t=30s
    h.now = 5_000
    const p2 = new SimMember("pod-a", undefined, 200)
    p2.onResponse(h.hb(p2.request()).response)
    expect(h.state.held.filter((x) => x !== null)).toHaveLength(4)
    h.advance(24_999) // t = 29,999: the old process's session has not ended
    expect(shards(h.hb(p2.request()).response)).toEqual([])
    h.advance(1)
    expect(h.state.held.every((x) => x === null)).toBe(true)
    expect(h.notices).toContain("pod-a")
    expect(shards(h.hb(p2.request()).response)).toEqual([0, 1, 2, 3])
    // a delayed leave of the old process releases nothing more and removes nobody
    const late = h.hb(p1.leaveRequest())
    expect(late.response.errorCode).toBe("FENCED_INSTANCE_ID")
    expect(h.state.members.get("pod-a")?.incarnation).toBe(200)
  })

  it("the older process waits as a standby: it joins only once the newer one left", () => {
    const h = new Harness()
    const p2 = new SimMember("pod-a", undefined, 200)
    settle(h, p2)
    const p1 = new SimMember("pod-a", undefined, 100)
    expect(h.hb(p1.request()).response.errorCode).toBe("FENCED_INSTANCE_ID")
    h.hb(p2.leaveRequest())
    const r = h.hb(p1.request())
    expect(r.response.errorCode).toBe("NONE")
    expect(shards(r.response)).toEqual([0, 1, 2, 3])
  })

  it("a newer incarnation that has not joined must join first (epoch 0)", () => {
    const h = new Harness()
    const p1 = new SimMember("pod-a", undefined, 100)
    settle(h, p1)
    const r = h.hb({ ...p1.request(), incarnation: 200 })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(r.records).toEqual([])
  })

  it("the member machine drops everything on FENCED_INSTANCE_ID, joins once its loops stopped (the proof that frees its held shards), then only at the slowest retry pace", () => {
    const state = MemberMachine.make(memberConfig, 0)
    answer(state, okResponse({ assigned: grants(0, 1) }), 0)
    const { seq } = MemberMachine.nextRequest(state, 100)
    const commands = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq,
      response: okResponse({ errorCode: "FENCED_INSTANCE_ID", errorMessage: "newer process" }),
      now: 110,
    })
    expect(commands.map((c) => c._tag)).toEqual(["StopAllShards", "Superseded"])
    expect(commands[0]).toEqual({ _tag: "StopAllShards", reason: "superseded" })
    expect(MemberMachine.ownedShards(state)).toEqual([])
    // nothing is sent while a stopped loop still runs
    expect(MemberMachine.step(state, { _tag: "Tick", now: 120 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
    const proof = MemberMachine.nextRequest(state, 130)
    expect(proof.request.memberEpoch).toBe(0)
    expect(proof.request.ownedShards).toEqual([])
    // still superseded: now the slowest pace
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: proof.seq,
      response: okResponse({ errorCode: "FENCED_INSTANCE_ID", errorMessage: "newer process" }),
      now: 140,
    })
    expect(MemberMachine.step(state, { _tag: "Tick", now: 140 + 999 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "Tick", now: 140 + 1_000 })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(0)
  })
})

describe("finding 2: a REVOKED sent before a self-fence cannot complete a later revocation", () => {
  it("across a self-fence and rejoin: the delayed REVOKED carries the old lifecycle's epoch and changes nothing", () => {
    const h = new Harness()
    const a = new SimMember("a")
    settle(h, a)
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response) // 2, 3 are revoked from a
    a.onResponse(h.hb(a.request()).response)
    const delayed = a.request() // REVOKED 2, 3 ... delayed in the network
    expect(delayed.revokingShards?.map((r) => r.state)).toEqual(["REVOKED", "REVOKED"])
    // a self-fences, rejoins; b leaves, so 2, 3 come back to a; c joins, so they are revoked again
    a.reset()
    settle(h, a)
    h.hb(b.leaveRequest())
    settle(h, a)
    expect([...a.owned.keys()]).toEqual([0, 1, 2, 3])
    const c = new SimMember("c")
    c.onResponse(h.hb(c.request()).response)
    const revoking = h.state.revocations.flatMap((r, s) => (r?.memberId === "a" ? [s] : []))
    expect(revoking.length).toBeGreaterThan(0)
    const before = h.snapshot()
    const late = h.hb(delayed)
    expect(late.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(late.records).toEqual([])
    expect(h.snapshot()).toEqual(before)
    for (const s of revoking) expect(h.owner(s)).toBe("a")
  })

  it("within one lifecycle: a REVOKED of an earlier grant of the shard is ignored by its token", () => {
    const { h, a, c, shard, old } = regrantedThenRevokedAgain()
    const before = h.snapshot()
    const replay = h.hb(old) // REVOKED with the first grant's token, same epoch
    expect(replay.response.errorCode).toBe("NONE")
    expect(replay.records).toEqual([]) // nothing accepted, nobody fenced
    expect(h.snapshot()).toEqual(before)
    expect(h.owner(shard)).toBe("a")
    expect(revokedFrom(h)[shard]).toBe("a")
    // the shard reaches c only after a drains the current grant
    expect(shards(h.hb(c.request()).response)).not.toContain(shard)
    a.onResponse(h.hb(a.request()).response)
    a.onResponse(h.hb(a.request()).response) // REVOKED with the current token: accepted
    expect(h.owner(shard)).toBeNull()
    expect(shards(h.hb(c.request()).response)).toContain(shard)
  })
})

/**
 * a owns 0..3; b joins (3 is revoked from a); b leaves while a is still
 * draining (3 is targeted back to a); a reports REVOKED (`old`) and gets 3
 * back with a new token; c joins and 3 is revoked from a again.
 */
const regrantedThenRevokedAgain = () => {
  const h = new Harness(config({ shardCount: 3 }))
  const a = new SimMember("a")
  settle(h, a)
  const b = new SimMember("b")
  b.onResponse(h.hb(b.request()).response)
  const shard = h.state.revocations.findIndex((r) => r?.memberId === "a")
  a.onResponse(h.hb(a.request()).response) // learns `shard` is gone
  h.hb(b.leaveRequest()) // target flips back to a; the revocation goes on
  const old = a.request() // REVOKED with the first grant's token
  const firstToken = old.revokingShards!.find((r) => r.shard === shard)!.token
  a.onResponse(h.hb(old).response) // accepted and granted back
  expect(a.owned.get(shard)).toBeGreaterThan(firstToken)
  settle(h, a)
  const c = new SimMember("c")
  settle(h, c)
  expect(revokedFrom(h)[shard]).toBe("a")
  return { h, a, c, shard, old }
}

describe("finding 3: a resent terminal REVOKED after a lost response is ignored", () => {
  it("REVOKED accepted and the shard granted back in the same (lost) response; the resend is not a violation", () => {
    const h = new Harness()
    const a = new SimMember("a")
    settle(h, a)
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response)
    a.onResponse(h.hb(a.request()).response) // 2, 3 revoking
    h.hb(b.leaveRequest()) // target flips back while a drains
    const report = a.request()
    const first = h.hb(report) // accepted + re-granted; this response is lost
    expect(shards(first.response)).toEqual([0, 1, 2, 3])
    const resent = h.hb(report)
    expect(resent.response.errorCode).toBe("NONE")
    expect(resent.records).toEqual([])
    expect(resent.response).toEqual(first.response)
    a.onResponse(resent.response)
    expect([...a.owned.keys()].sort()).toEqual([0, 1, 2, 3])
  })
})

describe("finding 4: each revocation has its own deadline", () => {
  it("a member asked at t=9s, while a revocation from t=0 was open, is not fenced at t=10s", () => {
    const h = new Harness(config({ shardCount: 6, rebalanceTimeoutMs: 10_000 }))
    const a = new SimMember("a")
    settle(h, a)
    const token = a.owned.get(3)!
    const b = new SimMember("b")
    b.onResponse(h.hb(b.request()).response) // t=0: 3, 4, 5 revoked from a
    const first = revokedFrom(h).flatMap((m, s) => (m === "a" ? [s] : []))
    expect(first).toEqual([3, 4, 5])
    /** a's heartbeat: still reading 0..2, the first revocation in the given state. */
    const hb = (state: "REVOKING" | "REVOKED") =>
      h.hb({
        memberId: "a",
        memberEpoch: a.epoch,
        assignmentEpoch: h.state.assignmentEpoch,
        ownedShards: [0, 1, 2],
        revokingShards: first.map((shard) => ({ shard, state, token })),
      })
    h.advance(9_000)
    const c = new SimMember("c")
    c.onResponse(h.hb(c.request()).response) // t=9s: a second revocation from a
    expect(hb("REVOKING").response.errorCode).toBe("NONE")
    const second = revokedFrom(h).flatMap((m, s) => (m === "a" && !first.includes(s) ? [s] : []))
    expect(second).toHaveLength(1)
    h.advance(500)
    expect(hb("REVOKED").response.errorCode).toBe("NONE") // t=9.5s: the first one is done
    expect(revokedFrom(h).filter((m) => m === "a")).toHaveLength(1)
    h.advance(600) // t=10.1s: past the first revocation's deadline
    expect(h.state.members.has("a")).toBe(true)
    h.advance(8_899) // t=18.999s
    expect(h.state.members.has("a")).toBe(true)
    h.advance(2) // t=19.001s: the second revocation's own deadline
    expect(h.state.members.has("a")).toBe(false)
  })
})

describe("finding 5: a weight the schema accepts never leaves shards unowned", () => {
  it("weights outside [MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT] are refused by the schemas", () => {
    const decode = Schema.decodeUnknownResult(HeartbeatRequest)
    const join = request({ memberId: "a" })
    for (const weight of [1e308, MAX_MEMBER_WEIGHT * 2, MIN_MEMBER_WEIGHT / 2, 0, -1])
      expect(decode({ ...join, memberInfo: { ...info("a"), weight } })._tag).toBe("Failure")
    const decodeConfig = Schema.decodeUnknownResult(GroupConfig)
    const cfg = config()
    expect(decodeConfig({ ...cfg, memberWeights: { a: 1e308 } })._tag).toBe("Failure")
    expect(decodeConfig({ ...cfg, memberWeights: { a: MAX_MEMBER_WEIGHT } })._tag).toBe("Success")
  })

  it("weights at both bounds: every shard has a live owner", () => {
    const h = new Harness(config({ shardCount: 64 }))
    const heavy = new SimMember("heavy", MAX_MEMBER_WEIGHT)
    const light = new SimMember("light", MIN_MEMBER_WEIGHT)
    settle(h, heavy, light)
    for (let s = 0; s < 64; s++) expect(h.state.target[s]).not.toBeNull()
    for (let s = 0; s < 64; s++) expect(h.owner(s)).not.toBeNull()
  })
})

describe("finding 6: a member whose lease is unusable", () => {
  it.each([
    ["memberId", { memberId: "" }],
    ["stream", { stream: "" }],
    ["incarnation", { incarnation: 0 }],
    ["incarnation", { incarnation: 1.5 }],
    ["safetyMarginMs", { safetyMarginMs: -1 }],
    ["heartbeatIntervalMs", { heartbeatIntervalMs: 0 }],
    ["retryBackoffMaxMs", { retryBackoffInitialMs: 500, retryBackoffMaxMs: 100 }],
    ["leaveTimeoutMs", { leaveTimeoutMs: Number.NaN }],
  ] as const)("bad member config fails at start, naming %s", (field, patch) => {
    const make = () => MemberMachine.make({ ...memberConfig, ...patch }, 0)
    expect(make).toThrow(InvalidMemberConfig)
    try {
      make()
    } catch (e) {
      expect((e as InvalidMemberConfig).field).toBe(field)
    }
  })

  it("the lease derives from the group's session timeout in each answer", () => {
    const state = MemberMachine.make({ ...memberConfig, safetyMarginMs: undefined }, 0)
    answer(state, okResponse({ sessionTimeoutMs: 20_000, assigned: grants(0) }), 0)
    expect(MemberMachine.leaseMs(state)).toBe(16_000) // default margin: a fifth
    expect(MemberMachine.leaseExpiresAt(state)).toBe(16_000)
    answer(state, okResponse({ sessionTimeoutMs: 5_000, assigned: grants(0) }), 100)
    expect(MemberMachine.leaseMs(state)).toBe(4_000)
  })

  it("a safety margin that leaves no more than a heartbeat interval: surfaced, and the member leaves", () => {
    const state = MemberMachine.make({ ...memberConfig, safetyMarginMs: 9_500 }, 0)
    const { request, commands } = answer(
      state,
      okResponse({ sessionTimeoutMs: 10_000, heartbeatIntervalMs: 1_000, assigned: grants(0, 1) }),
      0,
    )
    expect(request.memberEpoch).toBe(0)
    const unusable = commands.find((c) => c._tag === "LeaseUnusable")
    expect(unusable?._tag === "LeaseUnusable" && unusable.error.reason).toBe("MarginTooLarge")
    expect(commands.some((c) => c._tag === "StartShard")).toBe(false)
    expect(MemberMachine.phase(state)).toBe("leaving")
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(-1)
  })

  it("answers that always arrive after their lease: surfaced once per streak, never a shard started", () => {
    const state = MemberMachine.make(memberConfig, 0)
    const out: Array<MemberMachine.MemberCommand> = []
    let now = 0
    for (let i = 0; i < 5; i++) {
      const { seq } = MemberMachine.nextRequest(state, now)
      now += 9_000 // lease 8 s
      out.push(
        ...MemberMachine.step(state, {
          _tag: "ResponseReceived",
          seq,
          response: okResponse({ assigned: grants(0) }),
          now,
        }),
      )
    }
    const reports = out.filter((c) => c._tag === "LeaseUnusable")
    expect(reports).toHaveLength(1)
    expect(reports[0]?._tag === "LeaseUnusable" && reports[0].error.reason).toBe("AnswersTooSlow")
    expect(out.some((c) => c._tag === "StartShard")).toBe(false)
  })

  it("the coordinator reclaims grants that are never confirmed (the member is fenced after the revoke timeout)", () => {
    const h = new Harness(config({ rebalanceTimeoutMs: 10_000 }))
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response) // granted 0..3, never reports them owned
    const b = new SimMember("b")
    settle(h, b)
    h.advance(9_999)
    expect(h.state.members.has("a")).toBe(true)
    h.advance(2)
    expect(h.state.members.has("a")).toBe(false)
    // rule 19: a's lease (from its join at t=0) may still run: held until t=30s
    settle(h, b)
    expect([...b.owned.keys()]).toEqual([])
    h.advance(30_000 - h.now)
    settle(h, b)
    expect([...b.owned.keys()].sort()).toEqual([0, 1, 2, 3])
  })
})

describe("finding 7: a member that leaves with a batch in flight", () => {
  it("its shards move as each is drained, it is never fenced, and epoch -1 removes it", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    settle(h, a, b)
    const g = h.state.groupEpoch
    // a leaves: shard 0 is drained at once, shard 1 still has a batch in flight
    const token0 = a.owned.get(0)!
    const token1 = a.owned.get(1)!
    const leaving = h.hb({
      ...a.request(),
      ownedShards: [],
      revokingShards: [
        { shard: 0, state: "REVOKED", token: token0 },
        { shard: 1, state: "REVOKING", token: token1 },
      ],
      leaving: true,
    })
    expect(leaving.response.errorCode).toBe("NONE")
    expect(h.state.members.get("a")?.state).toBe("LEAVING")
    expect(h.state.groupEpoch).toBe(g + 1)
    expect(h.owner(0)).toBeNull() // moved now, not when the session expires
    expect(h.owner(1)).toBe("a")
    expect(leaving.notices).toContain("b")
    b.onResponse(h.hb(b.request()).response)
    expect(b.owned.has(0)).toBe(true)
    const drained = h.hb({
      ...a.request(),
      ownedShards: [],
      revokingShards: [{ shard: 1, state: "REVOKED", token: token1 }],
      leaving: true,
    })
    expect(drained.response.errorCode).toBe("NONE")
    expect(h.owner(1)).toBeNull()
    h.hb(a.leaveRequest())
    expect(h.state.members.has("a")).toBe(false)
    settle(h, b)
    expect([...b.owned.keys()].sort()).toEqual([0, 1, 2, 3])
  })

  it("the member machine says `leaving`, reports each drained shard, then sends epoch -1", () => {
    const state = MemberMachine.make(memberConfig, 0)
    answer(state, okResponse({ assigned: grants(0, 1) }), 0)
    for (const shard of [0, 1]) MemberMachine.step(state, { _tag: "ShardStarted", shard })
    answer(state, okResponse({ assigned: grants(0, 1) }), 10)
    const commands = MemberMachine.step(state, { _tag: "LeaveRequested", now: 20 })
    expect(commands).toEqual([
      { _tag: "StopShard", shard: 0 },
      { _tag: "StopShard", shard: 1 },
      { _tag: "SendHeartbeat" },
    ])
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 })
    const first = MemberMachine.nextRequest(state, 30).request
    expect(first.leaving).toBe(true)
    expect(first.revokingShards).toEqual([
      { shard: 0, state: "REVOKED", token: 1 },
      { shard: 1, state: "REVOKING", token: 2 },
    ])
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(-1)
  })

  it("a leave whose heartbeats all fail ends at the leave timeout", () => {
    const state = MemberMachine.make({ ...memberConfig, leaveTimeoutMs: 5_000 }, 0)
    answer(state, okResponse(), 0)
    MemberMachine.step(state, { _tag: "LeaveRequested", now: 100 })
    const { seq } = MemberMachine.nextRequest(state, 100)
    MemberMachine.step(state, { _tag: "HeartbeatFailed", seq, now: 200 })
    expect(MemberMachine.nextDeadline(state)).toBeLessThanOrEqual(5_100)
    expect(MemberMachine.step(state, { _tag: "Tick", now: 5_099 })).not.toContainEqual({
      _tag: "Left",
    })
    const end = MemberMachine.step(state, { _tag: "Tick", now: 5_100 })
    expect(end).toContainEqual({ _tag: "StopAllShards", reason: "leave-timeout" })
    expect(end).toContainEqual({ _tag: "Left" })
    expect(MemberMachine.phase(state)).toBe("left")
  })
})

describe("finding 8: the machine exposes its next deadline", () => {
  it("a runtime that sleeps until nextDeadline self-fences exactly on time", () => {
    const state = MemberMachine.make(memberConfig, 0)
    answer(state, okResponse({ assigned: grants(0) }), 1_000)
    MemberMachine.step(state, { _tag: "ShardStarted", shard: 0 })
    answer(state, okResponse({ assigned: grants(0) }), 1_000)
    // every later heartbeat fails
    let now = 1_000
    for (;;) {
      const at = MemberMachine.nextDeadline(state)!
      expect(at).toBeGreaterThanOrEqual(now)
      now = at
      const commands = MemberMachine.step(state, { _tag: "Tick", now })
      if (commands.some((c) => c._tag === "StopAllShards")) break
      if (commands.some((c) => c._tag === "SendHeartbeat")) {
        const { seq } = MemberMachine.nextRequest(state, now)
        MemberMachine.step(state, { _tag: "HeartbeatFailed", seq, now })
      }
    }
    expect(now).toBe(1_000 + 8_000) // the lease: session 10 s - margin 2 s from the send
  })
})

describe("finding 9: a second host with a different config", () => {
  it("changing timing is an explicit, audited GroupConfigChanged record", () => {
    const h = new Harness()
    const changed = Coordinator.configure(h.state, config({ sessionTimeoutMs: 60_000 }), 0)
    expect(changed._tag).toBe("Changed")
    if (changed._tag !== "Changed") return
    expect(changed.result.records[0]).toEqual({
      _tag: "GroupConfigChanged",
      config: config({ sessionTimeoutMs: 60_000 }),
    })
    const audit = changed.result.records.find((r) => r._tag === "Audit")
    expect(audit?._tag === "Audit" && audit.event.reason).toContain(
      "sessionTimeoutMs 30000 -> 60000",
    )
    h.apply(changed.result)
    expect(h.state.config.sessionTimeoutMs).toBe(60_000)
    expect(h.state.groupEpoch).toBe(0)
    expect(h.hb({ memberId: "a" }).response.sessionTimeoutMs).toBe(60_000)
  })

  it("changing weights bumps groupEpoch and recomputes the target", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    settle(h, a, b)
    const g = h.state.groupEpoch
    const changed = Coordinator.configure(h.state, config({ memberWeights: { a: 3 } }), 0)
    expect(changed._tag).toBe("Changed")
    if (changed._tag !== "Changed") return
    h.apply(changed.result)
    expect(h.state.config.memberWeights).toEqual({ a: 3 })
    expect(h.state.groupEpoch).toBe(g + 1)
    expect(h.state.target.filter((m) => m === "a")).toHaveLength(3)
    // the shard b gives up is revoked under its own deadline
    expect(revokedFrom(h).filter((m) => m === "b")).toHaveLength(1)
    expect(changed.result.shardDeadlines).toHaveLength(1)
  })

  it("the same config is no change; a shard count other than the stream's is refused and audited (issue 20 finding 5); another identity is refused", () => {
    const h = new Harness()
    expect(Coordinator.configure(h.state, config(), 0)._tag).toBe("Unchanged")
    const count = Coordinator.configure(h.state, config({ shardCount: 8 }), 0)
    expect(count._tag).toBe("Changed")
    if (count._tag !== "Changed") return
    expect(count.refused).toContain("shardCount 8 refused")
    expect(count.refused).toContain("has 4 shards")
    expect(count.result.records.map((r) => r._tag)).toEqual(["Audit"])
    const audit = count.result.records[0]
    expect(audit?._tag === "Audit" && audit.event.kind).toBe("GroupConfigRefused")
    h.apply(count.result)
    expect(h.state.config.shardCount).toBe(4)
    expect(h.state.layout.shardCount).toBe(4)
    const both = Coordinator.configure(
      h.state,
      config({ shardCount: 8, sessionTimeoutMs: 9_000 }),
      0,
    )
    expect(both._tag === "Changed" && both.result.records[0]).toEqual({
      _tag: "GroupConfigChanged",
      config: config({ sessionTimeoutMs: 9_000 }), // the stored shard count is kept
    })
    expect(both._tag === "Changed" && both.refused).toContain("shardCount 8 refused")
    const other = Coordinator.configure(h.state, config({ stream: "payments" }), 0)
    expect(other._tag === "Refused" && other.reason).toContain("payments")
  })
})

describe("finding 11: duplicate joins are harmless; one request in flight", () => {
  it("an older join delayed past a later one is stale; the same join received twice starts no new lifecycle", () => {
    const h = new Harness()
    const j1 = request({ memberId: "a", seq: 1 })
    const j2 = request({ memberId: "a", seq: 2 })
    h.hb(j1)
    const second = h.hb(j2)
    const epoch = second.response.memberEpoch
    const before = h.snapshot()
    // rule 18: answered from the current state, never acted on (the member
    // applies only the answer to its newest request, so it drops this one)
    const late = h.hb(j1)
    expect(late.response.memberEpoch).toBe(epoch)
    expect(late.records).toEqual([])
    expect(late.fences).toEqual([])
    expect(h.snapshot()).toEqual(before)
    const again = h.hb(j2)
    expect(again.response.errorCode).toBe("NONE")
    expect(again.response.memberEpoch).toBe(epoch)
    expect(again.response.assigned).toEqual(second.response.assigned)
    expect(again.fences).toEqual([])
  })

  it("the machine never asks for a second request while one is in flight", () => {
    const state = MemberMachine.make(memberConfig, 0)
    expect(MemberMachine.step(state, { _tag: "Tick", now: 0 })).toEqual([{ _tag: "SendHeartbeat" }])
    const { seq } = MemberMachine.nextRequest(state, 0)
    expect(MemberMachine.step(state, { _tag: "Tick", now: 60_000 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "NoticeReceived" })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "HeartbeatFailed", seq, now: 60_000 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "Tick", now: 60_100 })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
  })
})

describe("finding 12: the layout reaches a joining member", () => {
  it("the join response carries the layout at generation 0 and the member reports LayoutChanged", () => {
    const h = new Harness()
    const state = MemberMachine.make({ ...memberConfig, group: "g" }, 0)
    const { seq, request: join } = MemberMachine.nextRequest(state, 0)
    const r = h.hb(join)
    expect(r.response.layout).toEqual({ shardCount: 4, generation: 0, firstShard: 0 })
    const commands = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq,
      response: r.response,
      now: 1,
    })
    expect(commands[0]).toEqual({
      _tag: "LayoutChanged",
      layout: { shardCount: 4, generation: 0, firstShard: 0 },
    })
    expect(state.layout).toEqual({ shardCount: 4, generation: 0, firstShard: 0 })
  })
})

// --- member machine helpers -------------------------------------------------

const memberConfig: MemberMachine.MemberConfig = {
  group: "orders",
  stream: "orders",
  memberId: "pod-1-m0",
  incarnation: 7,
  memberInfo: { consumerName: "pod-1-m0", host: "10.0.0.1" },
  safetyMarginMs: 2_000,
  heartbeatIntervalMs: 1_000,
  retryBackoffInitialMs: 100,
  retryBackoffMaxMs: 1_000,
}

const okResponse = (overrides: Partial<HeartbeatResponse> = {}): HeartbeatResponse => ({
  errorCode: "NONE",
  memberId: memberConfig.memberId,
  memberEpoch: 1,
  assignmentEpoch: 1,
  assigned: [],
  pending: [],
  heartbeatIntervalMs: 1_000,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
  ...overrides,
})

const grants = (...s: Array<number>) => s.map((shard) => ({ shard, token: shard + 1 }))

/** Send the next request at `now` and deliver `response` as its answer at once. */
const answer = (state: MemberMachine.MemberState, response: HeartbeatResponse, now: number) => {
  const { seq, request } = MemberMachine.nextRequest(state, now)
  const commands = MemberMachine.step(state, { _tag: "ResponseReceived", seq, response, now })
  return { request, commands }
}

// --- through CoordinatorHost (the public host API) --------------------------

describe("findings 1 and 9 through CoordinatorHost", () => {
  effectIt.effect(
    "a second process with the same member id: its join fences the first (held, then new tokens at the storage); the first's steady requests change nothing",
    () =>
      Effect.gen(function* () {
        const streams = yield* ShardStreams.makeMemory
        const fence = yield* OwnerFence.make.pipe(
          Effect.provideService(ShardStreams.ShardStreams, streams),
        )
        const host = yield* makeCoordinatorHost({ config: config(), holder: "c1" }).pipe(
          Effect.provide(
            Layer.mergeAll(
              Store.layerMemory,
              CoordinatorLease.layerMemory,
              Layer.succeed(OwnerFence.OwnerFence, fence),
            ),
          ),
        )
        const address = (shard: number, token: number) => ({
          stream: "orders",
          shard,
          group: "g",
          token,
        })
        yield* streams.append("orders", 0, { k: "x" })
        const p1 = new SimMember("pod-a", undefined, 100)
        for (let i = 0; i < 3; i++) p1.onResponse(yield* host.heartbeat(request(p1.request())))
        const oldToken = p1.owned.get(0)!
        assert.isNumber(oldToken)
        const p2 = new SimMember("pod-a", undefined, 200)
        const joined = yield* host.heartbeat(request(p2.request()))
        assert.strictEqual(joined.errorCode, "NONE")
        // rule 19: held for the first process until it proves it stopped
        assert.deepStrictEqual(joined.pending, [0, 1, 2, 3])
        p2.onResponse(joined)
        // the coordinator answers the first process's steady requests with no state change
        const before = Option.getOrThrow(yield* host.state).storeRevision
        const steady = yield* host.heartbeat(request(p1.request()))
        assert.strictEqual(steady.errorCode, "FENCED_INSTANCE_ID")
        assert.strictEqual(Option.getOrThrow(yield* host.state).storeRevision, before)
        // its leave (it stopped everything) releases the held shards, and removes nobody
        const left = yield* host.heartbeat(request(p1.leaveRequest()))
        assert.strictEqual(left.errorCode, "FENCED_INSTANCE_ID")
        const state = Option.getOrThrow(yield* host.state)
        assert.strictEqual(state.members.get("pod-a")?.incarnation, 200)
        assert.isTrue(state.held.every((x) => x === null))
        p2.onResponse(yield* host.heartbeat(request(p2.request())))
        // the first process is refused at the storage: its token is below the new one
        const read = yield* Effect.flip(
          streams.read({ ...address(0, oldToken), consumer: "pod-a", count: 10 }),
        )
        assert.strictEqual(read._tag, "StaleOwner")
        // the new process reads with its own token
        const batch = yield* streams.read({
          ...address(0, p2.owned.get(0)!),
          consumer: "pod-a",
          count: 10,
        })
        assert.strictEqual(batch.length, 1)
      }).pipe(Effect.scoped),
  )

  effectIt.effect(
    "a host started with a different config applies it on takeover as an audited GroupConfigChanged",
    () =>
      Effect.gen(function* () {
        const store = TestingStore.makeMemoryUnsafe()
        const lease = yield* CoordinatorLease.makeMemory
        const layer = Layer.mergeAll(
          Layer.succeed(Store.Store, store),
          Layer.succeed(CoordinatorLease.CoordinatorLease, lease),
          OwnerFence.layerNoop,
        )
        const s1 = yield* Scope.make()
        const h1 = yield* makeCoordinatorHost({ config: config(), holder: "c1" }).pipe(
          Effect.provide(layer),
          Scope.provide(s1),
        )
        yield* h1.heartbeat(request({ memberId: "a" }))
        yield* Scope.close(s1, Exit.void)
        const h2 = yield* makeCoordinatorHost({
          config: config({ sessionTimeoutMs: 45_000 }),
          holder: "c2",
        }).pipe(Effect.provide(layer))
        const r = yield* h2.heartbeat(request({ memberId: "b" }))
        assert.strictEqual(r.errorCode, "NONE")
        assert.strictEqual(r.sessionTimeoutMs, 45_000)
        const events = store.auditLog({ stream: "orders", group: "g" })
        const change = events.find((e) => e.kind === "GroupConfigChanged")
        assert.include(change?.reason ?? "", "sessionTimeoutMs 30000 -> 45000")
      }).pipe(Effect.scoped),
  )
})

describe("owner tokens follow the coordinator's clock", () => {
  it("a group recreated after its metadata was lost grants tokens above every earlier one", () => {
    const h1 = new Harness()
    h1.now = 5_000
    const a = new SimMember("a")
    settle(h1, a)
    const old = Math.max(...a.owned.values())
    // the store is wiped (Redis without persistence): a fresh group, later
    const h2 = new Harness()
    h2.now = 6_000
    const b = new SimMember("b")
    settle(h2, b)
    for (const token of b.owned.values()) expect(token).toBeGreaterThan(old)
  })
})
