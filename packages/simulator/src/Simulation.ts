/**
 * The simulated world: virtual time, network, store, coordinator lease, data
 * plane (shard streams with fence tokens), members with local workers, faults,
 * scenario actions and checkers. The protocol itself is driven through the
 * `SimCoordinator` / `SimMember` adapters (the real machines).
 *
 * Single-threaded, no wall clock, no Math.random: every random choice comes
 * from a named PRNG stream of the run seed.
 *
 * @module
 */
import type { HeartbeatRequest, HeartbeatResponse } from "@shardline/core"
import type {
  CoordinatorStep,
  Machines,
  MemberCommand,
  ShardFence,
  SimCoordinator,
  SimMember,
} from "./adapter.js"
import {
  balanced,
  ConvergenceChecker,
  MessageChecker,
  OwnershipChecker,
  RevisionChecker,
  StarvationChecker,
  type Violation,
} from "./checkers.js"
import {
  drawFaults,
  EPISODIC_FAULTS,
  FAULT_KINDS,
  type FaultKind,
  type FaultMix,
  type SimOptions,
  timing,
} from "./config.js"
import { Digest } from "./engine/Digest.js"
import { EventQueue } from "./engine/EventQueue.js"
import { Prng } from "./engine/Prng.js"

// Event kinds.
const K = {
  MEMBER_TIMER: 1,
  REQ_AT_COORD: 2,
  RESP_AT_MEMBER: 3,
  REQ_TIMEOUT: 4,
  COORD_TIMER: 5,
  WORKER: 6,
  BATCH_DONE: 7,
  PRODUCE: 8,
  FAULT: 9,
  HEAL: 10,
  LEASE: 11,
  NOTICE: 12,
  ACTION: 13,
  RESUME_MEMBER: 14,
  RESUME_COORD: 15,
  SAMPLE: 16,
  LIVENESS: 17,
  DRAINED: 18,
  RESTART_MEMBER: 19,
  RESTART_COORD: 20,
  END: 21,
  LEAVE_DEADLINE: 22,
} as const
export const EVENT_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(K).map(([k, v]) => [v, k]),
)

interface Clock {
  offset: number
  rate: number
}
const local = (c: Clock, t: number): number => c.offset + t * c.rate
/** The first true time at which clock `c` reads at least `l`. */
const toTrue = (c: Clock, l: number): number => {
  let t = (l - c.offset) / c.rate
  while (local(c, t) < l) t += 1e-6 * Math.max(1, Math.abs(t))
  return t
}

interface Batch {
  inc: number
  member: number
  shard: number
  token: number
  ids: Array<number>
  start: number
  /** Slow drain: the batch was stretched past the revoke timeout once. */
  stretched: boolean
}

interface ShardRun {
  token: number
  draining: boolean
  fenced: boolean
  batch: Batch | null
}

interface MemberNode {
  readonly idx: number
  readonly id: string
  machine: SimMember | null
  alive: boolean
  /** Scenario wants it running (restart after crash, liveness phase). */
  wanted: boolean
  leaving: boolean
  paused: boolean
  inc: number
  clock: Clock
  timerAt: number
  reqSeq: number
  inflightSeq: number
  wantSend: boolean
  runs: Map<number, ShardRun>
  rotation: Array<number>
  rrPos: number
  idle: number
  deferred: Array<[number, number, number, number, unknown]>
  partOut: boolean
  partIn: boolean
  partStore: boolean
  slowDrain: boolean
}

interface CoordNode {
  readonly idx: number
  machine: SimCoordinator | null
  alive: boolean
  paused: boolean
  inc: number
  clock: Clock
  revision: number
  timerAt: number
  deferred: Array<[number, number, number, number, unknown]>
}

export interface Mark {
  readonly time: number
  readonly kind: "fault" | "heal" | "rebalance" | "fence" | "violation" | "action" | "phase"
  readonly label: string
}

export interface Segment {
  readonly shard: number
  readonly member: number
  readonly start: number
  end: number
}

export interface TraceLine {
  readonly time: number
  readonly event: string
  readonly a: number
  readonly b: number
}

export interface SimResult {
  readonly options: SimOptions
  readonly machines: string
  readonly faults: FaultMix
  readonly events: number
  readonly virtualMs: number
  readonly digest: string
  readonly violations: ReadonlyArray<Violation>
  readonly around: ReadonlyArray<TraceLine>
  readonly convergenceMs: ReadonlyArray<number>
  readonly livenessConvergedMs: number | undefined
  readonly shardsMoved: number
  readonly movementLowerBound: number | undefined
  readonly produced: number
  readonly acked: number
  readonly handled: number
  readonly duplicates: number
  readonly lost: number
  readonly fencedReads: number
  readonly fencedAcks: number
  readonly staleCommitsRejected: number
  readonly commits: number
  readonly worstStarvationWaitMs: number
  readonly ackedPerShard: ReadonlyArray<number>
  readonly memberIds: ReadonlyArray<string>
  readonly segments: ReadonlyArray<Segment>
  readonly marks: ReadonlyArray<Mark>
  readonly timelineTruncated: boolean
}

export interface RunHooks {
  /** Called about every 1% of virtual time. */
  readonly progress?: (fraction: number) => void
  /** Movement lower bound oracle (from the assignor) for "moved vs lower bound". */
  readonly lowerBound?: (
    shardCount: number,
    members: ReadonlyArray<string>,
    previous: ReadonlyArray<string | null>,
  ) => number
}

const RING = 64
const MAX_SEGMENTS = 200_000

