/**
 * The real machines behind the simulator's adapters: the coordinator shell
 * (`CoordinatorShell`, the same one `CoordinatorHost` drives, over the pure
 * `Coordinator`) and the member state machine (`MemberMachine.step`) from
 * `@shardline/core`.
 * Nothing here decides anything about the protocol; it only translates the
 * simulator's calls into the machines' inputs and their outputs back, the
 * way `CoordinatorHost` and member-runtime do in production.
 *
 * @module
 */

import {
  type CoordinatorResult,
  CoordinatorShell,
  MemberMachine,
  makeGroupConfig,
  movementLowerBound,
  type Snapshot,
  type TimerKey,
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

/** One coordinator instance: a thin view of the core's CoordinatorShell. */
class RealCoordinator implements SimCoordinator {
  constructor(private readonly shell: CoordinatorShell) {}

  revision(): number {
    return this.shell.revision
  }

  heartbeat(request: Parameters<SimCoordinator["heartbeat"]>[0], now: number): CoordinatorStep {
    return toStep(this.shell.heartbeat(request, now), true)
  }

  dueTimer(now: number): CoordinatorStep | undefined {
    const step = this.shell.dueTimer(now)
    return step === undefined ? undefined : toStep(step, false)
  }

  nextTimer(): number | undefined {
    return this.shell.nextTimer()
  }

  apply(step: CoordinatorStep, revision: number | undefined): void {
    this.shell.apply((step as RealStep).result, revision)
  }

  groupEpoch(): number {
    return this.shell.state.groupEpoch
  }

  members(): ReadonlyArray<string> {
    return [...this.shell.state.members.keys()].sort()
  }

  snapshot(): unknown {
    return this.shell.snapshot()
  }
}

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

/** Stands in for a candidate whose election was refused: the simulator never drives it. */
const refused: SimCoordinator = {
  revision: () => 0,
  heartbeat: () => {
    throw new Error("a refused coordinator never serves")
  },
  dueTimer: () => undefined,
  nextTimer: () => undefined,
  apply: () => {
    throw new Error("a refused coordinator never commits")
  },
  groupEpoch: () => 0,
  members: () => [],
  snapshot: () => undefined,
}

export const realMachines: Machines = {
  name: "core",
  coordinator: {
    create: (config, now, candidate) => {
      const { shell, step } = CoordinatorShell.create(groupConfig(config), now, candidate)
      return { coordinator: new RealCoordinator(shell), step: toStep(step, false) }
    },
    load: (snapshot, revision, now, candidate) => {
      const takeover = CoordinatorShell.load(
        { ...(snapshot as Snapshot), storeRevision: revision },
        now,
        candidate,
      )
      if (takeover._tag === "Refused")
        return { coordinator: refused, fences: [], election: undefined }
      return {
        coordinator: new RealCoordinator(takeover.shell),
        fences: takeover.fences,
        election: toStep(takeover.step, false),
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
