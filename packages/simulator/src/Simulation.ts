/**
 * One run: builds the world from the options (each subsystem with its own
 * options, drawn from the seed), runs the event loop and collects the
 * result. The subsystems:
 *
 * | module          | what                                                              |
 * | --------------- | ----------------------------------------------------------------- |
 * | world.ts        | time, event queue, PRNG streams, clocks, trace, counters          |
 * | network.ts      | loss, dup, delay, per-member links (drop / hold / lag), replay     |
 * | store.ts        | the coordinator store: CAS on storeRevision, the committed view   |
 * | lease.ts        | the coordinator lease as the lease store holds it, its token      |
 * | coordinator.ts  | three candidates: hosts driving the real `CoordinatorShell`,      |
 * |                 | their serves and the group's presence, `CandidateRole` checks     |
 * | members.ts      | member processes: the real `MemberMachine` and its runtime        |
 * | dataplane.ts    | shard streams: owner tokens, fenced reads and acks, readers       |
 * | workload.ts     | arrivals and processing times                                    |
 * | faults.ts       | every episodic fault kind: inject and heal                        |
 * | scenario.ts     | membership actions per scenario                                   |
 * | sampler.ts      | balance, episodes, deadlines, starvation, timeline                |
 * | checkers/       | one file per checker, plus the committed view they read           |
 *
 * @module
 */
import {
  AnswerChecker,
  CollateralChecker,
  ConvergenceChecker,
  DeadlineChecker,
  DrainChecker,
  ExactnessChecker,
  FanOutChecker,
  FenceWaitChecker,
  HandoverChecker,
  IntentChecker,
  isCollateralFree,
  KeyOrderChecker,
  LeaseChecker,
  LeaseConfigChecker,
  LivenessChecker,
  MessageChecker,
  OutboxChecker,
  OwnershipChecker,
  RequestChecker,
  RevisionChecker,
  RuntimeChecker,
  StarvationChecker,
  TokenChecker,
  TransactionChecker,
  type Violation,
} from "./checkers/index.js"
import { CommittedView, type EndKind } from "./checkers/view.js"
import { CoordinatorHost } from "./coordinator.js"
import type { Checks, Ctx } from "./ctx.js"
import { DataPlane } from "./dataplane.js"
import { FanOut } from "./fanout.js"
import { Faults } from "./faults.js"
import { StreamLayouts } from "./layouts.js"
import { Lease } from "./lease.js"
import { type Batch, Members } from "./members.js"
import { Network, type Req } from "./network.js"
import {
  drawFaults,
  exactConvergenceHeartbeats,
  FAULT_KINDS,
  type FaultMix,
  handoverBoundMs,
  isExact,
  isReshard,
  livenessBoundMs,
  membersOptions,
  networkOptions,
  type SimOptions,
  stallBoundMs,
  timing,
  txOn,
  workloadOptions,
} from "./options.js"
import { Outbox, type OutboxEntry } from "./outbox.js"
import { Sampler, type Segment } from "./sampler.js"
import { action, scheduleScenario } from "./scenario.js"
import { Store } from "./store.js"
import { Transactions, TX_KEYS_PER_SHARD } from "./transactions.js"
import { Workload } from "./workload.js"
import { K, type Mark, type TraceLine, World } from "./world.js"

export type { Mark, Segment, TraceLine }

/** How often the quiet tail looks whether the group still works off its backlog. */
const TAIL_STEP_MS = 5_000

