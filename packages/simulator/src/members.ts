/**
 * Members and their runtime. A logical member (a `Slot`: member id, weight,
 * settings) runs as one process at a time, or two during a `twin` fault; each
 * process start has its own, larger incarnation. A process is a real
 * `MemberMachine` plus the simulated runtime that executes its commands the
 * way member-runtime will:
 *
 * - it sends a heartbeat when the machine says `SendHeartbeat` (calling
 *   `nextRequest` at the send), reports every request's end (the response,
 *   or `HeartbeatFailed` at the transport timeout) and hands the machine
 *   every response that arrives, late, duplicated or reordered: the machine
 *   decides what to accept;
 * - it sleeps until `MemberMachine.nextDeadline` and asks
 *   `MemberMachine.leaseValid` before every read and every ack: nothing here
 *   computes a lease;
 * - W local workers rotate round-robin over the running read loops (one loop
 *   per shard), read batches of up to 16 messages with the grant's token,
 *   handle them, ack them; StopShard drains the in-flight batch, then
 *   reports ShardDrained; StopAllShards drops everything at once.
 *
 * It also answers the checkers' questions about processes (what a lifecycle
 * still does with a shard, how much lease it has left).
 *
 * @module
 */
import {
  type HeartbeatResponse,
  MAX_MEMBER_WEIGHT,
  MemberMachine,
  MIN_MEMBER_WEIGHT,
  type ShardLayout,
} from "@shardline/core"
import type { DrainFact, Holder, LeaseFact } from "./checkers/index.js"
import type { Forgery } from "./checkers/requests.js"
import { GROUP } from "./coordinator.js"
import type { Ctx } from "./ctx.js"
import type { Prng } from "./engine/Prng.js"
import { forgeReport } from "./faults.js"
import { type MemberSettings, timing } from "./options.js"
import { type Clock, K, local, toTrue } from "./world.js"

export interface Batch {
  readonly pid: number
  readonly shard: number
  readonly ids: ReadonlyArray<number>
  readonly start: number
  /** Slow drain: stretched past the revoke timeout once. */
  stretched: boolean
  /** Transactions: the commit was sent with this token and is in flight (it lands at this batch's next BATCH_DONE). */
  commitToken?: number
  /**
   * `handler-ignores-abort`: its loop was stopped (StopAllShards) while its
   * handler, which ignores the abort signal, runs on until `until`; the
   * machine hears `ShardDrained` only then (docs/protocol.md rule 19).
   */
  zombie?: { readonly until: number; readonly holder: Holder }
}

export interface Run {
  readonly token: number
  draining: boolean
  /** Storage refused the token: no more reads until the loop is restarted. */
  fenced: boolean
  batch: Batch | null
  readonly holder: Holder
  /** The loop found its sealed shard drained and told the machine (ShardExhausted). */
  exhausted: boolean
  /** Storage refused the loop for a missing owner token and it told the machine (ShardTokenMissing). */
  tokenMissing: boolean
  /**
   * BROKEN ON PURPOSE with `refused-ack-counted-as-acked`: pending entries
   * this loop took for acknowledged after a refused ack; it reads only new
   * entries, so it does not read them again while it runs.
   */
  skip?: Set<number>
}

/**
 * What a member's Redis user is refused (the `refused` fault: NOPERM after
 * an ACL change), a bit each: its reads (XREADGROUP), its acks (XACK), its
 * heartbeats (LPUSH to the coordinator's request list), its transactional
 * commits.
 */
export const REFUSE_READ = 1
export const REFUSE_ACK = 2
export const REFUSE_HEARTBEAT = 4
export const REFUSE_COMMIT = 8

export class Slot {
  wanted = false
  /** Alive processes, oldest first. */
  readonly procs: Array<Proc> = []
  lastIncarnation = 0
  partStore = false
  slowDrain = false
  /** `handler-ignores-abort`: its handlers run on past their abort signal. */
  ignoresAbort = false
  /** `refused`: the commands its Redis user is refused (`REFUSE_*` bits; 0: none). */
  refused = 0

  constructor(
    readonly idx: number,
    readonly id: string,
    readonly settings: MemberSettings,
    readonly clock: Clock,
  ) {}
}

type Deferred = readonly [number, number, number, unknown]

const ALIVE = 1
const PAUSED = 2

/**
 * The fields of every process that most events look at first (alive,
 * paused, the request in flight, the timer's instant), in typed arrays by
 * process id: dense, so at 5,000 members they stay in the cache, where a
 * look at the process object itself is a cache miss (docs/simulator.md,
 * Speed). `Proc` reads and writes them through accessors.
 */
export class ProcTable {
  flags = new Uint8Array(1024)
  inFlight = new Int32Array(1024)
  timerAt = new Float64Array(1024)

  /** Room for process `pid`, which starts alive, unpaused, idle, without a timer. */
  add(pid: number): void {
    if (pid >= this.flags.length) {
      const n = 2 * Math.max(this.flags.length, pid + 1)
      const flags = new Uint8Array(n)
      flags.set(this.flags)
      this.flags = flags
      const inFlight = new Int32Array(n)
      inFlight.set(this.inFlight)
      this.inFlight = inFlight
      const timerAt = new Float64Array(n)
      timerAt.set(this.timerAt)
      this.timerAt = timerAt
    }
    this.flags[pid] = ALIVE
    this.inFlight[pid] = 0
    this.timerAt[pid] = Number.POSITIVE_INFINITY
  }

  alive(pid: number): boolean {
    return (this.flags[pid]! & ALIVE) !== 0
  }

  paused(pid: number): boolean {
    return (this.flags[pid]! & PAUSED) !== 0
  }
}

