/**
 * Model test: random sequences of heartbeats, responses (errors, reorderings,
 * duplicates, losses), failures, read-loop starts, drains, ticks, notices and
 * leaves, checked after every step against a small reference model and an
 * independent record of which read loops the commands started and stopped.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { HeartbeatRequest, HeartbeatResponse } from "../../src/index.js"
import { MemberMachine } from "../../src/index.js"
import { numRuns } from "../assignor/arbitraries.js"

const SHARDS = 6
const config: MemberMachine.MemberConfig = {
  group: "orders",
  stream: "orders",
  memberId: "m0",
  incarnation: 1,
  memberInfo: { consumerName: "m0", host: "h" },
  safetyMarginMs: 2_000,
  heartbeatIntervalMs: 1_000,
}
/** The group's session timeout, carried by every answer. */
const SESSION_TIMEOUT_MS = 10_000
const SELF_FENCE_AFTER = SESSION_TIMEOUT_MS - config.safetyMarginMs!

const errorCode = fc.constantFrom(
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "NONE",
  "UNKNOWN_MEMBER_ID",
  "FENCED_MEMBER_EPOCH",
  "FENCED_INSTANCE_ID",
  "NOT_COORDINATOR",
  "COORDINATOR_LOAD_IN_PROGRESS",
  "INVALID_REQUEST",
) as fc.Arbitrary<HeartbeatResponse["errorCode"]>

/** A response, with epochs relative to what the member last accepted (so many are current). */
interface ResponseDraft {
  readonly errorCode: HeartbeatResponse["errorCode"]
  readonly memberEpochDelta: number
  readonly assignmentEpochDelta: number
  readonly assigned: HeartbeatResponse["assigned"]
  readonly pending: HeartbeatResponse["pending"]
  readonly revoking: NonNullable<HeartbeatResponse["revoking"]>
}

const responseArb: fc.Arbitrary<ResponseDraft> = fc.record({
  errorCode,
  memberEpochDelta: fc.constantFrom(-1, 0, 0, 0, 0, 1),
  assignmentEpochDelta: fc.constantFrom(-1, 0, 0, 1, 1, 2),
  assigned: fc.uniqueArray(
    fc.record({
      shard: fc.integer({ min: 0, max: SHARDS - 1 }),
      token: fc.integer({ min: 1, max: 2 }),
    }),
    { selector: (g) => g.shard, maxLength: SHARDS },
  ),
  pending: fc.uniqueArray(fc.integer({ min: 0, max: SHARDS - 1 }), { maxLength: 2 }),
  revoking: fc.uniqueArray(
    fc.record({
      shard: fc.integer({ min: 0, max: SHARDS - 1 }),
      token: fc.integer({ min: 1, max: 2 }),
    }),
    { selector: (g) => g.shard, maxLength: 2 },
  ),
})

type Action =
  | { readonly k: "send" }
  | { readonly k: "respond"; readonly pick: number; readonly response: ResponseDraft }
  | { readonly k: "fail"; readonly pick: number }
  | { readonly k: "started"; readonly pick: number }
  | { readonly k: "drain"; readonly pick: number }
  | { readonly k: "tick"; readonly dt: number }
  | { readonly k: "notice" }
  | { readonly k: "leave" }

/**
 * Swarm testing (as in TigerBeetle's VOPR): each run draws its own action
 * weights, so some runs lose most responses (and self-fence), some drain
 * eagerly, some tick slowly.
 */
const actionsArb = (w: {
  readonly respond: number
  readonly fail: number
  readonly drain: number
  readonly tick: number
}): fc.Arbitrary<Array<Action>> =>
  fc.array(
    fc.oneof(
      { weight: 8, arbitrary: fc.constant({ k: "send" as const }) },
      {
        weight: w.respond,
        arbitrary: fc.record({
          k: fc.constant("respond" as const),
          pick: fc.nat(),
          response: responseArb,
        }),
      },
      { weight: w.fail, arbitrary: fc.record({ k: fc.constant("fail" as const), pick: fc.nat() }) },
      { weight: 6, arbitrary: fc.record({ k: fc.constant("started" as const), pick: fc.nat() }) },
      {
        weight: w.drain,
        arbitrary: fc.record({ k: fc.constant("drain" as const), pick: fc.nat() }),
      },
      {
        weight: w.tick,
        arbitrary: fc.record({
          k: fc.constant("tick" as const),
          dt: fc.integer({ min: 0, max: 6_000 }),
        }),
      },
      { weight: 1, arbitrary: fc.constant({ k: "notice" as const }) },
    ),
    { minLength: 1, maxLength: 80 },
  )