export interface SimResult {
  readonly options: SimOptions
  readonly faults: FaultMix
  /** No disruptive fault: the run was held to exactness. */
  readonly exact: boolean
  readonly events: number
  readonly virtualMs: number
  readonly digest: string
  readonly violations: ReadonlyArray<Violation>
  readonly around: ReadonlyArray<TraceLine>
  readonly convergenceMs: ReadonlyArray<number>
  readonly livenessConvergedMs: number | undefined
  readonly episodes: number
  readonly shardsMoved: number
  readonly movementLowerBound: number
  readonly produced: number
  readonly acked: number
  readonly handled: number
  readonly duplicates: number
  /** Messages never acknowledged, and the shards they are on. */
  readonly lost: number
  readonly lostShards: number
  readonly fencedReads: number
  readonly fencedAcks: number
  readonly zombieAcks: number
  readonly staleCommitsRejected: number
  readonly commits: number
  readonly lifecycleEnds: Readonly<Record<EndKind, number>>
  readonly worstStarvationWaitMs: number
  /** Reshard runs: how long each key's consumption paused at a cutover (ms). */
  readonly keyPausesMs: ReadonlyArray<number>
  readonly counters: Readonly<Record<string, number>>
  readonly ackedPerShard: ReadonlyArray<number>
  readonly memberIds: ReadonlyArray<string>
  readonly segments: ReadonlyArray<Segment>
  readonly marks: ReadonlyArray<Mark>
  readonly timelineTruncated: boolean
}

export interface RunHooks {
  /** Called about every 1% of virtual time. */
  readonly progress?: (fraction: number) => void
}

export class Simulation {
  private readonly ctx: Ctx
  private readonly endSafety: number
  private readonly endRun: number
  /** Messages acknowledged at the last look of the quiet tail (see `end`). */
  private ackedAtLastLook = -1
  /** Messages undelivered or pending over every shard at the last look of the quiet tail. */
  private backlogAtLastLook = Number.POSITIVE_INFINITY