export class Proc {
  deferred: Array<Deferred> = []
  /** The lifecycle `liveSlots` last saw (it changes only in a step; see `exec`). */
  seenLifecycle: string | undefined = undefined
  readonly runs = new Map<number, Run>()
  rotation: Array<number> = []
  rrPos = 0
  idle: number
  layout: ShardLayout | undefined = undefined
  /** Shards this process lied about (REVOKED while still reading them). */
  byzantine: Set<number> | undefined = undefined
  /** Two different answers to one of its requests are on their way (finding F2). */
  mayApplyOlderAnswer = false
  /** Requests left to forge (the `forge` fault), what to forge, and forged so far. */
  forgeLeft = 0
  forgeKind = 0
  forged = 0
  /** Told FENCED_INSTANCE_ID: a standby until its join is answered. */
  superseded = false
  /** Its last requests' send times on its own clock, by seq (the answers checker's record). */
  readonly sentAt = new Map<number, number>()
  /**
   * Bumped when every loop is dropped (StopAllShards): a drain report still
   * on its way from a dropped loop must not reach the machine.
   */
  loops = 0
  readonly label: string

  constructor(
    private readonly table: ProcTable,
    readonly pid: number,
    readonly slot: Slot,
    readonly incarnation: number,
    readonly clock: Clock,
    readonly state: MemberMachine.MemberState,
    workers: number,
    readonly instance: string,
    collided: boolean,
  ) {
    table.add(pid)
    this.idle = workers
    this.label = collided
      ? `${slot.id} (incarnation ${incarnation}/${instance})`
      : `${slot.id} (incarnation ${incarnation})`
  }

  get id(): string {
    return this.slot.id
  }

  get alive(): boolean {
    return this.table.alive(this.pid)
  }

  set alive(v: boolean) {
    const f = this.table.flags
    f[this.pid] = v ? f[this.pid]! | ALIVE : f[this.pid]! & ~ALIVE
  }

  get paused(): boolean {
    return this.table.paused(this.pid)
  }

  set paused(v: boolean) {
    const f = this.table.flags
    f[this.pid] = v ? f[this.pid]! | PAUSED : f[this.pid]! & ~PAUSED
  }

  /** Request in flight (0: none). */
  get inFlight(): number {
    return this.table.inFlight[this.pid]!
  }

  set inFlight(seq: number) {
    this.table.inFlight[this.pid] = seq
  }

  get timerAt(): number {
    return this.table.timerAt[this.pid]!
  }

  set timerAt(t: number) {
    this.table.timerAt[this.pid] = t
  }

  local(t: number): number {
    return local(this.clock, t)
  }

  leaseValid(t: number): boolean {
    return MemberMachine.leaseValid(this.state, local(this.clock, t))
  }
}

/** 96 random bits as 24 hex digits, as the runtime draws a process's instance. */
const drawInstance = (r: Prng): string => {
  let out = ""
  for (let i = 0; i < 3; i++) out += r.int(0x1_0000_0000).toString(16).padStart(8, "0")
  return out
}

export const memberId = (i: number): string => `sim-${String(i).padStart(4, "0")}-m0`

export class Members {
  readonly slots: Array<Slot> = []
  readonly procs: Array<Proc> = []
  readonly table = new ProcTable()
  private readonly byId = new Map<string, Slot>()
  /** Per process: shards whose stopped loop's handler ignores its abort and runs on. */
  private readonly zombies = new Map<number, Set<number>>()
  /** A timer re-armed for the instant it just fired at would spin: the next tick is later. */
  private firing = false
  readonly weights: Float64Array
  /**
   * Per member: 1 while it is in the group from the member side (`live`),
   * refreshed after every step of one of its processes and when one stops,
   * so the balance check reads a byte per member instead of every process's
   * machine (docs/simulator.md, Speed).
   */
  readonly liveSlots: Uint8Array

  constructor(
    private readonly ctx: Ctx,
    settings: ReadonlyArray<MemberSettings>,
    private readonly clocksOn: boolean,
  ) {
    this.weights = new Float64Array(settings.length)
    this.liveSlots = new Uint8Array(settings.length)
    for (let i = 0; i < settings.length; i++) {
      const s = settings[i]!
      const slot = new Slot(i, memberId(i), s, ctx.w.drawClock(clocksOn))
      this.slots.push(slot)
      this.byId.set(slot.id, slot)
      this.weights[i] = s.weight
      if (s.weight !== 1) ctx.w.count("members:weighted")
      if (s.weight === MIN_MEMBER_WEIGHT || s.weight === MAX_MEMBER_WEIGHT)
        ctx.w.count("members:weightAtBound")
      for (const edge of s.edge.split(", "))
        if (edge !== "" && !edge.startsWith("weight")) ctx.w.count(`members:config:${edge}`)
    }
  }

  slotOf(id: string): Slot | undefined {
    return this.byId.get(id)
  }

  /** Defers events of a paused process; true when the event must not run now. */
  deferred(pid: number, kind: number, b: number, p: unknown): boolean {
    if (!this.table.paused(pid)) return false
    this.procs[pid]!.deferred.push([kind, pid, b, p])
    return true
  }

  // ---------------------------------------------------------------- processes

  /**
   * Starts a process of `slot` (a new incarnation); `ownClock`: on another
   * host (a twin). `collideWith`: a process whose incarnation this one draws
   * again (two starts of one id in one millisecond, docs/protocol.md rule
   * 24); only the 96-bit instance tells them apart.
   */
  start(slot: Slot, ownClock = false, collideWith?: Proc): Proc {
    const { w, options } = this.ctx
    const incarnation =
      collideWith?.incarnation ?? slot.lastIncarnation + 1 + w.rng.processes.int(1024)
    slot.lastIncarnation = Math.max(slot.lastIncarnation, incarnation)
    const instance = drawInstance(w.rng.instances)
    const clock = ownClock ? w.drawClock(this.clocksOn) : slot.clock
    const s = slot.settings
    const state = MemberMachine.make(
      {
        group: GROUP,
        stream: GROUP,
        memberId: slot.id,
        incarnation,
        instance,
        memberInfo: {
          consumerName: slot.id,
          host: `sim-host-${slot.idx}`,
          runtimeMaxConcurrency: options.workers,
          ...(s.weight !== 1 ? { weight: s.weight } : {}),
        },
        safetyMarginMs: s.safetyMarginMs,
        heartbeatIntervalMs: timing.heartbeatIntervalMs,
        retryBackoffInitialMs: s.retryBackoffInitialMs,
        retryBackoffMaxMs: s.retryBackoffMaxMs,
        ...(s.leaveTimeoutMs !== undefined ? { leaveTimeoutMs: s.leaveTimeoutMs } : {}),
      },
      local(clock, w.now),
    )
    const p = new Proc(
      this.table,
      this.procs.length,
      slot,
      incarnation,
      clock,
      state,
      options.workers,
      instance,
      collideWith !== undefined,
    )
    this.procs.push(p)
    slot.procs.push(p)
    w.count("member:processStarts")
    this.ctx.sampler.changed(slot.idx, "start")
    this.exec(p, MemberMachine.step(state, { _tag: "Tick", now: p.local(w.now) }))
    return p
  }

