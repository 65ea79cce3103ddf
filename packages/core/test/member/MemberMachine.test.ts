import { describe, expect, it } from "vitest"
import type { HeartbeatResponse } from "../../src/index.js"
import { MemberMachine } from "../../src/index.js"

const config: MemberMachine.MemberConfig = {
  group: "orders",
  stream: "orders",
  memberId: "pod-1-m0",
  incarnation: 1,
  memberInfo: { consumerName: "pod-1-m0", host: "10.0.0.1" },
  safetyMarginMs: 2_000,
  heartbeatIntervalMs: 1_000,
  retryBackoffInitialMs: 100,
  retryBackoffMaxMs: 1_000,
}

const response = (overrides: Partial<HeartbeatResponse> = {}): HeartbeatResponse => ({
  errorCode: "NONE",
  memberId: config.memberId,
  memberEpoch: 1,
  assignmentEpoch: 1,
  assigned: [],
  pending: [],
  heartbeatIntervalMs: 1_000,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
  ...overrides,
})

/** The request the member would send now, without its per-request `seq`. */
const requestView = (state: MemberMachine.MemberState) => {
  const { seq: _seq, ...rest } = MemberMachine.buildRequest(state)
  return rest
}

const grants = (...shards: Array<number>) => shards.map((shard) => ({ shard, token: shard + 1 }))

/** Send the next request and deliver `r` as its answer at `now`. */
const roundTrip = (state: MemberMachine.MemberState, r: HeartbeatResponse, now = 0) => {
  const { seq, request } = MemberMachine.nextRequest(state, now)
  const commands = MemberMachine.step(state, { _tag: "ResponseReceived", seq, response: r, now })
  return { seq, request, commands }
}

const tags = (commands: ReadonlyArray<MemberMachine.MemberCommand>) => commands.map((c) => c._tag)

/** A member that joined and reads shards 0, 1, 2 (read loops started). */
const stableMember = () => {
  const state = MemberMachine.make(config, 0)
  roundTrip(state, response({ assigned: grants(0, 1, 2) }))
  for (const shard of [0, 1, 2]) MemberMachine.step(state, { _tag: "ShardStarted", shard })
  return state
}