export class Simulation {
  private readonly q = new EventQueue(4096)
  private readonly digest = new Digest()
  private now = 0
  private readonly rngWork: Prng
  private readonly rngArrivals: Prng
  private readonly rngNet: Prng
  private readonly rngStore: Prng
  private readonly rngClock: Prng
  private readonly rngFault: Prng
  private readonly rngScenario: Prng
  private mix: FaultMix
  private readonly S: number
  private readonly members: Array<MemberNode> = []
  private readonly coords: Array<CoordNode> = []
  // Store + lease.
  private storeRevision = 0
  /** The coordinator instance whose state is the last committed one (its snapshot is the store's). */
  private storeSource: SimCoordinator | null = null
  private leaseHolder = -1
  private leaseExpires = 0
  /** Fencing token of the current lease acquisition (strictly increasing). */
  private leaseToken = 0
  // Data plane.
  private readonly fence: Int32Array
  private readonly cursor: Int32Array
  private readonly pel: Array<Set<number>>
  private readonly backlogSince: Float64Array
  private readonly servedAt: Float64Array
  private readonly ownedSince: Float64Array
  private readonly readerCount: Int32Array
  private readonly readerOf: Int32Array
  private readonly ackedPerShard: Float64Array
  private readonly cumRate: Float64Array
  private readonly procMean: Float64Array
  private totalRate = 0
  // Checkers.
  private readonly violations: Array<Violation> = []
  private readonly ownership: OwnershipChecker
  private readonly messages: MessageChecker
  private readonly starvation: StarvationChecker
  private readonly revisions: RevisionChecker
  private readonly convergence: ConvergenceChecker
  // Phases.
  private readonly endSafety: number
  private readonly endRun: number
  private readonly convergenceBound: number
  private liveness = false
  private livenessConverged: number | undefined = undefined
  private stopAfter = Number.POSITIVE_INFINITY
  // Stats.
  private fencedReads = 0
  private fencedAcks = 0
  private shardsMoved = 0
  private lowerBoundTotal = 0
  private lowerBoundKnown: boolean
  private lastOwner: Int32Array = new Int32Array(0)
  private lastGroupEpoch = -1
  private episodeBaseline: Array<string | null> | null = null
  private everBalanced = false
  // Trace.
  private readonly ringT = new Float64Array(RING)
  private readonly ringK = new Int32Array(RING)
  private readonly ringA = new Int32Array(RING)
  private readonly ringB = new Int32Array(RING)
  private ringN = 0
  private around: Array<TraceLine> = []
  private readonly segments: Array<Segment> = []
  private readonly openSeg = new Map<number, Segment>()
  private timelineTruncated = false
  private readonly marks: Array<Mark> = []

  constructor(
    private readonly options: SimOptions,
    private readonly machines: Machines,
    private readonly hooks: RunHooks = {},
  ) {
    const seed = options.seed
    this.rngWork = Prng.stream(seed, "workload")
    this.rngArrivals = Prng.stream(seed, "arrivals")
    this.rngNet = Prng.stream(seed, "network")
    this.rngStore = Prng.stream(seed, "store")
    this.rngClock = Prng.stream(seed, "clocks")
    this.rngFault = Prng.stream(seed, "fault-events")
    this.rngScenario = Prng.stream(seed, "scenario")
    this.mix = drawFaults(options)
    const S = options.shards
    this.S = S
    this.fence = new Int32Array(S)
    this.cursor = new Int32Array(S)
    this.pel = Array.from({ length: S }, () => new Set<number>())
    this.backlogSince = new Float64Array(S)
    this.servedAt = new Float64Array(S)
    this.ownedSince = new Float64Array(S)
    this.readerCount = new Int32Array(S)
    this.readerOf = new Int32Array(S).fill(-1)
    this.ackedPerShard = new Float64Array(S)
    this.lastOwner = new Int32Array(S).fill(-1)
    this.lowerBoundKnown = hooks.lowerBound !== undefined
    this.cumRate = new Float64Array(S)
    this.procMean = new Float64Array(S)
    const report = (v: Violation) => this.violation(v)
    this.ownership = new OwnershipChecker(S, report)
    this.messages = new MessageChecker(S)
    this.starvation = new StarvationChecker(report)
    this.revisions = new RevisionChecker(report)
    this.convergence = new ConvergenceChecker(report)
    this.endSafety = options.durationMs
    this.convergenceBound =
      timing.sessionTimeoutMs +
      timing.revokeTimeoutMs +
      timing.coordinatorLeaseMs +
      10 * timing.heartbeatIntervalMs
    this.endRun = this.endSafety + this.convergenceBound + 20_000
  }

  // ---------------------------------------------------------------- setup

  private setup(): void {
    const o = this.options
    const clockOn = this.mix.intensity.clock > 0
    const drawClock = (): Clock => {
      const off = this.rngClock.range(-timing.maxSkewMs, timing.maxSkewMs)
      const rate = 1 + this.rngClock.range(-timing.maxDriftPpm, timing.maxDriftPpm) * 1e-6
      return clockOn ? { offset: off, rate } : { offset: 0, rate: 1 }
    }
    // Workload: skewed arrival rates (a few hot shards) and processing times.
    let acc = 0
    for (let s = 0; s < this.S; s++) {
      const hot = this.rngWork.chance(0.1) ? this.rngWork.range(2, 5) : this.rngWork.range(0.3, 1.2)
      acc += o.ratePerShard * hot
      this.cumRate[s] = acc
      this.procMean[s] = this.rngWork.range(1, 8)
    }
    this.totalRate = acc
    for (let i = 0; i < 3; i++)
      this.coords.push({
        idx: i,
        machine: null,
        alive: true,
        paused: false,
        inc: 0,
        clock: drawClock(),
        revision: 0,
        timerAt: Number.POSITIVE_INFINITY,
        deferred: [],
      })
    for (let i = 0; i < o.members; i++)
      this.members.push({
        idx: i,
        id: `sim-${String(i).padStart(4, "0")}-m0`,
        machine: null,
        alive: false,
        wanted: false,
        leaving: false,
        paused: false,
        inc: 0,
        clock: drawClock(),
        timerAt: Number.POSITIVE_INFINITY,
        reqSeq: 0,
        inflightSeq: -1,
        wantSend: false,
        runs: new Map(),
        rotation: [],
        rrPos: 0,
        idle: 0,
        deferred: [],
        partOut: false,
        partIn: false,
        partStore: false,
        slowDrain: false,
      })
    this.q.push(0, K.LEASE, 0)
    this.scheduleScenario()
    if (this.totalRate > 0) this.q.push(this.rngArrivals.exp(1000 / this.totalRate), K.PRODUCE)
    for (let k = 0; k < FAULT_KINDS.length; k++) {
      const kind = FAULT_KINDS[k]!
      if (this.mix.intensity[kind] > 0 && EPISODIC_FAULTS.has(kind))
        this.q.push(this.faultGap(kind), K.FAULT, k)
    }
    this.q.push(timing.sampleEveryMs, K.SAMPLE)
    this.q.push(this.endSafety, K.LIVENESS)
    this.q.push(this.endRun, K.END)
  }