  constructor(
    options: SimOptions,
    private readonly hooks: RunHooks = {},
  ) {
    const w = new World(options)
    const mix = drawFaults(options)
    const reshard = isReshard(options.scenario)
    // A reshard moves every shard's keys: not held to the static-layout exactness rules.
    const exact = isExact(mix) && !reshard
    const keyCount = 8 * w.S
    this.endSafety = options.durationMs
    this.endRun = this.endSafety + livenessBoundMs + 20_000
    const report = (v: Violation) => w.violation(v)
    const ctx = { w, options, mix } as {
      -readonly [P in keyof Ctx]: Ctx[P]
    }
    const view = new CommittedView(
      w.S,
      {
        released: (shard, memberId, epoch, why, time) => {
          if (why !== "removed")
            checks.drain.check(
              time,
              shard,
              memberId,
              why,
              ctx.members.drainFacts(memberId, epoch, shard),
            )
        },
        ended: (memberId, epoch, kind, time, lifecycle, revoking) => {
          checks.collateral?.ended(memberId, kind, time, revoking)
          checks.requests.removed(lifecycle, ctx.coord.committer)
          if (kind !== "MemberLeft")
            w.mark(
              "fence",
              `${kind.replace("Member", "").toLowerCase()} ${memberId} (epoch ${epoch})`,
            )
          if (kind === "MemberExpired")
            checks.lease.expired(time, memberId, epoch, ctx.members.leaseFacts(memberId, epoch))
        },
      },
      options.shards,
    )
    const checks: Checks = {
      view,
      ownership: new OwnershipChecker(w.S, report, (pid) => ctx.members.procs[pid]!.label),
      intent: new IntentChecker(w.S, report),
      drain: new DrainChecker(report),
      lease: new LeaseChecker(report),
      deadlines: new DeadlineChecker(report),
      requests: new RequestChecker(report),
      runtime: new RuntimeChecker(report),
      answers: new AnswerChecker(report),
      messages: new MessageChecker(w.S),
      starvation: new StarvationChecker(report),
      revisions: new RevisionChecker(report),
      tokens: new TokenChecker(w.S, report),
      // replaced below once the fan-out groups are drawn
      fanout: new FanOutChecker(report, 1, 0, []),
      leaseConfig: new LeaseConfigChecker(
        report,
        timing.sessionTimeoutMs,
        timing.heartbeatIntervalMs,
      ),
      collateral:
        isCollateralFree(mix) && !reshard
          ? new CollateralChecker(
              report,
              FAULT_KINDS.filter((k) => mix.intensity[k] > 0).join(","),
              (memberId, since) => ctx.members.lostSince(memberId, since),
              timing.revokeTimeoutMs + timing.requestTimeoutMs,
              timing.sessionTimeoutMs,
              timing.revokeTimeoutMs,
              timing.requestTimeoutMs,
            )
          : undefined,
      convergence: new ConvergenceChecker(report),
      liveness: new LivenessChecker(report, stallBoundMs, timing.requestTimeoutMs, 3),
      exactness: exact
        ? new ExactnessChecker(
            report,
            exactConvergenceHeartbeats[options.scenario] * timing.heartbeatIntervalMs,
          )
        : undefined,
      keyOrder: reshard ? new KeyOrderChecker(w.S, keyCount, report, (k) => `key-${k}`) : undefined,
      transactions: txOn(options)
        ? new TransactionChecker(
            w.S,
            reshard ? keyCount : w.S * TX_KEYS_PER_SHARD,
            reshard
              ? (k) => `key-${k}`
              : (k) => `shard ${Math.floor(k / TX_KEYS_PER_SHARD)} key ${k % TX_KEYS_PER_SHARD}`,
          )
        : undefined,
      handover:
        mix.intensity["coord-stop"] > 0 ? new HandoverChecker(report, handoverBoundMs) : undefined,
      fenceWait:
        mix.intensity["fence-hang"] > 0
          ? new FenceWaitChecker(report, timing.fenceWaitMs)
          : undefined,
      // replaced below once the outbox is built
      outbox: undefined,
    }
    ctx.checks = checks
    const clocksOn = mix.intensity.clock > 0
    ctx.net = new Network(ctx, networkOptions(mix), options.members)
    ctx.store = new Store(ctx)
    ctx.lease = new Lease(ctx)
    ctx.coord = new CoordinatorHost(ctx, clocksOn)
    ctx.members = new Members(
      ctx,
      membersOptions(options.seed, options.members, mix).settings,
      clocksOn,
    )
    ctx.data = new DataPlane(ctx, options.fence === "on")
    if (checks.transactions !== undefined) ctx.data.tx = new Transactions(ctx, checks.transactions)
    if (checks.transactions !== undefined && mix.intensity["outbox-relay"] > 0) {
      let outbox: Outbox | undefined
      checks.outbox = new OutboxChecker(report, (key, from) => outbox!.routedTargets(key, from))
      outbox = new Outbox(ctx, checks.outbox)
      ctx.outbox = outbox
    }
    ctx.fanout = new FanOut(ctx)
    checks.fanout = new FanOutChecker(report, ctx.fanout.groups, w.S, ctx.fanout.modes())
    ctx.layouts = new StreamLayouts(ctx, reshard, keyCount)
    ctx.workload = new Workload(
      ctx,
      workloadOptions(options.seed, w.S, options.ratePerShard),
      this.endRun - 15_000,
    )
    ctx.faults = new Faults(ctx, this.endSafety)
    ctx.sampler = new Sampler(
      ctx,
      this.endSafety,
      Object.values(mix.intensity).every((v) => v === 0),
    )
    this.ctx = ctx
  }

  run(): SimResult {
    const ctx = this.ctx
    const w = ctx.w
    const q = w.q
    ctx.coord.start()
    scheduleScenario(ctx)
    ctx.workload.start()
    ctx.faults.start()
    ctx.fanout.start()
    ctx.sampler.start()
    q.push(this.endSafety, K.LIVENESS)
    q.push(this.endRun, K.END)
    const progressStep = this.endRun / 100
    let nextProgress = progressStep
    const progress = this.hooks.progress
    while (q.pop()) {
      const t = q.t
      if (t > w.stopAfter) break
      w.now = t
      const kind = q.kind
      const a = q.a
      const b = q.b
      w.trace(t, kind, a, b)
      if (progress !== undefined && t >= nextProgress) {
        progress(t / this.endRun)
        nextProgress = t + progressStep
      }
      if (this.dispatch(kind, a, b, q.p)) break
    }
    w.captureAfter()
    return this.result()
  }

