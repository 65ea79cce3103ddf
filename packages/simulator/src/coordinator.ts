/**
 * The coordinator host, simulated: three candidate processes race for the
 * lease; the winner creates the group or loads the committed snapshot
 * (`CoordinatorShell.create` / `load`, the same shell `CoordinatorHost`
 * drives) and commits its election before serving. It serves heartbeats
 * serially, commits a step's records (CAS) before it applies them, writes
 * the step's fences to storage before the reply, pushes notices, and runs
 * the deadlines the shell arms. A stale instance that still holds the lease
 * reloads and retries once; one that lost it steps down.
 *
 * Unlike `CoordinatorHost`, it does not check its lease before a deadline or
 * a commit: that models the worst case (a check that passed just before a
 * pause), so the election commit and the CAS must stop a stale leader alone.
 *
 * @module
 */
import {
  CoordinatorShell,
  type HeartbeatResponse,
  makeGroupConfig,
  type Step,
} from "@shardline/core"
import type { Ctx } from "./ctx.js"
import type { Members } from "./members.js"
import type { Req } from "./network.js"
import { timing } from "./options.js"
import { type Clock, K, local, toTrue } from "./world.js"

type Deferred = readonly [number, number, number, unknown]

export interface CoordNode {
  readonly idx: number
  shell: CoordinatorShell | null
  alive: boolean
  paused: boolean
  /** Bumped on every (re)load: timers of an older shell are ignored. */
  inc: number
  readonly clock: Clock
  /**
   * Wall-clock steps so far (the `clock-step` fault: NTP steps the host's
   * wall clock, never its monotonic clock; docs/protocol.md rule 21).
   */
  wallStepMs: number
  timerAt: number
  deferred: Array<Deferred>
}

export const GROUP = "sim"

/** A candidate's time as core takes it: its monotonic clock, and its wall clock with its steps. */
const instantOf = (c: CoordNode, t: number): { readonly mono: number; readonly wall: number } => {
  const mono = local(c.clock, t)
  return { mono, wall: mono + c.wallStepMs }
}

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

export class CoordinatorHost {
  readonly nodes: Array<CoordNode> = []
  /** Per process: the highest request seq any candidate received (fresh = above it). */
  private readonly lastSeq: Array<number> = []
  /**
   * Per process: its last 8 NONE answers (a ring of seqs and answers), to
   * spot two answers to one request. Flat, process `pid` at 8 * pid: one
   * cache line of seqs per process instead of three objects to chase
   * (docs/simulator.md, Speed).
   */
  private answerSeqs = new Int32Array(8 * 1024)
  private answerResponses: Array<HeartbeatResponse | undefined> = new Array(8 * 1024).fill(
    undefined,
  )
  private answerNext = new Uint8Array(1024)
  /** When the current leader started serving (election commit or resume). */
  private servingFrom = 0

  constructor(
    private readonly ctx: Ctx,
    clocksOn: boolean,
  ) {
    for (let i = 0; i < 3; i++)
      this.nodes.push({
        idx: i,
        shell: null,
        alive: true,
        paused: false,
        inc: 0,
        clock: ctx.w.drawClock(clocksOn),
        wallStepMs: 0,
        timerAt: Number.POSITIVE_INFINITY,
        deferred: [],
      })
  }

  /** The node that holds the lease with a shell at the store's revision, if any. */
  serving(): CoordNode | undefined {
    const c = this.nodes[this.ctx.lease.holder]
    if (c === undefined || !c.alive || c.paused || c.shell === null) return undefined
    // Redis is down: nobody can be answered, nothing committed.
    if (this.ctx.store.down) return undefined
    return c.shell.revision === this.ctx.store.revision ? c : undefined
  }

  /** Since when the current leader serves (undefined when none does). */
  servingSince(): number | undefined {
    return this.serving() === undefined ? undefined : this.servingFrom
  }

  /** Defers events of a paused node; true when the event must not run now. */
  deferred(node: number, kind: number, b: number, p: unknown): boolean {
    const c = this.nodes[node]!
    if (!c.paused) return false
    c.deferred.push([kind, node, b, p])
    return true
  }

  // ---------------------------------------------------------------- serving

  request(node: number, req: Req): void {
    const c = this.nodes[node]!
    if (!c.alive) return
    const { w, checks, members } = this.ctx
    const proc = members.procs[req.pid]!
    const slot = proc.slot.idx
    const fresh = req.seq > (this.lastSeq[req.pid] ?? 0)
    if (fresh) this.lastSeq[req.pid] = req.seq
    const honest =
      req.forgery === undefined &&
      proc.byzantine === undefined &&
      proc.forged === 0 &&
      // F2 is fixed (rule 18): no excuse for a process that got two answers
      // to one request, unless asked for the old leniency (--lenient)
      (this.ctx.options.strict !== false || !proc.mayApplyOlderAnswer)
    this.ctx.net.handled(slot)
    for (let attempt = 0; attempt < 2; attempt++) {
      const shell = c.shell
      if (shell === null) break
      const step = shell.heartbeat(req.request, instantOf(c, w.now))
      const leader = this.serving() === c
      if (leader)
        checks.requests.judge(w.now, req.request, req.forgery, checks.view, step, fresh, honest)
      const ok = this.commit(c, step)
      if (ok === "retry") continue
      if (!ok) break
      const response = step.response
      if (leader && response.errorCode === "NONE" && response.memberEpoch > 0)
        checks.view.touch(req.request.memberId, response.memberEpoch, w.now)
      if (response.errorCode === "NONE") this.answered(proc, req.seq, response)
      this.ctx.net.toMember(slot, req.pid, req.seq, response)
      this.armTimer(c)
      return
    }
    this.ctx.net.toMember(slot, req.pid, req.seq, notCoordinator(req.request.memberId))
  }