  /** How many requests and answers of member `id` the network lost at or after `since`. */
  lostSince(id: string, since: number): number {
    const slot = this.byId.get(id)
    return slot === undefined ? 0 : this.ctx.net.lostSince(slot.idx, since)
  }

  /** A wanted member without a process gets one (after a leave the scenario reversed). */
  restart(i: number): void {
    const slot = this.slots[i]!
    if (slot.wanted && slot.procs.length === 0) this.start(slot)
  }

  /** The process stops (crash, kill, or after Left): its loops end without acks. */
  stop(p: Proc): void {
    if (!p.alive) return
    for (const [shard, run] of p.runs) this.dropRun(p, shard, run)
    p.runs.clear()
    p.rotation = []
    p.alive = false
    p.paused = false
    p.deferred = []
    const at = p.slot.procs.indexOf(p)
    if (at >= 0) p.slot.procs.splice(at, 1)
    this.refreshLive(p.slot)
    this.ctx.sampler.changed(p.slot.idx, "leave")
  }

  /** Graceful leave (the scenario's or a burst's). */
  leave(p: Proc): void {
    const w = this.ctx.w
    for (const run of p.runs.values())
      if (run.batch !== null) {
        w.count("member:leavesWithBatchInFlight")
        break
      }
    w.count("member:leaves")
    this.exec(p, MemberMachine.step(p.state, { _tag: "LeaveRequested", now: p.local(w.now) }))
    this.ctx.sampler.changed(p.slot.idx, "leave")
  }

  pause(p: Proc): void {
    p.paused = true
  }

  resume(pid: number): void {
    const p = this.procs[pid]!
    if (!p.paused || !p.alive) return
    const w = this.ctx.w
    p.paused = false
    const deferred = p.deferred
    p.deferred = []
    for (const [kind, a, b, payload] of deferred) w.q.push(w.now, kind, a, b, payload)
    // Idle read loops were blocked waiting for data; `produce` does not wake a
    // paused process, so on resume a blocked read returns at once: wake every
    // idle worker (after the deferred events, so a self-fence or a response
    // due at resume is applied first).
    while (p.idle > 0 && p.rotation.length > 0) this.wake(p)
  }

  /** Is the member in the group from the member side (a process alive, not leaving)? */
  live(slot: Slot): boolean {
    for (const p of slot.procs) {
      const l = p.state.lifecycle
      if (l !== "leaving" && l !== "left") return true
    }
    return false
  }

  private refreshLive(slot: Slot): void {
    this.liveSlots[slot.idx] = this.live(slot) ? 1 : 0
  }

  // ---------------------------------------------------------------- the machine

  private exec(p: Proc, cmds: Array<MemberMachine.MemberCommand>): void {
    const w = this.ctx.w
    for (let i = 0; i < cmds.length; i++) {
      const c = cmds[i]!
      switch (c._tag) {
        case "StartShard":
          this.ctx.checks.leaseConfig.started(
            w.now,
            p.label,
            c.shard,
            p.slot.settings.safetyMarginMs,
          )
          this.startShard(p, c.shard, c.token)
          for (const more of MemberMachine.step(p.state, { _tag: "ShardStarted", shard: c.shard }))
            cmds.push(more)
          break
        case "StopShard":
          this.stopShard(p, c.shard)
          break
        case "StopAllShards": {
          const running = p.slot.ignoresAbort ? this.ignoringAbort(p) : undefined
          this.dropAll(p)
          w.count(`member:stopAll:${c.reason}`)
          this.ctx.checks.collateral?.memberStopped(p.id, c.reason, w.now)
          // the dropped loops end at once here (their batches are abandoned):
          // each is reported, as the machine requires before a REVOKED or a rejoin;
          // a loop whose handler ignores its abort ends when the handler returns
          if (running !== undefined) this.keepRunning(p, running)
          if (c.reason !== "left" && c.reason !== "leave-timeout")
            for (const [shard, entry] of [...p.state.shards])
              if (
                entry.status === "stopping" &&
                (!this.handlerRunsOn(p, shard) ||
                  this.ctx.options.broken === "drained-before-handler-returns")
              )
                for (const more of MemberMachine.step(p.state, { _tag: "ShardDrained", shard }))
                  cmds.push(more)
          break
        }
        case "SendHeartbeat":
          this.send(p)
          break
        case "LayoutChanged":
          p.layout = c.layout
          // a held-back drain report (see `exhausted`) may go now
          for (const shard of p.runs.keys())
            if (this.ctx.data.sealed[shard]) w.q.push(w.now, K.EXHAUSTED, p.pid, shard, p.loops)
          break
        case "RequestRejected":
          w.count("member:requestRejected")
          break
        case "LeaseUnusable":
          w.count(`member:leaseUnusable:${c.error.reason}`)
          // A config error: the operator takes the member out.
          if (c.error.reason === "MarginTooLarge") p.slot.wanted = false
          break
        case "Superseded":
          w.count("twin:superseded")
          p.superseded = true
          break
        case "Left": {
          this.stop(p)
          // The scenario wants the member back (it asked for a start while
          // this process was still leaving): the orchestrator starts a new one.
          const slot = p.slot
          if (slot.wanted && slot.procs.length === 0)
            w.q.push(w.now + 500, K.RESTART_SLOT, slot.idx)
          return
        }
      }
    }
    // the member's liveness can only have changed with this process's lifecycle
    const lifecycle = p.state.lifecycle
    if (lifecycle !== p.seenLifecycle) {
      p.seenLifecycle = lifecycle
      this.refreshLive(p.slot)
    }
    this.armTimer(p)
  }

