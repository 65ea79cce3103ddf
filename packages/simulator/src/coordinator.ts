/**
 * The coordinator host, simulated: three candidate processes, each with the
 * parts the runtime's `CoordinatorCandidate` has (docs/protocol.md rules 20
 * and 25), kept apart as they are there:
 *
 * - **the host** (`CoordinatorHost`): the lease it leads under (its token:
 *   the term) and its shell. Its renewal loop (every lease TTL/3) renews
 *   the lease, steps down when that fails, and, not leading, takes a free
 *   lease: the silent path, its candidate is not told. Taking the lease
 *   creates the group or loads the committed snapshot (`CoordinatorShell
 *   .create` / `load`, the shell `CoordinatorHost` drives) and commits the
 *   election before anything is served. It serves heartbeats serially,
 *   commits a step's records (CAS) before it applies them, writes a grant's
 *   fence outside its lock before the grant is told (docs/protocol.md rule
 *   31: `pending` in every answer until written; the answer that made it
 *   waits at most `fenceWaitMs`, rule 27), pushes notices, and runs the
 *   deadlines the shell arms. A stale instance that still holds the lease
 *   reloads and retries once; one that lost it steps down.
 * - **the serve** (`CoordinatorTransport.serve`): the loop that takes the
 *   group's requests off the transport. It belongs to the term it started
 *   under; starting, it claims the group's presence, which replaces any
 *   other serve of the group (that one stops answering: its candidate is
 *   woken at once, as `Serving.ended` wakes it). Requests are taken only by
 *   the serve that is the current claimer, on a live candidate; with no
 *   claimer, or a dead one, nobody answers them (members see their request
 *   fail at the transport timeout, as when no coordinator serves on Redis).
 *   A paused claimer's requests wait for it, or for the next claimer.
 * - **the candidate's check** (every TTL/3; a standby also when the holder's
 *   lease should run out, a holder at once when its serve ended, and every
 *   standby at a resignation's handover): elect, then core's own
 *   `CandidateRole.decide` on what it sees (its host's lease token, its
 *   serve's term, whether the serve is still the claimer), the same pure
 *   function the runtime runs: serve, keep, restart, resign (stop serving,
 *   release the lease, take none for one TTL) or stop.
 *
 * What is checked against the lease, and what is not: a request is answered
 * only while the host's lease is valid by its own monotonic clock (its
 * expiry taken from its clock when it took or renewed the lease, shortened
 * by the drift bound, so never later than the lease store's), as
 * `CoordinatorHost.ensureLeader` does before a heartbeat; past it the host
 * steps down and tries to take the lease again (a heartbeat can retake it
 * silently too), and answers NOT_COORDINATOR when it cannot. Deadlines and
 * the commits they make are NOT checked against the lease by the host: that
 * models the worst case (a check that passed just before a pause), so the
 * election commit, the CAS and the Store's lease fence (docs/protocol.md
 * rule 32: the commit refused unless its term still holds the lease) must
 * stop a stale leader alone.
 *
 * A graceful stop of the lease holder's process (the `coord-stop` fault,
 * docs/protocol.md rule 20) hands over at once: its serve stops taking
 * requests (it answered what it took: requests are handled as they arrive
 * here), a short handover mark makes members' requests queue for the
 * successor instead of failing, its host releases the lease, and the
 * handover wakes every standby's check, so a successor serves in the same
 * instant instead of when the lease runs out.
 *
 * @module
 */
import {
  CandidateRole,
  CoordinatorShell,
  type Fence,
  type HeartbeatResponse,
  makeGroupConfig,
  type Step,
  withGrantsPending,
} from "@shardline/core"
import type { Ctx } from "./ctx.js"
import type { Members } from "./members.js"
import type { Req } from "./network.js"
import { FAULT_KINDS, timing } from "./options.js"
import type { CommitFence } from "./store.js"
import { type Clock, K, local, toTrue } from "./world.js"

/** One serve (`CoordinatorTransport.serve`) of a candidate. */
export interface Serve {
  /** Unique per run: the group's presence names the serve that claimed it. */
  readonly id: number
  /** The lease token (term) it was started under. */
  readonly leaseToken: number
  /** Serves its candidate started in this term before it (0: the first). */
  readonly restarts: number
}

type Deferred = readonly [number, number, number, unknown]

/** A grant whose owner-token fence is not written yet (docs/protocol.md rule 31). */
interface Unfenced {
  readonly token: number
  readonly memberId: string
  readonly fence: Fence
  /** A write of it is under way. */
  inFlight: boolean
  /** An answer left it out: its owner is noticed once it is written. */
  withheld: boolean
}

/** The answer that made grants, waiting for their fence writes (at most `fenceWaitMs`). */
interface OwnWrites {
  /** Its grants written so far. */
  readonly written: Set<number>
  /** Every write of them ended (written or failed). */
  ended: boolean
  onEnd: (() => void) | undefined
}

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
  /** The lease token (term) its host leads under; 0 when it leads under none. */
  token: number
  /** The last term it led under (a late serve's claim names it). */
  lastToken: number
  /** When its lease ends by its own monotonic clock (its local ms). */
  leaseUntil: number
  /** After a resignation: it takes no lease before this (its local ms). */
  resignedUntil: number
  /** When the holder's lease runs out, as its last failed acquisition learned (`standbyUntil`). */
  heldUntil: number | undefined
  /** The serve its candidate runs (docs/protocol.md rule 25), whether or not it still claims. */
  serve: Serve | null
  /** The candidate's check: a check or wake-up of an older generation is superseded. */
  checkGen: number
  /** The host's renewal loop: a crash ends it, a restart starts another generation. */
  renewGen: number
  /** CPU starvation (`stale-claim`): its check runs no earlier than this. */
  checkStarvedUntil: number
  /**
   * The `hung-store` fault: its host's next store command never answers
   * ("any"), or its next one made for a due deadline ("deadline").
   */
  hangArmed: "any" | "deadline" | undefined
  /**
   * A store command of its host hangs (`hung-store`): the host's lock is held
   * until the command's deadline; requests wait in `held`, deadlines wait.
   */
  hung: boolean
  /** Which hang (a crash ends one; its deadline must not end the next). */
  hangId: number
  held: Array<Req>
  /**
   * Grants whose fence is not written yet, by shard (docs/protocol.md rule
   * 31): every answer lists them `pending` until written. A new map when
   * its host steps down (a later term re-fences every owner at its takeover).
   */
  unfenced: Map<number, Unfenced>
  /** Withheld grants written since, by shard: their token and when (their deadline's start). */
  told: Map<number, { readonly token: number; readonly at: number }>
  /**
   * The host's lock is held until then (its local ms is not needed: true
   * time) by a takeover waiting for a hung node's token read and re-fence
   * (`fenceWaitMs` each, rule 27), or, with `--broken fence-under-lock`, by
   * a hung fence write (+Infinity until it answers).
   */
  busyUntil: number
  /** Which lock hold (a crash ends one; its release must not end the next). */
  busyId: number
  /** Hung fence writes holding the lock (`--broken fence-under-lock` only). */
  lockWrites: number
  /** Requests waiting for the lock meanwhile, with when the serve took them. */
  waiting: Array<readonly [Req, number]>
}

