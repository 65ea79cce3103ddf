/**
 * Model-based test: random joins, leaves (immediate and draining), crashes,
 * heartbeats (some responses lost), replays of earlier requests (delayed or
 * duplicated by the network, across rejoins too), a second process with the
 * same member id, and time jumps past session and revoke timeouts, run
 * against the real pure handlers and the memory store. Members behave
 * correctly: they drain and report REVOKED, rejoin after UNKNOWN/FENCED, and
 * self-fence when no heartbeat succeeded for (session timeout - heartbeat
 * interval). Members have unequal weights, so convergence checks the
 * weighted quotas. FC_NUM_RUNS overrides the number of runs.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { Coordinator, type HeartbeatRequest, type HeartbeatResponse } from "../../src/index.js"
import { numRuns } from "../assignor/arbitraries.js"
import { config, Harness, request, SimMember } from "./harness.js"

type Cmd =
  | { readonly t: "hb"; readonly m: number; readonly lose: boolean }
  | { readonly t: "leave"; readonly m: number }
  | { readonly t: "leaving"; readonly m: number }
  | { readonly t: "crash"; readonly m: number }
  | { readonly t: "replay"; readonly m: number; readonly back: number }
  | { readonly t: "advance"; readonly ms: number }

const MEMBERS = 4
/** Processes: m0..m3 (incarnation 1), and a second process of m0 (incarnation 2). */
const PROCESSES = MEMBERS + 1
const SHARDS = 6
/** Reported weights of m0..m3 (the assignor honours them). */
const WEIGHTS = [3, 1, 1, 2] as const
const cfg = config({ shardCount: SHARDS, sessionTimeoutMs: 30_000, rebalanceTimeoutMs: 10_000 })

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  {
    weight: 14,
    arbitrary: fc.record({
      t: fc.constant("hb" as const),
      m: fc.nat(PROCESSES - 1),
      lose: fc.oneof(
        { weight: 4, arbitrary: fc.constant(false) },
        { weight: 1, arbitrary: fc.constant(true) },
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant("leave" as const), m: fc.nat(PROCESSES - 1) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant("leaving" as const), m: fc.nat(PROCESSES - 1) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant("crash" as const), m: fc.nat(PROCESSES - 1) }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant("replay" as const),
      m: fc.nat(PROCESSES - 1),
      back: fc.nat(12),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant("advance" as const),
      ms: fc.constantFrom(500, 3_000, 10_001, 30_001),
    }),
  },
)

class World {
  readonly h = new Harness(cfg)
  readonly members = [
    ...Array.from({ length: MEMBERS }, (_, i) => new SimMember(`m${i}`, WEIGHTS[i])),
    new SimMember("m0", WEIGHTS[0], 2),
  ]
  readonly active = new Array<boolean>(PROCESSES).fill(false)
  readonly lastOk = new Array<number>(PROCESSES).fill(0)
  /** Every request each process sent, for replays. */
  readonly sent = Array.from({ length: PROCESSES }, () => [] as HeartbeatRequest[])
  readonly maxEpoch = new Map<string, number>()
  groupEpoch = 0
  assignmentEpoch = 0

  heartbeat(i: number, lose: boolean): void {
    const m = this.members[i]!
    if (m.drained()) {
      this.leave(i)
      return
    }
    this.active[i] = true
    m.left = false
    const revBefore = this.h.state.storeRevision
    const req = request(m.request())
    this.sent[i]!.push(req)
    const r = this.h.hb(req)
    expect(this.h.state.storeRevision).toBe(revBefore + (r.records.length > 0 ? 1 : 0))
    this.checkResponse(m.id, r.response)
    if (!lose) {
      m.onResponse(r.response)
      if (r.response.errorCode === "NONE") this.lastOk[i] = this.h.now
    }
  }

  leave(i: number): void {
    const m = this.members[i]!
    if (!this.active[i]) return
    const revBefore = this.h.state.storeRevision
    const req = request(m.leaveRequest())
    this.sent[i]!.push(req)
    const r = this.h.hb(req)
    expect(this.h.state.storeRevision).toBe(revBefore + (r.records.length > 0 ? 1 : 0))
    m.reset()
    m.left = true
    this.active[i] = false
  }

  /** Start a graceful leave: the next heartbeats say `leaving` until drained, then epoch -1. */
  leaving(i: number): void {
    if (this.active[i] && this.members[i]!.epoch !== 0) this.members[i]!.startLeaving()
  }

  /**
   * The network delivers an earlier request of this process again (delayed or
   * duplicated); its answer goes nowhere. It must never break safety.
   */
  replay(i: number, back: number): void {
    const sent = this.sent[i]!
    const req = sent[sent.length - 1 - back]
    if (req === undefined) return
    const revBefore = this.h.state.storeRevision
    const r = this.h.hb(req)
    expect(this.h.state.storeRevision).toBe(revBefore + (r.records.length > 0 ? 1 : 0))
    this.checkResponse(req.memberId, r.response)
  }

  /** The process dies silently: no leave; the coordinator must expire it. */
  crash(i: number): void {
    this.members[i]!.reset()
    this.active[i] = false
  }

  advance(ms: number): void {
    const revBefore = this.h.state.storeRevision
    const commitsBefore = this.h.commits.length
    this.h.advance(ms)
    expect(this.h.state.storeRevision - revBefore).toBe(this.h.commits.length - commitsBefore)
    this.members.forEach((m, i) => {
      if (this.h.now - this.lastOk[i]! >= cfg.sessionTimeoutMs - cfg.heartbeatIntervalMs) m.reset()
    })
  }