  /**
   * A network duplicate of a request is handled twice and may get two
   * different answers (the group moved in between), the later one possibly
   * newer than the answer to the member's next request; the member applies
   * answers by request seq and may end up with the older state (finding F2
   * in docs/simulator.md). Such a process's next reports are not held to the
   * honest-report rule until it drops everything.
   */
  private answered(proc: Members["procs"][number], seq: number, response: HeartbeatResponse): void {
    const pid = proc.pid
    if (pid >= this.answerNext.length) {
      const n = Math.max(2 * this.answerNext.length, pid + 1)
      const seqs = new Int32Array(8 * n)
      seqs.set(this.answerSeqs)
      this.answerSeqs = seqs
      const next = new Uint8Array(n)
      next.set(this.answerNext)
      this.answerNext = next
      for (let i = this.answerResponses.length; i < 8 * n; i++) this.answerResponses.push(undefined)
    }
    const seqs = this.answerSeqs
    const base = 8 * pid
    for (let i = 0; i < 8; i++)
      if (seqs[base + i] === seq && !sameAnswer(this.answerResponses[base + i]!, response)) {
        proc.mayApplyOlderAnswer = true
        this.ctx.w.count("finding:twoAnswersToOneRequest")
        break
      }
    const at = base + this.answerNext[pid]!
    seqs[at] = seq
    this.answerResponses[at] = response
    this.answerNext[pid] = (this.answerNext[pid]! + 1) & 7
  }

  /** Due deadlines (deliberately without a lease check: see the module comment). */
  timer(node: number, inc: number): void {
    const c = this.nodes[node]!
    const w = this.ctx.w
    if (c.inc !== inc || c.shell === null || !c.alive || w.now < c.timerAt) return
    c.timerAt = Number.POSITIVE_INFINITY
    const now = instantOf(c, w.now)
    for (;;) {
      const shell = c.shell
      if (shell === null) return
      const step = shell.dueTimer(now)
      if (step === undefined) break
      if (this.commit(c, step) === false) return
    }
    this.armTimer(c)
  }

  /** Redis is back: every loaded candidate looks at its deadlines again. */
  redisBack(): void {
    // The deadline checker measures a leader's deadlines from when it serves again.
    this.servingFrom = this.ctx.w.now
    for (const c of this.nodes) {
      if (!c.alive || c.shell === null) continue
      c.timerAt = Number.POSITIVE_INFINITY
      this.armTimer(c)
    }
  }

  private armTimer(c: CoordNode): void {
    if (c.shell === null) return
    const next = c.shell.nextTimer()
    if (next === undefined) return
    const w = this.ctx.w
    const at = Math.max(w.now, toTrue(c.clock, next))
    if (at < c.timerAt || c.timerAt <= w.now) {
      c.timerAt = at
      w.q.push(at, K.COORD_TIMER, c.idx, c.inc)
    }
  }

  /**
   * Store CAS on storeRevision, then fences and notices. A stale instance
   * that still holds the lease reloads and retries (as CoordinatorHost
   * does); one that lost it steps down.
   */
  private commit(c: CoordNode, step: Step<unknown>): boolean | "retry" {
    const shell = c.shell!
    const { w, store, lease, data, members } = this.ctx
    if (store.down && (step.records.length > 0 || step.fences.length > 0)) {
      // Redis is down: the commit fails and, as CoordinatorHost does on a
      // failed commit, the candidate steps down (the shell's contract: drop
      // it, load again). A kept shell would never run a deadline whose step
      // this was: `dueTimer` took it off the heap (seed 7305, issue 34).
      w.count("redis:commitsFailed")
      w.mark("fault", `coordinator #${c.idx} commit failed (Redis down): steps down`)
      c.shell = null
      return false
    }
    if (step.records.length > 0) {
      const expected = shell.revision
      if (store.commit(shell, step) === undefined) {
        w.count("coordinator:staleCommit")
        w.mark(
          "fault",
          `coordinator #${c.idx} stale commit (rev ${expected} < ${store.revision}) rejected`,
        )
        if (lease.held(c.idx)) {
          this.becomeLeader(c)
          return "retry"
        }
        c.shell = null
        return false
      }
    } else shell.apply(step)
    data.writeFences(step.fences)
    for (const id of step.notices) members.notice(id)
    return true
  }

