/**
 * Sampling and the timeline: member-side balance (evaluated exactly when a
 * reader or the membership changes while the group is unbalanced, and every
 * second), rebalance episodes (from a membership change to balance: their
 * duration, the shards moved and the assignor's lower bound for them),
 * convergence after faults stop, starvation, the protocol deadlines, and the
 * ownership segments drawn by the HTML report.
 *
 * @module
 */
import { movementLowerBound } from "@shardline/core"
import { balanced } from "./checkers/convergence.js"
import type { Ctx } from "./ctx.js"
import type { Proc } from "./members.js"
import { livenessBoundMs, timing } from "./options.js"
import { K } from "./world.js"

export interface Segment {
  readonly shard: number
  /** The member (slot index) reading it. */
  readonly member: number
  readonly start: number
  end: number
}

interface Episode {
  readonly since: number
  /** The last membership change of the episode: convergence is measured from it. */
  lastChange: number
  /** Distinct (member, start|leave) changes in the episode. */
  readonly changes: Set<string>
  moved: number
  /** Member (slot index) reading each shard when the episode began (-1: none). */
  readonly baseline: Int32Array
}

const MAX_SEGMENTS = 200_000

export class Sampler {
  readonly segments: Array<Segment> = []
  private readonly openSeg = new Map<number, Segment>()
  timelineTruncated = false
  /** Last member (slot) that read each shard. */
  private readonly lastReader: Int32Array
  private readonly slotOf: Int32Array
  private episode: Episode | undefined = undefined
  private everBalanced = false
  shardsMoved = 0
  lowerBoundTotal = 0
  episodes = 0
  liveness = false
  livenessConvergedMs: number | undefined = undefined

  constructor(
    private readonly ctx: Ctx,
    private readonly endSafety: number,
    private readonly faultFree: boolean,
  ) {
    this.lastReader = new Int32Array(ctx.w.S).fill(-1)
    this.slotOf = new Int32Array(ctx.w.S)
  }

  start(): void {
    this.ctx.w.q.push(timing.sampleEveryMs, K.SAMPLE)
  }

  /** A member started, left or stopped (`slot`, `kind`), or a fault changed the world. */
  changed(slot?: number, kind?: "start" | "leave"): void {
    const w = this.ctx.w
    this.ctx.checks.convergence.change(w.now)
    if (slot === undefined) return
    if (this.episode === undefined)
      this.episode = {
        since: w.now,
        lastChange: w.now,
        changes: new Set(),
        moved: 0,
        baseline: Int32Array.from(this.lastReader),
      }
    this.episode.changes.add(`${slot}:${kind}`)
    this.episode.lastChange = w.now
    // A leave may balance the group at once (the leaver read nothing); a
    // start cannot unless its quota is 0, which the next sample sees.
    if (kind === "leave") this.evaluate()
  }

  /** Process `pid` started (or stopped) reading `shard`. */
  readersChanged(shard: number, pid: number, added: boolean): void {
    if (added) {
      const slot = this.ctx.members.procs[pid]!.slot.idx
      const last = this.lastReader[shard]!
      if (last >= 0 && last !== slot && this.everBalanced) {
        this.shardsMoved++
        if (this.episode !== undefined) this.episode.moved++
      }
      this.lastReader[shard] = slot
    }
    if (this.ctx.data.notSingle === 0 && this.ctx.checks.convergence.open) this.evaluate()
  }