  private armTimer(p: Proc): void {
    const next = MemberMachine.nextDeadline(p.state)
    if (next === undefined || !Number.isFinite(next)) return
    const w = this.ctx.w
    const at = Math.max(this.firing ? w.now + 1 : w.now, toTrue(p.clock, next))
    if (at < p.timerAt || p.timerAt <= w.now) {
      p.timerAt = at
      w.q.push(at, K.MEMBER_TIMER, p.pid, 0)
    }
  }

  timer(pid: number): void {
    const w = this.ctx.w
    const table = this.table
    // a superseded timer, or a stopped process: decided without its object
    if (!table.alive(pid) || w.now < table.timerAt[pid]!) return
    table.timerAt[pid] = Number.POSITIVE_INFINITY
    const p = this.procs[pid]!
    this.firing = true
    this.exec(p, MemberMachine.step(p.state, { _tag: "Tick", now: p.local(w.now) }))
    this.firing = false
  }

  private send(p: Proc): void {
    const { w, checks, net } = this.ctx
    // One request in flight, always (finding F3 is gone: a lost lease no
    // longer fences, and a fence comes with the answer to the request in flight)
    if (p.inFlight !== 0) checks.runtime.secondRequest(w.now, p.label, p.inFlight)
    const now = p.local(w.now)
    const { seq, request } = MemberMachine.nextRequest(p.state, now)
    p.sentAt.set(seq, now)
    if (p.sentAt.size > 16) for (const old of p.sentAt.keys()) if (p.sentAt.delete(old)) break
    let sent = request
    let forgery: Forgery | undefined
    if (p.forgeLeft > 0 && request.memberEpoch > 0) {
      const forged = forgeReport(this.ctx, p, request)
      if (forged !== undefined || p.forgeKind !== 3) p.forgeLeft--
      if (forged !== undefined) {
        sent = forged.request
        forgery = forged.forgery
        p.forged++
      }
    }
    p.inFlight = seq
    if ((p.slot.refused & REFUSE_HEARTBEAT) !== 0 || this.ctx.store.refusing) {
      // the `refused` fault: LPUSH answered NOPERM (or OOM, the server
      // full): the request fails at once, nothing reached the coordinator,
      // and the machine retries it as any failed heartbeat
      w.count("refused:heartbeat")
      w.q.push(w.now + 1, K.REQ_TIMEOUT, p.pid, seq)
      return
    }
    w.q.push(w.now + timing.requestTimeoutMs, K.REQ_TIMEOUT, p.pid, seq)
    net.toCoordinator(p.slot.idx, { pid: p.pid, seq, sentAt: w.now, request: sent, forgery })
  }

  response(pid: number, seq: number, response: HeartbeatResponse): void {
    const p = this.procs[pid]!
    if (!p.alive) return
    const { w, options, data } = this.ctx
    if (p.inFlight === seq) p.inFlight = 0
    else w.count("member:responsesAfterTheirRequestEnded")
    let res = response
    if (options.broken === "assign-before-revoke" && res.pending.length > 0) {
      // BROKEN ON PURPOSE (test-only): hand pending shards over before the
      // previous owner finished revoking, with the shard's current token.
      res = {
        ...res,
        assigned: [
          ...res.assigned,
          ...res.pending.map((shard) => ({ shard, token: Math.max(1, data.fence[shard]!) })),
        ],
        pending: [],
      }
    }
    const wasStandby = p.superseded
    const epochBefore = p.state.memberEpoch
    const heldBefore = p.state.shards.size
    const leaseFrom = p.state.lastSuccessAt
    const arrivedAt = p.local(w.now)
    this.ctx.checks.collateral?.answered(p.id, response, w.now)
    this.exec(
      p,
      MemberMachine.step(p.state, {
        _tag: "ResponseReceived",
        seq,
        response: res,
        now: arrivedAt,
      }),
    )
    const sentAt = p.sentAt.get(seq)
    if (response.errorCode === "NONE" && sentAt !== undefined)
      this.ctx.checks.answers.answer(
        w.now,
        p.label,
        seq,
        sentAt,
        arrivedAt,
        response.sessionTimeoutMs - p.slot.settings.safetyMarginMs,
        leaseFrom,
        p.state.lastSuccessAt,
      )
    const epochAfter = p.state.memberEpoch
    if (
      p.alive &&
      epochBefore > 0 &&
      epochAfter > 0 &&
      epochAfter !== epochBefore &&
      heldBefore > 0
    ) {
      // finding F1 (fixed in core; docs/simulator.md): counted, no longer excused
      w.count("finding:lifecycleSwitchWithoutFence")
    }
    if (wasStandby && p.state.lifecycle === "active") {
      p.superseded = false
      w.count("twin:standbyTookOver")
    }
    // Idle read loops of sealed shards poll their drain state again (the
    // runtime's loop re-reads after every wait), here once per answer.
    if (this.ctx.layouts.enabled && p.alive)
      for (const [shard, run] of p.runs)
        if (data.sealed[shard] && !run.exhausted)
          w.q.push(w.now, K.EXHAUSTED, p.pid, shard, p.loops)
  }

  timeout(pid: number, seq: number): void {
    // most timeouts find their request answered: decided without the process object
    const table = this.table
    if (!table.alive(pid) || table.inFlight[pid] !== seq) return
    table.inFlight[pid] = 0
    const p = this.procs[pid]!
    this.exec(
      p,
      MemberMachine.step(p.state, { _tag: "HeartbeatFailed", seq, now: p.local(this.ctx.w.now) }),
    )
  }

  /** The coordinator pushes a notice to member `id`: every process of it subscribed. */
  notice(id: string): void {
    const slot = this.byId.get(id)
    if (slot === undefined) return
    for (const p of slot.procs) this.ctx.net.notice(slot.idx, p.pid)
  }