  // ---------------------------------------------------------------- leadership

  /**
   * Become leader: create the group or load the committed snapshot, then
   * commit the core's election records (CAS) before serving anything, as
   * `CoordinatorHost` does. Load and election commit are one event here.
   */
  becomeLeader(c: CoordNode): void {
    const { w, store, lease, data, options } = this.ctx
    c.inc++
    c.timerAt = Number.POSITIVE_INFINITY
    const now = instantOf(c, w.now)
    const candidate = { holder: `coordinator-${c.idx}`, leaseToken: lease.token }
    if (!store.created) {
      const created = CoordinatorShell.create(
        groupConfig(options.shards),
        now,
        candidate,
        this.ctx.layouts.enabled ? this.ctx.layouts.origin() : undefined,
      )
      c.shell = created.shell
      if (store.commit(created.shell, created.step, 0) === undefined)
        throw new Error("store has a revision but no group")
    } else {
      if (this.ctx.checks.view.migrating) w.count("reshard:takeoverMidMigration")
      const takeover = CoordinatorShell.load(store.snapshot(), now, candidate)
      if (takeover._tag === "Refused") {
        w.mark("fault", `coordinator #${c.idx} election refused`)
        c.shell = null
        return
      }
      c.shell = takeover.shell
      // BROKEN ON PURPOSE with `skip-election` (test-only): serve without the
      // election commit, so a paused ex-leader's next commit can pass the CAS.
      if (options.broken !== "skip-election" && takeover.step.records.length > 0)
        store.commit(takeover.shell, takeover.step)
      data.writeFences(takeover.fences)
    }
    this.servingFrom = w.now
    this.armTimer(c)
    this.followStream(c)
  }

  /**
   * Bring the leader in line with its stream's layout, as `CoordinatorHost`
   * does at takeover and at every lease renewal: register the group, adopt
   * newer generations (`CoordinatorShell.followLayout`, committed like any
   * step) and, once the group's migration completed, record that it drained
   * the earlier generations (which retires them). Reshard scenarios only.
   */
  followStream(c: CoordNode): void {
    const { w, layouts } = this.ctx
    if (!layouts.enabled || c.shell === null || this.serving() !== c) return
    layouts.registerGroup()
    const step = c.shell.followLayout(layouts.record.generations, instantOf(c, w.now))
    if (typeof step === "string") {
      w.count("reshard:followRefused")
      w.mark("fault", `coordinator #${c.idx}: ${step}`)
    } else if (step !== undefined) {
      if (this.commit(c, step) !== true) return
      w.count("reshard:adopted")
      this.armTimer(c)
      layouts.adopted()
    }
    const state = c.shell?.state
    if (state !== undefined && state.resharding._tag === "Idle")
      layouts.groupDrainedBelow(state.layout.generation)
  }

  crash(c: CoordNode): void {
    c.alive = false
    c.shell = null
    c.deferred = []
    this.ctx.w.mark("fault", `coordinator #${c.idx} crash`)
  }

  pause(c: CoordNode): void {
    c.paused = true
    this.ctx.w.mark("fault", `coordinator #${c.idx} paused (will resume stale)`)
  }

  resume(node: number): void {
    const c = this.nodes[node]!
    if (!c.paused) return
    const w = this.ctx.w
    c.paused = false
    const deferred = c.deferred
    c.deferred = []
    // A stale leader wakes up believing it still leads: its timers fire first.
    if (c.shell !== null) w.q.push(w.now, K.COORD_TIMER, c.idx, c.inc)
    c.timerAt = w.now
    for (const [kind, a, b, p] of deferred) w.q.push(w.now, kind, a, b, p)
    if (this.ctx.lease.holder === c.idx) this.servingFrom = w.now
  }

  restart(node: number): void {
    this.nodes[node]!.alive = true
  }

  /** Liveness phase: every candidate alive and running. */
  heal(): void {
    for (const c of this.nodes) {
      c.alive = true
      if (c.paused) this.resume(c.idx)
    }
  }
}

const sameAnswer = (a: HeartbeatResponse, b: HeartbeatResponse): boolean =>
  a.memberEpoch === b.memberEpoch &&
  a.assignmentEpoch === b.assignmentEpoch &&
  a.assigned.length === b.assigned.length &&
  a.pending.length === b.pending.length &&
  a.assigned.every(
    (g, i) => g.shard === b.assigned[i]!.shard && g.token === b.assigned[i]!.token,
  ) &&
  a.pending.every((s, i) => s === b.pending[i])

const groupConfig = (shards: number) =>
  makeGroupConfig({
    groupId: GROUP,
    stream: GROUP,
    shardCount: shards,
    sessionTimeoutMs: timing.sessionTimeoutMs,
    rebalanceTimeoutMs: timing.revokeTimeoutMs,
    heartbeatIntervalMs: timing.heartbeatIntervalMs,
  })
