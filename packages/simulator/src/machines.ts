/**
 * The real machines behind the simulator's adapters: the pure coordinator
 * (`Coordinator.heartbeat` / `onTimer` / `load` / `elect` + `replayAll` /
 * `applyVolatile`) and the member state machine (`MemberMachine.step`) from
 * `@shardline/core`.
 * Nothing here decides anything about the protocol; it only translates the
 * simulator's calls into the machines' inputs and their outputs back, the
 * way `CoordinatorHost` and member-runtime do in production.
 *
 * @module
 */

import {
  applyVolatile,
  Coordinator,
  type CoordinatorRecord,
  type CoordinatorResult,
  type CoordinatorState,
  initialState,
  MemberMachine,
  makeGroupConfig,
  movementLowerBound,
  replayAll,
  type Snapshot,
  type Timer,
  type TimerKey,
  timerId,
  toSnapshot,
} from "@shardline/core"
import type {
  CoordinatorConfig,
  CoordinatorStep,
  Machines,
  MemberCommand,
  MemberConfig,
  SimCoordinator,
  SimMember,
} from "./adapter.js"

// ---------------------------------------------------------------- coordinator

interface RealStep extends CoordinatorStep {
  readonly result: CoordinatorResult<unknown>
}

const toStep = (result: CoordinatorResult<unknown>, response: boolean): RealStep => ({
  records: result.records,
  response: response ? (result.response as CoordinatorStep["response"]) : undefined,
  notices: result.notices,
  fences: result.fences,
  result,
})

/** One coordinator instance: the state plus its armed timers (like CoordinatorHost's). */
class RealCoordinator implements SimCoordinator {
  // Armed timers: a min-heap by `at`, one live entry per timer id.
  private readonly heap: Array<Timer> = []
  private readonly armed = new Map<string, number>()

  constructor(private readonly state: CoordinatorState) {}

  revision(): number {
    return this.state.storeRevision
  }

  heartbeat(request: Parameters<SimCoordinator["heartbeat"]>[0], now: number): CoordinatorStep {
    return toStep(Coordinator.heartbeat(this.state, request, now), true)
  }

  dueTimer(now: number): CoordinatorStep | undefined {
    for (;;) {
      const top = this.heap[0]
      if (top === undefined || top.at > now) return undefined
      this.pop()
      const id = timerId(top.key)
      if (this.armed.get(id) !== top.at) continue
      this.armed.delete(id)
      return toStep(Coordinator.onTimer(this.state, top.key, now), false)
    }
  }

  nextTimer(): number | undefined {
    for (;;) {
      const top = this.heap[0]
      if (top === undefined) return undefined
      if (this.armed.get(timerId(top.key)) === top.at) return top.at
      this.pop()
    }
  }

  apply(step: CoordinatorStep, revision: number | undefined): void {
    const { result } = step as RealStep
    if (revision !== undefined) {
      replayAll(this.state, result.records)
      this.state.storeRevision = revision
    }
    applyVolatile(this.state, result)
    this.arm(result.timers)
  }

  arm(timers: ReadonlyArray<Timer>): void {
    for (const t of timers) {
      const id = timerId(t.key)
      const cur = this.armed.get(id)
      // A timer that fires before its (moved) deadline re-arms itself.
      if (cur !== undefined && cur <= t.at) continue
      this.armed.set(id, t.at)
      this.push(t)
    }
  }

  groupEpoch(): number {
    return this.state.groupEpoch
  }

  members(): ReadonlyArray<string> {
    return [...this.state.members.keys()].sort()
  }

  snapshot(): unknown {
    return toSnapshot(this.state)
  }

  private push(t: Timer): void {
    const h = this.heap
    let i = h.length
    h.push(t)
    while (i > 0) {
      const p = (i - 1) >> 1
      if (h[p]!.at <= t.at) break
      h[i] = h[p]!
      i = p
    }
    h[i] = t
  }

  private pop(): void {
    const h = this.heap
    const last = h.pop()!
    if (h.length === 0) return
    let i = 0
    for (;;) {
      const l = 2 * i + 1
      if (l >= h.length) break
      const r = l + 1
      const c = r < h.length && h[r]!.at < h[l]!.at ? r : l
      if (h[c]!.at >= last.at) break
      h[i] = h[c]!
      i = c
    }
    h[i] = last
  }
}

/** A step that only commits records (creation, election). */
const recordsOnly = (records: ReadonlyArray<CoordinatorRecord>): RealStep => ({
  records,
  notices: [],
  fences: [],
  result: {
    records,
    response: undefined,
    timers: [],
    notices: [],
    fences: [],
    shardDeadlines: [],
  },
})

