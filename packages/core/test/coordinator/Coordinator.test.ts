import { describe, expect, it } from "vitest"
import {
  Coordinator,
  type CoordinatorRecord,
  fromSnapshot,
  monitor,
  timerId,
  toSnapshot,
} from "../../src/index.js"
import { config, Harness, request, SimMember, shards } from "./harness.js"

const tags = (records: ReadonlyArray<CoordinatorRecord>) => records.map((r) => r._tag)

/** Indexes of the shards whose target is `memberId`. */
const targetOf = (h: Harness, memberId: string): Array<number> =>
  h.state.target.flatMap((m, s) => (m === memberId ? [s] : []))

/** The member each shard is being revoked from (null: none). */
const revokedFrom = (h: Harness): Array<string | null> =>
  h.state.revocations.map((r) => r?.memberId ?? null)

/** Shards a simulated member owns, ascending. */
const ownedOf = (m: SimMember): Array<number> => [...m.owned.keys()].sort((x, y) => x - y)

/**
 * Join a and b (4 shards), let both settle. Sticky assignor: a first gets all
 * 4; when b joins a keeps its lowest shards [0, 1] and releases [2, 3] to b.
 */
const twoMembers = () => {
  const h = new Harness()
  const a = new SimMember("a")
  const b = new SimMember("b")
  const step = (m: SimMember) => m.onResponse(h.hb(m.request()).response)
  step(a)
  step(b)
  for (let i = 0; i < 3; i++) {
    step(a)
    step(b)
  }
  expect(h.state.target).toEqual(["a", "a", "b", "b"])
  expect(ownedOf(a)).toEqual([0, 1])
  expect(ownedOf(b)).toEqual([2, 3])
  return { h, a, b, step }
}

describe("join", () => {
  it("join at epoch 0 creates the member, bumps groupEpoch and assignmentEpoch, grants with fences", () => {
    const h = new Harness()
    const r = h.hb({ memberId: "a" })
    expect(r.response.errorCode).toBe("NONE")
    expect(r.response.memberEpoch).toBe(1)
    expect(h.state.groupEpoch).toBe(1)
    expect(h.state.assignmentEpoch).toBe(1)
    expect(r.response.assigned).toEqual([0, 1, 2, 3].map((shard) => ({ shard, token: 1 })))
    expect(r.fences).toEqual(
      [0, 1, 2, 3].map((shard) => ({ shard, token: 1, memberId: "a", first: true })),
    )
    expect(r.timers.map((t) => timerId(t.key))).toContain("Session:a")
    expect(tags(r.records)).toEqual(
      expect.arrayContaining([
        "MemberUpserted",
        "GroupEpochBumped",
        "TargetAssignmentChanged",
        "ShardOwnersChanged",
        "Audit",
      ]),
    )
  })

  it("a group's startAt rides on each shard's first grant only (docs/runtime.md, \"Where a new group starts\")", () => {
    const h = new Harness(config({ startAt: "latest" }))
    const first = h.hb({ memberId: "a" })
    expect(first.fences).toEqual(
      [0, 1, 2, 3].map((shard) => ({
        shard,
        token: 1,
        memberId: "a",
        first: true,
        startAt: "latest",
      })),
    )
    // a later grant of a shard (to a new member) never carries it: the group exists there
    const b = h.hb({ memberId: "b" })
    expect(b.fences).toEqual([])
    // earliest (the default) adds nothing: the storage creates the group at the start
    const early = new Harness(config({ startAt: "earliest" })).hb({ memberId: "a" })
    expect(early.fences.every((f) => !("startAt" in f))).toBe(true)
  })

  it("a full heartbeat is required to join: epoch 0 without memberInfo is INVALID_REQUEST", () => {
    const h = new Harness()
    const before = h.snapshot()
    const r = h.hb({ memberId: "a", memberEpoch: 0, memberInfo: undefined })
    expect(r.response.errorCode).toBe("INVALID_REQUEST")
    expect(r.records).toEqual([])
    expect(h.snapshot()).toEqual(before)
  })

  it("rejoin: same memberId with epoch 0 gets a fresh, higher memberEpoch and its shards back", () => {
    const { h, a } = twoMembers()
    const epoch = a.epoch
    const g = h.state.groupEpoch
    a.reset()
    const r = h.hb(a.request())
    expect(r.response.memberEpoch).toBeGreaterThan(epoch)
    expect(r.response.memberEpoch).toBe(h.state.maxMemberEpoch) // never issued before
    expect(shards(r.response)).toEqual([0, 1])
    expect(shards(r.response)).toEqual(targetOf(h, "a"))
    // new tokens: the old lifecycle's tokens are fenced at the storage
    expect(r.response.assigned.every((x) => x.token === 2)).toBe(true)
    expect(h.state.groupEpoch).toBe(g) // rejoin with the same weight is not a membership change
  })
})