  /** Returns true to stop the run. */
  private dispatch(kind: number, a: number, b: number, p: unknown): boolean {
    const { members, coord } = this.ctx
    switch (kind) {
      case K.PRODUCE:
        this.ctx.workload.produce()
        return false
      case K.WORKER:
        if (!members.deferred(a, kind, b, p)) members.worker(a)
        return false
      case K.BATCH_DONE:
        if (!members.deferred(a, kind, b, p)) members.batchDone(p as Batch)
        return false
      case K.MEMBER_TIMER:
        if (!members.deferred(a, kind, b, p)) members.timer(a)
        return false
      case K.RESP_AT_MEMBER:
        if (!members.deferred(a, kind, b, p))
          members.response(a, b, p as Parameters<Members["response"]>[2])
        return false
      case K.REQ_TIMEOUT:
        if (!members.deferred(a, kind, b, p)) members.timeout(a, b)
        return false
      case K.NOTICE:
        if (!members.deferred(a, kind, b, p)) members.noticeArrived(a)
        return false
      case K.DRAINED:
        if (!members.deferred(a, kind, b, p)) members.drained(a, b, p as number)
        return false
      case K.REQ_AT_COORD:
        coord.arrive(p as Req)
        return false
      case K.REQ_POPPED:
        if (!coord.deferred(a, kind, b, p)) coord.popped(a, p as Req)
        return false
      case K.COORD_TIMER:
        if (!coord.deferred(a, kind, b, p)) coord.timer(a, b)
        return false
      case K.LEASE:
        if (!coord.deferred(a, kind, b, p)) coord.renew(a, b)
        return false
      case K.CAND_CHECK:
        if (!coord.deferred(a, kind, b, p)) coord.check(a, b)
        return false
      case K.STALE_CLAIM:
        if (!coord.deferred(a, kind, b, p)) coord.staleClaim(a)
        return false
      case K.ACTION:
        action(this.ctx, a, b)
        return false
      case K.OUTBOX_RELAY:
        if (a < 0) this.ctx.outbox!.resumed(b, p as ReadonlyArray<OutboxEntry>)
        else if (!members.deferred(a, kind, b, p)) this.ctx.outbox!.relay(a, b, p as number)
        return false
      case K.EXHAUSTED:
        if (!members.deferred(a, kind, b, p)) members.exhausted(a, b, p as number)
        return false
      case K.RESHARD:
        this.ctx.layouts.change(a, b)
        return false
      case K.RESTART_SLOT:
        members.restart(a)
        return false
      case K.FAULT:
        this.ctx.faults.fault(a)
        return false
      case K.HEAL:
        this.ctx.faults.heal(a, b)
        return false
      case K.SAMPLE:
        this.ctx.sampler.sample()
        return false
      case K.LIVENESS:
        this.startLiveness()
        return false
      case K.FANOUT:
        this.ctx.fanout.poll(a)
        return false
      case K.END:
        return this.end()
    }
    return false
  }

  /** Faults stop: every episode heals, the network heals, every wanted member runs. */
  private startLiveness(): void {
    const { w, faults, net, coord, members, sampler } = this.ctx
    w.mark("phase", "liveness phase: faults off")
    faults.healAll()
    this.ctx.fanout.heal()
    net.heal()
    coord.heal()
    this.ctx.outbox?.heal()
    sampler.startLiveness()
    // Someone must consume what was produced: if every member was taken out, the first comes back.
    if (!members.slots.some((s) => s.wanted)) members.slots[0]!.wanted = true
    for (const slot of members.slots) {
      slot.partStore = false
      slot.slowDrain = false
      for (const p of slot.procs) if (p.paused) members.resume(p.pid)
      if (slot.wanted && slot.procs.length === 0) members.start(slot)
    }
  }