  private scheduleScenario(): void {
    const o = this.options
    const M = o.members
    const D = o.durationMs
    const start = (i: number, t: number) => this.q.push(t, K.ACTION, 0, i)
    const leave = (i: number, t: number) => this.q.push(t, K.ACTION, 1, i)
    const stagger = () => this.rngScenario.range(0, 1000)
    switch (o.scenario) {
      case "scale-out": {
        const initial = Math.max(1, Math.ceil(M / 2))
        for (let i = 0; i < initial; i++) start(i, stagger())
        for (let i = initial; i < M; i++)
          start(i, D * 0.2 + ((i - initial + 1) * D * 0.6) / (M - initial + 1))
        break
      }
      case "scale-in": {
        for (let i = 0; i < M; i++) start(i, stagger())
        const leaving = Math.floor(M / 2)
        for (let i = 0; i < leaving; i++)
          leave(M - 1 - i, D * 0.2 + ((i + 1) * D * 0.6) / (leaving + 1))
        break
      }
      case "rolling-restart": {
        for (let i = 0; i < M; i++) start(i, stagger())
        for (let i = 0; i < M; i++) {
          const t = D * 0.1 + (i * D * 0.8) / M
          leave(i, t)
          start(i, t + 2_000)
        }
        break
      }
      case "swarm": {
        for (let i = 0; i < M; i++) start(i, stagger())
        const changes = this.rngScenario.int(Math.min(M, 6) + 1)
        for (let c = 0; c < changes; c++) {
          const i = this.rngScenario.int(M)
          const t = this.rngScenario.range(D * 0.1, D * 0.8)
          leave(i, t)
          start(i, t + this.rngScenario.range(500, 10_000))
        }
        break
      }
      default:
        for (let i = 0; i < M; i++) start(i, stagger())
    }
  }

  // ---------------------------------------------------------------- run

  run(): SimResult {
    this.setup()
    const q = this.q
    const digest = this.digest
    const progressStep = this.endRun / 100
    let nextProgress = progressStep
    while (q.pop()) {
      const t = q.t
      if (t > this.stopAfter) break
      this.now = t
      const kind = q.kind
      const a = q.a
      const b = q.b
      digest.event(t, kind, a, b)
      const r = this.ringN++ & (RING - 1)
      this.ringT[r] = t
      this.ringK[r] = kind
      this.ringA[r] = a
      this.ringB[r] = b
      if (t >= nextProgress && this.hooks.progress !== undefined) {
        this.hooks.progress(t / this.endRun)
        nextProgress = t + progressStep
      }
      if (this.dispatch(kind, a, b, q.p)) break
    }
    if (this.around.length > 0 && this.around.length < RING) this.captureAfter()
    return this.result()
  }

  /** Returns true to stop the run. */
  private dispatch(kind: number, a: number, b: number, p: unknown): boolean {
    switch (kind) {
      case K.PRODUCE:
        this.produce()
        return false
      case K.WORKER:
        if (!this.memberEvent(a, kind, b, p)) this.worker(a, b)
        return false
      case K.BATCH_DONE:
        if (!this.memberEvent(a, kind, b, p)) this.batchDone(p as Batch)
        return false
      case K.MEMBER_TIMER:
        if (!this.memberEvent(a, kind, b, p)) this.memberTimer(a, b)
        return false
      case K.RESP_AT_MEMBER:
        if (!this.memberEvent(a, kind, b, p)) this.response(a, b, p as HeartbeatResponse)
        return false
      case K.REQ_TIMEOUT:
        if (!this.memberEvent(a, kind, b, p)) this.requestTimeout(a, b)
        return false
      case K.NOTICE:
        if (!this.memberEvent(a, kind, b, p)) this.notice(a, b)
        return false
      case K.DRAINED:
        if (!this.memberEvent(a, kind, b, p)) this.drained(a, b, p as number)
        return false
      case K.REQ_AT_COORD:
        if (!this.coordEvent(a, kind, b, p)) this.request(a, b, p as Req)
        return false
      case K.COORD_TIMER:
        if (!this.coordEvent(a, kind, b, p)) this.coordTimer(a, b)
        return false
      case K.LEASE:
        this.lease()
        return false
      case K.ACTION:
        this.action(a, b)
        return false
      case K.FAULT:
        this.fault(a)
        return false
      case K.HEAL:
        this.heal(a, b)
        return false
      case K.RESUME_MEMBER:
        this.resumeMember(a)
        return false
      case K.RESUME_COORD:
        this.resumeCoord(a)
        return false
      case K.RESTART_MEMBER:
        this.restartMember(a)
        return false
      case K.RESTART_COORD: {
        const c = this.coords[a]!
        c.alive = true
        return false
      }
      case K.SAMPLE:
        this.sample()
        return false
      case K.LIVENESS:
        this.startLiveness()
        return false
      case K.LEAVE_DEADLINE: {
        const m = this.members[a]!
        if (m.inc === b && m.alive && m.leaving) this.stopProcess(m)
        return false
      }
      case K.END:
        this.end()
        return true
    }
    return false
  }

  /** Defers events of a paused member; returns true when the event must not run now. */
  private memberEvent(i: number, kind: number, b: number, p: unknown): boolean {
    const m = this.members[i]!
    if (m.paused) {
      m.deferred.push([this.now, kind, i, b, p])
      return true
    }
    return false
  }

  private coordEvent(i: number, kind: number, b: number, p: unknown): boolean {
    const c = this.coords[i]!
    if (c.paused) {
      c.deferred.push([this.now, kind, i, b, p])
      return true
    }
    return false
  }

  // ---------------------------------------------------------------- members

  private startMember(m: MemberNode): void {
    m.inc++
    m.alive = true
    m.leaving = false
    m.inflightSeq = -1
    m.wantSend = false
    m.timerAt = Number.POSITIVE_INFINITY
    m.idle = this.options.workers
    m.machine = this.machines.member.make(
      {
        group: "sim",
        memberId: m.id,
        workers: this.options.workers,
        heartbeatIntervalMs: timing.heartbeatIntervalMs,
        sessionTimeoutMs: timing.sessionTimeoutMs,
        safetyMarginMs: timing.safetyMarginMs,
      },
      local(m.clock, this.now),
    )
    this.convergence.change(this.now)
    this.commands(m, m.machine.start(local(m.clock, this.now)))
  }

  private stopProcess(m: MemberNode): void {
    for (const [shard, run] of m.runs) this.dropRun(m, shard, run)
    m.runs.clear()
    m.rotation = []
    m.alive = false
    m.machine = null
    m.inc++
    m.deferred = []
    m.paused = false
    this.convergence.change(this.now)
  }