  noticeArrived(pid: number): void {
    const p = this.procs[pid]!
    if (!p.alive) return
    this.exec(p, MemberMachine.step(p.state, { _tag: "NoticeReceived" }))
  }

  /**
   * A read loop with nothing to read asks whether its shard is drained for
   * the group (`ShardStreams.drainState`: sealed by a reshard, nothing
   * undelivered, nothing pending) and, once it is, tells the machine
   * (`ShardExhausted`), which reports it in `drainedShards`.
   */
  exhausted(pid: number, shard: number, loops: number): void {
    const p = this.procs[pid]!
    const { w, data } = this.ctx
    if (!p.alive || loops !== p.loops) return
    const run = p.runs.get(shard)
    if (run === undefined || run.draining || run.fenced || run.exhausted) return
    // Only a loop with nothing to read asks (BROKEN ON PURPOSE with
    // `cutover-before-drain`: it asks with a batch in flight too).
    if (run.batch !== null && this.ctx.options.broken !== "cutover-before-drain") return
    if (
      !p.leaseValid(w.now) ||
      p.slot.partStore ||
      this.ctx.store.down ||
      (p.slot.refused & REFUSE_READ) !== 0
    )
      return
    // its outbox is relayed first (the relay asks again once it is empty)
    const outbox = this.ctx.outbox
    if (outbox !== undefined && outbox.pending(shard) > 0) outbox.kick(p.pid, shard, p.loops)
    if (!data.drained(shard)) return
    // Finding F4 (docs/simulator.md), fixed in core: the stream seals a shard
    // before the group's leader adopts the new generation; the leader ignores
    // a drained report of a shard of its current layout until it adopts it,
    // and the machine repeats the report until then. No hold-back here.
    run.exhausted = true
    w.count("reshard:shardExhausted")
    this.exec(p, MemberMachine.step(p.state, { _tag: "ShardExhausted", shard }))
  }

  /** `shard` was sealed: its readers look whether it is drained. */
  sealed(shard: number): void {
    for (const slot of this.slots)
      for (const p of slot.procs)
        if (p.runs.has(shard)) this.ctx.w.q.push(this.ctx.w.now, K.EXHAUSTED, p.pid, shard, p.loops)
  }

  drained(pid: number, shard: number, loops: number): void {
    const p = this.procs[pid]!
    if (!p.alive) return
    if (loops !== p.loops) {
      this.ctx.w.count("member:drainReportOfDroppedLoop")
      return
    }
    this.exec(p, MemberMachine.step(p.state, { _tag: "ShardDrained", shard }))
  }

  // ---------------------------------------------------------------- read loops

  private startShard(p: Proc, shard: number, token: number): void {
    const { w, checks, data, sampler, options } = this.ctx
    // a shard id beyond the layout it knows (ids of later generations are higher)
    if (
      p.layout === undefined ||
      (this.ctx.layouts.enabled
        ? shard >= p.layout.firstShard + p.layout.shardCount
        : p.layout.shardCount !== options.shards)
    )
      checks.runtime.startWithoutLayout(
        w.now,
        p.label,
        shard,
        p.layout === undefined ? "none" : `${p.layout.shardCount} shards`,
      )
    if (!p.leaseValid(w.now)) checks.runtime.startWithoutLease(w.now, p.label, shard)
    const existing = p.runs.get(shard)
    if (existing !== undefined) {
      checks.runtime.startWhileRunning(w.now, p.label, shard)
      this.dropRun(p, shard, existing)
      p.runs.delete(shard)
      const at = p.rotation.indexOf(shard)
      if (at >= 0) p.rotation.splice(at, 1)
    }
    p.byzantine?.delete(shard)
    const epoch = p.state.memberEpoch
    const holder: Holder = {
      proc: p.pid,
      label: p.label,
      memberId: p.id,
      epoch,
      token,
      grantRev: checks.view.grantRev(shard, token),
      active: () =>
        p.alive &&
        p.runs.get(shard) === run &&
        p.byzantine?.has(shard) !== true &&
        p.leaseValid(w.now),
    }
    const run: Run = {
      token,
      draining: false,
      fenced: false,
      batch: null,
      holder,
      exhausted: false,
      tokenMissing: false,
    }
    p.runs.set(shard, run)
    this.ctx.outbox?.kick(p.pid, shard, p.loops)
    p.rotation.push(shard)
    data.addReader(shard, p.pid)
    checks.intent.hold(shard, holder)
    sampler.openSegment(shard, p)
    this.wake(p)
    if (data.sealed[shard]) w.q.push(w.now, K.EXHAUSTED, p.pid, shard, p.loops)
  }

  private stopShard(p: Proc, shard: number): void {
    const { w, data, sampler } = this.ctx
    const run = p.runs.get(shard)
    if (run === undefined) {
      w.q.push(w.now, K.DRAINED, p.pid, shard, p.loops)
      return
    }
    if (run.draining) return
    run.draining = true
    data.removeReader(shard, p.pid)
    sampler.closeSegment(shard, p)
    if (run.batch === null) this.finishDrain(p, shard)
  }

  private finishDrain(p: Proc, shard: number, drainedBatch = false): void {
    const { w, checks } = this.ctx
    p.runs.delete(shard)
    const at = p.rotation.indexOf(shard)
    if (at >= 0) p.rotation.splice(at, 1)
    checks.intent.release(shard, p.pid)
    // Slow drain with nothing in flight: the drain report itself comes late.
    const late = p.slot.slowDrain && !drainedBatch ? timing.revokeTimeoutMs * 1.5 : 0
    w.q.push(w.now + late, K.DRAINED, p.pid, shard, p.loops)
  }

  /**
   * The `handler-ignores-abort` fault: the loops of `p` with a handler in
   * flight, about to be stopped at once (StopAllShards), by shard.
   */
  private ignoringAbort(p: Proc): Map<number, { run: Run; batch: Batch }> {
    const out = new Map<number, { run: Run; batch: Batch }>()
    for (const [shard, run] of p.runs)
      if (run.batch !== null && run.batch.commitToken === undefined)
        out.set(shard, { run, batch: run.batch })
    return out
  }