  /**
   * The end of the run, unless the quiet tail runs on: while messages are
   * still unacknowledged and the group acknowledged more since the last look
   * (TAIL_STEP_MS ago), it keeps working off its backlog (arrivals stopped
   * 15 s before the end), up to the safety phase's length again. A group
   * with more work than its members can serve (extreme weights can put every
   * shard on one member) is slow, not lossy; a message nobody acknowledges
   * any more is lost. Runs with nothing left to acknowledge end as before.
   * Returns true to stop.
   */
  private end(): boolean {
    const { w, checks, data } = this.ctx
    const m = checks.messages
    const tail = w.now - this.endRun
    const unacked = m.producedTotal - m.ackedTotal
    // Progress is an acknowledgement never made before, or a smaller backlog:
    // a group created again at its stream's start (rule 26, `evict`) first
    // works through entries acknowledged before it vanished, at least once,
    // acknowledging nothing new for a while.
    const backlog = data.totalBacklog()
    const progress = m.ackedTotal > this.ackedAtLastLook || backlog < this.backlogAtLastLook
    if (unacked > 0 && progress && tail < this.endSafety) {
      this.ackedAtLastLook = m.ackedTotal
      this.backlogAtLastLook = backlog
      w.q.push(w.now + TAIL_STEP_MS, K.END)
      return false
    }
    if (tail > 0) w.count("run:drainTailMs", tail)
    if (this.ctx.fanout.enabled) checks.fanout.finish(w.now, (s) => checks.messages.producedOn(s))
    m.finish(
      w.now,
      (v) => w.violation(v),
      tail === 0
        ? ""
        : progress
          ? `still draining when the tail ended, ${Math.round(tail / 1000)} s after the run's end`
          : `none acknowledged in the last ${TAIL_STEP_MS / 1000} s of the tail`,
    )
    checks.transactions?.finish(w.now, (v) => w.violation(v))
    checks.handover?.finish(w.now)
    checks.outbox?.finish(w.now)
    const c = w.counters
    const ends = checks.view.endCounts
    checks.exactness?.finish(w.now, {
      duplicates: checks.messages.duplicates,
      fencedReads: data.fencedReads,
      fencedAcks: data.fencedAcks,
      fences: ends.MemberFenced,
      expiries: ends.MemberExpired,
      replaced: ends.MemberReplaced,
      rejoined: ends.MemberRejoined + ends.Removed,
      selfFences:
        (c["member:stopAll:self-fence"] ?? 0) +
        (c["member:stopAll:fenced"] ?? 0) +
        (c["member:stopAll:unknown-member"] ?? 0) +
        (c["member:stopAll:superseded"] ?? 0),
      staleCommits: checks.revisions.rejected,
    })
    return true
  }