export const GROUP = "sim"

/** A candidate's time as core takes it: its monotonic clock, and its wall clock with its steps. */
const instantOf = (c: CoordNode, t: number): { readonly mono: number; readonly wall: number } => {
  const mono = local(c.clock, t)
  return { mono, wall: mono + c.wallStepMs }
}

/** The lease term candidate `c`'s host commits under (docs/protocol.md rule 32). */
const fenceOf = (c: CoordNode): CommitFence => ({ node: c.idx, token: c.token })

/** The lease's TTL by a candidate's own clock: never later than the lease store's (drift bound). */
const ownLeaseMs = timing.coordinatorLeaseMs * (1 - (2 * timing.maxDriftPpm) / 1e6)
/**
 * A candidate's check period and its host's renewal period: a third of the
 * lease, whole milliseconds, as `CoordinatorCandidate`'s default and
 * `CoordinatorHost`'s renewal loop take it.
 */
export const checkEveryMs = Math.max(10, Math.floor(timing.coordinatorLeaseMs / 3))
/** A standby wakes this long after the holder's lease should have run out (as the runtime does). */
const STANDBY_SLACK_MS = 5

/**
 * BROKEN ON PURPOSE with `serve-without-check` (test-only): the decision
 * before rule 25 (`CoordinatorCandidate` at 63f2b94^): a holder that runs a
 * serve keeps it, whatever term it started under and whether it still
 * answers; nobody resigns (and, there, a serve that ends wakes nobody).
 */