describe("MemberMachine", () => {
  it("finding F1: the answer to an earlier join, arriving after a retried join was sent, is ignored", () => {
    const state = MemberMachine.make(config, 0)
    const first = MemberMachine.nextRequest(state, 0)
    MemberMachine.step(state, { _tag: "HeartbeatFailed", seq: first.seq, now: 10 })
    const retry = MemberMachine.nextRequest(state, 200)
    expect(retry.request.memberEpoch).toBe(0)
    // the coordinator handled the first join too: its lifecycle ends with the retry's
    const late = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: first.seq,
      response: response({ memberEpoch: 3, assigned: grants(0, 1) }),
      now: 250,
    })
    expect(tags(late)).not.toContain("StartShard")
    expect(state.memberEpoch).toBe(0)
    const answer = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: retry.seq,
      response: response({ memberEpoch: 4, assigned: grants(2) }),
      now: 300,
    })
    expect(answer.filter((c) => c._tag === "StartShard").map((c) => c.shard)).toEqual([2])
    expect(state.memberEpoch).toBe(4)
  })

  it("join: the first heartbeat is a full heartbeat with epoch 0 and memberInfo", () => {
    const state = MemberMachine.make(config, 0)
    expect(MemberMachine.phase(state)).toBe("joining")
    const request = MemberMachine.buildRequest(state)
    expect(request.memberEpoch).toBe(0)
    expect(request.memberInfo).toEqual(config.memberInfo)
    expect(tags(MemberMachine.step(state, { _tag: "Tick", now: 0 }))).toEqual(["SendHeartbeat"])
  })

  it("starts reading only assigned shards, never pending ones", () => {
    const state = MemberMachine.make(config, 0)
    const { commands } = roundTrip(state, response({ assigned: grants(0, 1), pending: [2, 3] }))
    expect(commands).toEqual([
      { _tag: "StartShard", shard: 0, token: 1 },
      { _tag: "StartShard", shard: 1, token: 2 },
    ])
    expect(MemberMachine.phase(state)).toBe("reconciling")
    MemberMachine.step(state, { _tag: "ShardStarted", shard: 0 })
    const last = MemberMachine.step(state, { _tag: "ShardStarted", shard: 1 })
    expect(MemberMachine.phase(state)).toBe("stable")
    expect(tags(last)).toEqual(["SendHeartbeat"])
    expect(MemberMachine.buildRequest(state).ownedShards).toEqual([0, 1])
    expect(MemberMachine.buildRequest(state).memberInfo).toBeUndefined()
  })

  it("a shard both assigned and pending is not read", () => {
    const state = MemberMachine.make(config, 0)
    const { commands } = roundTrip(state, response({ assigned: grants(0, 1), pending: [1] }))
    expect(commands).toEqual([{ _tag: "StartShard", shard: 0, token: 1 }])
  })

  it("revoke: stop reads, drain, report REVOKING then REVOKED", () => {
    const state = stableMember()
    const { commands } = roundTrip(
      state,
      response({ assignmentEpoch: 2, assigned: grants(0, 2) }),
      10,
    )
    expect(commands).toEqual([{ _tag: "StopShard", shard: 1 }])
    expect(MemberMachine.buildRequest(state).ownedShards).toEqual([0, 2])
    expect(MemberMachine.buildRequest(state).revokingShards).toEqual([
      { shard: 1, state: "REVOKING", token: 2 },
    ])
    const drained = MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
    expect(tags(drained)).toEqual(["SendHeartbeat"])
    expect(MemberMachine.buildRequest(state).revokingShards).toEqual([
      { shard: 1, state: "REVOKED", token: 2 },
    ])
  })

  it("keeps reporting REVOKED until a response to a request carrying it is accepted", () => {
    const state = stableMember()
    roundTrip(state, response({ assignmentEpoch: 2, assigned: grants(0, 2) }), 10)
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
    // First REVOKED report is lost.
    const lost = MemberMachine.nextRequest(state, 20)
    expect(lost.request.revokingShards).toEqual([{ shard: 1, state: "REVOKED", token: 2 }])
    MemberMachine.step(state, { _tag: "HeartbeatFailed", seq: lost.seq, now: 30 })
    // The retry still carries it (duplicates are fine) ...
    const retry = MemberMachine.nextRequest(state, 40)
    expect(retry.request.revokingShards).toEqual([{ shard: 1, state: "REVOKED", token: 2 }])
    // ... and a NOT_COORDINATOR answer does not count as accepted.
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: retry.seq,
      response: response({ errorCode: "NOT_COORDINATOR", assignmentEpoch: 2 }),
      now: 50,
    })
    const { request } = roundTrip(
      state,
      response({ assignmentEpoch: 2, assigned: grants(0, 2) }),
      60,
    )
    expect(request.revokingShards).toEqual([{ shard: 1, state: "REVOKED", token: 2 }])
    expect(MemberMachine.buildRequest(state).revokingShards).toEqual([])
    expect(MemberMachine.phase(state)).toBe("stable")
  })

  it("a response to a request sent before the drain does not acknowledge REVOKED", () => {
    const state = stableMember()
    roundTrip(state, response({ assignmentEpoch: 2, assigned: grants(0, 2) }), 10)
    const inFlight = MemberMachine.nextRequest(state, 11) // carries REVOKING, not REVOKED
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: inFlight.seq,
      response: response({ assignmentEpoch: 2, assigned: grants(0, 2) }),
      now: 12,
    })
    expect(MemberMachine.buildRequest(state).revokingShards).toEqual([
      { shard: 1, state: "REVOKED", token: 2 },
    ])
  })

  it("a shard given back while draining is read again once drained, with the new token", () => {
    const state = stableMember()
    roundTrip(state, response({ assignmentEpoch: 2, assigned: grants(0, 2) }), 10)
    roundTrip(
      state,
      response({ assignmentEpoch: 3, assigned: [...grants(0, 2), { shard: 1, token: 9 }] }),
      20,
    )
    expect(MemberMachine.buildRequest(state).ownedShards).toEqual([0, 2])
    const drained = MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
    expect(drained).toEqual([{ _tag: "StartShard", shard: 1, token: 9 }])
  })

  it.each(["UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"] as const)(
    "%s: stop reads and acks, clear owned and revoking, rejoin with same memberId and epoch 0 once every loop stopped",
    (errorCode) => {
      const state = stableMember()
      roundTrip(state, response({ assignmentEpoch: 2, assigned: grants(0) }), 10)
      MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
      const { commands } = roundTrip(
        state,
        response({ errorCode, memberEpoch: 0, assignmentEpoch: 0 }),
        20,
      )
      // shard 0 (reading) and 2 (draining) are still stopping: no join yet,
      // since the join releases the shards held for this member (rule 19)
      expect(tags(commands)).toEqual(["StopAllShards"])
      expect(MemberMachine.phase(state)).toBe("fenced")
      expect(MemberMachine.nextDeadline(state)).toBe(Number.POSITIVE_INFINITY)
      expect(MemberMachine.step(state, { _tag: "Tick", now: 5_000 })).toEqual([])
      const request = MemberMachine.buildRequest(state)
      expect(request.memberId).toBe(config.memberId)
      expect(request.memberEpoch).toBe(0)
      expect(request.memberInfo).toEqual(config.memberInfo)
      expect(request.ownedShards).toEqual([])
      expect(request.revokingShards).toEqual([])
      expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 })).toEqual([])
      expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 2 })).toEqual([
        { _tag: "SendHeartbeat" },
      ])
      // The rejoin is answered: back to normal with a fresh epoch.
      const rejoin = roundTrip(state, response({ memberEpoch: 5, assigned: grants(3) }), 30)
      expect(rejoin.commands).toEqual([{ _tag: "StartShard", shard: 3, token: 4 }])
    },
  )

  // A leave used to send at once: an epoch-0 request, which the coordinator
  // takes as a join, the proof that this process stopped (rule 19), so it
  // granted a shard again while a handler past its abort still ran on it
  // (simulator, swarm seed 7060 with handler-ignores-abort).
  it("a leave asked while fenced with stopped loops still running sends nothing until they end, then leaves", () => {
    const state = stableMember()
    const fenced = roundTrip(
      state,
      response({ errorCode: "UNKNOWN_MEMBER_ID", memberEpoch: 0, assignmentEpoch: 0 }),
      10,
    )
    expect(tags(fenced.commands)).toEqual(["StopAllShards"])
    expect(MemberMachine.step(state, { _tag: "LeaveRequested", now: 20 })).toEqual([])
    expect(MemberMachine.phase(state)).toBe("fenced")
    // the leave timeout still bounds it (session 10 s from the answer)
    expect(MemberMachine.nextDeadline(state)).toBe(20 + 10_000)
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 })).toEqual([])
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })).toEqual([])
    // the last loop ended: the leave begins, and only now is a request sent
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 2 })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
    expect(MemberMachine.phase(state)).toBe("leaving")
  })

  it("a leave asked while fenced, whose stopped loop never ends, ends at the leave timeout without a request", () => {
    const state = stableMember()
    roundTrip(
      state,
      response({ errorCode: "UNKNOWN_MEMBER_ID", memberEpoch: 0, assignmentEpoch: 0 }),
      10,
    )
    MemberMachine.step(state, { _tag: "LeaveRequested", now: 20 })
    expect(MemberMachine.step(state, { _tag: "Tick", now: 10_019 })).toEqual([])
    expect(tags(MemberMachine.step(state, { _tag: "Tick", now: 10_020 }))).toContain("Left")
    expect(MemberMachine.phase(state)).toBe("left")
  })

  it.each(["NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"] as const)(
    "%s: keep state and retry with backoff",
    (errorCode) => {
      const state = stableMember()
      const before = requestView(state)
      const first = roundTrip(state, response({ errorCode, memberEpoch: 0 }), 100)
      expect(first.commands).toEqual([])
      expect(requestView(state)).toEqual(before)
      expect(state.nextHeartbeatAt).toBe(200)
      roundTrip(state, response({ errorCode }), 200)
      expect(state.nextHeartbeatAt).toBe(400)
      expect(MemberMachine.step(state, { _tag: "Tick", now: 399 })).toEqual([])
      expect(tags(MemberMachine.step(state, { _tag: "Tick", now: 400 }))).toEqual(["SendHeartbeat"])
      // Success resets the backoff.
      roundTrip(state, response({ assigned: grants(0, 1, 2) }), 500)
      expect(state.failures).toBe(0)
      expect(state.nextHeartbeatAt).toBe(1_500)
    },
  )

  it("a failed heartbeat (transport error, timeout) keeps ownership and retries with backoff", () => {
    const state = stableMember()
    const before = requestView(state)
    const sent = MemberMachine.nextRequest(state, 1_000)
    expect(
      MemberMachine.step(state, { _tag: "HeartbeatFailed", seq: sent.seq, now: 1_500 }),
    ).toEqual([])
    expect(requestView(state)).toEqual(before)
    expect(state.nextHeartbeatAt).toBe(1_600)
    expect(tags(MemberMachine.step(state, { _tag: "Tick", now: 1_600 }))).toEqual(["SendHeartbeat"])
  })

  it("INVALID_REQUEST: a typed error is surfaced and ownership is unchanged", () => {
    const state = stableMember()
    const before = requestView(state)
    const { commands } = roundTrip(
      state,
      response({ errorCode: "INVALID_REQUEST", errorMessage: "bad shard" }),
      10,
    )
    expect(commands).toHaveLength(1)
    const [command] = commands
    expect(command?._tag).toBe("RequestRejected")
    if (command?._tag !== "RequestRejected") throw new Error("unreachable")
    expect(command.error._tag).toBe("HeartbeatRejected")
    expect(command.error.message).toBe("bad shard")
    expect(requestView(state)).toEqual(before)
  })

  it("a lost lease: no answer for sessionTimeout - safetyMargin stops every loop, keeps the epoch (rule 22)", () => {
    const state = stableMember()
    const failed = MemberMachine.nextRequest(state, 1_000)
    MemberMachine.step(state, { _tag: "HeartbeatFailed", seq: failed.seq, now: 2_000 })
    expect(MemberMachine.step(state, { _tag: "Tick", now: 7_999 })).not.toContainEqual({
      _tag: "StopAllShards",
      reason: "lease-lost",
    })
    const commands = MemberMachine.step(state, { _tag: "Tick", now: 8_000 })
    expect(commands).toContainEqual({ _tag: "StopAllShards", reason: "lease-lost" })
    expect(MemberMachine.phase(state)).toBe("suspended")
    expect(MemberMachine.ownedShards(state)).toEqual([])
    expect(MemberMachine.leaseValid(state, 8_000)).toBe(false)
    // no rejoin: the same epoch, no memberInfo
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(1)
    expect(MemberMachine.buildRequest(state).memberInfo).toBeUndefined()
    for (const shard of [0, 1, 2]) MemberMachine.step(state, { _tag: "ShardDrained", shard })
    // an answer that grants a fresh lease resumes it with the same tokens
    const resumed = roundTrip(state, response({ assigned: grants(0, 1, 2) }), 9_000)
    expect(resumed.request.memberEpoch).toBe(1)
    expect(resumed.commands.filter((c) => c._tag === "StartShard")).toEqual([
      { _tag: "StartShard", shard: 0, token: 1 },
      { _tag: "StartShard", shard: 1, token: 2 },
      { _tag: "StartShard", shard: 2, token: 3 },
    ])
    expect(MemberMachine.phase(state)).toBe("reconciling")
    expect(state.memberEpoch).toBe(1)
  })

  it("a suspended member whose loops have not ended yet restarts each once it has", () => {
    const state = stableMember()
    expect(MemberMachine.step(state, { _tag: "Tick", now: 8_000 })).toContainEqual({
      _tag: "StopAllShards",
      reason: "lease-lost",
    })
    const resumed = roundTrip(state, response({ assigned: grants(0, 1) }), 9_000)
    expect(tags(resumed.commands)).not.toContain("StartShard")
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 })).toEqual([
      { _tag: "StartShard", shard: 0, token: 1 },
    ])
    // shard 2 was revoked while it was stopped: reported REVOKED once it ended
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 2 })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
    expect(MemberMachine.buildRequest(state).revokingShards).toEqual([
      { shard: 2, state: "REVOKED", token: 3 },
    ])
  })

  it("a suspended member answered UNKNOWN_MEMBER_ID rejoins (the coordinator expired it)", () => {
    const state = stableMember()
    MemberMachine.step(state, { _tag: "Tick", now: 8_000 })
    for (const shard of [0, 1, 2]) MemberMachine.step(state, { _tag: "ShardDrained", shard })
    const { commands } = roundTrip(
      state,
      response({ errorCode: "UNKNOWN_MEMBER_ID", memberEpoch: 0 }),
      9_000,
    )
    expect(tags(commands)).toEqual(["StopAllShards", "SendHeartbeat"])
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(0)
  })

  it("lease is measured from the send time of the answered request", () => {
    const state = stableMember()
    // Sent at t0 = 1_000, answered at t0 + 3_000: the coordinator's session
    // deadline started somewhere in between, so the lease runs from t0.
    const sent = MemberMachine.nextRequest(state, 1_000)
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: sent.seq,
      response: response({ assigned: grants(0, 1, 2) }),
      now: 4_000,
    })
    expect(state.lastSuccessAt).toBe(1_000)
    expect(MemberMachine.step(state, { _tag: "Tick", now: 8_999 })).not.toContainEqual({
      _tag: "StopAllShards",
      reason: "lease-lost",
    })
    // t0 + sessionTimeout - safetyMargin, not 4_000 + 8_000
    const commands = MemberMachine.step(state, { _tag: "Tick", now: 9_000 })
    expect(commands).toContainEqual({ _tag: "StopAllShards", reason: "lease-lost" })
    expect(MemberMachine.ownedShards(state)).toEqual([])
  })

  it("a late answer that grants no lease any more does not restart shards; a timely one does", () => {
    // The lease ran out (Tick); then the answer to an earlier request (sent at
    // 1_000) arrives: it is not the newest request, so it is dropped.
    const suspended = stableMember()
    const before = MemberMachine.nextRequest(suspended, 1_000)
    MemberMachine.step(suspended, { _tag: "HeartbeatFailed", seq: before.seq, now: 1_500 })
    MemberMachine.nextRequest(suspended, 1_600)
    expect(MemberMachine.step(suspended, { _tag: "Tick", now: 8_000 })).toContainEqual({
      _tag: "StopAllShards",
      reason: "lease-lost",
    })
    for (const shard of [0, 1, 2]) MemberMachine.step(suspended, { _tag: "ShardDrained", shard })
    const older = MemberMachine.step(suspended, {
      _tag: "ResponseReceived",
      seq: before.seq,
      response: response({ assignmentEpoch: 2, assigned: grants(0, 1, 2, 3) }),
      now: 8_500,
    })
    expect(older).toEqual([])
    expect(MemberMachine.ownedShards(suspended)).toEqual([])

    // The lease was due but the member was paused (GC): the late answer is
    // the first thing it sees. Its request was sent at 1_000, so the lease it
    // would grant ended at 9_000: it suspends, never starts shards.
    const paused = stableMember()
    const old = MemberMachine.nextRequest(paused, 1_000)
    const late = MemberMachine.step(paused, {
      _tag: "ResponseReceived",
      seq: old.seq,
      response: response({ assignmentEpoch: 2, assigned: grants(0, 1, 2, 3) }),
      now: 9_500,
    })
    expect(tags(late)).not.toContain("StartShard")
    expect(late).toContainEqual({ _tag: "StopAllShards", reason: "lease-lost" })
    expect(MemberMachine.ownedShards(paused)).toEqual([])
    expect(MemberMachine.buildRequest(paused).memberEpoch).toBe(1)
    for (const shard of [0, 1, 2]) MemberMachine.step(paused, { _tag: "ShardDrained", shard })

    // Same for an answer that arrives after the lease it would grant.
    const again = MemberMachine.nextRequest(paused, 9_600)
    const slow = MemberMachine.step(paused, {
      _tag: "ResponseReceived",
      seq: again.seq,
      response: response({ assignmentEpoch: 3, assigned: grants(0, 1) }),
      now: 9_600 + 8_000,
    })
    expect(tags(slow)).not.toContain("StartShard")
    expect(MemberMachine.ownedShards(paused)).toEqual([])
    // ... while a timely answer to the next one is applied, its lease measured from its send.
    const next = MemberMachine.nextRequest(paused, 17_700)
    const ok = MemberMachine.step(paused, {
      _tag: "ResponseReceived",
      seq: next.seq,
      response: response({ assignmentEpoch: 3, assigned: grants(0, 1) }),
      now: 17_800,
    })
    expect(tags(ok)).toEqual(["StartShard", "StartShard"])
    expect(paused.lastSuccessAt).toBe(17_700)
    expect(paused.memberEpoch).toBe(1)
  })

  it("rule 18: only the answer to the newest request is applied (finding F2)", () => {
    const state = stableMember()
    // n times out; n+1 is sent; both are answered, n's from a newer state
    const n = MemberMachine.nextRequest(state, 1_000)
    MemberMachine.step(state, { _tag: "HeartbeatFailed", seq: n.seq, now: 1_200 })
    const n1 = MemberMachine.nextRequest(state, 1_300)
    const newer = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: n.seq,
      response: response({ assignmentEpoch: 1, assigned: grants(0, 1, 2, 3) }),
      now: 1_400,
    })
    expect(newer).toEqual([])
    const answer = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: n1.seq,
      response: response({ assignmentEpoch: 1, assigned: grants(0, 1, 2) }),
      now: 1_500,
    })
    // nothing to stop or report: the older content never replaced a newer one
    expect(tags(answer)).not.toContain("StopShard")
    expect(MemberMachine.buildRequest(state).revokingShards).toEqual([])
    expect(MemberMachine.ownedShards(state)).toEqual([0, 1, 2])
    // a failure of an earlier request changes nothing either
    MemberMachine.nextRequest(state, 2_000)
    expect(MemberMachine.step(state, { _tag: "HeartbeatFailed", seq: n.seq, now: 2_100 })).toEqual(
      [],
    )
    expect(state.failures).toBe(0)
  })

  it("rule 24: requests carry the process's instance", () => {
    const state = MemberMachine.make({ ...config, instance: "0123456789abcdef" }, 0)
    expect(MemberMachine.nextRequest(state, 0).request.instance).toBe("0123456789abcdef")
  })

  it("send times are kept only for a bounded number of outstanding requests", () => {
    const state = stableMember()
    for (let i = 0; i < 1_000; i++) MemberMachine.nextRequest(state, 10 + i)
    expect(state.sentAt.size).toBeLessThanOrEqual(MemberMachine.MAX_TRACKED_REQUESTS)
    // A response to a request whose send time was forgotten cannot extend the lease.
    const commands = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: 3,
      response: response({ assignmentEpoch: 2, assigned: grants(0, 1, 2, 3) }),
      now: 1_100,
    })
    expect(tags(commands)).not.toContain("StartShard")
    expect(state.lastSuccessAt).toBe(0)
    // Answering a request prunes the send times of the older ones.
    const last = MemberMachine.nextRequest(state, 1_200)
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: last.seq,
      response: response({ assigned: grants(0, 1, 2) }),
      now: 1_300,
    })
    expect([...state.sentAt.keys()]).toEqual([last.seq])
  })

  it("layout in the response updates metadataVersion", () => {
    const state = stableMember()
    const { commands } = roundTrip(
      state,
      response({
        assigned: grants(0, 1, 2),
        layout: { shardCount: 8, generation: 3, firstShard: 20 },
      }),
    )
    expect(commands).toEqual([
      { _tag: "LayoutChanged", layout: { shardCount: 8, generation: 3, firstShard: 20 } },
    ])
    expect(state.metadataVersion).toBe(3)
    expect(MemberMachine.buildRequest(state).metadataVersion).toBe(3)
  })

  it("leave: stop all, drain, then send epoch -1; the answer makes the member left", () => {
    const state = stableMember()
    const commands = MemberMachine.step(state, { _tag: "LeaveRequested", now: 10 })
    expect(commands).toEqual([
      { _tag: "StopShard", shard: 0 },
      { _tag: "StopShard", shard: 1 },
      { _tag: "StopShard", shard: 2 },
    ])
    expect(MemberMachine.phase(state)).toBe("leaving")
    // While draining, heartbeats keep the session alive and report REVOKING.
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(1)
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 })
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })
    expect(MemberMachine.buildRequest(state).memberEpoch).toBe(1)
    MemberMachine.step(state, { _tag: "ShardDrained", shard: 2 })
    const { request, commands: done } = roundTrip(state, response({ memberEpoch: -1 }), 20)
    expect(request.memberEpoch).toBe(-1)
    expect(request.ownedShards).toEqual([])
    expect(request.revokingShards).toEqual([])
    expect(tags(done)).toContain("Left")
    expect(MemberMachine.phase(state)).toBe("left")
    expect(MemberMachine.step(state, { _tag: "NoticeReceived" })).toEqual([])
  })

  it("leave: a response to an older request does not start new shards", () => {
    const state = stableMember()
    const old = MemberMachine.nextRequest(state, 5)
    MemberMachine.step(state, { _tag: "LeaveRequested", now: 10 })
    const commands = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: old.seq,
      response: response({ assignmentEpoch: 2, assigned: grants(0, 1, 2, 3) }),
      now: 11,
    })
    // no shard starts; the heartbeat the leave asked for goes out once the old one ended
    expect(commands).toEqual([{ _tag: "SendHeartbeat" }])
    expect(MemberMachine.ownedShards(state)).toEqual([])
  })

  it("ignores a response older than the last applied one (reordering cannot resurrect ownership)", () => {
    const state = stableMember()
    const older = MemberMachine.nextRequest(state, 10)
    const newer = MemberMachine.nextRequest(state, 11)
    MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: newer.seq,
      response: response({ assignmentEpoch: 2, assigned: grants(0) }),
      now: 12,
    })
    const stale = MemberMachine.step(state, {
      _tag: "ResponseReceived",
      seq: older.seq,
      response: response({ assignmentEpoch: 1, assigned: grants(0, 1, 2) }),
      now: 13,
    })
    expect(stale).toEqual([])
    expect(MemberMachine.ownedShards(state)).toEqual([0])
  })

  it("ignores a response carrying an older assignmentEpoch or memberEpoch even in order", () => {
    const state = stableMember()
    roundTrip(state, response({ memberEpoch: 2, assignmentEpoch: 4, assigned: grants(0) }))
    expect(
      roundTrip(state, response({ memberEpoch: 2, assignmentEpoch: 3, assigned: grants(0, 1) }))
        .commands,
    ).toEqual([])
    expect(
      roundTrip(state, response({ memberEpoch: 1, assignmentEpoch: 9, assigned: grants(0, 1) }))
        .commands,
    ).toEqual([])
    expect(MemberMachine.ownedShards(state)).toEqual([0])
  })

  it("a look-again notice asks for a heartbeat now, once; while one is in flight, right after it", () => {
    const state = stableMember()
    roundTrip(state, response({ assigned: grants(0, 1, 2) })) // the confirmation it asked for
    expect(MemberMachine.step(state, { _tag: "NoticeReceived" })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
    expect(MemberMachine.step(state, { _tag: "NoticeReceived" })).toEqual([])
    const sent = MemberMachine.nextRequest(state, 1)
    // rule 14: one request in flight; the notice waits for its end
    expect(MemberMachine.step(state, { _tag: "NoticeReceived" })).toEqual([])
    expect(
      MemberMachine.step(state, {
        _tag: "ResponseReceived",
        seq: sent.seq,
        response: response({ assigned: grants(0, 1, 2) }),
        now: 2,
      }),
    ).toEqual([{ _tag: "SendHeartbeat" }])
  })

  it("a re-granted token on an owned shard restarts its read loop after a drain", () => {
    const state = stableMember()
    const { commands } = roundTrip(
      state,
      response({ assigned: [...grants(0, 2), { shard: 1, token: 7 }] }),
    )
    expect(commands).toEqual([{ _tag: "StopShard", shard: 1 }])
    expect(MemberMachine.step(state, { _tag: "ShardDrained", shard: 1 })).toEqual([
      { _tag: "StartShard", shard: 1, token: 7 },
    ])
  })
})