  /**
   * Handlers that ignore their abort signal (`handler-ignores-abort`) run on
   * after their loops were stopped, 0.5-3 revoke timeouts more: the process
   * still holds those shards (the intent checker sees it while its lease is
   * valid: nobody else may read them, docs/protocol.md rule 19), and their
   * loops are reported drained only when the handlers return (`batchDone`).
   */
  private keepRunning(p: Proc, running: Map<number, { run: Run; batch: Batch }>): void {
    const { w, checks } = this.ctx
    // The lease the grants were held under, as it stood when the loops
    // stopped: a later answer (a rejoin after an expiry, rule 19's limit)
    // is a new lifecycle's lease and covers none of these grants.
    const lease = { ...p.state }
    for (const [shard, { run, batch }] of running) {
      const holder: Holder = {
        ...run.holder,
        active: () =>
          p.alive &&
          batch.zombie !== undefined &&
          MemberMachine.leaseValid(lease, local(p.clock, w.now)),
      }
      const until = w.now + w.rng.faultEvents.range(0.5, 3) * timing.revokeTimeoutMs
      batch.zombie = { until, holder }
      let set = this.zombies.get(p.pid)
      if (set === undefined) {
        set = new Set()
        this.zombies.set(p.pid, set)
      }
      set.add(shard)
      checks.intent.hold(shard, holder)
      w.count("ignoresAbort:handlerRunsOn")
    }
  }

  /** Whether a handler of `p` that ignored its abort still runs for `shard`. */
  private handlerRunsOn(p: Proc, shard: number): boolean {
    return this.zombies.get(p.pid)?.has(shard) === true
  }

  /** The handler of a stopped loop that ignored its abort returns: its late ack, then its drain report. */
  private zombieDone(p: Proc, batch: Batch): void {
    const { w, checks, data } = this.ctx
    const z = batch.zombie!
    if (w.now < z.until) {
      w.q.push(z.until, K.BATCH_DONE, p.pid, 0, batch)
      return
    }
    this.zombies.get(p.pid)?.delete(batch.shard)
    if (!p.alive) {
      batch.zombie = undefined
      checks.intent.release(batch.shard, p.pid)
      return
    }
    // The worst case: the handler acknowledges on its own (a late ack with
    // its old token, whether or not its lease is still valid); storage
    // decides (rule 19's limit: once its grant ended only the fence stops it).
    // With transactional handlers the late ack is the handler's commit: its
    // effects and its ack in one fenced step (docs/exactly-once.md), never
    // an ack alone
    const tx = data.tx
    if ((p.slot.refused & (tx !== undefined ? REFUSE_COMMIT : REFUSE_ACK)) !== 0)
      w.count("refused:lateAck")
    else if (!p.slot.partStore && !this.ctx.store.down) {
      if (z.holder.active()) checks.intent.act(w.now, batch.shard, z.holder)
      const accepted =
        tx !== undefined
          ? tx.commit(batch.shard, z.holder.token, batch.ids) === "committed"
          : data.ack(batch.shard, z.holder.token, batch.ids)
      if (accepted) {
        w.count("ignoresAbort:lateAckAccepted")
        if (tx !== undefined) this.ctx.outbox?.kick(p.pid, batch.shard, p.loops)
        // with the fence off, a fenced or replaced lifecycle's ack is a
        // zombie ack by design, as in `effective` (the intent checker judges it)
        const end = data.storageFence ? undefined : checks.view.ended(p.id, z.holder.epoch)
        if (end !== undefined && (end.kind === "MemberFenced" || end.kind === "MemberReplaced"))
          data.zombieAcks++
        else checks.ownership.batch(batch.shard, p.pid, batch.start, w.now)
      } else w.count("ignoresAbort:lateAckRefused")
    } else w.count("ignoresAbort:lateAckUnreachable")
    batch.zombie = undefined
    checks.intent.release(batch.shard, p.pid)
    const entry = p.state.shards.get(batch.shard)
    if (
      entry?.status === "stopping" &&
      this.ctx.options.broken !== "drained-before-handler-returns"
    )
      this.exec(p, MemberMachine.step(p.state, { _tag: "ShardDrained", shard: batch.shard }))
    this.pickAndRead(p)
  }

  /** Stops a loop at once (crash, StopAllShards): the in-flight batch is abandoned. */
  private dropRun(p: Proc, shard: number, run: Run): void {
    const { data, sampler, checks } = this.ctx
    run.batch = null
    if (!run.draining) {
      data.removeReader(shard, p.pid)
      sampler.closeSegment(shard, p)
    }
    checks.intent.release(shard, p.pid)
  }

  private dropAll(p: Proc): void {
    p.loops++
    p.mayApplyOlderAnswer = false
    for (const [shard, run] of p.runs) this.dropRun(p, shard, run)
    p.runs.clear()
    p.rotation = []
  }

  private wake(p: Proc): void {
    if (p.idle > 0) {
      p.idle--
      this.ctx.w.q.push(this.ctx.w.now, K.WORKER, p.pid, 0)
    }
  }

  /** New data on `shard`, which process `pid` reads. */
  wakeFor(pid: number, shard: number): void {
    const p = this.procs[pid]!
    if (p.idle > 0 && p.alive && !p.paused && p.runs.has(shard)) this.wake(p)
  }

  worker(pid: number): void {
    const p = this.procs[pid]!
    if (p.alive) this.pickAndRead(p)
  }