  private result(): SimResult {
    const { w, checks, data, sampler, members, options, mix } = this.ctx
    sampler.closeAll()
    let produced = 0
    for (let s = 0; s < w.S; s++) produced += checks.messages.producedOn(s)
    const counters: Record<string, number> = { ...w.counters }
    counters["intent:checks"] = checks.intent.checks
    counters["intent:checks"] = checks.intent.checks
    counters["drain:releasesChecked"] = checks.drain.released
    counters["lease:expiriesChecked"] = checks.lease.expiries
    counters["requests:staleJudged"] = checks.requests.staleJudged
    counters["requests:forgedJudged"] = checks.requests.forgedJudged
    counters["requests:forgedFenced"] = checks.requests.forgedFenced
    counters["requests:honestFreshJudged"] = checks.requests.freshJudged
    counters["requests:departedJoinJudged"] = checks.requests.departedJudged
    counters["requests:olderEpoch"] = checks.requests.olderEpoch
    counters["requests:olderEpochAfterJoin"] = checks.requests.olderEpochAfterJoin
    counters["answers:applied"] = checks.answers.applied
    counters["answers:lateDropped"] = checks.answers.lateDropped
    if (checks.keyOrder !== undefined) {
      counters["keyOrder:delivered"] = checks.keyOrder.delivered
      counters["keyOrder:crossGenerationChecks"] = checks.keyOrder.crossGeneration
    }
    if (checks.collateral !== undefined)
      counters["collateral:excusedLossStreaks"] = checks.collateral.excused
    if (checks.collateral !== undefined)
      counters["collateral:unheardGrantJudged"] = checks.collateral.unheardJudged
    counters["tokens:grantsChecked"] = checks.tokens.grants
    counters["liveness:worstStallMs"] = Math.round(checks.liveness.worstStallMs)
    counters["liveness:excusedStalls"] = checks.liveness.excusedStalls
    if (checks.transactions !== undefined) {
      counters["tx:effectsApplied"] = checks.transactions.effects
      counters["tx:lostAnswerPermille"] = Math.round((data.tx?.lostAnswerP ?? 0) * 1000)
    }
    if (this.ctx.fanout.enabled) {
      counters["fanout:deletionsChecked"] = checks.fanout.deletionsChecked
      for (const [g, mode] of this.ctx.fanout.modes().entries())
        counters[`fanout:group${g}:${mode}`] = 1
    }
    if (checks.outbox !== undefined) {
      counters["outbox:entriesCommitted"] = checks.outbox.committedN
      counters["outbox:appends"] = checks.outbox.deliveredN
    }
    if (checks.fenceWait !== undefined) {
      counters["fenceHang:answersJudged"] = checks.fenceWait.answers
      counters["fenceHang:worstLockWaitMs"] = Math.round(checks.fenceWait.worstLockWaitMs)
      counters["fenceHang:worstAnswerWaitMs"] = Math.round(checks.fenceWait.worstAnswerWaitMs)
    }
    if (checks.handover !== undefined) {
      counters["handover:stopsJudged"] = checks.handover.stops
      counters["handover:worstServedMs"] = Math.round(checks.handover.worstServedMs)
      counters["handover:worstAnsweredMs"] = Math.round(checks.handover.worstAnsweredMs)
    }
    if (checks.exactness !== undefined) {
      counters["exact:episodes"] = checks.exactness.episodes
      counters["exact:singleChangeEpisodes"] = checks.exactness.singleChangeEpisodes
      counters["exact:worstConvergenceMs"] = Math.round(checks.exactness.worstMs)
    }
    return {
      options,
      faults: mix,
      exact: checks.exactness !== undefined,
      events: w.digest.count,
      virtualMs: w.now,
      digest: w.digest.hex(),
      violations: w.violations,
      around: w.around,
      convergenceMs: checks.convergence.durations,
      livenessConvergedMs: sampler.livenessConvergedMs,
      episodes: sampler.episodes,
      shardsMoved: sampler.shardsMoved,
      movementLowerBound: sampler.lowerBoundTotal,
      produced,
      acked: checks.messages.ackedTotal,
      handled: checks.messages.handledTotal,
      duplicates: checks.messages.duplicates,
      lost: checks.messages.lostMessages,
      lostShards: checks.messages.lostShards,
      fencedReads: data.fencedReads,
      fencedAcks: data.fencedAcks,
      zombieAcks: data.zombieAcks,
      staleCommitsRejected: checks.revisions.rejected,
      commits: checks.revisions.accepted,
      lifecycleEnds: { ...checks.view.endCounts },
      worstStarvationWaitMs: checks.starvation.worstWaitMs,
      keyPausesMs: checks.keyOrder?.pausesMs ?? [],
      counters,
      ackedPerShard: Array.from(data.ackedPerShard),
      memberIds: members.slots.map((s) => s.id),
      segments: sampler.segments,
      marks: w.marks,
      timelineTruncated: sampler.timelineTruncated,
    }
  }
}

export const runSimulation = (options: SimOptions, hooks?: RunHooks): SimResult =>
  new Simulation(options, hooks).run()
