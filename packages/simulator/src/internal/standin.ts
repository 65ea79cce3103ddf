/**
 * TEMPORARY stand-in machines, used only until the real coordinator and member
 * state machines from `@shardline/core` are merged and wired in
 * `machines.ts`. Deliberately minimal; not the protocol of record.
 *
 * @internal
 */
import { type HeartbeatRequest, type HeartbeatResponse, stickyAssign } from "@shardline/core"
import type {
  CoordinatorConfig,
  CoordinatorStep,
  Machines,
  MemberCommand,
  MemberConfig,
  SimCoordinator,
  SimMember,
} from "../adapter.js"

interface CState {
  members: Map<string, { epoch: number; deadline: number }>
  owner: Array<string | null>
  revoking: Array<string | null>
  revokeDeadline: Array<number>
  target: Array<string | null>
  token: Array<number>
  assignmentEpoch: number
}

const clone = (s: CState): CState => ({
  members: new Map([...s.members].map(([k, v]) => [k, { ...v }])),
  owner: s.owner.slice(),
  revoking: s.revoking.slice(),
  revokeDeadline: s.revokeDeadline.slice(),
  target: s.target.slice(),
  token: s.token.slice(),
  assignmentEpoch: s.assignmentEpoch,
})

class StandinCoordinator implements SimCoordinator {
  private fences: Array<{ shard: number; token: number }> = []
  private notices = new Set<string>()
  private changed = false
  constructor(
    private readonly config: CoordinatorConfig,
    private readonly s: CState,
  ) {}

  private free(id: string): void {
    const s = this.s
    for (let i = 0; i < s.owner.length; i++) {
      if (s.owner[i] === id) s.owner[i] = null
      if (s.revoking[i] === id) s.revoking[i] = null
    }
  }

  private rebalance(now: number): void {
    const s = this.s
    const members = [...s.members.keys()].map((id) => ({ id }))
    s.target = stickyAssign({ shardCount: s.owner.length, members, previous: s.target }).slice()
    s.assignmentEpoch++
    for (let i = 0; i < s.owner.length; i++) {
      const o = s.owner[i]
      if (o != null && s.target[i] !== o) {
        s.owner[i] = null
        s.revoking[i] = o
        s.revokeDeadline[i] = now + this.config.revokeTimeoutMs
      }
    }
  }

  private grant(): void {
    const s = this.s
    for (let i = 0; i < s.owner.length; i++) {
      const t = s.target[i]
      if (s.owner[i] == null && s.revoking[i] == null && t != null && s.members.has(t)) {
        s.owner[i] = t
        s.token[i] = s.token[i]! + 1
        this.fences.push({ shard: i, token: s.token[i]! })
        this.notices.add(t)
        this.changed = true
      }
    }
  }

  private step(response?: HeartbeatResponse): CoordinatorStep {
    const out: CoordinatorStep = {
      records: this.changed ? ["changed"] : [],
      response,
      notices: [...this.notices],
      fences: this.fences,
    }
    this.fences = []
    this.notices = new Set()
    this.changed = false
    return out
  }

  private respond(id: string, errorCode: HeartbeatResponse["errorCode"]): HeartbeatResponse {
    const s = this.s
    const m = s.members.get(id)
    const assigned: Array<{ shard: number; token: number }> = []
    const pending: Array<number> = []
    if (m !== undefined && errorCode === "NONE")
      for (let i = 0; i < s.owner.length; i++) {
        if (s.owner[i] === id) assigned.push({ shard: i, token: s.token[i]! })
        else if (s.target[i] === id) pending.push(i)
      }
    return {
      errorCode,
      memberId: id,
      memberEpoch: m?.epoch ?? 0,
      assignmentEpoch: s.assignmentEpoch,
      assigned,
      pending,
      heartbeatIntervalMs: this.config.heartbeatIntervalMs,
    }
  }

  heartbeat(req: HeartbeatRequest, now: number): CoordinatorStep {
    const s = this.s
    const id = req.memberId
    const m = s.members.get(id)
    if (req.memberEpoch === -1) {
      if (m !== undefined) {
        s.members.delete(id)
        this.free(id)
        this.rebalance(now)
        this.changed = true
        this.grant()
      }
      return this.step({ ...this.respond(id, "NONE"), memberEpoch: -1 })
    }
    if (req.memberEpoch === 0) {
      if (m !== undefined) this.free(id)
      s.members.set(id, {
        epoch: (m?.epoch ?? 0) + 1,
        deadline: now + this.config.sessionTimeoutMs,
      })
      this.rebalance(now)
      this.changed = true
      this.grant()
      return this.step(this.respond(id, "NONE"))
    }
    if (m === undefined) return this.step(this.respond(id, "UNKNOWN_MEMBER_ID"))
    if (req.memberEpoch !== m.epoch) {
      s.members.delete(id)
      this.free(id)
      this.rebalance(now)
      this.changed = true
      this.grant()
      return this.step(this.respond(id, "FENCED_MEMBER_EPOCH"))
    }
    m.deadline = now + this.config.sessionTimeoutMs
    this.changed = true
    for (const r of req.revokingShards)
      if (r.state === "REVOKED" && s.revoking[r.shard] === id) s.revoking[r.shard] = null
    this.grant()
    return this.step(this.respond(id, "NONE"))
  }

  timers(now: number): CoordinatorStep {
    const s = this.s
    let expired = false
    for (const [id, m] of s.members)
      if (m.deadline <= now) {
        s.members.delete(id)
        this.free(id)
        expired = true
      }
    for (let i = 0; i < s.revoking.length; i++) {
      const r = s.revoking[i]
      if (r != null && s.revokeDeadline[i]! <= now) {
        s.members.delete(r)
        this.free(r)
        expired = true
      }
    }
    if (expired) {
      this.rebalance(now)
      this.changed = true
      this.grant()
    }
    return this.step()
  }