  private pickAndRead(p: Proc): void {
    const { w, checks, data, workload } = this.ctx
    const n = p.rotation.length
    if (n === 0 || !p.leaseValid(w.now)) {
      p.idle++
      return
    }
    for (let k = 0; k < n; k++) {
      const pos = (p.rrPos + k) % n
      const shard = p.rotation[pos]!
      if (data.backlog(shard) === 0) continue
      const run = p.runs.get(shard)!
      if (run.draining || run.fenced || run.batch !== null) continue
      p.rrPos = pos + 1
      if (p.slot.partStore || this.ctx.store.down) {
        w.count("store:readUnreachable")
        w.q.push(w.now + 200, K.WORKER, p.pid, 0)
        return
      }
      if ((p.slot.refused & REFUSE_READ) !== 0) {
        // NOPERM (the `refused` fault): nothing read, nothing made pending;
        // the loop tries again after a backoff
        w.count("refused:read")
        run.skip = undefined
        w.q.push(w.now + 200, K.WORKER, p.pid, 0)
        return
      }
      const gone = data.vanished(shard)
      if (gone === "token") {
        // rule 26: every token is refused; the shard waits for a coordinator
        // to write one again, trying again every idle wait, and its member
        // asks for it (rule 30)
        w.count("evict:readRefused")
        this.tokenMissing(p, run, shard)
        w.q.push(w.now + 200, K.WORKER, p.pid, 0)
        return
      }
      if (gone !== undefined) data.recreate(shard)
      if (p.byzantine?.has(shard) !== true) checks.intent.act(w.now, shard, run.holder)
      const ids = data.read(shard, run.token, run.skip)
      if (ids === undefined) {
        run.fenced = true
        continue
      }
      // only a loop that skips pending entries it took for acknowledged
      // (`refused-ack-counted-as-acked`) reads nothing here
      if (ids.length === 0 && run.skip !== undefined) continue
      if (run.tokenMissing) {
        // the token is back: nothing more to report (rule 30)
        run.tokenMissing = false
        this.exec(p, MemberMachine.step(p.state, { _tag: "ShardTokenBack", shard }))
      }
      const order = checks.keyOrder
      if (order !== undefined) for (const id of ids) order.deliver(w.now, shard, id)
      const batch: Batch = { pid: p.pid, shard, ids, start: w.now, stretched: false }
      if (data.tx !== undefined) data.tx.handlerStarted(shard, ids)
      run.batch = batch
      w.q.push(w.now + workload.processing(shard, ids.length), K.BATCH_DONE, p.pid, 0, batch)
      return
    }
    p.idle++
  }

  /**
   * A fenced call of `run` was refused for a missing owner token: the loop
   * tells its machine once, which asks the coordinator to write the token
   * again (docs/protocol.md rule 30). BROKEN ON PURPOSE with
   * `missing-token-unreported`: it waits in silence, as before the rule.
   */
  private tokenMissing(p: Proc, run: Run, shard: number): void {
    if (run.tokenMissing || this.ctx.options.broken === "missing-token-unreported") return
    run.tokenMissing = true
    this.ctx.w.count("evict:tokenReported")
    this.exec(
      p,
      MemberMachine.step(p.state, { _tag: "ShardTokenMissing", shard, token: run.token }),
    )
  }

  batchDone(batch: Batch): void {
    const p = this.procs[batch.pid]!
    if (batch.zombie !== undefined) {
      this.zombieDone(p, batch)
      return
    }
    if (batch.commitToken !== undefined) {
      this.commitLands(p, batch)
      return
    }
    if (!p.alive) return
    const { w, checks, data } = this.ctx
    const shard = batch.shard
    const run = p.runs.get(shard)
    if (run === undefined || run.batch !== batch) {
      this.pickAndRead(p)
      return
    }
    if (run.draining && p.slot.slowDrain && !batch.stretched) {
      // Delayed revoke: in-flight work drains slower than the revoke timeout.
      batch.stretched = true
      w.count("slowDrain:stretched")
      w.q.push(w.now + timing.revokeTimeoutMs * 1.5, K.BATCH_DONE, p.pid, 0, batch)
      return
    }
    if (run.draining && p.slot.ignoresAbort && !batch.stretched) {
      // A handler that ignores its abort signal at its drain deadline runs
      // on past the revoke timeout (rule 4 fences its member; rule 19 holds
      // the shard until it stopped or its lease provably ended).
      batch.stretched = true
      w.count("ignoresAbort:drainStretched")
      const more = w.rng.faultEvents.range(1.2, 3) * timing.revokeTimeoutMs
      w.q.push(w.now + more, K.BATCH_DONE, p.pid, 0, batch)
      return
    }
    run.batch = null
    if (p.leaseValid(w.now)) {
      const byzantine = p.byzantine?.has(shard) === true
      if (!byzantine) checks.intent.act(w.now, shard, run.holder)
      const order = checks.keyOrder
      for (const id of batch.ids) {
        checks.messages.handle(shard, id)
        order?.handle(w.now, shard, id)
      }
      const tx = data.tx
      const gone = data.vanished(shard)
      if (p.slot.partStore || this.ctx.store.down) {
        w.count("store:ackUnreachable")
        run.skip = undefined
      } else if ((p.slot.refused & REFUSE_ACK) !== 0 && tx === undefined)
        this.ackRefused(run, batch)
      else if (
        tx !== undefined &&
        ((p.slot.refused & REFUSE_COMMIT) !== 0 || this.ctx.store.refusing)
      ) {
        // NOPERM, or OOM (a full server refuses the commit's writes): nothing
        // committed, the batch stays pending and is handled again
        w.count("refused:txCommit")
      } else if (gone !== undefined) {
        // rule 26: the ack is refused (a missing token: the entries stay
        // pending, read again once it is back, rule 30; a vanished group or
        // stream: the next read says so and starts the group again)
        w.count(`evict:ackRefused:${gone}`)
        if (gone === "token") this.tokenMissing(p, run, shard)
      } else if (tx !== undefined) {
        if (this.commitTx(p, run, batch, byzantine)) return
      } else if (data.ack(shard, run.token, batch.ids)) {
        if (this.effective(p, run, byzantine))
          checks.ownership.batch(shard, p.pid, batch.start, w.now)
        if (data.sealed[shard]) w.q.push(w.now, K.EXHAUSTED, p.pid, shard, p.loops)
      } else run.fenced = true
    } else w.count("member:batchAbandonedLeaseExpired")
    if (run.draining) this.finishDrain(p, shard, true)
    this.pickAndRead(p)
  }