const groupConfig = (c: CoordinatorConfig) =>
  makeGroupConfig({
    groupId: c.group,
    stream: c.group,
    shardCount: c.shardCount,
    sessionTimeoutMs: c.sessionTimeoutMs,
    rebalanceTimeoutMs: c.revokeTimeoutMs,
    heartbeatIntervalMs: c.heartbeatIntervalMs,
  })

// ---------------------------------------------------------------- member

const translate = (state: MemberMachine.MemberState, cmds: Array<MemberMachine.MemberCommand>) => {
  const out: Array<MemberCommand> = []
  for (let i = 0; i < cmds.length; i++) {
    const c = cmds[i]!
    switch (c._tag) {
      case "StartShard":
        out.push(c)
        // The simulated runtime starts the read loop synchronously.
        for (const more of MemberMachine.step(state, { _tag: "ShardStarted", shard: c.shard }))
          cmds.push(more)
        break
      case "StopShard":
        out.push(c)
        break
      case "StopAllShards":
        out.push({ _tag: "StopAll" })
        break
      case "SendHeartbeat":
        out.push(c)
        break
      case "Left":
        out.push(c)
        break
      // LayoutChanged, RequestRejected: nothing for the simulated runtime to do.
    }
  }
  return out
}

class RealMember implements SimMember {
  private readonly state: MemberMachine.MemberState

  constructor(config: MemberConfig, now: number) {
    this.state = MemberMachine.make(
      {
        group: config.group,
        stream: config.group,
        memberId: config.memberId,
        incarnation: 1,
        memberInfo: {
          consumerName: config.memberId,
          host: "sim",
          runtimeMaxConcurrency: config.workers,
        },
        safetyMarginMs: config.safetyMarginMs,
        heartbeatIntervalMs: config.heartbeatIntervalMs,
      },
      now,
    )
  }

  get id(): string {
    return this.state.config.memberId
  }

  private step(event: MemberMachine.MemberEvent): ReadonlyArray<MemberCommand> {
    return translate(this.state, MemberMachine.step(this.state, event))
  }

  start(now: number) {
    return this.step({ _tag: "Tick", now })
  }

  takeRequest(now: number) {
    return MemberMachine.nextRequest(this.state, now)
  }

  onResponse(seq: number, response: Parameters<SimMember["onResponse"]>[1], now: number) {
    return this.step({ _tag: "ResponseReceived", seq, response, now })
  }

  onRequestFailed(seq: number, now: number) {
    return this.step({ _tag: "HeartbeatFailed", seq, now })
  }

  onNotice(_now: number) {
    return this.step({ _tag: "NoticeReceived" })
  }

  onTimer(now: number) {
    return this.step({ _tag: "Tick", now })
  }

  onShardDrained(shard: number, _now: number) {
    return this.step({ _tag: "ShardDrained", shard })
  }

  leave(now: number) {
    return this.step({ _tag: "LeaveRequested", now })
  }

  nextTimer(): number | undefined {
    return MemberMachine.nextDeadline(this.state)
  }

  leaseValid(now: number): boolean {
    return MemberMachine.leaseValid(this.state, now)
  }
}

export const realMachines: Machines = {
  name: "core",
  coordinator: {
    create: (config, now, candidate) => {
      const gc = groupConfig(config)
      const records = Coordinator.createGroup(gc, now, candidate)
      const coordinator = new RealCoordinator(initialState(gc))
      return { coordinator, step: recordsOnly(records) }
    },
    load: (snapshot, revision, now, candidate) => {
      const loaded = Coordinator.load(snapshot as Snapshot, now)
      loaded.state.storeRevision = revision
      const coordinator = new RealCoordinator(loaded.state)
      coordinator.arm(loaded.timers)
      const election = Coordinator.elect(loaded.state, candidate, now)
      return {
        coordinator,
        fences: loaded.fences,
        election: election._tag === "Refused" ? undefined : recordsOnly(election.records),
      }
    },
  },
  member: { make: (config, now) => new RealMember(config, now) },
}

/** The assignor's movement oracle, for "shards moved vs lower bound". */
export const lowerBound = (
  shardCount: number,
  members: ReadonlyArray<string>,
  previous: ReadonlyArray<string | null>,
): number => movementLowerBound({ shardCount, members: members.map((id) => ({ id })), previous })

export type { TimerKey }