  /** No shard in a member's `assigned` while it is revoking or held elsewhere. */
  checkResponse(memberId: string, r: HeartbeatResponse): void {
    if (r.errorCode !== "NONE") return
    for (const g of r.assigned) {
      expect(this.h.state.revocations[g.shard]).toBeNull()
      expect(this.h.state.current[g.shard]?.memberId).toBe(memberId)
      expect(this.h.state.current[g.shard]?.token).toBe(g.token)
    }
    for (const s of r.pending) expect(r.assigned.some((g) => g.shard === s)).toBe(false)
  }

  /** Is this process live in the coordinator's eyes with the epoch it holds locally? */
  liveAs(m: SimMember): boolean {
    const e = this.h.state.members.get(m.id)
    if (e === undefined || m.epoch === 0) return false
    return e.incarnation === m.incarnation && e.memberEpoch === m.epoch
  }

  invariants(): void {
    const s = this.h.state
    // no shard with two live owners (members still reading or draining it)
    for (let shard = 0; shard < SHARDS; shard++) {
      const holders = this.members.filter((m) => m.tokens.has(shard) && this.liveAs(m))
      expect(
        holders.map((m) => m.id).length,
        `shard ${shard} held by ${holders.map((m) => m.id)}`,
      ).toBeLessThanOrEqual(1)
      // ...and at the storage: at most one process holds the shard's current token
      const valid = this.members.filter(
        (m) => m.tokens.has(shard) && m.tokens.get(shard) === this.h.storageTokens.get(shard),
      )
      expect(
        valid.length,
        `shard ${shard}: ${valid.length} processes hold the valid token`,
      ).toBeLessThanOrEqual(1)
      const cur = s.current[shard]
      if (cur != null) {
        expect(s.members.has(cur.memberId)).toBe(true)
        for (const h of holders) expect(h.id).toBe(cur.memberId)
      }
      const rev = s.revocations[shard]
      if (rev != null) expect(cur?.memberId).toBe(rev.memberId)
    }
    // epochs monotonic
    expect(s.groupEpoch).toBeGreaterThanOrEqual(this.groupEpoch)
    expect(s.assignmentEpoch).toBeGreaterThanOrEqual(this.assignmentEpoch)
    this.groupEpoch = s.groupEpoch
    this.assignmentEpoch = s.assignmentEpoch
    for (const m of s.members.values()) {
      const prev = this.maxEpoch.get(m.memberId) ?? 0
      expect(m.memberEpoch).toBeGreaterThanOrEqual(prev)
      this.maxEpoch.set(m.memberId, m.memberEpoch)
    }
    expect(s.storeRevision).toBe(this.h.commits.length)
  }
}

const run = (cmds: ReadonlyArray<Cmd>): void => {
  const w = new World()
  for (const c of cmds) {
    if (c.t === "hb") w.heartbeat(c.m, c.lose)
    else if (c.t === "leave") w.leave(c.m)
    else if (c.t === "leaving") w.leaving(c.m)
    else if (c.t === "replay") w.replay(c.m, c.back)
    else if (c.t === "crash") w.crash(c.m)
    else w.advance(c.ms)
    w.invariants()
  }
  // Liveness: inputs stop; every member that has not left heartbeats correctly.
  // 40 rounds of 1s: longer than the session timeout, so crashed members expire.
  for (let round = 0; round < 40; round++) {
    w.advance(1_000)
    w.members.forEach((_, i) => {
      if (w.active[i]) w.heartbeat(i, false)
    })
    w.invariants()
  }
  const s = w.h.state
  expect(s.revocations.every((r) => r === null)).toBe(true)
  const live = [...s.members.keys()].sort()
  expect(live).toEqual(
    [...new Set(w.members.filter((_, i) => w.active[i]).map((m) => m.id))].sort(),
  )
  for (let shard = 0; shard < SHARDS; shard++) {
    expect(s.current[shard]?.memberId ?? null).toBe(s.target[shard] ?? null)
    if (live.length > 0) expect(s.current[shard]?.confirmed).toBe(true)
  }
  if (live.length > 0) {
    // weighted balance: each live member owns floor or ceil of SHARDS * w / W
    const weightOf = (id: string) => WEIGHTS[Number(id.slice(1))]!
    const total = live.reduce((sum, id) => sum + weightOf(id), 0)
    for (const id of live) {
      expect(s.members.get(id)?.weight).toBe(weightOf(id))
      const quota = (SHARDS * weightOf(id)) / total
      const count = s.ownedBy.get(id)?.size ?? 0
      expect(count, `${id} owns ${count}, quota ${quota}`).toBeGreaterThanOrEqual(Math.floor(quota))
      expect(count, `${id} owns ${count}, quota ${quota}`).toBeLessThanOrEqual(Math.ceil(quota))
    }
  }
  // the store replays to the same state
  expect(w.h.stored()).toEqual(w.h.snapshot())
  // and a failover load of it reproduces it
  expect(Coordinator.load(w.h.stored(), w.h.now).state.target).toEqual(s.target)
}

describe("coordinator model", () => {
  it("safety after every step, convergence and balance after inputs stop", () => {
    fc.assert(
      fc.property(fc.array(cmdArb, { minLength: 1, maxLength: 80 }), (cmds) => run(cmds)),
      { numRuns: numRuns(300) },
    )
    // CPU-bound: about 10 s on an idle machine, 68 s at load 18 (past the 60 s default)
  }, 300_000)
})