describe("revoke-before-assign (seed, seven steps)", () => {
  it("walkthrough: a shard moves from A to B only after A reports REVOKED", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    a.onResponse(h.hb(a.request()).response)
    a.onResponse(h.hb(a.request()).response)
    expect([...a.owned.keys()]).toEqual([0, 1, 2, 3])

    // B joins: target moves shards 2 and 3 to B (sticky: A keeps its lowest shards).
    const joinB = h.hb(b.request())
    b.onResponse(joinB.response)
    // Step 1: coordinator removes the shards from A's assigned set (pending revocation).
    expect(revokedFrom(h)).toEqual([null, null, "a", "a"])
    expect(h.state.target).toEqual(["a", "a", "b", "b"])
    // ...and B may not read them yet: they are pending for B, not assigned.
    expect(joinB.response.assigned).toEqual([])
    expect(joinB.response.pending).toEqual([2, 3])
    expect(joinB.fences).toEqual([])

    // Step 2: A receives the missing shards in its next heartbeat response.
    const r2 = h.hb(a.request())
    expect(shards(r2.response)).toEqual([0, 1])
    a.onResponse(r2.response)
    // Step 3: A stops new reads and drains in-flight work.
    expect([...a.owned.keys()]).toEqual([0, 1])
    expect([...a.revoking.keys()]).toEqual([2, 3])
    // B still does not get them while A is draining (REVOKING).
    const rb = h.hb(b.request())
    expect(rb.response.assigned).toEqual([])
    const aDraining = h.hb({
      ...a.request(),
      revokingShards: [
        { shard: 2, state: "REVOKING", token: 1 },
        { shard: 3, state: "REVOKING", token: 1 },
      ],
    })
    expect(aDraining.response.errorCode).toBe("NONE")
    expect(revokedFrom(h)).toEqual([null, null, "a", "a"])

    // Step 4: A reports revokingShards.state = REVOKED.
    const ack = a.request()
    expect(ack.revokingShards).toEqual([
      { shard: 2, state: "REVOKED", token: 1 },
      { shard: 3, state: "REVOKED", token: 1 },
    ])
    const r4 = h.hb(ack)
    a.onResponse(r4.response)
    // Step 5: coordinator accepts the revoke acknowledgement.
    expect(revokedFrom(h)).toEqual([null, null, null, null])
    expect(h.owner(2)).toBeNull()
    expect(h.owner(3)).toBeNull()
    expect(r4.records.some((r) => r._tag === "Audit" && r.event.kind === "RevokeAccepted")).toBe(
      true,
    )
    expect(r4.notices).toEqual(["b"])

    // Step 6: coordinator returns the shards to B as assigned (with new fences).
    const r6 = h.hb(b.request())
    expect(r6.response.assigned).toEqual([
      { shard: 2, token: 2 },
      { shard: 3, token: 2 },
    ])
    expect(r6.fences.map((f) => f.shard)).toEqual([2, 3])
    b.onResponse(r6.response)

    // Step 7: B starts reading and reports ownership; the current assignment observes it.
    expect([...b.owned.keys()]).toEqual([2, 3])
    const r7 = h.hb(b.request())
    expect(h.state.current[2]).toMatchObject({ memberId: "b", confirmed: true })
    expect(h.state.current[3]).toMatchObject({ memberId: "b", confirmed: true })
    expect(
      r7.records.some((r) => r._tag === "Audit" && r.event.kind === "OwnershipConfirmed"),
    ).toBe(true)
    expect(monitor(h.state).rebalanceInProgress).toBe(false) // converged: current == target, confirmed
  })
})