  private commands(m: MemberNode, cmds: ReadonlyArray<MemberCommand>): void {
    for (const c of cmds) {
      switch (c._tag) {
        case "StartShard":
          this.startShard(m, c.shard, c.token)
          break
        case "StopShard":
          this.stopShard(m, c.shard)
          break
        case "StopAll":
          for (const [shard, run] of m.runs) this.dropRun(m, shard, run)
          m.runs.clear()
          m.rotation = []
          break
        case "SendHeartbeat":
          if (m.inflightSeq >= 0) m.wantSend = true
          else this.sendHeartbeat(m)
          break
        case "Left":
          this.stopProcess(m)
          return
      }
    }
    this.armMemberTimer(m)
  }

  private armMemberTimer(m: MemberNode): void {
    const machine = m.machine
    if (machine === null) return
    const next = machine.nextTimer()
    if (next === undefined) return
    // A timer re-armed for the instant it just fired at would spin: the next tick is later.
    const at = Math.max(this.firing ? this.now + 1 : this.now, toTrue(m.clock, next))
    if (at < m.timerAt || m.timerAt <= this.now) {
      m.timerAt = at
      this.q.push(at, K.MEMBER_TIMER, m.idx, m.inc)
    }
  }

  private memberTimer(i: number, inc: number): void {
    const m = this.members[i]!
    if (m.inc !== inc || m.machine === null || this.now < m.timerAt) return
    m.timerAt = Number.POSITIVE_INFINITY
    this.firing = true
    this.commands(m, m.machine.onTimer(local(m.clock, this.now)))
    this.firing = false
  }

  private startShard(m: MemberNode, shard: number, token: number): void {
    const existing = m.runs.get(shard)
    if (existing !== undefined) {
      existing.token = token
      existing.fenced = false
      existing.draining = false
      return
    }
    m.runs.set(shard, { token, draining: false, fenced: false, batch: null })
    m.rotation.push(shard)
    this.readerCount[shard]!++
    this.readerOf[shard] = m.idx
    this.ownedSince[shard] = this.now
    if (this.options.timeline === true) this.openSegment(shard, m.idx)
    this.wake(m)
  }

  private stopShard(m: MemberNode, shard: number): void {
    const run = m.runs.get(shard)
    if (run === undefined) {
      this.q.push(this.now, K.DRAINED, m.idx, m.inc, shard)
      return
    }
    if (run.draining) return
    run.draining = true
    this.readerGone(shard, m.idx)
    this.closeSegment(shard, m.idx)
    if (run.batch === null) this.finishDrain(m, shard)
  }

  /** A member stopped reading `shard`: keep the reader count and "one of the readers" right. */
  private readerGone(shard: number, member: number): void {
    const left = --this.readerCount[shard]!
    if (left === 0) this.readerOf[shard] = -1
    else if (this.readerOf[shard] === member) {
      for (const other of this.members) {
        const run = other.idx === member ? undefined : other.runs.get(shard)
        if (run !== undefined && !run.draining) {
          this.readerOf[shard] = other.idx
          break
        }
      }
    }
  }

  private finishDrain(m: MemberNode, shard: number, drainedBatch = false): void {
    m.runs.delete(shard)
    const at = m.rotation.indexOf(shard)
    if (at >= 0) m.rotation.splice(at, 1)
    // Slow drain with nothing in flight: the drain report itself comes late.
    const late = m.slowDrain && !drainedBatch ? timing.revokeTimeoutMs * 1.5 : 0
    this.q.push(this.now + late, K.DRAINED, m.idx, m.inc, shard)
  }

  private drained(i: number, inc: number, shard: number): void {
    const m = this.members[i]!
    if (m.inc !== inc || m.machine === null) return
    this.commands(m, m.machine.onShardDrained(shard, local(m.clock, this.now)))
  }

  /** Stops a run at once (crash, StopAll): the in-flight batch is abandoned. */
  private dropRun(m: MemberNode, shard: number, run: ShardRun): void {
    run.batch = null
    if (!run.draining) {
      this.readerGone(shard, m.idx)
      this.closeSegment(shard, m.idx)
    }
  }

  private wake(m: MemberNode): void {
    if (m.idle > 0) {
      m.idle--
      this.q.push(this.now, K.WORKER, m.idx, m.inc)
    }
  }

  private backlog(shard: number): number {
    return this.messages.producedOn(shard) - this.cursor[shard]! + this.pel[shard]!.size
  }

  private worker(i: number, inc: number): void {
    const m = this.members[i]!
    if (m.inc !== inc || !m.alive) return
    this.pickAndRead(m)
  }

  private pickAndRead(m: MemberNode): void {
    const machine = m.machine
    const n = m.rotation.length
    if (machine === null || n === 0 || !machine.leaseValid(local(m.clock, this.now))) {
      m.idle++
      return
    }
    for (let k = 0; k < n; k++) {
      const pos = (m.rrPos + k) % n
      const shard = m.rotation[pos]!
      const run = m.runs.get(shard)!
      if (run.draining || run.fenced || run.batch !== null || this.backlog(shard) === 0) continue
      m.rrPos = pos + 1
      if (m.partStore) {
        this.q.push(this.now + 200, K.WORKER, m.idx, m.inc)
        return
      }
      // Fenced read: storage refuses a token lower than the shard's current one.
      if (run.token < this.fence[shard]!) {
        this.fencedReads++
        run.fenced = true
        continue
      }
      const ids: Array<number> = []
      const B = timing.batchSize
      for (const id of this.pel[shard]!) {
        if (ids.length >= B) break
        ids.push(id)
      }
      const produced = this.messages.producedOn(shard)
      while (ids.length < B && this.cursor[shard]! < produced) {
        const id = this.cursor[shard]!
        this.cursor[shard] = id + 1
        this.pel[shard]!.add(id)
        ids.push(id)
      }
      this.servedAt[shard] = this.now
      let dur = 0
      const mean = this.procMean[shard]!
      for (let j = 0; j < ids.length; j++) dur += mean * this.rngWork.range(0.5, 1.5)
      const batch: Batch = {
        inc: m.inc,
        member: m.idx,
        shard,
        token: run.token,
        ids,
        start: this.now,
        stretched: false,
      }
      run.batch = batch
      this.q.push(this.now + dur, K.BATCH_DONE, m.idx, m.inc, batch)
      return
    }
    m.idle++
  }

