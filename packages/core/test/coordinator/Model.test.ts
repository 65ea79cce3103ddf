/**
 * Model-based test: random joins, leaves, heartbeats (some responses lost)
 * and time jumps past session and revoke timeouts, run against the real pure
 * handlers and the memory store. Members behave correctly: they drain and
 * report REVOKED, rejoin after UNKNOWN/FENCED, and self-fence when no
 * heartbeat succeeded for (session timeout - heartbeat interval).
 * FC_NUM_RUNS overrides the number of runs.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { Coordinator, type HeartbeatResponse } from "../../src/index.js"
import { config, Harness, SimMember } from "./harness.js"

type Cmd =
  | { readonly t: "hb"; readonly m: number; readonly lose: boolean }
  | { readonly t: "leave"; readonly m: number }
  | { readonly t: "crash"; readonly m: number }
  | { readonly t: "advance"; readonly ms: number }

const MEMBERS = 4
const SHARDS = 6
const cfg = config({ shardCount: SHARDS, sessionTimeoutMs: 30_000, rebalanceTimeoutMs: 10_000 })

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  {
    weight: 14,
    arbitrary: fc.record({
      t: fc.constant("hb" as const),
      m: fc.nat(MEMBERS - 1),
      lose: fc.oneof(
        { weight: 4, arbitrary: fc.constant(false) },
        { weight: 1, arbitrary: fc.constant(true) },
      ),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("leave" as const), m: fc.nat(MEMBERS - 1) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("crash" as const), m: fc.nat(MEMBERS - 1) }) },
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
  readonly members = Array.from({ length: MEMBERS }, (_, i) => new SimMember(`m${i}`))
  readonly active = new Array<boolean>(MEMBERS).fill(false)
  readonly lastOk = new Array<number>(MEMBERS).fill(0)
  readonly maxEpoch = new Map<string, number>()
  groupEpoch = 0
  assignmentEpoch = 0

  heartbeat(i: number, lose: boolean): void {
    const m = this.members[i]!
    this.active[i] = true
    m.left = false
    const revBefore = this.h.state.storeRevision
    const r = this.h.hb(m.request())
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
    const r = this.h.hb(m.epoch === 0 ? { memberId: m.id, memberEpoch: -1 } : m.leaveRequest())
    expect(this.h.state.storeRevision).toBe(revBefore + (r.records.length > 0 ? 1 : 0))
    m.reset()
    m.left = true
    this.active[i] = false
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

  /** Is the member live in the coordinator's eyes with the epoch it holds locally? */
  liveAs(m: SimMember): boolean {
    const e = this.h.state.members.get(m.id)
    if (e === undefined || e.state === "FENCED" || m.epoch === 0) return false
    return e.memberEpoch === m.epoch || e.previousMemberEpoch === m.epoch
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
      const cur = s.current[shard]
      if (cur != null) {
        expect(s.members.get(cur.memberId)?.state).not.toBe("FENCED")
        for (const h of holders) expect(h.id).toBe(cur.memberId)
      }
      const rev = s.revocations[shard]
      if (rev != null) expect(cur?.memberId).toBe(rev)
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
  expect(live).toEqual(w.members.filter((_, i) => w.active[i]).map((m) => m.id))
  for (let shard = 0; shard < SHARDS; shard++) {
    expect(s.current[shard]?.memberId ?? null).toBe(s.target[shard] ?? null)
    if (live.length > 0) expect(s.current[shard]?.confirmed).toBe(true)
  }
  if (live.length > 0) {
    const counts = live.map((id) => s.ownedBy.get(id)?.size ?? 0)
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1)
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
      { numRuns: Number(process.env.FC_NUM_RUNS ?? 300) },
    )
  })
})