const weightsArb = fc.record({
  respond: fc.integer({ min: 1, max: 16 }),
  fail: fc.integer({ min: 0, max: 4 }),
  drain: fc.integer({ min: 1, max: 10 }),
  tick: fc.integer({ min: 1, max: 8 }),
})

/** Random actions; in half of the runs a leave is requested somewhere. */
const scenarioArb = fc
  .tuple(weightsArb.chain(actionsArb), fc.option(fc.nat(), { freq: 2 }))
  .map(([actions, leaveAt]): Array<Action> => {
    if (leaveAt === null) return actions
    const at = leaveAt % (actions.length + 1)
    return [...actions.slice(0, at), { k: "leave" as const }, ...actions.slice(at)]
  })

interface Loop {
  token: number
  started: boolean
  stopping: boolean
  /** Stopped by StopAllShards (not by StopShard). */
  stoppedAll: boolean
}

const cmp = (a: number, b: number, c: number, d: number) => (a !== c ? a - c : b - d)

const run = (actions: ReadonlyArray<Action>) => {
  const state = MemberMachine.make(config, 0)
  let now = 0
  const sent: Array<{ seq: number; request: HeartbeatRequest; at: number }> = []
  // reference model of what the member may believe
  const model = {
    acceptFrom: 0,
    memberEpoch: 0,
    assignmentEpoch: 0,
    assigned: new Map<number, number>(),
    pending: new Set<number>(),
    /** Send time of the last request answered with an accepted NONE. */
    lastSuccess: 0,
    leaving: false,
    leaveSeq: 0,
    left: false,
    /** Holds a lease it acts on: an accepted NONE, no fence or lost lease since. */
    active: false,
  }
  // independent record of read loops, built only from commands
  const loops = new Map<number, Loop>()
  // shard -> seq of the first request that reported it REVOKED
  const revokedFirstSent = new Map<number, number>()

  const reset = () => {
    model.acceptFrom = sent.length + 1
    model.memberEpoch = 0
    model.assignmentEpoch = 0
    model.assigned.clear()
    model.pending.clear()
    model.active = false
  }
  /** docs/protocol.md rule 22: a lost lease keeps the epochs, drops the assignment. */
  const suspend = () => {
    model.assigned.clear()
    model.pending.clear()
    model.active = false
  }

  const execute = (commands: ReadonlyArray<MemberMachine.MemberCommand>) => {
    for (const c of commands) {
      switch (c._tag) {
        case "StartShard":
          // at most one read loop per shard, ever
          expect(loops.has(c.shard), `second loop for shard ${c.shard}`).toBe(false)
          loops.set(c.shard, { token: c.token, started: false, stopping: false, stoppedAll: false })
          break
        case "StopShard": {
          const loop = loops.get(c.shard)
          expect(loop, `StopShard of a shard not running: ${c.shard}`).toBeDefined()
          if (loop) loop.stopping = true
          break
        }
        case "StopAllShards":
          // every loop stops; each is reported drained once its work has ended
          for (const loop of loops.values()) {
            loop.stopping = true
            loop.stoppedAll = true
          }
          break
        default:
          break
      }
    }
  }

  for (const action of actions) {
    const before = MemberMachine.buildRequest(state)
    const beforeRevoked = new Set(
      before.revokingShards.filter((r) => r.state === "REVOKED").map((r) => r.shard),
    )
    let commands: Array<MemberMachine.MemberCommand> = []
    let acceptedNoneSeq = -1
    let expectFence = false
    let expectLeft = false
    let drainedToRevoked = -1

    switch (action.k) {
      case "send": {
        if (model.left) continue
        const next = MemberMachine.nextRequest(state, now)
        sent.push({ ...next, at: now })
        expect(next.seq).toBe(sent.length)
        for (const r of next.request.revokingShards)
          if (r.state === "REVOKED" && !revokedFirstSent.has(r.shard))
            revokedFirstSent.set(r.shard, next.seq)
        if (next.request.memberEpoch === -1 && model.leaveSeq === 0) model.leaveSeq = next.seq
        if (next.request.memberEpoch === 0) {
          expect(next.request.memberInfo).toEqual(config.memberInfo)
          // a join replaces the lifecycle of any earlier join: their answers are stale
          model.acceptFrom = next.seq
        }
        break
      }
      case "respond": {
        if (sent.length === 0) continue
        const { seq, at } = sent[action.pick % sent.length]!
        const d = action.response
        const r: HeartbeatResponse = {
          errorCode: d.errorCode,
          memberId: config.memberId,
          memberEpoch: Math.max(0, Math.max(1, model.memberEpoch) + d.memberEpochDelta),
          assignmentEpoch: Math.max(0, model.assignmentEpoch + d.assignmentEpochDelta),
          assigned: d.assigned,
          pending: d.pending,
          ...(d.revoking.length > 0 ? { revoking: d.revoking } : {}),
          heartbeatIntervalMs: 1_000,
          sessionTimeoutMs: SESSION_TIMEOUT_MS,
          rebalanceTimeoutMs: 10_000,
        }
        const fenceCode =
          r.errorCode === "UNKNOWN_MEMBER_ID" ||
          r.errorCode === "FENCED_MEMBER_EPOCH" ||
          r.errorCode === "FENCED_INSTANCE_ID"
        if (model.left) {
          // nothing happens after left
        } else if (
          model.leaving &&
          model.leaveSeq !== 0 &&
          seq >= model.leaveSeq &&
          (r.errorCode === "NONE" || fenceCode)
        ) {
          expectLeft = true
        } else if (seq >= model.acceptFrom && seq === sent.length) {
          // only the answer to the newest request counts (docs/protocol.md rule 18)
          // A NONE answer grants a lease from its request's send time, if that
          // is still known (the last MAX_TRACKED_REQUESTS sends) and not yet over.
          const leaseLeft =
            seq > sent.length - MemberMachine.MAX_TRACKED_REQUESTS && now - at < SELF_FENCE_AFTER
          if (
            r.errorCode === "NONE" &&
            leaseLeft &&
            cmp(r.memberEpoch, r.assignmentEpoch, model.memberEpoch, model.assignmentEpoch) >= 0
          ) {
            acceptedNoneSeq = seq
            model.acceptFrom = seq
            model.memberEpoch = r.memberEpoch
            model.assignmentEpoch = r.assignmentEpoch
            model.assigned = new Map(r.assigned.map((g) => [g.shard, g.token]))
            for (const p of r.pending) model.assigned.delete(p)
            model.pending = new Set(r.pending)
            model.lastSuccess = Math.max(model.lastSuccess, at)
            model.active = !model.leaving
          } else if (fenceCode) {
            if (model.leaving) expectLeft = true
            else expectFence = true
          }
        }
        commands = MemberMachine.step(state, { _tag: "ResponseReceived", seq, response: r, now })
        break
      }
      case "fail": {
        if (sent.length === 0) continue
        const { seq } = sent[action.pick % sent.length]!
        commands = MemberMachine.step(state, { _tag: "HeartbeatFailed", seq, now })
        break
      }
      case "started": {
        const starting = [...loops].filter(([, l]) => !l.started && !l.stopping)
        if (starting.length === 0) continue
        const [shard, loop] = starting[action.pick % starting.length]!
        loop.started = true
        commands = MemberMachine.step(state, { _tag: "ShardStarted", shard })
        break
      }
      case "drain": {
        const stopping = [...loops].filter(([, l]) => l.stopping)
        // Sometimes drain a shard that is not stopping at all: must be ignored.
        const shard =
          stopping.length === 0 || action.pick % 5 === 0
            ? action.pick % SHARDS
            : stopping[action.pick % stopping.length]![0]
        const loop = loops.get(shard)
        if (loop?.stopping) {
          loops.delete(shard)
          // a loop stopped by StopAllShards is reported REVOKED only when the
          // member is active again and the shard was revoked meanwhile
          if (!model.assigned.has(shard) && (!loop.stoppedAll || model.active))
            drainedToRevoked = shard
        } else if (loop) {
          // not stopping: a spurious drain notice; the loop keeps running
        }
        commands = MemberMachine.step(state, { _tag: "ShardDrained", shard })
        break
      }
      case "tick":
        now += action.dt
        commands = MemberMachine.step(state, { _tag: "Tick", now })
        break
      case "notice":
        commands = MemberMachine.step(state, { _tag: "NoticeReceived" })
        break
      case "leave":
        if (model.left) continue
        model.leaving = true
        commands = MemberMachine.step(state, { _tag: "LeaveRequested", now })
        break
    }

    const wasActive = model.active
    execute(commands)
    const lostLease = commands.some((c) => c._tag === "StopAllShards" && c.reason === "lease-lost")
    const selfFenced = commands.some(
      (c) =>
        c._tag === "StopAllShards" &&
        (c.reason === "lease-lost" || c.reason === "left" || c.reason === "leave-timeout"),
    )
    if (lostLease) {
      expect(wasActive || model.leaving, "a lease lost by a member without one").toBe(true)
      suspend()
    }
    if (expectFence || (selfFenced && !lostLease)) reset()
    if (commands.some((c) => c._tag === "Left")) {
      model.left = true
      reset()
    }

    // --- invariants, after every step ---
    const request = MemberMachine.buildRequest(state)
    const owned = MemberMachine.ownedShards(state)
    const revoking = request.revokingShards.map((r) => r.shard)

    // a loop that StopAllShards stopped and that has ended is started again
    // only while active and assigned (a lease came back)
    for (const c of commands)
      if (c._tag === "StartShard") {
        expect(model.active, `StartShard ${c.shard} while not active`).toBe(true)
        expect(model.assigned.get(c.shard)).toBe(c.token)
      }
    // never reading a shard that is not in the last accepted `assigned` (with its token)
    for (const [shard, loop] of loops) {
      if (loop.stopping) continue
      expect(model.assigned.get(shard), `reading unassigned shard ${shard}`).toBe(loop.token)
      expect(model.pending.has(shard)).toBe(false)
    }
    for (const shard of owned)
      expect(model.assigned.get(shard)).toBe(MemberMachine.tokenOf(state, shard))
    // the machine's owned set is exactly the running (non-stopping) loops
    expect(owned).toEqual(
      [...loops]
        .filter(([, l]) => !l.stopping)
        .map(([s]) => s)
        .sort((a, b) => a - b),
    )
    // rule 14: SendHeartbeat only when no request is in flight
    if (commands.some((c) => c._tag === "SendHeartbeat")) expect(state.inFlightSeq).toBe(0)
    const reading = [...loops.values()].filter((l) => !l.stopping).length
    // a runtime sleeping until nextDeadline never overshoots the lease
    if (reading > 0 && !model.left)
      expect(MemberMachine.nextDeadline(state)!).toBeLessThanOrEqual(
        model.lastSuccess + SELF_FENCE_AFTER,
      )
    // never both owned and revoking; no duplicates
    expect(new Set([...owned, ...revoking]).size).toBe(owned.length + revoking.length)
    // after UNKNOWN_MEMBER_ID / FENCED: nothing owned, next request epoch 0 + memberInfo
    if (expectFence) {
      expect(commands[0]).toMatchObject({ _tag: "StopAllShards" })
      expect(owned).toEqual([])
      expect(revoking).toEqual([])
      expect(request.memberEpoch).toBe(0)
      expect(request.memberInfo).toEqual(config.memberInfo)
    }
    // rule 19: a fenced member joins only once every stopped loop has ended
    if (
      state.lifecycle === "fenced" &&
      [...loops.values()].some((l) => l.stopping) &&
      commands.some((c) => c._tag === "SendHeartbeat")
    )
      expect.fail("a fenced member asked to send its join while a stopped loop still runs")
    if (lostLease) {
      // rule 22: suspended, same epochs, nothing owned
      expect(owned).toEqual([])
      expect(request.memberEpoch).toBe(model.memberEpoch)
    }
    if (expectLeft) expect(MemberMachine.phase(state)).toBe("left")
    if (model.left) {
      expect(MemberMachine.phase(state)).toBe("left")
      expect(reading).toBe(0)
    }
    // the machine agrees with the model on what it accepted
    expect([state.memberEpoch, state.assignmentEpoch]).toEqual([
      model.memberEpoch,
      model.assignmentEpoch,
    ])
    expect(state.lastSuccessAt).toBe(model.lastSuccess)
    // self-fencing: the member never owns or reads a shard at `now` once the
    // SEND time of its last successful heartbeat is sessionTimeout - safetyMargin
    // ago (after any step, not only ticks: a late answer must not revive it)
    if (now - model.lastSuccess >= SELF_FENCE_AFTER) {
      expect(reading, "reading after the lease ran out").toBe(0)
      expect(owned).toEqual([])
    }
    // a drained, no-longer-assigned shard is reported REVOKED on the next heartbeat
    if (drainedToRevoked >= 0 && !model.leaving && !model.left) {
      expect(
        request.revokingShards.some((r) => r.shard === drainedToRevoked && r.state === "REVOKED"),
      ).toBe(true)
      revokedFirstSent.delete(drainedToRevoked)
    }
    // ... and keeps being reported until accepted, reassigned, fenced or left
    const nowRevoked = new Set(
      request.revokingShards.filter((r) => r.state === "REVOKED").map((r) => r.shard),
    )
    for (const shard of beforeRevoked) {
      if (nowRevoked.has(shard)) continue
      const first = revokedFirstSent.get(shard)
      const accepted = acceptedNoneSeq >= 0 && first !== undefined && acceptedNoneSeq >= first
      const justified =
        accepted ||
        model.assigned.has(shard) ||
        expectFence ||
        selfFenced ||
        model.leaving ||
        model.left
      expect(justified, `REVOKED report for ${shard} dropped without acceptance`).toBe(true)
    }
    for (const shard of revokedFirstSent.keys())
      if (!nowRevoked.has(shard)) revokedFirstSent.delete(shard)
  }
}