  private batchDone(batch: Batch): void {
    const m = this.members[batch.member]!
    if (m.inc !== batch.inc || m.machine === null) return
    const run = m.runs.get(batch.shard)
    if (run === undefined || run.batch !== batch) {
      this.pickAndRead(m)
      return
    }
    const shard = batch.shard
    if (run.draining && m.slowDrain && !batch.stretched) {
      // Delayed revoke: in-flight work drains slower than the revoke timeout.
      batch.stretched = true
      this.q.push(this.now + timing.revokeTimeoutMs * 1.5, K.BATCH_DONE, m.idx, m.inc, batch)
      return
    }
    run.batch = null
    if (m.machine.leaseValid(local(m.clock, this.now))) {
      for (const id of batch.ids) this.messages.handle(shard, id)
      if (!m.partStore && batch.token >= this.fence[shard]!) {
        const pel = this.pel[shard]!
        for (const id of batch.ids) {
          pel.delete(id)
          this.messages.ack(shard, id)
        }
        this.ackedPerShard[shard]! += batch.ids.length
        this.ownership.batch(shard, m.idx, batch.start, this.now)
        if (this.backlog(shard) === 0) this.backlogSince[shard] = Number.POSITIVE_INFINITY
      } else {
        this.fencedAcks++
        if (batch.token < this.fence[shard]!) run.fenced = true
      }
    }
    if (run.draining) this.finishDrain(m, shard, true)
    this.pickAndRead(m)
  }