describe("ownership validation (seed)", () => {
  it("owned shards must be assigned or pending for the reporting member: otherwise fenced", () => {
    const { h, a, b } = twoMembers()
    const theirs = ownedOf(b)[0]!
    const r = h.hb({ ...a.request(), ownedShards: [...ownedOf(a), theirs] })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(h.state.members.has("a")).toBe(false) // a fence removes the member (rule 2)
    expect(h.owner(theirs)).toBe("b")
  })

  it("a shard nobody owns cannot be claimed either", () => {
    const h = new Harness(config({ shardCount: 4 }))
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response)
    h.hb({ memberId: "b" }) // b joins; 2 and 3 pending revocation from a (a keeps 0, 1)
    expect(revokedFrom(h)).toEqual([null, null, "a", "a"])
    const r = h.hb({ memberId: "b", memberEpoch: 2, assignmentEpoch: 2, ownedShards: [2] })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(r.response.errorMessage).toContain("owned by live member a")
  })

  it("revoking shards must match shards previously removed from assignment", () => {
    const { h, a } = twoMembers()
    // a reports one of its own (never revoked) shards as REVOKED, the others as owned
    const [mine, ...rest] = ownedOf(a)
    expect(h.state.revocations[mine!]).toBeNull()
    const r = h.hb({
      ...a.request(),
      ownedShards: rest,
      revokingShards: [{ shard: mine!, state: "REVOKED", token: a.owned.get(mine!)! }],
    })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(r.response.errorMessage).toContain("not removed from its assignment")
  })

  it("a live member cannot claim a shard owned by another live member", () => {
    const { h, a } = twoMembers()
    const r = h.hb({ ...a.request(), ownedShards: [0, 2, 3] })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(r.response.errorMessage).toContain("owned by live member b")
    expect(h.owner(3)).toBe("b")
  })

  it("stale member epochs are rejected with FENCED_MEMBER_EPOCH and change nothing", () => {
    const { h, a } = twoMembers()
    const first = a.epoch
    a.reset()
    a.onResponse(h.hb(a.request()).response) // rejoin -> epoch+1
    a.reset()
    a.onResponse(h.hb(a.request()).response) // rejoin -> epoch+2
    const stale = h.hb({ ...a.request(), memberEpoch: first, ownedShards: [] })
    expect(stale.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(stale.records).toEqual([])
    const ahead = h.hb({ ...a.request(), memberEpoch: a.epoch + 5 })
    expect(ahead.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(ahead.records).toEqual([])
  })

  it("a stale assignment epoch triggers reconciliation: the response carries the current assignment", () => {
    const { h, a } = twoMembers()
    const r = h.hb({ ...a.request(), assignmentEpoch: 0 })
    expect(r.response.errorCode).toBe("NONE")
    expect(r.response.assignmentEpoch).toBe(h.state.assignmentEpoch)
    expect(shards(r.response)).toEqual(targetOf(h, "a"))
    expect(shards(r.response)).toEqual([0, 1])
  })

  it("an invalid report fences the member; its shards are freed by the fence records, not granted in the same result", () => {
    const { h, a } = twoMembers()
    const r = h.peek({ ...a.request(), ownedShards: [0, 1, 3] }) // 3 is b's
    expect(r.fences).toEqual([])
    const owners = r.records.find((x) => x._tag === "ShardOwnersChanged")
    // exactly a's shards are freed; b's and a's target are untouched
    expect(owners).toEqual({
      _tag: "ShardOwnersChanged",
      shards: [
        { shard: 0, owner: null },
        { shard: 1, owner: null },
      ],
    })
    expect(r.records.find((x) => x._tag === "MemberRemoved")).toEqual({
      _tag: "MemberRemoved",
      memberId: "a",
    })
  })

  it("duplicate terminal revoke reports are ignored, not violations", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    a.onResponse(h.hb(a.request()).response)
    b.onResponse(h.hb(b.request()).response)
    a.onResponse(h.hb(a.request()).response) // learns 1,3 are gone
    const ack = a.request()
    h.hb(ack) // accepted
    const dup = h.hb(ack) // resent (lost response)
    expect(dup.response.errorCode).toBe("NONE")
    expect(dup.records).toEqual([])
    expect(h.state.members.has("a")).toBe(true)
  })
})