  apply(_step: CoordinatorStep): void {}

  nextTimer(): number | undefined {
    let t = Number.POSITIVE_INFINITY
    for (const m of this.s.members.values()) if (m.deadline < t) t = m.deadline
    for (let i = 0; i < this.s.revoking.length; i++)
      if (this.s.revoking[i] != null && this.s.revokeDeadline[i]! < t) t = this.s.revokeDeadline[i]!
    return t === Number.POSITIVE_INFINITY ? undefined : t
  }

  snapshot(): unknown {
    return this.s
  }

  targetOwners(): ReadonlyArray<string | null> {
    return this.s.target
  }
}

class StandinMember implements SimMember {
  private epoch = 0
  private owned = new Map<number, number>()
  private revoking = new Map<number, "REVOKING" | "REVOKED">()
  private inflight = false
  private sentAt = 0
  private lastOk = Number.NEGATIVE_INFINITY
  private nextHb = Number.POSITIVE_INFINITY
  private leaving = false
  private sentRevoked: Array<number> = []
  constructor(private readonly c: MemberConfig) {}
  get id(): string {
    return this.c.memberId
  }

  private send(now: number): Array<MemberCommand> {
    if (this.inflight) return []
    this.inflight = true
    this.sentAt = now
    this.sentRevoked = [...this.revoking].filter(([, st]) => st === "REVOKED").map(([sh]) => sh)
    return [
      {
        _tag: "SendHeartbeat",
        request: {
          group: this.c.group,
          memberId: this.c.memberId,
          memberEpoch: this.leaving ? -1 : this.epoch,
          assignmentEpoch: 0,
          metadataVersion: 0,
          ownedShards: [...this.owned.keys()],
          revokingShards: [...this.revoking].map(([shard, state]) => ({ shard, state })),
          ...(this.epoch === 0
            ? {
                memberInfo: {
                  consumerName: this.c.memberId,
                  host: "sim",
                  runtimeMaxConcurrency: this.c.workers,
                },
              }
            : {}),
        },
      },
    ]
  }

  private reset(): Array<MemberCommand> {
    this.owned.clear()
    this.revoking.clear()
    this.epoch = 0
    return [{ _tag: "StopAll" }]
  }

  start(now: number) {
    return this.send(now)
  }

  onResponse(r: HeartbeatResponse, now: number) {
    this.inflight = false
    const out: Array<MemberCommand> = []
    if (r.errorCode === "UNKNOWN_MEMBER_ID" || r.errorCode === "FENCED_MEMBER_EPOCH") {
      out.push(...this.reset())
      out.push(...this.send(now))
      return out
    }
    if (r.errorCode !== "NONE") {
      this.nextHb = now + 200
      return out
    }
    if (this.leaving) return out
    this.epoch = r.memberEpoch
    this.lastOk = this.sentAt
    this.nextHb = now + r.heartbeatIntervalMs
    for (const s of this.sentRevoked) this.revoking.delete(s)
    this.sentRevoked = []
    const assigned = new Map(r.assigned.map((g) => [g.shard, g.token]))
    for (const s of [...this.owned.keys()])
      if (!assigned.has(s)) {
        this.owned.delete(s)
        this.revoking.set(s, "REVOKING")
        out.push({ _tag: "StopShard", shard: s })
      }
    for (const [s, token] of assigned)
      if (this.owned.get(s) !== token && !this.revoking.has(s)) {
        this.owned.set(s, token)
        out.push({ _tag: "StartShard", shard: s, token })
      }
    return out
  }

  onRequestFailed(now: number) {
    this.inflight = false
    this.nextHb = now + Math.min(500, this.c.heartbeatIntervalMs)
    return []
  }

  onNotice(now: number) {
    return this.send(now)
  }

  onTimer(now: number) {
    const out: Array<MemberCommand> = []
    if ((this.owned.size > 0 || this.revoking.size > 0) && !this.leaseValid(now))
      out.push(...this.reset())
    if (now >= this.nextHb) {
      this.nextHb = now + this.c.heartbeatIntervalMs
      out.push(...this.send(now))
    }
    return out
  }

  onShardDrained(shard: number, now: number) {
    if (this.revoking.get(shard) !== "REVOKING") return []
    this.revoking.set(shard, "REVOKED")
    return this.send(now)
  }

  leave(now: number) {
    this.leaving = true
    this.inflight = false
    const out = this.reset()
    out.push(...this.send(now))
    return out
  }

  nextTimer() {
    const fence = this.lastOk + this.c.sessionTimeoutMs - this.c.safetyMarginMs
    return this.owned.size > 0 && fence > 0 ? Math.min(fence, this.nextHb) : this.nextHb
  }

  leaseValid(now: number) {
    return now < this.lastOk + this.c.sessionTimeoutMs - this.c.safetyMarginMs
  }
}

export const standinMachines: Machines = {
  name: "standin",
  coordinator: {
    load: (config, snapshot) => {
      const n = config.shardCount
      const s: CState =
        snapshot === undefined
          ? {
              members: new Map(),
              owner: new Array(n).fill(null),
              revoking: new Array(n).fill(null),
              revokeDeadline: new Array(n).fill(0),
              target: new Array(n).fill(null),
              token: new Array(n).fill(0),
              assignmentEpoch: 0,
            }
          : clone(snapshot as CState)
      return new StandinCoordinator(config, s)
    },
  },
  member: { make: (c) => new StandinMember(c) },
}