  private produce(): void {
    const x = this.rngArrivals.next() * this.totalRate
    let lo = 0
    let hi = this.S - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (this.cumRate[mid]! > x) hi = mid
      else lo = mid + 1
    }
    const shard = lo
    if (this.backlog(shard) === 0) this.backlogSince[shard] = this.now
    this.messages.produce(shard)
    const w = this.readerOf[shard]!
    if (w >= 0) {
      const m = this.members[w]!
      if (m.alive && !m.paused && m.runs.has(shard)) this.wake(m)
    }
    const next = this.now + this.rngArrivals.exp(1000 / this.totalRate)
    if (next < this.endRun - 15_000) this.q.push(next, K.PRODUCE)
  }

  // ---------------------------------------------------------------- network

  private sendHeartbeat(m: MemberNode): void {
    if (m.machine === null) return
    m.wantSend = false
    const { seq, request } = m.machine.takeRequest(local(m.clock, this.now))
    m.inflightSeq = seq
    this.q.push(this.now + timing.requestTimeoutMs, K.REQ_TIMEOUT, m.idx, seq)
    const target = this.leaseHolder
    if (target < 0 || m.partOut || this.rngNet.chance(this.mix.lossP)) return
    const req: Req = { member: m.idx, seq, request }
    this.q.push(this.now + this.netDelay(), K.REQ_AT_COORD, target, m.idx, req)
    if (this.rngNet.chance(this.mix.dupP))
      this.q.push(this.now + this.netDelay(), K.REQ_AT_COORD, target, m.idx, req)
  }

  private netDelay(): number {
    return 0.2 + this.rngNet.exp(this.mix.delayMeanMs)
  }

  private reply(member: number, seq: number, response: HeartbeatResponse): void {
    const m = this.members[member]!
    if (m.partIn || this.rngNet.chance(this.mix.lossP)) return
    this.q.push(this.now + this.netDelay(), K.RESP_AT_MEMBER, member, seq, response)
    if (this.rngNet.chance(this.mix.dupP))
      this.q.push(this.now + this.netDelay(), K.RESP_AT_MEMBER, member, seq, response)
  }

  private response(i: number, seq: number, response: HeartbeatResponse): void {
    const m = this.members[i]!
    if (m.machine === null || m.inflightSeq !== seq) return
    m.inflightSeq = -1
    let res = response
    if (this.options.broken === "assign-before-revoke" && res.pending.length > 0) {
      // BROKEN ON PURPOSE (test-only): hand pending shards over before the
      // previous owner finished revoking, with the shard's current token.
      res = {
        ...res,
        assigned: [
          ...res.assigned,
          ...res.pending.map((shard) => ({ shard, token: Math.max(1, this.fence[shard]!) })),
        ],
        pending: [],
      }
    }
    this.commands(m, m.machine.onResponse(seq, res, local(m.clock, this.now)))
    this.sendWanted(m)
  }

  private sendWanted(m: MemberNode): void {
    if (m.wantSend && m.machine !== null && m.inflightSeq < 0) this.sendHeartbeat(m)
  }

  private requestTimeout(i: number, seq: number): void {
    const m = this.members[i]!
    if (m.machine === null || m.inflightSeq !== seq) return
    m.inflightSeq = -1
    this.commands(m, m.machine.onRequestFailed(seq, local(m.clock, this.now)))
    this.sendWanted(m)
  }

  private notice(i: number, inc: number): void {
    const m = this.members[i]!
    if (m.inc !== inc || m.machine === null) return
    this.commands(m, m.machine.onNotice(local(m.clock, this.now)))
  }

  // ---------------------------------------------------------------- coordinator

  private request(node: number, _member: number, req: Req): void {
    const c = this.coords[node]!
    if (!c.alive) return
    for (let attempt = 0; attempt < 2; attempt++) {
      const machine = c.machine
      if (machine === null) break
      const step = machine.heartbeat(req.request, local(c.clock, this.now))
      const ok = this.commit(c, step)
      if (ok === "retry") continue
      if (!ok) break
      if (step.response !== undefined) this.reply(req.member, req.seq, step.response)
      this.armCoordTimer(c)
      return
    }
    this.reply(req.member, req.seq, notCoordinator(req.request.memberId))
  }

  /**
   * Due coordinator timers. Deliberately no lease check (CoordinatorHost
   * renews its lease before a deadline and before every commit): this models
   * the worst case, a check that passed just before the process paused, so
   * the election commit and the store CAS are what must stop a stale leader.
   */
  private coordTimer(node: number, inc: number): void {
    const c = this.coords[node]!
    if (c.inc !== inc || c.machine === null || !c.alive || this.now < c.timerAt) return
    c.timerAt = Number.POSITIVE_INFINITY
    const now = local(c.clock, this.now)
    for (;;) {
      const machine = c.machine
      if (machine === null) return
      const step = machine.dueTimer(now)
      if (step === undefined) break
      if (this.commit(c, step) === false) return
    }
    this.armCoordTimer(c)
  }

  private armCoordTimer(c: CoordNode): void {
    if (c.machine === null) return
    const next = c.machine.nextTimer()
    if (next === undefined) return
    const at = Math.max(this.now, toTrue(c.clock, next))
    if (at < c.timerAt || c.timerAt <= this.now) {
      c.timerAt = at
      this.q.push(at, K.COORD_TIMER, c.idx, c.inc)
    }
  }

  /**
   * Store compare-and-set on storeRevision, then fences and notices.
   * A stale instance that still holds the lease reloads and retries (as
   * CoordinatorHost does); one that lost the lease steps down.
   */
  private commit(c: CoordNode, step: CoordinatorStep): boolean | "retry" {
    const machine = c.machine!
    if (step.records.length > 0) {
      const expected = machine.revision()
      if (expected !== this.storeRevision) {
        this.revisions.reject()
        this.mark(
          "fault",
          `coordinator #${c.idx} stale commit (rev ${expected} < ${this.storeRevision}) rejected`,
        )
        if (this.leaseHolder === c.idx && this.now < this.leaseExpires) {
          this.loadLeader(c)
          return "retry"
        }
        c.machine = null
        return false
      }
      this.storeRevision++
      this.revisions.commit(this.now, expected, this.storeRevision)
      machine.apply(step, this.storeRevision)
      this.storeSource = machine
      this.groupChanged(machine)
    } else machine.apply(step, undefined)
    this.writeFences(step.fences)
    for (const id of step.notices) {
      const idx = memberIndex(id)
      const m = this.members[idx]
      if (m !== undefined && !m.partIn && !this.rngNet.chance(this.mix.lossP))
        this.q.push(this.now + this.netDelay(), K.NOTICE, idx, m.inc)
    }
    return true
  }

  /** Fence tokens are written to storage before anyone is told. */
  private writeFences(fences: ReadonlyArray<ShardFence>): void {
    for (const f of fences) if (f.token > this.fence[f.shard]!) this.fence[f.shard] = f.token
    if (fences.length > 0 && this.options.timeline === true)
      this.mark("fence", `${fences.length} shard token(s) written`)
  }

  private coordinatorConfig() {
    return {
      group: "sim",
      shardCount: this.S,
      heartbeatIntervalMs: timing.heartbeatIntervalMs,
      sessionTimeoutMs: timing.sessionTimeoutMs,
      revokeTimeoutMs: timing.revokeTimeoutMs,
    }
  }

  /**
   * Become leader: create the group or load the last committed snapshot, then
   * commit the core's election records (CAS) before serving anything, as
   * `CoordinatorHost` does. The load and the election commit happen in one
   * event here, so the CAS cannot lose to another commit.
   */
  private loadLeader(c: CoordNode): void {
    c.inc++
    c.timerAt = Number.POSITIVE_INFINITY
    const now = local(c.clock, this.now)
    const candidate = { holder: `coordinator-${c.idx}`, leaseToken: this.leaseToken }
    if (this.storeSource === null) {
      const created = this.machines.coordinator.create(this.coordinatorConfig(), now, candidate)
      c.machine = created.coordinator
      if (this.storeRevision !== 0) throw new Error("store has a revision but no snapshot")
      this.storeRevision = 1
      this.revisions.commit(this.now, 0, 1)
      created.coordinator.apply(created.step, 1)
      this.storeSource = created.coordinator
    } else {
      const loaded = this.machines.coordinator.load(
        this.storeSource.snapshot(),
        this.storeRevision,
        now,
        candidate,
      )
      if (loaded.election === undefined) {
        // Refused: a newer lease is already recorded (cannot happen with this lease model).
        this.mark("fault", `coordinator #${c.idx} election refused`)
        c.machine = null
        return
      }
      c.machine = loaded.coordinator
      // BROKEN ON PURPOSE with `skip-election` (test-only): serve without the
      // election commit, so a paused ex-leader's next commit can pass the CAS.
      if (this.options.broken !== "skip-election" && loaded.election.records.length > 0) {
        const expected = this.storeRevision
        this.storeRevision++
        this.revisions.commit(this.now, expected, this.storeRevision)
        loaded.coordinator.apply(loaded.election, this.storeRevision)
        this.storeSource = loaded.coordinator
      }
      this.writeFences(loaded.fences)
    }
    this.armCoordTimer(c)
  }

  private lease(): void {
    const holder = this.coords[this.leaseHolder]
    if (holder?.alive && !holder.paused && holder.machine !== null) {
      this.leaseExpires = this.now + timing.coordinatorLeaseMs
    } else if (this.now >= this.leaseExpires) {
      // Candidates race; the store stream decides who wins.
      const candidates = this.coords.filter((c) => c.alive && !c.paused)
      if (candidates.length > 0) {
        const c = candidates[this.rngStore.int(candidates.length)]!
        if (holder !== undefined && holder !== c)
          this.mark("rebalance", `coordinator failover #${holder.idx} -> #${c.idx}`)
        this.leaseHolder = c.idx
        this.leaseExpires = this.now + timing.coordinatorLeaseMs
        this.leaseToken++
        this.loadLeader(c)
      }
    }
    this.q.push(this.now + timing.coordinatorLeaseMs / 3, K.LEASE)
  }

  // ---------------------------------------------------------------- scenario + faults

  private action(kind: number, i: number): void {
    const m = this.members[i]!
    if (kind === 0) {
      m.wanted = true
      if (!m.alive) {
        this.mark("action", `start ${m.id}`)
        this.startMember(m)
      }
    } else {
      m.wanted = false
      if (m.alive && m.machine !== null && !m.paused) {
        this.mark("action", `leave ${m.id}`)
        m.leaving = true
        this.q.push(this.now + timing.sessionTimeoutMs, K.LEAVE_DEADLINE, i, m.inc)
        this.commands(m, m.machine.leave(local(m.clock, this.now)))
      } else if (m.alive) this.stopProcess(m)
    }
  }

  private faultGap(kind: FaultKind): number {
    const level = this.mix.intensity[kind]
    const perMember =
      kind === "coord-crash" || kind === "coord-stale" ? 1 : Math.sqrt(this.options.members)
    return this.now + this.rngFault.exp(40_000 / (level * perMember))
  }

  private fault(k: number): void {
    if (this.now >= this.endSafety) return
    const kind = FAULT_KINDS[k]!
    this.q.push(this.faultGap(kind), K.FAULT, k)
    const r = this.rngFault
    const target = r.int(this.options.members)
    const m = this.members[target]!
    const dur = r.range(500, 20_000)
    this.convergence.change(this.now)
    switch (kind) {
      case "partition":
        m.partIn = m.partOut = true
        break
      case "oneway":
        if (r.chance(0.5)) m.partIn = true
        else m.partOut = true
        break
      case "store-partition":
        m.partStore = true
        break
      case "crash":
        if (!m.alive) return
        this.stopProcess(m)
        this.q.push(this.now + dur, K.RESTART_MEMBER, target)
        break
      case "pause":
        if (!m.alive || m.paused) return
        this.pauseMember(m)
        this.q.push(this.now + r.range(2_000, timing.sessionTimeoutMs * 2), K.RESUME_MEMBER, target)
        break
      case "slow-drain":
        m.slowDrain = true
        break
      case "coord-crash": {
        const c = this.coords[this.leaseHolder]
        if (c === undefined) return
        c.alive = false
        c.machine = null
        c.deferred = []
        this.q.push(this.now + dur, K.RESTART_COORD, c.idx)
        this.mark("fault", `coordinator #${c.idx} crash`)
        return
      }
      case "coord-stale": {
        const c = this.coords[this.leaseHolder]
        if (c === undefined || c.paused) return
        c.paused = true
        this.q.push(
          this.now + r.range(timing.coordinatorLeaseMs * 1.5, timing.sessionTimeoutMs * 1.5),
          K.RESUME_COORD,
          c.idx,
        )
        this.mark("fault", `coordinator #${c.idx} paused (will resume stale)`)
        return
      }
      default:
        return
    }
    this.mark("fault", `${kind} ${m.id}`)
    if (kind !== "crash" && kind !== "pause") this.q.push(this.now + dur, K.HEAL, k, target)
  }

  private heal(k: number, target: number): void {
    const m = this.members[target]!
    const kind = FAULT_KINDS[k]!
    if (kind === "partition" || kind === "oneway") m.partIn = m.partOut = false
    else if (kind === "store-partition") {
      m.partStore = false
    } else if (kind === "slow-drain") m.slowDrain = false
    this.convergence.change(this.now)
  }

  private pauseMember(m: MemberNode): void {
    m.paused = true
    // A paused process reads nothing: its in-flight batches stop counting as activity
    // until it resumes (batchDone re-checks the lease).
    this.mark("fault", `pause ${m.id}`)
  }

  private resumeMember(i: number): void {
    const m = this.members[i]!
    if (!m.paused) return
    m.paused = false
    const deferred = m.deferred
    m.deferred = []
    for (const [, kind, a, b, p] of deferred) this.q.push(this.now, kind, a, b, p)
    // Idle read loops were blocked waiting for data; `produce` does not wake a
    // paused process, so data that arrived during the pause would wait for the
    // next message on the shard. On resume a blocked read returns at once:
    // wake every idle worker (after the deferred events, so a self-fence or a
    // response due at resume is applied first; a worker with nothing to read
    // goes idle again).
    while (m.idle > 0 && m.rotation.length > 0) this.wake(m)
    this.convergence.change(this.now)
  }

  private resumeCoord(i: number): void {
    const c = this.coords[i]!
    if (!c.paused) return
    c.paused = false
    const deferred = c.deferred
    c.deferred = []
    // A stale leader wakes up believing it still leads: its timers fire first.
    if (c.machine !== null) this.q.push(this.now, K.COORD_TIMER, c.idx, c.inc)
    c.timerAt = this.now
    for (const [, kind, a, b, p] of deferred) this.q.push(this.now, kind, a, b, p)
  }

  private restartMember(i: number): void {
    const m = this.members[i]!
    if (m.wanted && !m.alive) this.startMember(m)
  }

  private startLiveness(): void {
    this.liveness = true
    this.mark("phase", "liveness phase: faults off")
    for (const c of this.coords) {
      c.alive = true
      if (c.paused) this.resumeCoord(c.idx)
    }
    for (const m of this.members) {
      m.partIn = m.partOut = m.partStore = false
      m.slowDrain = false
      if (m.paused) this.resumeMember(m.idx)
      if (m.wanted && !m.alive) this.startMember(m)
    }
    this.convergence.change(this.now)
    // Faults stop: fault() ignores events after endSafety; the network heals.
    this.mix = { ...this.mix, lossP: 0, dupP: 0, delayMeanMs: 1 }
  }

  // ---------------------------------------------------------------- sampling + checks

  private live(): Array<number> {
    const out: Array<number> = []
    for (const m of this.members) if (m.alive && !m.leaving && m.machine !== null) out.push(m.idx)
    return out
  }

  private sample(): void {
    this.q.push(this.now + timing.sampleEveryMs, K.SAMPLE)
    const live = this.live()
    const bal = balanced(this.readerCount, this.readerOf, live)
    this.convergence.sample(this.now, bal.ok)
    this.recordMovement()
    if (bal.ok) {
      if (this.everBalanced) this.episodeConverged()
      else this.episodeBaseline = null
      this.everBalanced = true
    }
    if (this.liveness && this.livenessConverged === undefined && bal.ok) {
      this.livenessConverged = this.now - this.endSafety
    }
    if (
      this.liveness &&
      this.livenessConverged === undefined &&
      this.now - this.endSafety > this.convergenceBound
    ) {
      this.convergence.notConverged(this.now, this.endSafety, bal.why)
      this.livenessConverged = Number.NaN
    }
    // Starvation: only where nothing prevents the owner from serving.
    const faultsOff = this.liveness || this.faultFree()
    if (!faultsOff || this.now < 5_000) return
    const owned = new Map<number, number>()
    for (let s = 0; s < this.S; s++) {
      if (this.readerCount[s] !== 1) continue
      const o = this.readerOf[s]!
      owned.set(o, (owned.get(o) ?? 0) + 1)
    }
    for (let s = 0; s < this.S; s++) {
      if (this.readerCount[s] !== 1 || this.backlog(s) === 0) continue
      const m = this.members[this.readerOf[s]!]!
      const run = m.runs.get(s)
      if (!m.alive || m.paused || run === undefined || run.fenced || m.machine === null) continue
      if (!m.machine.leaseValid(local(m.clock, this.now)) || m.partStore) continue
      const rounds = Math.ceil((owned.get(m.idx) ?? 1) / this.options.workers)
      const bound = rounds * timing.batchSize * 12 + 3_000
      const since = Math.max(
        this.backlogSince[s]!,
        this.servedAt[s]!,
        this.ownedSince[s]!,
        this.liveness ? this.endSafety : 0,
      )
      this.starvation.sample(this.now, s, since, bound)
    }
  }

  private faultFree(): boolean {
    for (const k of FAULT_KINDS) if (this.mix.intensity[k] > 0) return false
    return true
  }

  /**
   * Movement accounting (a statistic, not a checker). `shardsMoved` counts
   * every change of a shard's member-side reader to another member. The
   * lower bound is summed per rebalance episode: from the readers when the
   * first membership change of the episode was committed (the leader's
   * groupEpoch moved) to the membership when the group is balanced again,
   * using the assignor's oracle. A member that leaves and rejoins within one
   * episode moves shards that the episode's net bound does not count.
   */
  private recordMovement(): void {
    const last = this.lastOwner
    for (let s = 0; s < this.S; s++) {
      if (this.readerCount[s] !== 1) continue
      const o = this.readerOf[s]!
      // The initial ramp (members joining one by one) is not a rebalance.
      if (last[s]! >= 0 && last[s] !== o && this.everBalanced) this.shardsMoved++
      last[s] = o
    }
  }

  private groupChanged(leader: SimCoordinator): void {
    const epoch = leader.groupEpoch()
    if (epoch === this.lastGroupEpoch) return
    this.lastGroupEpoch = epoch
    this.recordMovement()
    if (this.episodeBaseline === null) this.episodeBaseline = this.lastTargetIds()
  }

  private episodeConverged(): void {
    const baseline = this.episodeBaseline
    const leader = this.coords[this.leaseHolder]?.machine
    if (baseline === null || leader === null || leader === undefined) return
    this.episodeBaseline = null
    if (this.hooks.lowerBound === undefined) {
      this.lowerBoundKnown = false
      return
    }
    this.lowerBoundTotal += this.hooks.lowerBound(this.S, leader.members(), baseline)
  }

  private lastTargetIds(): Array<string | null> {
    return Array.from(this.lastOwner, (i) => (i >= 0 ? this.members[i]!.id : null))
  }

  private end(): void {
    this.messages.finish(this.now, (v) => this.violation(v))
  }

  // ---------------------------------------------------------------- trace + report

  private violation(v: Violation): void {
    this.violations.push(v)
    this.marks.push({ time: v.time, kind: "violation", label: v.message })
    if (this.around.length === 0) {
      this.around = this.ring()
      // Keep running a little to show what follows, then stop.
      this.stopAfter = this.now + 2_000
      this.aroundStart = this.ringN
    }
  }

  private aroundStart = 0
  private firing = false

  private ring(): Array<TraceLine> {
    const out: Array<TraceLine> = []
    const n = Math.min(this.ringN, RING)
    for (let j = this.ringN - n; j < this.ringN; j++) {
      const r = j & (RING - 1)
      out.push({
        time: this.ringT[r]!,
        event: EVENT_NAMES[this.ringK[r]!] ?? "?",
        a: this.ringA[r]!,
        b: this.ringB[r]!,
      })
    }
    return out
  }

  private captureAfter(): void {
    const after = Math.min(this.ringN - this.aroundStart, 16)
    if (after <= 0) return
    const all = this.ring()
    this.around.push(...all.slice(all.length - after))
  }

  private mark(kind: Mark["kind"], label: string): void {
    if (this.options.timeline === true && this.marks.length < 20_000)
      this.marks.push({ time: this.now, kind, label })
  }

  private openSegment(shard: number, member: number): void {
    if (this.segments.length >= MAX_SEGMENTS) {
      this.timelineTruncated = true
      return
    }
    const seg: Segment = { shard, member, start: this.now, end: Number.NaN }
    this.segments.push(seg)
    this.openSeg.set(shard * 65_536 + member, seg)
  }

  private closeSegment(shard: number, member: number): void {
    const key = shard * 65_536 + member
    const seg = this.openSeg.get(key)
    if (seg !== undefined) {
      seg.end = this.now
      this.openSeg.delete(key)
    }
  }

  private result(): SimResult {
    for (const seg of this.openSeg.values()) seg.end = this.now
    const lost = this.violations.filter((v) => v.checker === "message-loss").length
    let produced = 0
    for (let s = 0; s < this.S; s++) produced += this.messages.producedOn(s)
    return {
      options: this.options,
      machines: this.machines.name,
      faults: this.mix,
      events: this.digest.count,
      virtualMs: this.now,
      digest: this.digest.hex(),
      violations: this.violations,
      around: this.around,
      convergenceMs: this.convergence.durations,
      livenessConvergedMs: this.livenessConverged,
      shardsMoved: this.shardsMoved,
      movementLowerBound: this.lowerBoundKnown ? this.lowerBoundTotal : undefined,
      produced,
      acked: this.messages.ackedTotal,
      handled: this.messages.handledTotal,
      duplicates: this.messages.duplicates,
      lost,
      fencedReads: this.fencedReads,
      fencedAcks: this.fencedAcks,
      staleCommitsRejected: this.revisions.rejected,
      commits: this.revisions.accepted,
      worstStarvationWaitMs: this.starvation.worstWaitMs,
      ackedPerShard: Array.from(this.ackedPerShard),
      memberIds: this.members.map((m) => m.id),
      segments: this.segments,
      marks: this.marks,
      timelineTruncated: this.timelineTruncated,
    }
  }
}

interface Req {
  readonly member: number
  readonly seq: number
  readonly request: HeartbeatRequest
}

const memberIndex = (id: string): number => Number.parseInt(id.slice(4, 8), 10)

const notCoordinator = (memberId: string): HeartbeatResponse => ({
  errorCode: "NOT_COORDINATOR",
  memberId,
  memberEpoch: 0,
  assignmentEpoch: 0,
  assigned: [],
  pending: [],
  heartbeatIntervalMs: timing.heartbeatIntervalMs,
  sessionTimeoutMs: timing.sessionTimeoutMs,
  rebalanceTimeoutMs: timing.revokeTimeoutMs,
})

export const runSimulation = (
  options: SimOptions,
  machines: Machines,
  hooks?: RunHooks,
): SimResult => new Simulation(options, machines, hooks).run()