describe("lost responses (docs/protocol.md rule 7)", () => {
  it("a lost grant response: the retried heartbeat gets the same grants and commits nothing", () => {
    const h = new Harness()
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response)
    const req = a.request()
    const first = h.hb(req) // response lost
    expect(first.response.errorCode).toBe("NONE")
    const retry = h.hb(req)
    expect(retry.response).toEqual(first.response)
    expect(retry.fences).toEqual([])
  })

  it("no earlier memberEpoch is tolerated: a heartbeat of the previous lifecycle changes nothing", () => {
    const { h, a } = twoMembers()
    const old = a.epoch
    a.reset()
    const rejoin = h.hb(a.request())
    expect(rejoin.response.memberEpoch).toBeGreaterThan(old)
    const before = h.snapshot()
    const late = h.hb({
      memberId: "a",
      memberEpoch: old,
      assignmentEpoch: h.state.assignmentEpoch,
      ownedShards: [0],
    })
    expect(late.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(late.records).toEqual([])
    expect(h.snapshot()).toEqual(before)
  })

  it("a fenced member is unknown: neither its old epoch nor a guessed newer one is accepted (rule 2)", () => {
    const { h, a } = twoMembers()
    const req = a.request()
    h.hb({ ...req, ownedShards: [0, 1, 2] }) // fenced
    expect(h.hb(req).response.errorCode).toBe("UNKNOWN_MEMBER_ID")
    for (const guess of [a.epoch + 1, h.state.maxMemberEpoch, h.state.maxMemberEpoch + 1]) {
      const r = h.hb({ ...req, memberEpoch: guess, ownedShards: [], revokingShards: [] })
      expect(r.response.errorCode).toBe("UNKNOWN_MEMBER_ID")
      expect(r.records).toEqual([])
    }
  })
})

describe("UNKNOWN_MEMBER_ID (docs/protocol.md rule 6)", () => {
  it("an unknown member with epoch > 0 gets UNKNOWN_MEMBER_ID; its rejoin with epoch 0 is accepted", () => {
    const h = new Harness()
    const r = h.hb({ memberId: "ghost", memberEpoch: 7, ownedShards: [1] })
    expect(r.response.errorCode).toBe("UNKNOWN_MEMBER_ID")
    expect(r.records).toEqual([])
    const m = new SimMember("ghost")
    m.onResponse(r.response)
    const j = h.hb(m.request())
    expect(j.response.errorCode).toBe("NONE")
    expect(j.response.memberEpoch).toBeGreaterThan(0)
    expect(shards(j.response)).toEqual([0, 1, 2, 3])
  })

  it("a rejoining member must not report owned or revoking shards", () => {
    const h = new Harness()
    const r = h.hb({ memberId: "a", memberEpoch: 0, ownedShards: [1] })
    expect(r.response.errorCode).toBe("INVALID_REQUEST")
  })
})

describe("expiry and revoke timeout (docs/protocol.md rules 4, 5)", () => {
  it("session expiry removes and fences the member, bumps groupEpoch and hands its shards on", () => {
    const { h, b, step } = twoMembers()
    const g = h.state.groupEpoch
    for (let i = 0; i < 12; i++) {
      h.advance(3_000)
      step(b)
    }
    expect(h.state.members.has("a")).toBe(false)
    expect(h.state.groupEpoch).toBe(g + 1)
    step(b)
    expect([...b.owned.keys()].sort()).toEqual([0, 1, 2, 3])
  })

  it("expiry before revoke ack: A expires -> fenced -> B gets the shard (with a notice)", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    a.onResponse(h.hb(a.request()).response)
    a.onResponse(h.hb(a.request()).response) // confirms its grants
    h.advance(25_000)
    b.onResponse(h.hb(b.request()).response) // revocation of 2,3 from a starts at t=25s
    expect(revokedFrom(h)).toEqual([null, null, "a", "a"])
    expect(b.owned.size).toBe(0)
    h.notices.length = 0
    h.advance(5_001) // a's session (30s from t=0) passes before the revoke timeout
    expect(h.state.members.has("a")).toBe(false)
    expect(h.state.revocations.every((r) => r === null)).toBe(true)
    expect(h.notices).toContain("b")
    const r = h.hb(b.request())
    expect(shards(r.response)).toEqual([0, 1, 2, 3])
    // every shard, revoked (2, 3) or not (0, 1), gets a token above a's (1), following the clock
    expect(r.response.assigned.map((g) => g.token)).toEqual([30_001, 30_001, 30_001, 30_001])
  })

  it("a member that does not finish a revoke within the revoke timeout is fenced", () => {
    const h = new Harness()
    const a = new SimMember("a")
    const b = new SimMember("b")
    a.onResponse(h.hb(a.request()).response)
    b.onResponse(h.hb(b.request()).response)
    const revoked = h.state.revocations.flatMap((r, s) => (r?.memberId === "a" ? [s] : []))
    expect(revoked).toEqual(targetOf(h, "b"))
    expect(revoked).toEqual([2, 3])
    const epoch = a.epoch
    // a keeps heartbeating but never reports REVOKED
    for (let i = 0; i < 4; i++) {
      h.advance(2_000)
      h.hb({ ...a.request(), ownedShards: [0, 1, 2, 3], revokingShards: [] })
    }
    expect(h.state.members.has("a")).toBe(true)
    h.advance(-h.now + 10_000)
    // fenced: removed, every shard targeted to the live member, but held
    // until a's lease has provably ended (rule 19: its last answer was at
    // t=8s, so its session ends at t=38s)
    expect(h.state.members.has("a")).toBe(false)
    for (const s of [0, 1, 2, 3]) expect(h.owner(s)).toBeNull()
    expect(h.state.held.map((x) => x?.memberId)).toEqual(["a", "a", "a", "a"])
    expect(shards(h.hb(b.request()).response)).toEqual([])
    expect(h.hb({ ...a.request(), memberEpoch: epoch }).response.errorCode).toBe(
      "UNKNOWN_MEMBER_ID",
    )
    h.advance(37_999 - h.now)
    expect(shards(h.hb(b.request()).response)).toEqual([])
    h.advance(1)
    const rb = h.hb(b.request())
    expect(shards(rb.response)).toEqual([0, 1, 2, 3])
  })

  it("a timer firing before its (moved) deadline re-arms itself", () => {
    const { h } = twoMembers()
    h.now = 31_000
    const r = Coordinator.onTimer(h.state, { _tag: "Session", memberId: "a" }, 1_000)
    expect(r.records).toEqual([])
    expect(r.timers).toEqual([{ key: { _tag: "Session", memberId: "a" }, at: 30_000 }])
  })
})