  /** Is the group balanced now? Closes the open convergence stretch and episode if so. */
  private evaluate(): boolean {
    const { w, data, members, checks } = this.ctx
    const live: Array<number> = []
    const liveSlots = members.liveSlots
    for (let i = 0; i < liveSlots.length; i++) if (liveSlots[i] === 1) live.push(i)
    let ok: boolean
    let why = ""
    if (data.notSingle > 0 && live.length > 0) {
      ok = false
      why = "a shard without exactly one reader"
    } else {
      for (let s = 0; s < w.S; s++) {
        const pid = data.readerPid[s]!
        this.slotOf[s] = pid < 0 ? -1 : members.procs[pid]!.slot.idx
      }
      const b = balanced(
        data.readers,
        this.slotOf,
        live,
        members.weights,
        this.ctx.layouts.enabled ? data.expect : undefined,
      )
      ok = b.ok
      why = b.why
    }
    checks.convergence.sample(w.now, ok)
    if (!ok) {
      this.lastWhy = why
      return false
    }
    if (this.liveness && this.livenessConvergedMs === undefined)
      this.livenessConvergedMs = w.now - this.endSafety
    const e = this.episode
    this.episode = undefined
    // An empty group is trivially balanced; it moved nothing worth bounding.
    if (e !== undefined && this.everBalanced && live.length > 0) {
      this.episodes++
      // over the shards a balanced group reads (the current generation's)
      const previous: Array<string | null> = []
      for (let s = 0; s < w.S; s++)
        if (data.expect[s] === 1) {
          const i = e.baseline[s]!
          previous.push(i >= 0 ? members.slots[i]!.id : null)
        }
      const bound = movementLowerBound({
        shardCount: previous.length,
        members: live.map((i) => ({ id: members.slots[i]!.id, weight: members.weights[i]! })),
        previous,
      })
      this.lowerBoundTotal += bound
      checks.exactness?.episode(w.now, w.now - e.lastChange, e.changes.size, e.moved, bound)
    }
    this.everBalanced = true
    return true
  }

  private lastWhy = ""

  sample(): void {
    const { w, checks, coord } = this.ctx
    w.q.push(w.now + timing.sampleEveryMs, K.SAMPLE)
    const ok = this.evaluate()
    if (
      this.liveness &&
      this.livenessConvergedMs === undefined &&
      w.now - this.endSafety > livenessBoundMs
    ) {
      checks.convergence.notConverged(w.now, this.endSafety, ok ? "" : this.lastWhy)
      this.livenessConvergedMs = Number.NaN
    }
    checks.deadlines.sample(w.now, checks.view, coord.servingSince())
    checks.liveness.sample(w.now)
    this.starvation()
  }

  /** Starvation: only where nothing prevents the owner from serving, and no fault is active. */
  private starvation(): void {
    const { w, data, members, checks, options } = this.ctx
    if (!(this.liveness || this.faultFree) || w.now < 5_000) return
    const owned = new Map<number, number>()
    for (let s = 0; s < w.S; s++) {
      if (data.readers[s] !== 1) continue
      const pid = data.readerPid[s]!
      owned.set(pid, (owned.get(pid) ?? 0) + 1)
    }
    for (let s = 0; s < w.S; s++) {
      if (data.readers[s] !== 1 || data.backlog(s) === 0) continue
      const p = members.procs[data.readerPid[s]!]!
      const run = p.runs.get(s)
      if (!p.alive || p.paused || run === undefined || run.fenced) continue
      if (!p.leaseValid(w.now) || p.slot.partStore) continue
      const rounds = Math.ceil((owned.get(p.pid) ?? 1) / options.workers)
      const bound = rounds * timing.batchSize * 12 + 3_000
      const since = Math.max(
        data.backlogSince[s]!,
        data.servedAt[s]!,
        data.ownedSince[s]!,
        this.liveness ? this.endSafety : 0,
      )
      checks.starvation.sample(w.now, s, since, bound)
    }
  }

  startLiveness(): void {
    this.liveness = true
    this.changed()
  }

  // ---------------------------------------------------------------- timeline

  openSegment(shard: number, p: Proc): void {
    if (this.ctx.options.timeline !== true) return
    if (this.segments.length >= MAX_SEGMENTS) {
      this.timelineTruncated = true
      return
    }
    const seg: Segment = { shard, member: p.slot.idx, start: this.ctx.w.now, end: Number.NaN }
    this.segments.push(seg)
    this.openSeg.set(shard * 1_048_576 + p.pid, seg)
  }

  closeSegment(shard: number, p: Proc): void {
    const key = shard * 1_048_576 + p.pid
    const seg = this.openSeg.get(key)
    if (seg !== undefined) {
      seg.end = this.ctx.w.now
      this.openSeg.delete(key)
    }
  }

  closeAll(): void {
    for (const seg of this.openSeg.values()) seg.end = this.ctx.w.now
  }
}