const decideBeforeRule25 = (view: CandidateRole.CandidateView): CandidateRole.CandidateAction => {
  if (view.leaseToken === undefined) return view.serving === undefined ? "idle" : "stop"
  return view.serving === undefined ? "serve" : "keep"
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
  /**
   * The shell whose commit the store is applying (`<candidate>:<load>`): a
   * shell's volatile memory (departed processes, rule 18) lives from its load
   * to its next one, so the request checker ties what it remembers to it.
   */
  committer = ""
  /**
   * The group's serving presence (on Redis the `hb:serving` key): the serve
   * that claimed it last, on its candidate. Only that serve takes requests.
   */
  private presence: { readonly node: number; readonly serve: number } | null = null
  private serveIds = 0
  private hangs = 0
  private busies = 0
  /**
   * A graceful stop's handover mark (docs/protocol.md rule 20): until
   * `until`, with no serve claiming the presence, members' requests queue
   * here for the next serve to claim it instead of failing.
   */
  private handover: { readonly until: number; readonly queued: Array<Req> } | undefined
  /** The `stale-claim` fault's brief successor: called when a serve of another candidate claims. */
  private onClaim: { readonly except: number; readonly then: (c: CoordNode) => void } | undefined
  private readonly broken: boolean

  constructor(
    private readonly ctx: Ctx,
    clocksOn: boolean,
  ) {
    this.broken = ctx.options.broken === "serve-without-check"
    ctx.checks.deadlines.tellable = (shard, token) => this.tellable(shard, token)
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
        token: 0,
        lastToken: 0,
        leaseUntil: Number.NEGATIVE_INFINITY,
        resignedUntil: Number.NEGATIVE_INFINITY,
        heldUntil: undefined,
        serve: null,
        checkGen: 0,
        renewGen: 0,
        checkStarvedUntil: 0,
        hangArmed: undefined,
        hung: false,
        hangId: 0,
        held: [],
        unfenced: new Map(),
        told: new Map(),
        busyUntil: Number.NEGATIVE_INFINITY,
        busyId: 0,
        lockWrites: 0,
        waiting: [],
      })
  }

  /** For the deadline checker: a grant withheld by a live candidate, or since when it could be told. */
  private tellable(shard: number, token: number): number | "withheld" | undefined {
    let told: number | undefined
    for (const c of this.nodes) {
      if (!c.alive || c.shell === null) continue
      if (c.unfenced.get(shard)?.token === token) return "withheld"
      const t = c.told.get(shard)
      if (t !== undefined && t.token === token) told = Math.max(told ?? 0, t.at)
    }
    return told
  }

  /**
   * Starts every candidate at time 0: their first checks in an order drawn
   * per seed (the first elects itself), their hosts' renewal loops each at a
   * phase of its own.
   */
  start(): void {
    const { w } = this.ctx
    const r = w.rng.candidates
    const order = [0, 1, 2]
    for (let i = order.length - 1; i > 0; i--) {
      const j = r.int(i + 1)
      const t = order[i]!
      order[i] = order[j]!
      order[j] = t
    }
    for (const i of order) w.q.push(0, K.CAND_CHECK, i, 0)
    for (let i = 0; i < 3; i++) w.q.push(r.range(1, checkEveryMs), K.LEASE, i, 0)
  }

  /** The node that holds the lease with a shell at the store's revision, if any. */
  serving(): CoordNode | undefined {
    const c = this.nodes[this.ctx.lease.holder]
    if (c === undefined || !c.alive || c.paused || c.shell === null) return undefined
    // its lock is held by a command that does not answer (`hung-store`)
    if (c.hung) return undefined
    // Redis is down: nobody can be answered, nothing committed; or full
    // (`refused`): no heartbeat reaches it, no commit passes
    if (this.ctx.store.down || this.ctx.store.refusing) return undefined
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

  /** Candidates alive and not paused. */
  available(): number {
    let n = 0
    for (const c of this.nodes) if (c.alive && !c.paused) n++
    return n
  }

  private availabilityChanged(): void {
    this.ctx.checks.liveness.candidates(this.ctx.w.now, this.available())
  }

  // ---------------------------------------------------------------- the transport

  /**
   * A request reached the group's request list: the serve that claims the
   * group's presence takes it, if there is one and its candidate lives
   * (a paused one takes it when it wakes, unless a newer serve claims first).
   */
  arrive(req: Req): void {
    const proc = this.ctx.members.procs[req.pid]!
    // the liveness checker's input: a request of a live member reached the transport
    if (proc.alive && !proc.superseded) this.ctx.checks.liveness.arrived(this.ctx.w.now, req.sentAt)
    this.route(req)
  }

  private route(req: Req): void {
    const w = this.ctx.w
    const pr = this.presence
    const mark = this.handover
    if (pr === null && mark !== undefined && w.now < mark.until) {
      // a graceful stop's handover mark: the request waits for the successor
      w.count("handover:requestQueued")
      mark.queued.push(req)
      return
    }
    if (pr === null) {
      // "no coordinator serves": the member's request fails
      w.count("transport:noServe")
      return
    }
    const c = this.nodes[pr.node]!
    if (!c.alive || c.serve?.id !== pr.serve) {
      // the claimer died: its presence stays, nobody takes the request
      w.count("transport:deadServe")
      return
    }
    if (c.paused) {
      w.count("transport:waitsForPausedServe")
      c.deferred.push([K.REQ_POPPED, c.idx, req.pid, req])
      return
    }
    this.request(c.idx, req)
  }

  /** A request the serve of `node` took while the node was paused: handled now, or by the newer claimer. */
  popped(node: number, req: Req): void {
    const c = this.nodes[node]!
    if (c.alive && c.serve !== null && this.presence?.serve === c.serve.id) this.request(node, req)
    else this.route(req)
  }

  /** The serve of `c` answers the group's requests: it is the current claimer. */
  private active(c: CoordNode): boolean {
    return c.serve !== null && this.presence?.serve === c.serve.id
  }

  /** Candidate `c` starts a serve under term `leaseToken`; it claims the group's presence. */
  private startServe(c: CoordNode, leaseToken: number, restarts: number): void {
    const serve = { id: ++this.serveIds, leaseToken, restarts }
    c.serve = serve
    this.claim(c, serve)
    // the handover checker's input: the group is served again under a lease
    if (c.token !== 0 && this.ctx.lease.held(c.idx))
      this.ctx.checks.handover?.served(this.ctx.w.now)
  }

  /** `serve` of candidate `c` claims the group's presence, replacing whichever serve had it. */
  private claim(c: CoordNode, serve: Serve): void {
    const w = this.ctx.w
    const prev = this.presence
    this.presence = { node: c.idx, serve: serve.id }
    w.count("serve:claims")
    if (prev !== null && prev.serve !== serve.id) {
      const p = this.nodes[prev.node]!
      if (p.serve?.id === prev.serve) {
        w.count("serve:replaced")
        w.mark("fault", `coordinator #${p.idx}'s serve replaced by #${c.idx}'s`)
        // `Serving.ended` wakes its candidate (rule 25); before it, nothing did
        if (!this.broken && p.alive) this.wake(p)
      }
      // requests the paused old claimer held in the list go to the new one
      if (p.deferred.length > 0 && p !== c) {
        const keep: Array<Deferred> = []
        for (const d of p.deferred)
          if (d[0] === K.REQ_POPPED) {
            if (!this.deferred(c.idx, K.REQ_POPPED, d[2], d[3]))
              w.q.push(w.now, K.REQ_POPPED, c.idx, d[2], d[3])
          } else keep.push(d)
        p.deferred = keep
      }
    }
    const mark = this.handover
    if (mark !== undefined) {
      // the successor's serve takes the requests queued under the handover
      // mark; past the mark's end they had failed at their members already
      this.handover = undefined
      if (w.now >= mark.until && mark.queued.length > 0) w.count("handover:queueExpired")
      else
        for (const req of mark.queued) {
          w.count("handover:requestTaken")
          if (!this.deferred(c.idx, K.REQ_POPPED, req.pid, req))
            w.q.push(w.now, K.REQ_POPPED, c.idx, req.pid, req)
        }
    }
    const armed = this.onClaim
    if (armed !== undefined && armed.except !== c.idx) {
      this.onClaim = undefined
      armed.then(c)
    }
  }

  /** Candidate `c` stops its serve; if it still claimed the presence, nobody does now. */
  private stopServe(c: CoordNode): void {
    const s = c.serve
    if (s === null) return
    c.serve = null
    if (this.presence?.serve === s.id) this.presence = null
  }

  // ---------------------------------------------------------------- serving

  /** `takenAt`: when the serve took it (a request that waited for the lock keeps its time). */
  request(node: number, req: Req, takenAt = this.ctx.w.now): void {
    const c = this.nodes[node]!
    if (!c.alive) return
    const { w, checks, members } = this.ctx
    if (c.hung) {
      // the host serves heartbeats under its lock, which a hung store
      // command holds (`hung-store`): the request waits for the deadline
      w.count("hungStore:requestsHeld")
      c.held.push(req)
      return
    }
    if (w.now < c.busyUntil) {
      // the lock is held by a takeover's bounded wait for a hung node (rule
      // 27), or by a hung fence write (`--broken fence-under-lock`)
      w.count("fenceHang:requestsWaitedForLock")
      c.waiting.push([req, takenAt])
      return
    }
    const proc = members.procs[req.pid]!
    const slot = proc.slot.idx
    const lastSeq = this.lastSeq[req.pid] ?? 0
    const fresh = req.seq > lastSeq
    if (fresh) this.lastSeq[req.pid] = req.seq
    /** The lock is held by a takeover's bounded wait: the request is handled once it is free. */
    const wait = () => {
      w.count("fenceHang:requestsWaitedForLock")
      // taken again then: as fresh as it is now
      if (fresh) this.lastSeq[req.pid] = lastSeq
      c.waiting.push([req, takenAt])
    }
    const honest =
      req.forgery === undefined &&
      proc.byzantine === undefined &&
      proc.forged === 0 &&
      // F2 is fixed (rule 18): no excuse for a process that got two answers
      // to one request, unless asked for the old leniency (--lenient)
      (this.ctx.options.strict !== false || !proc.mayApplyOlderAnswer)
    this.ctx.net.handled(slot)
    // rule 20: a host answers only within its lease, by its own clock (and
    // past it tries to take the lease again, as `ensureLeader` does)
    if (this.ensureLeader(c, "heartbeat")) {
      // the takeover this request made waits for a hung node: so does it
      if (w.now < c.busyUntil) {
        wait()
        return
      }
      for (let attempt = 0; attempt < 2; attempt++) {
        const shell = c.shell
        if (shell === null) break
        const step = shell.heartbeat(req.request, instantOf(c, w.now))
        const leader = this.serving() === c
        if (leader)
          checks.requests.judge(
            w.now,
            req.request,
            req.forgery,
            checks.view,
            step,
            fresh,
            honest,
            shellKey(c),
          )
        const own: OwnWrites = { written: new Set(), ended: false, onEnd: undefined }
        const ok = this.commit(c, step, false, own)
        if (ok === "retry") {
          // reloaded: a takeover that waits for a hung node holds the lock
          if (w.now < c.busyUntil) {
            wait()
            return
          }
          continue
        }
        // the request is lost with the hung command: the member's transport times out
        if (ok === "hung") return
        if (!ok) break
        if (leader && step.response.errorCode === "NONE" && step.response.memberEpoch > 0)
          checks.view.touch(req.request.memberId, step.response.memberEpoch, w.now)
        const grants = step.fences.filter((f) => f.restore !== true)
        const response = this.withhold(c, step.response, new Set(grants.map((g) => g.shard)))
        const steppedAt = w.now
        const gen = c.renewGen
        let sent = false
        // outside the lock (rule 31): this answer waits for its own fence
        // writes only, and at most `fenceWaitMs` (rule 27); a grant not
        // written by then is answered pending, its owner noticed once written
        const send = () => {
          if (sent || !c.alive || c.renewGen !== gen) return
          sent = true
          const unwritten = grants.filter((g) => !own.written.has(g.shard))
          for (const g of unwritten) {
            const entry = c.unfenced.get(g.shard)
            if (entry !== undefined && entry.token === g.token) entry.withheld = true
          }
          const answer =
            unwritten.length === 0 || this.ctx.options.broken === "grant-before-fence"
              ? response
              : withGrantsPending(
                  response,
                  unwritten.map((g) => g.shard),
                )
          if (w.now > steppedAt)
            w.count(
              unwritten.length === 0 ? "fenceHang:answerWaited" : "fenceHang:answerAtFenceWait",
            )
          checks.fenceWait?.answered(w.now, takenAt, steppedAt, req.request.memberId)
          if (answer.errorCode === "NONE") this.answered(proc, req.seq, answer)
          // The liveness checker's input: a loaded leader answered. Its error
          // answers are service too: an expired member's requests get
          // UNKNOWN_MEMBER_ID until it hears one and rejoins (rule 6), and a
          // lost answer makes it ask again (seed 7107, docs/simulator.md).
          checks.liveness.answered(w.now)
          checks.handover?.answered(w.now)
          this.ctx.net.toMember(slot, req.pid, req.seq, answer)
        }
        const broken = this.ctx.options.broken
        if (own.ended || broken === "grant-before-fence") send()
        else {
          own.onEnd = send
          // BROKEN ON PURPOSE with `no-fence-wait` and `fence-under-lock`
          // (test-only): the answer waits for its writes, up to the command
          // deadline, as before rules 27 and 31
          if (broken !== "no-fence-wait" && broken !== "fence-under-lock")
            this.ctx.faults.open(FAULT_KINDS.indexOf("fence-hang"), {
              afterMs: timing.fenceWaitMs,
              heal: send,
            })
        }
        this.armTimer(c)
        return
      }
    }
    w.count("coordinator:notCoordinator")
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
    // deadlines run under the host's lock too; the hang ends in a step-down
    if (c.hung) return
    // a lock held by a bounded wait: they run once it is released
    if (w.now < c.busyUntil) return
    c.timerAt = Number.POSITIVE_INFINITY
    const now = instantOf(c, w.now)
    for (;;) {
      const shell = c.shell
      if (shell === null) return
      // a withheld grant's confirmation deadline never passes while it is
      // withheld (CoordinatorHost.fireDue, docs/protocol.md rule 31)
      if (c.unfenced.size > 0) this.deferDeadlines(c, this.unfencedGrants(c))
      const step = shell.dueTimer(now)
      if (step === undefined) break
      const ok = this.commit(c, step, true)
      if (ok === false || ok === "hung") return
    }
    this.armTimer(c)
  }

  /** Redis is down: no request, commit, renewal or acquisition gets through (`redis-outage`). */
  redisDown(): void {
    this.ctx.store.down = true
    this.ctx.checks.liveness.redis(this.ctx.w.now, false)
  }

  /** Redis is back: every loaded candidate looks at its deadlines again. */
  redisBack(): void {
    this.ctx.store.down = false
    // (a full server, the `refused` fault, is still no service)
    if (!this.ctx.store.refusing) this.ctx.checks.liveness.redis(this.ctx.w.now, true)
    // The deadline checker measures a leader's deadlines from when it serves again.
    this.servingFrom = this.ctx.w.now
    for (const c of this.nodes) {
      if (!c.alive || c.shell === null) continue
      c.timerAt = Number.POSITIVE_INFINITY
      this.armTimer(c)
    }
  }

  /**
   * The server is full (the `refused` fault's OOM): every write is refused
   * at once. To the liveness checker it is as if Redis were down: no
   * heartbeat reaches the transport, no commit passes.
   */
  refuseStart(): void {
    this.ctx.store.refusing = true
    this.ctx.checks.liveness.redis(this.ctx.w.now, false)
  }

  /** The server has room again: as after an outage, deadlines are measured from now. */
  refuseEnd(): void {
    this.ctx.store.refusing = false
    if (this.ctx.store.down) return
    this.ctx.checks.liveness.redis(this.ctx.w.now, true)
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
  private commit(
    c: CoordNode,
    step: Step<unknown>,
    deadline = false,
    own?: OwnWrites,
  ): boolean | "retry" | "hung" {
    const shell = c.shell!
    const { w, store, lease, data, members } = this.ctx
    // a restored token (rule 30) is written best effort, as CoordinatorHost
    // does: with Redis down it is not written, and the answer goes out
    const grants = step.fences.filter((f) => f.restore !== true)
    if (store.down && (step.records.length > 0 || grants.length > 0)) {
      // Redis is down: the commit fails and, as CoordinatorHost does on a
      // failed commit, the candidate steps down (the shell's contract: drop
      // it, load again). A kept shell would never run a deadline whose step
      // this was: `dueTimer` took it off the heap (seed 7305, issue 34).
      w.count("redis:commitsFailed")
      w.mark("fault", `coordinator #${c.idx} commit failed (Redis down): steps down`)
      // its host leads no more (the release cannot reach Redis: the lease runs
      // out by itself), so its candidate stops serving at its next check
      this.stepDown(c)
      return false
    }
    if (store.refusing && (step.records.length > 0 || grants.length > 0)) {
      // The server is full (the `refused` fault): the commit (or the fence
      // write) is refused with OOM, nothing written; a backend failure the
      // host treats like any other: it steps down (docs/simulator.md, Faults)
      w.count("refused:storeCommit")
      w.mark("fault", `coordinator #${c.idx} commit refused (OOM): steps down`)
      this.stepDown(c)
      return false
    }
    if (
      (c.hangArmed === "any" || (c.hangArmed === "deadline" && deadline)) &&
      (step.records.length > 0 || grants.length > 0)
    ) {
      c.hangArmed = undefined
      if (deadline) this.ctx.w.count("hungStore:hungAtDeadline")
      this.hang(c, step, grants)
      return "hung"
    }
    if (step.records.length > 0) {
      const expected = shell.revision
      this.committer = shellKey(c)
      const fence = fenceOf(c)
      if (store.commit(shell, step, expected, fence) === undefined) {
        if (!store.holds(fence)) {
          // refused by the lease fence (docs/protocol.md rule 32): LeaseLost, it steps down
          w.count("coordinator:leaseFencedCommit")
          w.mark("fault", `coordinator #${c.idx} commit refused: term ${c.token} holds no lease`)
          this.stepDown(c)
          return false
        }
        w.count("coordinator:staleCommit")
        w.mark(
          "fault",
          `coordinator #${c.idx} stale commit (rev ${expected} < ${store.revision}) rejected`,
        )
        if (lease.held(c.idx) && lease.token === c.token) {
          this.becomeLeader(c)
          return "retry"
        }
        this.stepDown(c)
        return false
      }
    } else shell.apply(step)
    if (store.down && grants.length < step.fences.length) w.count("redis:restoresFailed")
    // a grant's fence is written before its member is told (rule 1 step 6),
    // outside the lock, one write per shard (rule 31): until then every
    // answer withholds it. Restores (rule 30) grant nothing: best effort
    if (!store.down) {
      const restores = step.fences.filter((f) => f.restore === true)
      if (restores.length > 0) data.writeFences(restores.filter((f) => data.hung[f.shard] !== 1))
    }
    for (const f of grants) this.withholdUntilWritten(c, f)
    this.settle(c, grants, own)
    for (const id of step.notices) members.notice(id)
    return true
  }

  // ---------------------------------------------------------------- fences (rule 31)

  /** Withhold `f`'s grant until its fence is written (docs/protocol.md rule 31). */
  private withholdUntilWritten(c: CoordNode, f: Fence): void {
    c.unfenced.set(f.shard, {
      token: f.token,
      memberId: f.memberId,
      fence: f,
      inFlight: false,
      withheld: false,
    })
  }

  /**
   * Write grants' fences, one write per shard, outside the lock, as
   * `CoordinatorHost.settle` does: a written grant leaves `unfenced` (its
   * owner is noticed if an answer withheld it meanwhile); one whose write
   * failed stays withheld until a later answer retries it. `own`: the
   * answer waiting for them (its written shards, and when every write ended).
   */
  private settle(c: CoordNode, grants: ReadonlyArray<Fence>, own?: OwnWrites): void {
    const { w, data } = this.ctx
    const map = c.unfenced
    const gen = c.renewGen
    let left = grants.length
    const ended = () => {
      if (--left > 0 || own === undefined) return
      own.ended = true
      own.onEnd?.()
    }
    if (left === 0 && own !== undefined) own.ended = true
    if (left > 0 && grants.every((g) => data.hung[g.shard] !== 1)) {
      // every node answers: one write, as before rule 31 (the same events)
      data.writeFences(grants)
      for (const g of grants) {
        own?.written.add(g.shard)
        const entry = map.get(g.shard)
        if (entry !== undefined && entry.token === g.token) {
          map.delete(g.shard)
          if (entry.withheld) this.noticeWritten(c, map, gen, entry)
        }
      }
      if (own !== undefined) own.ended = true
      return
    }
    for (const grant of grants) {
      const entry = map.get(grant.shard)
      const mine = entry !== undefined && entry.token === grant.token ? entry : undefined
      if (mine !== undefined) mine.inFlight = true
      const underLock =
        this.ctx.options.broken === "fence-under-lock" && data.hung[grant.shard] === 1
      if (underLock) this.holdLock(c)
      data.writeFence(grant, (written) => {
        if (mine !== undefined) mine.inFlight = false
        if (written) {
          own?.written.add(grant.shard)
          if (mine !== undefined && map.get(grant.shard) === mine) {
            map.delete(grant.shard)
            if (mine.withheld) this.noticeWritten(c, map, gen, mine)
          }
        } else w.count("fenceHang:grantUnwritten")
        // BROKEN ON PURPOSE with `fence-under-lock` (test-only): the write
        // held the host's lock, as before docs/protocol.md rule 31
        if (underLock) this.freeLock(c, gen)
        ended()
      })
    }
  }

  /** A withheld grant is written: its owner is noticed (rule 8), if its host still leads on `map`. */
  private noticeWritten(c: CoordNode, map: Map<number, Unfenced>, gen: number, e: Unfenced): void {
    if (!c.alive || c.renewGen !== gen || c.unfenced !== map) return
    this.ctx.w.count("fenceHang:noticedOnceWritten")
    // told only now: its confirmation deadline counts from here (rule 31)
    this.deferDeadlines(c, [e.fence.shard])
    c.told.set(e.fence.shard, { token: e.token, at: this.ctx.w.now })
    this.ctx.members.notice(e.memberId)
  }

  /**
   * Grants whose member cannot be told yet, or was just told: their rule 10
   * confirmation deadline counts from now (`CoordinatorHost.deferDeadlines`).
   * BROKEN ON PURPOSE with `withheld-grant-deadline` (test-only): it runs
   * from the grant, as before.
   */
  private deferDeadlines(c: CoordNode, shards: ReadonlyArray<number>): void {
    if (c.shell === null || shards.length === 0) return
    if (this.ctx.options.broken === "withheld-grant-deadline") return
    c.shell.apply(c.shell.deferGrantDeadlines(shards, instantOf(c, this.ctx.w.now)))
  }

  /** The shards of `unfenced` whose entry is the current grant. */
  private unfencedGrants(c: CoordNode): Array<number> {
    const out: Array<number> = []
    for (const [shard, e] of c.unfenced)
      if (c.shell?.state.current[shard]?.token === e.token) out.push(shard)
    return out
  }

  /**
   * An answer without the grants whose fence is not written: they move to
   * `pending` and are marked withheld (their owner is noticed once
   * written); one whose write is not under way is retried now, in the
   * background. `own`: the shards whose first write this answer makes.
   * BROKEN ON PURPOSE with `grant-before-fence` (test-only): nothing withheld.
   */
  private withhold(
    c: CoordNode,
    response: HeartbeatResponse,
    own: ReadonlySet<number>,
  ): HeartbeatResponse {
    if (c.unfenced.size === 0 || response.assigned.length === 0) return response
    if (this.ctx.options.broken === "grant-before-fence") return response
    const held: Array<number> = []
    const retries: Array<Fence> = []
    for (const g of response.assigned) {
      const entry = c.unfenced.get(g.shard)
      if (own.has(g.shard) || entry === undefined || entry.token !== g.token) continue
      const owner = c.shell?.state.current[g.shard]
      // BROKEN ON PURPOSE with `withhold-confirmed` (test-only): withheld all the same
      const released = this.ctx.options.broken !== "withhold-confirmed"
      if (released && owner?.confirmed === true && owner.token === entry.token) {
        // its member reports it owned: told by an earlier leader after that
        // leader's write, so written (CoordinatorHost.withhold, rule 31)
        this.ctx.w.count("fenceHang:confirmedReleased")
        c.unfenced.delete(g.shard)
        continue
      }
      held.push(g.shard)
      entry.withheld = true
      if (!entry.inFlight) retries.push(entry.fence)
    }
    if (held.length === 0) return response
    const w = this.ctx.w
    w.count("fenceHang:answerWithheld")
    if (retries.length > 0) {
      w.count("fenceHang:writeRetried", retries.length)
      this.settle(c, retries)
    }
    return withGrantsPending(response, held)
  }

  /** The lock is held (by a hung write under `--broken fence-under-lock`) until `freeLock`. */
  private holdLock(c: CoordNode): void {
    c.lockWrites++
    c.busyUntil = Number.POSITIVE_INFINITY
    c.busyId = ++this.busies
    this.ctx.w.count("fenceHang:lockHeldByWrite")
  }

  private freeLock(c: CoordNode, gen: number): void {
    if (!c.alive || c.renewGen !== gen || c.lockWrites === 0) return
    if (--c.lockWrites > 0) return
    this.releaseLock(c, c.busyId)
  }

  /** A takeover holds the lock for `ms`, waiting for a hung node (rule 27). */
  private busyFor(c: CoordNode, ms: number): void {
    const id = ++this.busies
    c.busyId = id
    c.busyUntil = Math.max(c.busyUntil, this.ctx.w.now + ms)
    this.ctx.faults.open(FAULT_KINDS.indexOf("fence-hang"), {
      afterMs: ms,
      heal: () => this.releaseLock(c, id),
    })
  }

  /** The lock is free again: the requests that waited are served, in order; deadlines run. */
  private releaseLock(c: CoordNode, id: number): void {
    if (!c.alive || c.busyId !== id || c.lockWrites > 0) return
    c.busyUntil = Number.NEGATIVE_INFINITY
    const waiting = c.waiting
    c.waiting = []
    for (const [req, takenAt] of waiting)
      if (c.paused) c.deferred.push([K.REQ_POPPED, c.idx, req.pid, req])
      else this.request(c.idx, req, takenAt)
    if (c.shell !== null && c.busyUntil <= this.ctx.w.now) {
      c.timerAt = Number.POSITIVE_INFINITY
      this.armTimer(c)
    }
  }

  // ---------------------------------------------------------------- the lease

  /**
   * `CoordinatorHost.ensureLeader`: a host that leads keeps leading while its
   * lease is valid by its own clock; past it, it steps down. One that does
   * not lead takes the lease if it is free (not after a resignation, not
   * while Redis is down), loads and commits its election: a new term.
   * `via` names who asked (the candidate's check, the renewal loop, a
   * heartbeat): only the check tells the candidate.
   */
  private ensureLeader(c: CoordNode, via: "check" | "renewal" | "heartbeat"): boolean {
    const { w, lease, store } = this.ctx
    const now = local(c.clock, w.now)
    if (c.token !== 0) {
      if (c.leaseUntil > now) return true
      w.count("coordinator:ownLeaseExpired")
      this.stepDown(c)
    }
    if (now < c.resignedUntil || store.down) return false
    if (lease.taken) {
      c.heldUntil = lease.expires
      return false
    }
    c.heldUntil = undefined
    const was = lease.holder
    c.token = lease.acquire(c.idx)
    c.lastToken = c.token
    c.leaseUntil = now + ownLeaseMs
    w.count(`coordinator:leaseTakenBy:${via}`)
    if (was >= 0 && was !== c.idx) w.mark("rebalance", `coordinator failover #${was} -> #${c.idx}`)
    this.becomeLeader(c)
    return c.shell !== null
  }

  /** The host stops leading: its shell and timers go, its lease is released if still its own. */
  private stepDown(c: CoordNode): void {
    // (with Redis down the release never arrives: the lease runs out by itself)
    if (c.token !== 0 && !this.ctx.store.down) this.ctx.lease.release(c.idx, c.token)
    c.token = 0
    c.shell = null
    c.inc++
    c.timerAt = Number.POSITIVE_INFINITY
    // a later term re-fences every owner at its takeover (rule 31)
    if (c.unfenced.size > 0) c.unfenced = new Map()
    c.told.clear()
  }

  /**
   * The host's renewal loop (every TTL/3): renew the lease it leads under,
   * or step down; not leading, take a free lease (the silent path: its
   * candidate learns of the new term only at its next check). Nothing while
   * Redis is down (a lease that runs out meanwhile is lost).
   */
  renew(node: number, gen: number): void {
    const c = this.nodes[node]!
    const { w, lease, store } = this.ctx
    if (gen !== c.renewGen || !c.alive) return
    w.q.push(w.now + checkEveryMs, K.LEASE, node, gen)
    if (store.down) return
    if (c.token !== 0) {
      if (lease.renew(c.idx, c.token)) {
        c.leaseUntil = local(c.clock, w.now) + ownLeaseMs
        this.followStream(c)
      } else {
        w.count("coordinator:renewalFailed")
        this.stepDown(c)
      }
      return
    }
    this.ensureLeader(c, "renewal")
  }

  // ---------------------------------------------------------------- the candidate

  /** Wakes candidate `c`'s check now (its serve ended, or a handover). */
  private wake(c: CoordNode): void {
    this.ctx.w.q.push(this.ctx.w.now, K.CAND_CHECK, c.idx, c.checkGen)
  }

  /**
   * The candidate's check (`CoordinatorCandidate`): elect, then
   * `CandidateRole.decide` on its host's lease token and its serve, and act
   * on it; sleep a check period, a standby only until the holder's lease
   * should run out.
   */
  check(node: number, gen: number): void {
    const c = this.nodes[node]!
    const w = this.ctx.w
    if (gen !== c.checkGen || !c.alive) return
    if (w.now < c.checkStarvedUntil) {
      w.count("candidate:checkStarved")
      w.q.push(c.checkStarvedUntil, K.CAND_CHECK, node, gen)
      return
    }
    c.checkGen++
    this.ensureLeader(c, "check")
    const token = c.token !== 0 ? c.token : undefined
    const s = c.serve
    const active = this.active(c)
    const view: CandidateRole.CandidateView = {
      leaseToken: token,
      serving: s === null ? undefined : { leaseToken: s.leaseToken, active, restarts: s.restarts },
    }
    const action = this.broken ? decideBeforeRule25(view) : CandidateRole.decide(view)
    w.count(`candidate:${action}`)
    switch (action) {
      case "idle":
        break
      case "keep":
        // the state of the production stall: a lease held, a serve nobody's requests reach
        if (!active) {
          w.count("candidate:keepsDeadServe")
          if (s!.leaseToken !== token) w.count("candidate:keepsDeadServe:newTerm")
        }
        break
      case "serve":
        this.startServe(c, token!, 0)
        break
      case "restart":
        // a new term (taken again, maybe by the renewal loop) or a serve replaced or ended
        w.count(
          s!.leaseToken !== token ? "candidate:restart:newTerm" : "candidate:restart:replaced",
        )
        if (s!.leaseToken !== token && !active) w.count("candidate:restart:newTermServeReplaced")
        this.stopServe(c)
        this.startServe(c, token!, s!.leaseToken === token ? s!.restarts + 1 : 0)
        break
      case "resign":
        this.stopServe(c)
        this.resign(c)
        break
      case "stop":
        this.stopServe(c)
        break
    }
    let wait = checkEveryMs
    if (c.serve === null && c.heldUntil !== undefined)
      wait = Math.max(1, Math.min(checkEveryMs, c.heldUntil - w.now + STANDBY_SLACK_MS))
    w.q.push(w.now + wait, K.CAND_CHECK, node, c.checkGen)
  }

  /**
   * `CoordinatorHost.resign` and the candidate's handover: step down,
   * release the lease, take none for one TTL, and wake the standbys.
   */
  private resign(c: CoordNode): void {
    const w = this.ctx.w
    w.mark("fault", `coordinator #${c.idx} resigns: its serve stopped twice in one term`)
    c.resignedUntil = local(c.clock, w.now) + timing.coordinatorLeaseMs
    if (c.token !== 0) this.stepDown(c)
    for (const o of this.nodes) if (o !== c && o.alive) this.wake(o)
  }

  // ---------------------------------------------------------------- the stale-claim fault

  /** CPU starvation: candidate `c`'s check runs no earlier than `ms` from now. */
  starveCheck(c: CoordNode, ms: number): void {
    c.checkStarvedUntil = Math.max(c.checkStarvedUntil, this.ctx.w.now + ms)
    this.ctx.w.count("staleClaim:checkStarved")
  }

  /** Candidate `node`'s late serve claims the presence now (when it wakes, if paused). */
  lateClaim(node: number): void {
    this.ctx.w.q.push(this.ctx.w.now, K.STALE_CLAIM, node, 0)
  }

  /**
   * A serve its candidate started before it paused (or while it briefly
   * held the lease) claims the group's presence only now: under the last
   * term it led under, replacing whichever serve answers the group.
   */
  staleClaim(node: number): void {
    const c = this.nodes[node]!
    const w = this.ctx.w
    if (!c.alive) return
    w.count("staleClaim:claims")
    w.mark("fault", `coordinator #${c.idx}: a late serve (term ${c.lastToken}) claims the presence`)
    this.startServe(c, c.lastToken, 0)
  }

  /** The next serve of a candidate other than `except` to claim the presence runs `then`. */
  armClaim(except: number, then: (c: CoordNode) => void): void {
    this.onClaim = { except, then }
  }

  disarmClaim(): void {
    this.onClaim = undefined
  }

  // ---------------------------------------------------------------- the hung-store fault

  /**
   * The next store command of candidate `c`'s host (a commit or a fence
   * write; with `deadline`, the next one a due deadline makes) never answers.
   */
  armHang(c: CoordNode, deadline: boolean): void {
    c.hangArmed = deadline ? "deadline" : "any"
  }

  /**
   * A store command of the host never answers (a hung master, a connection
   * that drops packets without a reset). The host waits under its lock, so
   * no heartbeat is answered and no deadline runs, while its renewal loop
   * and its candidate's check go on (docs/protocol.md rule 20: renewals run
   * outside the lock). The command may have run or not: half the time the
   * commit (CAS) and the fences land, the answer never comes. At the
   * command's deadline (`commandTimeoutMs`, docs/redis.md "Command
   * deadline", docs/protocol.md rule 27) it fails `BackendUnavailable`, and
   * the host steps down as on any failed commit; the requests that waited
   * are served then (by whoever takes the lease).
   */
  private hang(c: CoordNode, step: Step<unknown>, grants: Step<unknown>["fences"]): void {
    const { w, store, data } = this.ctx
    c.hung = true
    w.count("hungStore:hung")
    if (w.rng.faultEvents.chance(0.5)) {
      // the command ran; only its answer is lost
      w.count("hungStore:ranUnanswered")
      if (step.records.length > 0) {
        this.committer = shellKey(c)
        store.commit(c.shell!, step, undefined, fenceOf(c))
      }
      data.writeFences(grants)
    }
    w.mark("fault", `coordinator #${c.idx}: a store command hangs`)
    // BROKEN ON PURPOSE with `no-command-deadline` (test-only): no deadline,
    // as before docs/protocol.md rule 27: the host waits for good
    if (this.ctx.options.broken === "no-command-deadline") return
    const hangs = ++this.hangs
    c.hangId = hangs
    this.ctx.faults.open(FAULT_KINDS.indexOf("hung-store"), {
      afterMs: timing.commandTimeoutMs,
      heal: () => this.commandDeadline(c, hangs),
    })
  }

  /**
   * The hung command's deadline passed: `BackendUnavailable`, the host steps
   * down (even if its renewal loop lost the lease meanwhile and it stepped
   * down already: then this is a no-op but for the waiting requests).
   */
  private commandDeadline(c: CoordNode, hangId: number): void {
    const w = this.ctx.w
    if (!c.hung || c.hangId !== hangId || !c.alive) return
    c.hung = false
    w.count("hungStore:deadlinePassed")
    w.mark("fault", `coordinator #${c.idx}: store command deadline passed: steps down`)
    // BROKEN ON PURPOSE with `hung-commit-keeps-shell` (test-only): the host
    // keeps leading on its shell after the failed command, so a deadline
    // whose step `dueTimer` handed out is lost (the seed 7305 class)
    if (this.ctx.options.broken !== "hung-commit-keeps-shell") this.stepDown(c)
    const held = c.held
    c.held = []
    for (const req of held) {
      if (!this.deferred(c.idx, K.REQ_POPPED, req.pid, req))
        w.q.push(w.now, K.REQ_POPPED, c.idx, req.pid, req)
    }
  }

  // ---------------------------------------------------------------- leadership

  /**
   * Become leader: create the group or load the committed snapshot, then
   * commit the core's election records (CAS) before serving anything, as
   * `CoordinatorHost` does. Load and election commit are one event here.
   */
  becomeLeader(c: CoordNode): void {
    const { w, store, options } = this.ctx
    c.inc++
    c.timerAt = Number.POSITIVE_INFINITY
    const now = instantOf(c, w.now)
    const candidate = { holder: `coordinator-${c.idx}`, leaseToken: c.token }
    if (!store.created) {
      const created = CoordinatorShell.create(
        groupConfig(options.shards),
        now,
        candidate,
        this.ctx.layouts.enabled ? this.ctx.layouts.origin() : undefined,
      )
      c.shell = created.shell
      this.committer = shellKey(c)
      if (store.commit(created.shell, created.step, 0, fenceOf(c)) === undefined) {
        if (store.holds(fenceOf(c))) throw new Error("store has a revision but no group")
        this.stepDown(c)
        return
      }
    } else {
      if (this.ctx.checks.view.migrating) w.count("reshard:takeoverMidMigration")
      const takeover = CoordinatorShell.load(store.snapshot(), now, candidate)
      if (takeover._tag === "Refused") {
        w.mark("fault", `coordinator #${c.idx} election refused`)
        this.stepDown(c)
        return
      }
      if (store.refusing && takeover.step.records.length > 0) {
        // the election commit refused (OOM, the `refused` fault): no leader
        w.count("refused:electionCommit")
        this.stepDown(c)
        return
      }
      c.shell = takeover.shell
      // BROKEN ON PURPOSE with `skip-election` (test-only): serve without the
      // election commit, so a paused ex-leader's next commit can pass the CAS.
      this.committer = shellKey(c)
      if (
        options.broken !== "skip-election" &&
        takeover.step.records.length > 0 &&
        store.commit(takeover.shell, takeover.step, undefined, fenceOf(c)) === undefined &&
        !store.holds(fenceOf(c))
      ) {
        // the election refused by the lease fence (docs/protocol.md rule 32)
        this.stepDown(c)
        return
      }
      this.reassert(
        c,
        takeover.shell,
        this.afterRewindCheck(c, takeover.shell, takeover.fences, now),
      )
    }
    this.servingFrom = w.now
    this.armTimer(c)
    this.followStream(c)
  }

  /**
   * docs/protocol.md rule 23, as `CoordinatorHost.takeOver` does it after
   * the election: read the owner token storage holds for every shard (a
   * missing one reads as none), and when storage is ahead of the loaded
   * state (the `store-rewind` fault: the Store failed over to a replica
   * that missed commits whose fences storage kept) commit the shell's
   * `rewound` step (those shards held one session with storage's token,
   * their recorded owners fenced) before re-fencing the owners left.
   * Returns the fences to write. BROKEN ON PURPOSE with `no-rewind-check`:
   * no check, every loaded owner re-fenced with the rewound state's token.
   */
  /**
   * `CoordinatorHost.takeOver`'s re-fence of every owner, one write per
   * shard, after its token reads (docs/protocol.md rules 27 and 31): a hung
   * node's read is left out after `fenceWaitMs`, and so is its re-fence
   * (which goes on: it lands at the heal, or half the time at the command
   * deadline); the lock is held for those waits. A grant its owner never
   * confirmed whose re-fence failed, and whose token storage was not read
   * holding, is withheld until written, as a new grant is.
   */
  private reassert(c: CoordNode, shell: CoordinatorShell, fences: ReadonlyArray<Fence>): void {
    const { w, data } = this.ctx
    let hungRead = false
    for (let s = 0; s < shell.state.tokens.length && !hungRead; s++) hungRead = data.hung[s] === 1
    if (!hungRead) {
      data.writeFences(fences)
      return
    }
    w.count("fenceHang:takeoverReadLeftOut")
    const answered = fences.filter((f) => data.hung[f.shard] !== 1)
    data.writeFences(answered)
    let failed = 0
    for (const f of fences) {
      if (data.hung[f.shard] !== 1) continue
      failed++
      data.writeFence(f, () => {})
      const o = shell.state.current[f.shard]
      // its stored token was not read (the node hangs): unknown, so withheld
      if (o == null || o.confirmed || c.shell !== shell) continue
      w.count("fenceHang:takeoverWithheld")
      this.withholdUntilWritten(c, f)
    }
    if (failed > 0) w.count("fenceHang:takeoverRefenceFailed", failed)
    this.busyFor(c, (failed > 0 ? 2 : 1) * timing.fenceWaitMs)
  }

  private afterRewindCheck(
    c: CoordNode,
    shell: CoordinatorShell,
    fences: Step<unknown>["fences"],
    now: { readonly mono: number; readonly wall: number },
  ): Step<unknown>["fences"] {
    const { w, store, data, options } = this.ctx
    if (options.broken === "no-rewind-check" || c.shell !== shell) return fences
    // every shard's stored token, a vanished one read as none (0), as OwnerFence.read does
    const stored: Array<{ shard: number; token: number }> = []
    const tokens = shell.state.tokens
    let ahead = 0
    let missing = 0
    for (let s = 0; s < tokens.length; s++) {
      // a hung node's read is left out after `fenceWaitMs` (rule 27): its
      // rewind is not checked at this takeover
      if (data.hung[s] === 1) continue
      const token = data.tokenGone[s] === 0 ? data.fence[s]! : 0
      if (token > (tokens[s] ?? 0)) ahead++
      else if (token === 0 && (tokens[s] ?? 0) > 0) missing++
      stored.push({ shard: s, token })
    }
    if (ahead === 0) return fences
    const step = shell.rewound(stored, now)
    if (step === undefined) return fences
    w.count("rewind:detected")
    w.count("rewind:shardsHeld", ahead + missing)
    // docs/simulator.md, store-rewind: a token lost with the rewind's grant is held too
    if (missing > 0) w.count("rewind:missingHeld", missing)
    w.mark("fault", `coordinator #${c.idx}: storage ahead on ${ahead} shard(s): rewind`)
    this.committer = shellKey(c)
    if (store.commit(shell, step, undefined, fenceOf(c)) === undefined) return fences
    const current = shell.state.current
    return fences.filter((f) => current[f.shard]?.token === f.token)
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
    const w = this.ctx.w
    // a fault took the lease holder away: a takeover is owed, the liveness clock restarts
    if (this.ctx.lease.held(c.idx)) this.ctx.checks.liveness.holderLost(w.now)
    this.exit(c)
    w.mark("fault", `coordinator #${c.idx} crash`)
    this.availabilityChanged()
  }

  /**
   * A graceful stop of candidate `c`'s process, the lease holder (a rolling
   * deploy, a scale-down: SIGTERM; docs/protocol.md rule 20): its serve
   * stops taking requests, a handover mark queues members' requests for the
   * successor, its host releases the lease, the process exits, and the
   * handover wakes every standby's check at once, so a successor serves now,
   * not when the lease runs out. Nothing moves: the successor loads members
   * with their epochs, shards and tokens.
   */
  gracefulStop(c: CoordNode): void {
    const { w, store } = this.ctx
    // the handover checker judges a stop only when a standby can take over
    // now: Redis takes the successor's election commit (up, and not refusing
    // writes: an OOM episode of `refused` holds every takeover back)
    const standby =
      !store.down &&
      !store.refusing &&
      this.nodes.some(
        (o) =>
          o !== c &&
          o.alive &&
          !o.paused &&
          !o.hung &&
          o.checkStarvedUntil <= w.now &&
          local(o.clock, w.now) >= o.resignedUntil,
      )
    this.ctx.checks.handover?.stopped(w.now, standby)
    // BROKEN ON PURPOSE with `stop-without-handover` (test-only): the process
    // exits as if killed: no release, no mark, no wake-up; a standby takes
    // over only once the lease ran out
    if (this.ctx.options.broken === "stop-without-handover") {
      this.crash(c)
      return
    }
    w.count("coordStop:handover")
    w.mark("rebalance", `coordinator #${c.idx} stops gracefully: hands over`)
    if (this.active(c)) this.handover = { until: w.now + timing.handoverMs, queued: [] }
    this.stopServe(c)
    // `stepDown` releases the lease the host leads under
    this.stepDown(c)
    this.exit(c)
    this.availabilityChanged()
    // the handover (`transport.handover(key)`): every standby checks now
    for (const o of this.nodes) if (o !== c && o.alive) this.wake(o)
  }

  /** The process of candidate `c` is gone: its shell, lease term, serve, loops and waits with it. */
  private exit(c: CoordNode): void {
    c.alive = false
    c.shell = null
    c.token = 0
    c.inc++
    c.timerAt = Number.POSITIVE_INFINITY
    // its serve dies with it; the presence it claimed stays until a newer claim
    c.serve = null
    c.checkGen++
    c.renewGen++
    // a crashed process is not paused any more; what it deferred is gone
    c.paused = false
    c.deferred = []
    // a hung command and the requests behind it die with the process
    c.hung = false
    c.held = []
    c.hangArmed = undefined
    // so do its unwritten grants and the requests that waited for its lock
    c.unfenced = new Map()
    c.told.clear()
    c.busyUntil = Number.NEGATIVE_INFINITY
    c.lockWrites = 0
    c.waiting = []
  }

  pause(c: CoordNode): void {
    if (this.ctx.lease.held(c.idx)) this.ctx.checks.liveness.holderLost(this.ctx.w.now)
    c.paused = true
    this.ctx.w.mark("fault", `coordinator #${c.idx} paused (will resume stale)`)
    this.availabilityChanged()
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
    this.availabilityChanged()
  }

  /** A crashed candidate starts again: a new process, no lease, no serve; it checks at once. */
  restart(node: number): void {
    const c = this.nodes[node]!
    if (c.alive) return
    c.alive = true
    c.resignedUntil = Number.NEGATIVE_INFINITY
    c.heldUntil = undefined
    c.checkStarvedUntil = 0
    this.wake(c)
    this.ctx.w.q.push(this.ctx.w.now + checkEveryMs, K.LEASE, c.idx, c.renewGen)
    this.availabilityChanged()
  }

  /** Liveness phase: every candidate alive and running, none starved. */
  heal(): void {
    this.onClaim = undefined
    for (const c of this.nodes) {
      c.hangArmed = undefined
      if (!c.alive) this.restart(c.idx)
      if (c.paused) this.resume(c.idx)
      c.checkStarvedUntil = Math.min(c.checkStarvedUntil, this.ctx.w.now)
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

/** A candidate's shell, from one load to the next (see `CoordinatorHost.committer`). */
const shellKey = (c: CoordNode): string => `${c.idx}:${c.inc}`