  /**
   * The `refused` fault: storage refused the batch's ack (NOPERM): nothing
   * was acknowledged, so the entries stay pending and the loop reads them
   * again (the runtime's retry read, after a failed ack: docs/simulator.md,
   * Faults). BROKEN ON PURPOSE with `refused-ack-counted-as-acked`: the
   * loop takes the ack as done and reads only new entries.
   */
  private ackRefused(run: Run, batch: Batch): void {
    this.ctx.w.count("refused:ack")
    if (this.ctx.options.broken !== "refused-ack-counted-as-acked") {
      run.skip = undefined
      return
    }
    run.skip ??= new Set()
    for (const id of batch.ids) run.skip.add(id)
  }

  /**
   * Transactional handlers (docs/simulator.md, Transactions): the batch's
   * effects and ack commit in one fenced step. A commit whose answer is lost
   * looks failed to the member, which handles the batch again and commits
   * again (that commit finds nothing pending). Returns true when the batch
   * is in flight again (the caller stops there).
   */
  private commitTx(p: Proc, run: Run, batch: Batch, byzantine: boolean): boolean {
    const { w, checks, data, workload } = this.ctx
    const shard = batch.shard
    const stall = data.tx!.commitStall()
    if (stall > 0) {
      // Checked the lease, then stalled on its way to Redis (the worst case
      // after the check): it lands later, maybe after the shard moved on.
      batch.commitToken = run.token
      run.batch = batch
      w.q.push(w.now + stall, K.BATCH_DONE, p.pid, 0, batch)
      return true
    }
    const outcome = data.tx!.commit(shard, run.token, batch.ids)
    if (outcome === "fenced") {
      run.fenced = true
      return false
    }
    if (outcome === "committed") {
      this.ctx.outbox?.kick(p.pid, shard, p.loops)
      if (this.effective(p, run, byzantine))
        checks.ownership.batch(shard, p.pid, batch.start, w.now)
      if (data.tx!.answerLost()) {
        run.batch = batch
        w.q.push(
          w.now + workload.processing(shard, batch.ids.length),
          K.BATCH_DONE,
          p.pid,
          0,
          batch,
        )
        return true
      }
    }
    if (data.sealed[shard]) w.q.push(w.now, K.EXHAUSTED, p.pid, shard, p.loops)
    return false
  }

  /**
   * A stalled commit lands in Redis, whether or not its process still lives
   * or still reads the shard; only the storage's checks (owner token, still
   * pending) decide. Its answer goes to the loop if that loop still waits.
   */
  private commitLands(p: Proc, batch: Batch): void {
    const { w, data } = this.ctx
    const shard = batch.shard
    // Redis down when it lands: the commit fails, nothing is written.
    const outcome = this.ctx.store.down
      ? "unreachable"
      : (p.slot.refused & REFUSE_COMMIT) !== 0 || this.ctx.store.refusing
        ? "refused"
        : data.tx!.commit(shard, batch.commitToken!, batch.ids)
    w.count(`tx:stalledCommit:${outcome}`)
    batch.commitToken = undefined
    if (!p.alive) return
    if (outcome === "committed") this.ctx.outbox?.kick(p.pid, shard, p.loops)
    const run = p.runs.get(shard)
    if (run === undefined || run.batch !== batch) {
      // The loop is gone: the worker that waited on this commit reads on.
      this.pickAndRead(p)
      return
    }
    run.batch = null
    if (outcome === "fenced") run.fenced = true
    else if (data.sealed[shard]) w.q.push(w.now, K.EXHAUSTED, p.pid, shard, p.loops)
    if (run.draining) this.finishDrain(p, shard, true)
    this.pickAndRead(p)
  }

  /**
   * Does an accepted ack count for the storage-level ownership checker? With
   * the fence on, always (storage accepted it). With it off, not the acks of
   * a liar or of a lifecycle the coordinator fenced or replaced: by design
   * only the fence stops those (counted as zombie acks; the intent checker
   * judges them).
   */
  private effective(p: Proc, run: Run, byzantine: boolean): boolean {
    const { data, checks } = this.ctx
    if (data.storageFence) return true
    const end = checks.view.ended(p.id, run.holder.epoch)
    if (
      byzantine ||
      (end !== undefined && (end.kind === "MemberFenced" || end.kind === "MemberReplaced"))
    ) {
      data.zombieAcks++
      return false
    }
    return true
  }

  /** Another process still reading `shard` (not draining), or -1. */
  otherReader(shard: number, pid: number): number {
    for (const slot of this.slots)
      for (const p of slot.procs) {
        if (p.pid === pid) continue
        const run = p.runs.get(shard)
        if (run !== undefined && !run.draining) return p.pid
      }
    return -1
  }

  // ---------------------------------------------------------------- faults

  // ---------------------------------------------------------------- facts for the checkers

  /** What each process of lifecycle `memberId`/`epoch` still does with `shard`. */
  drainFacts(id: string, epoch: number, shard: number): Array<DrainFact> {
    const out: Array<DrainFact> = []
    const slot = this.byId.get(id)
    if (slot === undefined) return out
    for (const p of slot.procs) {
      if (p.state.memberEpoch !== epoch || p.byzantine?.has(shard) === true) continue
      const run = p.runs.get(shard)
      out.push({
        label: p.label,
        state:
          run === undefined
            ? "idle"
            : !run.draining
              ? "reading"
              : run.batch !== null
                ? "draining"
                : "idle",
      })
    }
    return out
  }

  /** How many shards each process of lifecycle `memberId`/`epoch` holds, and its lease left. */
  leaseFacts(id: string, epoch: number): Array<LeaseFact> {
    const out: Array<LeaseFact> = []
    const slot = this.byId.get(id)
    if (slot === undefined) return out
    const now = this.ctx.w.now
    for (const p of slot.procs) {
      if (p.state.memberEpoch !== epoch) continue
      const until = MemberMachine.leaseExpiresAt(p.state)
      out.push({
        label: p.label,
        shards: p.runs.size,
        leaseLeftMs: until === undefined ? 0 : until - p.local(now),
      })
    }
    return out
  }
}
