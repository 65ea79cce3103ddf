/**
 * Fan-out (docs/simulator.md, Fan-out; docs/runtime.md, "Ack policies and
 * other groups"): more consumer groups on the same shard streams. Group 0
 * is the simulated group (the real protocol's members, reading through the
 * data plane); groups 1.. are plain readers, each polling every shard at
 * its own period, with stuck spells (reads, no acks) and stopped spells (no
 * reads) drawn from the seed. Every group's ack mode is drawn per seed:
 * `ack` (XACK) or `xackdel` (acknowledged, and deleted once every group is
 * done with the entry, decided by core's `AckPolicy.doneByEveryGroup`, the
 * rule the memory port and the Redis scripts follow). A deleted entry is
 * gone for every group: a read skips it, a pending one is dropped. The
 * fan-out checker judges each deletion and each group's end state.
 *
 * @module
 */
import { AckPolicy } from "@shardline/core"
import type { Ctx } from "./ctx.js"
import { Prng } from "./engine/Prng.js"
import { timing } from "./options.js"
import { K } from "./world.js"

export type AckMode = "ack" | "xackdel"

interface Reader {
  readonly cursor: Int32Array
  readonly pel: Array<Set<number>>
  readonly mode: AckMode
  readonly periodMs: number
  /** Until when it reads without acknowledging, or does not read at all. */
  stuckUntil: number
  stoppedUntil: number
}

export class FanOut {
  readonly groups: number
  /** Group 0's ack mode (the simulated group's members). */
  readonly modeA: AckMode
  private readonly readers: Array<Reader> = []
  /** Per shard: deleted entry ids. */
  private readonly deleted: Array<Set<number>>
  private readonly rng: Prng
  private quiet = false
  deletions = 0

  constructor(private readonly ctx: Ctx) {
    const G = Math.max(1, ctx.options.groups ?? 1)
    this.groups = G
    this.rng = Prng.stream(ctx.options.seed, "fanout")
    const S = ctx.w.S
    this.deleted = Array.from({ length: G > 1 ? S : 0 }, () => new Set<number>())
    this.modeA = G > 1 && this.rng.chance(0.5) ? "xackdel" : "ack"
    for (let g = 1; g < G; g++)
      this.readers.push({
        cursor: new Int32Array(S),
        pel: Array.from({ length: S }, () => new Set<number>()),
        mode: this.rng.chance(0.5) ? "xackdel" : "ack",
        periodMs: this.rng.range(20, 400),
        stuckUntil: 0,
        stoppedUntil: 0,
      })
  }

  get enabled(): boolean {
    return this.groups > 1
  }

  /** Modes of every group, group 0 first. */
  modes(): Array<AckMode> {
    return [this.modeA, ...this.readers.map((r) => r.mode)]
  }

  start(): void {
    for (let g = 1; g < this.groups; g++) this.ctx.w.q.push(this.rng.range(0, 500), K.FANOUT, g)
  }

  /** Liveness phase: fan-out readers are neither stuck nor stopped any more. */
  heal(): void {
    this.quiet = true
    for (const r of this.readers) {
      r.stuckUntil = 0
      r.stoppedUntil = 0
    }
  }

  isDeleted(shard: number, id: number): boolean {
    return this.enabled && this.deleted[shard]!.has(id)
  }

  /** Group `g`'s reader polls every shard once. */
  poll(g: number): void {
    const r = this.readers[g - 1]!
    const { w, checks } = this.ctx
    w.q.push(w.now + r.periodMs, K.FANOUT, g)
    if (!this.quiet && w.now >= r.stuckUntil && w.now >= r.stoppedUntil && this.rng.chance(0.01)) {
      const spell = this.rng.range(2_000, 20_000)
      if (this.rng.chance(0.5)) r.stuckUntil = w.now + spell
      else r.stoppedUntil = w.now + spell
      w.count("fanout:spells")
    }
    if (w.now < r.stoppedUntil) return
    const acking = w.now >= r.stuckUntil
    const B = timing.batchSize
    for (let s = 0; s < r.pel.length; s++) {
      const produced = checks.messages.producedOn(s)
      const pel = r.pel[s]!
      const ids: Array<number> = []
      for (const id of pel) {
        if (ids.length >= B) break
        if (this.deleted[s]!.has(id)) {
          // XREADGROUP returns a deleted pending entry without its fields.
          pel.delete(id)
          w.count("fanout:pendingDeleted")
          continue
        }
        ids.push(id)
      }
      while (ids.length < B && r.cursor[s]! < produced) {
        const id = r.cursor[s]!
        r.cursor[s] = id + 1
        if (this.deleted[s]!.has(id)) continue
        pel.add(id)
        ids.push(id)
      }
      if (!acking) continue
      for (const id of ids) {
        pel.delete(id)
        checks.fanout.acked(g, s, id)
        if (r.mode === "xackdel") this.maybeDelete(s, id)
      }
    }
  }

  /** Group 0 acknowledged `ids` of `shard` (with its members' mode). */
  ackedByA(shard: number, ids: ReadonlyArray<number>): void {
    if (!this.enabled) return
    for (const id of ids) {
      this.ctx.checks.fanout.acked(0, shard, id)
      if (this.modeA === "xackdel") this.maybeDelete(shard, id)
    }
  }

  private maybeDelete(shard: number, id: number): void {
    if (this.deleted[shard]!.has(id)) return
    const data = this.ctx.data
    const done = AckPolicy.doneByEveryGroup([-1, ...this.readers.keys()], (g) =>
      g < 0
        ? id < data.cursor[shard]! && !data.pel[shard]!.has(id)
        : id < this.readers[g]!.cursor[shard]! && !this.readers[g]!.pel[shard]!.has(id),
    )
    if (!done) return
    this.deleted[shard]!.add(id)
    this.deletions++
    this.ctx.checks.fanout.deleted(shard, id, this.ctx.w.now)
  }
}