/**
 * A counterexample a CI run found (fast-check seed 1441007560): fenced with a
 * loop still stopping, a leave is asked (it waits for the loop, rule 19), a
 * join is sent out of turn and answered with shard 1: the machine started
 * shard 1 although leaving. It now begins the leave instead.
 */
const leaveAskedThenJoinAnswered: Array<Action> = JSON.parse(
  '[{"k":"send"},{"k":"drain","pick":0},{"k":"respond","pick":0,"response":{"errorCode":"NONE","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[{"shard":0,"token":1}],"pending":[],"revoking":[]}},{"k":"notice"},{"k":"respond","pick":0,"response":{"errorCode":"NONE","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[],"pending":[],"revoking":[]}},{"k":"respond","pick":0,"response":{"errorCode":"FENCED_MEMBER_EPOCH","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[],"pending":[],"revoking":[]}},{"k":"leave"},{"k":"send"},{"k":"respond","pick":20836111,"response":{"errorCode":"NONE","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[{"shard":1,"token":1}],"pending":[],"revoking":[]}},{"k":"respond","pick":0,"response":{"errorCode":"NONE","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[],"pending":[],"revoking":[]}},{"k":"tick","dt":0}]',
)

/**
 * A counterexample a CI run found (fast-check seed 1988235631): fenced with a
 * loop still stopping, a leave is asked (it waits for the loop, rule 19), a
 * join is sent out of turn and answered FENCED_MEMBER_EPOCH: the machine
 * stayed fenced, to rejoin later, although the leave was asked. A fence
 * answer now ends the leave, as it does for a member already leaving.
 */
const leaveAskedThenJoinFenced: Array<Action> = JSON.parse(
  '[{"k":"send"},{"k":"respond","pick":0,"response":{"errorCode":"NONE","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[{"shard":0,"token":1}],"pending":[],"revoking":[]}},{"k":"respond","pick":0,"response":{"errorCode":"UNKNOWN_MEMBER_ID","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[],"pending":[],"revoking":[]}},{"k":"leave"},{"k":"send"},{"k":"respond","pick":403142305,"response":{"errorCode":"FENCED_MEMBER_EPOCH","memberEpochDelta":-1,"assignmentEpochDelta":-1,"assigned":[],"pending":[],"revoking":[]}}]',
)

describe("MemberMachine model", () => {
  it("keeps its safety invariants under random responses, reorderings, losses and drains", () => {
    fc.assert(
      fc.property(scenarioArb, (actions) => run(actions)),
      {
        numRuns: numRuns(1_000),
        examples: [[leaveAskedThenJoinAnswered], [leaveAskedThenJoinFenced]],
      },
    )
  })
})