describe("leave", () => {
  it("leave at -1 removes the member, frees its shards and bumps groupEpoch", () => {
    const { h, a, b, step } = twoMembers()
    const g = h.state.groupEpoch
    const r = h.hb(a.leaveRequest())
    expect(r.response.memberEpoch).toBe(-1)
    expect(h.state.members.has("a")).toBe(false)
    expect(h.state.groupEpoch).toBe(g + 1)
    expect(r.notices).toEqual(["b"])
    step(b)
    expect([...b.owned.keys()].sort()).toEqual([0, 1, 2, 3])
  })

  it("leaving twice is idempotent", () => {
    const { h, a } = twoMembers()
    h.hb(a.leaveRequest())
    const again = h.hb(a.leaveRequest())
    expect(again.response.errorCode).toBe("NONE")
    expect(again.records).toEqual([])
  })
})

describe("epochs (seed)", () => {
  it("groupEpoch +1 on join, leave, leave start, expiry and fence; not on steady heartbeats, same-weight rejoins or revoke acks", () => {
    const { h, a, b, step } = twoMembers()
    expect(h.state.groupEpoch).toBe(2)
    step(a)
    step(b)
    expect(h.state.groupEpoch).toBe(2)
    b.reset()
    step(b) // rejoin, same weight
    expect(h.state.groupEpoch).toBe(2)
    const c = new SimMember("c")
    step(c) // c joins: a keeps [0, 1]; b must revoke 3 (sticky assignor)
    expect(h.state.groupEpoch).toBe(3)
    expect(revokedFrom(h)).toEqual([null, null, null, "b"])
    const revBefore = h.commits.length
    step(a)
    step(b) // b learns 3 is gone
    step(b) // revoke ack
    expect(
      h.commits
        .slice(revBefore)
        .flat()
        .some((r) => r._tag === "Audit" && r.event.kind === "RevokeAccepted"),
    ).toBe(true)
    expect(h.state.groupEpoch).toBe(3)
    h.hb(c.leaveRequest())
    expect(h.state.groupEpoch).toBe(4)
    h.hb({ ...a.request(), ownedShards: [0, 1, 2] }) // fence: a is removed
    expect(h.state.groupEpoch).toBe(5)
    const d = new SimMember("d")
    step(d)
    expect(h.state.groupEpoch).toBe(6)
    h.hb({ ...d.request(), leaving: true }) // leave start
    expect(h.state.groupEpoch).toBe(7)
    for (let i = 0; i < 11; i++) {
      h.advance(3_000)
      step(b)
    }
    expect(h.state.members.has("d")).toBe(false) // expired
    expect(h.state.groupEpoch).toBe(8)
  })

  it("assignmentEpoch +1 only when the target actually changes", () => {
    const h = new Harness(config({ shardCount: 2 }))
    h.hb({ memberId: "a" })
    h.hb({ memberId: "b" })
    expect(h.state.assignmentEpoch).toBe(2)
    const g = h.state.groupEpoch
    h.hb({ memberId: "c" }) // 2 shards, 3 members: c gets nothing, target unchanged
    expect(h.state.groupEpoch).toBe(g + 1)
    expect(h.state.assignmentEpoch).toBe(2)
    h.hb({ memberId: "c", memberEpoch: -1 })
    expect(h.state.groupEpoch).toBe(g + 2)
    expect(h.state.assignmentEpoch).toBe(2)
  })

  it("every lifecycle (join, rejoin, replacement) gets a memberEpoch never issued before; steady heartbeats and target changes keep it", () => {
    const { h, a, step } = twoMembers()
    const e = a.epoch
    step(new SimMember("c")) // target change
    step(a)
    expect(a.epoch).toBe(e)
    const issued = new Set([...h.state.members.values()].map((m) => m.memberEpoch))
    a.reset()
    step(a) // rejoin
    expect(issued.has(a.epoch)).toBe(false)
    expect(a.epoch).toBe(h.state.maxMemberEpoch)
    h.hb({ ...a.request(), ownedShards: [0, 1, 2, 3], revokingShards: [] }) // fenced, removed
    a.reset()
    const before = h.state.maxMemberEpoch
    step(a) // joins as a new member
    expect(a.epoch).toBe(before + 1)
  })

  it("storeRevision +1 on every committed change and only then", () => {
    const { h, a, step } = twoMembers()
    const rev = h.state.storeRevision
    expect(rev).toBe(h.commits.length)
    step(a) // steady: no records, no commit
    h.hb({ memberId: "zz", memberEpoch: 3 }) // UNKNOWN
    h.hb({ ...a.request(), ownedShards: [9] }) // INVALID
    expect(h.state.storeRevision).toBe(rev)
    step(new SimMember("c"))
    expect(h.state.storeRevision).toBe(rev + 1)
    expect(h.stored().storeRevision).toBe(rev + 1)
  })
})

describe("steady state, notices, layout", () => {
  it("a steady heartbeat emits zero records, no fences, no notices; only the session deadline moves", () => {
    const { h, a } = twoMembers()
    h.now = 5_000
    const r = h.hb(a.request())
    expect(r.records).toEqual([])
    expect(r.fences).toEqual([])
    expect(r.notices).toEqual([])
    expect(r.timers).toEqual([{ key: { _tag: "Session", memberId: "a" }, at: 35_000 }])
    expect(shards(r.response)).toEqual(ownedOf(a))
  })

  it("a member whose assignment grows gets a notice (docs/protocol.md rule 8)", () => {
    const { h, a } = twoMembers()
    const r = h.hb(a.leaveRequest())
    expect(r.notices).toEqual(["b"])
  })

  it("the response carries the layout on a join and when the member's metadataVersion is stale", () => {
    const h = new Harness()
    const snap = toSnapshot(h.state)
    const state = fromSnapshot({ ...snap, layout: { shardCount: 4, generation: 1, firstShard: 0 } })
    const stale = Coordinator.heartbeat(state, request({ memberId: "a", metadataVersion: 0 }), 0)
    expect(stale.response.layout).toEqual({ shardCount: 4, generation: 1, firstShard: 0 })
    // rule 12: a join learns the layout even at generation 0
    const join = h.hb({ memberId: "a" })
    expect(join.response.layout).toEqual({ shardCount: 4, generation: 0, firstShard: 0 })
    const steady = h.hb({
      memberId: "a",
      memberEpoch: join.response.memberEpoch,
      assignmentEpoch: join.response.assignmentEpoch,
      ownedShards: shards(join.response),
    })
    expect(steady.response.errorCode).toBe("NONE")
    expect(steady.response.layout).toBeUndefined()
  })
})

describe("audit and monitoring", () => {
  it("every membership, ownership and epoch change has an audit event with epochs before/after", () => {
    const { h } = twoMembers()
    const events = h.store.auditLog("g")
    const kinds = events.map((e) => e.kind)
    expect(kinds).toEqual(
      expect.arrayContaining([
        "GroupCreated",
        "MemberJoined",
        "TargetAssignmentChanged",
        "ShardsGranted",
        "RevokeRequested",
        "RevokeAccepted",
        "OwnershipConfirmed",
      ]),
    )
    const joinB = events.find((e) => e.kind === "MemberJoined" && e.memberId === "b")
    expect(joinB?.before.groupEpoch).toBe(1)
    expect(joinB?.after.groupEpoch).toBe(2)
  })

  it("monitoring projection: shard counts, imbalance, pending revokes, states", () => {
    const { h } = twoMembers()
    const m = monitor(h.state)
    expect(m.shardsPerMember).toEqual({ a: 2, b: 2 })
    expect(m.imbalance).toBe(0)
    expect(m.pendingRevokes).toBe(0)
    expect(m.rebalanceInProgress).toBe(false)
    expect(m.membersByState.STABLE).toBe(2)
    h.hb({ memberId: "c" })
    const m2 = monitor(h.state)
    expect(m2.pendingRevokes).toBeGreaterThan(0)
    expect(m2.rebalanceInProgress).toBe(true)
  })
})

describe("load (failover)", () => {
  it("every known member gets a fresh session deadline; owners' tokens are re-fenced", () => {
    const { h } = twoMembers()
    const loaded = Coordinator.load(h.stored(), 100_000)
    expect(loaded.timers.filter((t) => t.key._tag === "Session").map((t) => t.at)).toEqual([
      130_000, 130_000,
    ])
    expect(loaded.fences).toHaveLength(4)
    expect(toSnapshot(loaded.state)).toEqual(h.snapshot())
  })
})

describe("weights and target flips", () => {
  it("a configured member weight overrides the weight the member reports", () => {
    const h = new Harness(config({ memberWeights: { a: 3 } }))
    h.hb({ memberId: "a", memberInfo: { consumerName: "a", host: "h", weight: 1 } })
    h.hb({ memberId: "b", memberInfo: { consumerName: "b", host: "h", weight: 2 } })
    expect(h.state.members.get("a")?.weight).toBe(3)
    expect(h.state.members.get("b")?.weight).toBe(2)
    // quotas 4*3/5 = 2.4 and 4*2/5 = 1.6; the ceil slot goes to a (it held all 4):
    // a keeps [0, 1, 2], b gets [3]. With a's reported weight 1 it would be 2 / 2.
    expect(h.state.target).toEqual(["a", "a", "a", "b"])
  })

  it("a rejoin with a new weight is a group metadata change: groupEpoch +1", () => {
    const { h, a } = twoMembers()
    const g = h.state.groupEpoch
    const ae = h.state.assignmentEpoch
    h.hb({ memberId: "a", memberInfo: { consumerName: "a", host: "h", weight: 5 } })
    expect(h.state.groupEpoch).toBe(g + 1)
    // ...and the target honours it: quotas 4*5/6 = 3.33 and 4/6 = 0.67, the ceil
    // slot goes to b (it held 2 > floor 0): a 3, b 1; b releases its highest shard.
    expect(h.state.assignmentEpoch).toBe(ae + 1)
    expect(h.state.target).toEqual(["a", "a", "b", "a"])
    expect(revokedFrom(h)).toEqual([null, null, null, "b"])
    void a
  })

  it("a shard whose target returns to the member revoking it stays pending until REVOKED, then is re-granted with a new token", () => {
    const { h, a, b } = twoMembers()
    const c = new SimMember("c")
    // 4 shards, 3 members: a wins the tie for the one ceil slot (lower id) and
    // keeps [0, 1]; b releases its highest shard, 3, to c.
    c.onResponse(h.hb(c.request()).response)
    expect(h.state.target).toEqual(["a", "a", "b", "c"])
    expect(revokedFrom(h)).toEqual([null, null, null, "b"])
    const shard = 3
    const oldToken = h.state.current[shard]!.token
    h.hb(c.leaveRequest()) // target flips back
    expect(h.state.target[shard]).toBe("b")
    expect(revokedFrom(h)[shard]).toBe("b")
    const r1 = h.hb(b.request())
    expect(r1.response.pending).toContain(shard)
    expect(shards(r1.response)).not.toContain(shard)
    b.onResponse(r1.response)
    const r2 = h.hb(b.request()) // REVOKED accepted, then granted again
    expect(shards(r2.response)).toContain(shard)
    expect(r2.response.assigned.find((g) => g.shard === shard)!.token).toBe(oldToken + 1)
    void a
  })
})
