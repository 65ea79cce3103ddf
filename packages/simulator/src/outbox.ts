/**
 * The cluster outbox relay (the `outbox-relay` fault with `--tx`;
 * docs/exactly-once.md, "Redis Cluster and the outbox"; docs/simulator.md,
 * Transactions). A transactional commit cannot write another shard's slot,
 * so each message's send goes to its shard's **outbox** inside the commit,
 * and the shard's owner **relays** it: before each read (here: after each
 * commit, when a loop starts, when a sealed shard's loop asks whether it is
 * drained, and after a backoff when a relay failed) it reads the outbox and
 * delivers every entry in outbox order to its routed shard of the target
 * stream, then removes it. Modelled on the product's scripts:
 * - **deliver** (`outbox-deliver.lua`): the target's mark of the last
 *   outbox id delivered from this outbox is checked first (delivered
 *   already: nothing), then the target's seal (sealed: re-route), then the
 *   append and the mark, in one atomic step;
 * - **re-route** (`outbox-reroute.lua`): an entry whose target was sealed
 *   goes to its key's shard of the newer layout, recorded in the source's
 *   slot, so two relayers never deliver it to two shards; when the entry is
 *   gone (another relayer delivered and removed it, its record with it) the
 *   answer is -1, "gone", and the relayer skips it;
 * - a relay stops at its first failure (per-key order) and is tried again
 *   after a backoff.
 *
 * The fault: relays fail for 0.5-4 s at a time (a target node down, a send
 * refused), and once per run the target stream reshards while they fail
 * (its shards sealed, a new layout of twice as many), so entries waiting
 * in outboxes are re-routed; a relayer may read the outbox and pause
 * 0.2-3 s before it delivers (a GC pause), while the shard's next owner, or
 * its own next relay, relays the same entries: two relayers on one outbox.
 * In reshard scenarios a sealed shard is drained only once its outbox is
 * empty (docs/exactly-once.md, "Resharding and the outbox"), and the
 * relay failures are aimed at the seal.
 *
 * BROKEN ON PURPOSE (test-only): `outbox-gone-as-shard` reads the re-route's
 * -1 ("entry already gone") as a shard number (the product bug of issue 32,
 * item 9); `drain-with-outbox` calls a sealed shard drained whatever its
 * outbox holds.
 *
 * @module
 */
import type { OutboxChecker } from "./checkers/outbox.js"
import type { Ctx } from "./ctx.js"
import { Prng } from "./engine/Prng.js"
import { FAULT_KINDS } from "./options.js"
import { K } from "./world.js"

/** One send in an outbox: its id (rising per outbox), its key and its routed target shard. */
export interface OutboxEntry {
  readonly id: number
  readonly source: number
  readonly key: number
  /** The key's sequence number in production order (the per-key order checker's input). */
  readonly seq: number
  /** The target shard its commit routed it to (the entry's field). */
  readonly target: number
}

/** The target stream's layouts: generation g has `counts[g]` shards numbered after the previous ones'. */
const TARGET_SHARDS = 4

export class Outbox {
  private readonly queues: Array<Array<OutboxEntry>>
  /** The re-route records, in the source's slot: entry id -> the shard it goes to now. */
  private readonly routes = new Map<number, number>()
  /** The targets' marks: `${target}:${source}` -> the last outbox id delivered from that outbox. */
  private readonly marks = new Map<string, number>()
  private readonly seqOfKey = new Map<number, number>()
  private nextId = 1
  private readonly bases: Array<number> = [0]
  private readonly counts: Array<number> = [TARGET_SHARDS]
  private readonly sealedTargets = new Set<number>()
  /** Relays fail until this time (a target node down, a send refused). */
  private failUntil = 0
  private readonly rng: Prng
  private readonly goneAsShard: boolean
  private readonly drainWithOutbox: boolean
  private targetResharded = false
  private readonly backoff: Float64Array

  constructor(
    private readonly ctx: Ctx,
    readonly checker: OutboxChecker,
  ) {
    this.queues = Array.from({ length: ctx.w.S }, () => [])
    this.backoff = new Float64Array(ctx.w.S)
    // its own stream: the outbox shifts no other draw
    this.rng = Prng.stream(ctx.options.seed, "outbox")
    this.goneAsShard = ctx.options.broken === "outbox-gone-as-shard"
    this.drainWithOutbox = ctx.options.broken === "drain-with-outbox"
  }

  /** The target stream's shard for `key` in its newest layout. */
  private route(key: number): number {
    const g = this.counts.length - 1
    return this.bases[g]! + (key % this.counts[g]!)
  }

  /** Is `target` a shard the target stream's layouts route `key` to, in `target`'s layout or a newer one? */
  routedTargets(key: number, from: number): ReadonlyArray<number> {
    const out: Array<number> = []
    for (let g = 0; g < this.counts.length; g++) {
      const t = this.bases[g]! + (key % this.counts[g]!)
      if (t >= from || out.length > 0) out.push(t)
    }
    return out
  }

  /** Entries waiting in `shard`'s outbox. */
  pending(shard: number): number {
    return this.queues[shard]!.length
  }

  /** A sealed shard may be called drained: its outbox is empty (BROKEN ON PURPOSE: whatever it holds). */
  drainable(shard: number): boolean {
    if (this.drainWithOutbox) return true
    return this.queues[shard]!.length === 0
  }

  /** A commit of `shard` wrote the sends of `ids` (with their keys) to its outbox. */
  committed(shard: number, ids: ReadonlyArray<number>, keyOf: (id: number) => number): void {
    const q = this.queues[shard]!
    for (const id of ids) {
      const key = keyOf(id)
      const seq = this.seqOfKey.get(key) ?? 0
      this.seqOfKey.set(key, seq + 1)
      const entry = { id: this.nextId++, source: shard, key, seq, target: this.route(key) }
      q.push(entry)
      this.checker.committed(entry)
    }
  }

  /** Process `pid` (read loop generation `loops`) relays `shard`'s outbox now. */
  kick(pid: number, shard: number, loops: number): void {
    if (this.queues[shard]!.length === 0) return
    const w = this.ctx.w
    w.q.push(w.now, K.OUTBOX_RELAY, pid, shard, loops)
  }

  /**
   * A relay of `shard`'s outbox by process `pid`: only while it reads the
   * shard with a valid lease. It reads the outbox; with the fault, it may
   * pause before it delivers what it read (another relayer meanwhile).
   */
  relay(pid: number, shard: number, loops: number): void {
    const { w, members, store } = this.ctx
    const p = members.procs[pid]!
    if (!p.alive || p.loops !== loops) return
    const run = p.runs.get(shard)
    // a loop that ended: the shard's next owner relays when its loop starts
    if (run === undefined || run.fenced) return
    const q = this.queues[shard]!
    if (q.length === 0) return
    // no lease, no storage, or the relay fails: the loop tries again later
    if (!p.leaseValid(w.now) || p.slot.partStore || store.down || w.now < this.failUntil) {
      w.count("outbox:relayFailed")
      // tried again after a backoff, doubling from 100 ms to at most 1 s
      const next = Math.min(1_000, Math.max(100, 2 * this.backoff[shard]!))
      this.backoff[shard] = next
      w.q.push(w.now + next, K.OUTBOX_RELAY, pid, shard, loops)
      return
    }
    this.backoff[shard] = 0
    const snapshot = q.slice()
    if (this.on && !this.ctx.sampler.liveness && this.rng.chance(0.1)) {
      // read, then paused before delivering: the next relayer may deliver these first
      w.count("outbox:relayerPaused")
      const pause = this.rng.range(200, 3_000)
      w.q.push(w.now + pause, K.OUTBOX_RELAY, -1, shard, snapshot)
      return
    }
    this.deliverAll(shard, snapshot)
    if (this.ctx.data.sealed[shard]) w.q.push(w.now, K.EXHAUSTED, pid, shard, loops)
  }

  /** A paused relayer wakes and delivers what it read before its pause (whoever owns the shard now). */
  resumed(shard: number, snapshot: ReadonlyArray<OutboxEntry>): void {
    this.ctx.w.count("outbox:pausedRelayerResumed")
    this.deliverAll(shard, snapshot)
  }

  private get on(): boolean {
    return this.ctx.mix.intensity["outbox-relay"] > 0
  }

  /** Delivers `entries` (read from `shard`'s outbox) in order, each then removed; stops at a failure. */
  private deliverAll(shard: number, entries: ReadonlyArray<OutboxEntry>): void {
    const w = this.ctx.w
    for (const e of entries) {
      if (w.now < this.failUntil || this.ctx.store.down) {
        w.count("outbox:relayStoppedAtFailure")
        return
      }
      let target = e.target
      for (let hops = 0; hops < 4; hops++) {
        const outcome = this.deliver(e, target)
        if (outcome !== "sealed") break
        w.count("outbox:targetSealed")
        const to = this.reroute(e, target, this.route(e.key))
        if (to === -1) {
          w.count("outbox:rerouteGone")
          // BROKEN ON PURPOSE with `outbox-gone-as-shard`: -1 taken for a shard
          if (!this.goneAsShard) break
        }
        target = to
      }
      this.remove(shard, e.id)
    }
  }

  /** `outbox-deliver.lua`: the mark first, then the seal, then the append and the mark. */
  private deliver(e: OutboxEntry, target: number): "appended" | "already" | "sealed" {
    const mark = `${target}:${e.source}`
    const last = this.marks.get(mark)
    if (last !== undefined && last >= e.id) {
      this.ctx.w.count("outbox:alreadyDelivered")
      return "already"
    }
    if (this.sealedTargets.has(target)) return "sealed"
    this.marks.set(mark, e.id)
    this.ctx.w.count("outbox:delivered")
    this.checker.delivered(this.ctx.w.now, e, target)
    return "appended"
  }

  /** `outbox-reroute.lua`: the shard the entry goes to now, or -1 when it is gone. */
  private reroute(e: OutboxEntry, from: number, to: number): number {
    let current = this.routes.get(e.id)
    if (current === undefined) {
      if (!this.queues[e.source]!.some((x) => x.id === e.id)) return -1
      current = e.target
    }
    if (current !== from) {
      this.ctx.w.count("outbox:rerouteFound")
      return current
    }
    this.routes.set(e.id, to)
    this.ctx.w.count("outbox:rerouted")
    return to
  }

  /** The entry leaves the outbox, its re-route record with it. */
  private remove(shard: number, id: number): void {
    const q = this.queues[shard]!
    const i = q.findIndex((x) => x.id === id)
    if (i >= 0) q.splice(i, 1)
    this.routes.delete(id)
  }

  /** The fault: relays fail for `ms`; the first time, the target stream reshards meanwhile. */
  failFor(ms: number): void {
    const w = this.ctx.w
    this.failUntil = Math.max(this.failUntil, w.now + ms)
    w.count("outbox:failureEpisodes")
    if (!this.targetResharded) {
      this.targetResharded = true
      this.ctx.faults.open(FAULT_KINDS.indexOf("outbox-relay"), {
        afterMs: ms / 2,
        heal: () => this.reshardTarget(),
      })
    }
  }

  /** The target stream reshards: every shard of its newest layout sealed, a layout of twice as many. */
  reshardTarget(): void {
    const g = this.counts.length - 1
    const base = this.bases[g]!
    const count = this.counts[g]!
    for (let t = base; t < base + count; t++) this.sealedTargets.add(t)
    this.bases.push(base + count)
    this.counts.push(2 * count)
    this.ctx.w.count("outbox:targetResharded")
    this.ctx.w.mark("fault", `target stream resharded ${count} -> ${2 * count}`)
  }

  /** The source stream sealed shards (a reshard): with the fault, relays fail right then. */
  sealedNow(): void {
    if (!this.on || this.ctx.sampler.liveness) return
    this.ctx.w.count("outbox:failureAtSeal")
    this.failFor(this.rng.range(500, 4_000))
  }

  /** Liveness phase: relays work again, and every loop relays what its outbox holds. */
  heal(): void {
    this.failUntil = 0
    for (const p of this.ctx.members.procs)
      if (p.alive) for (const shard of p.runs.keys()) this.kick(p.pid, shard, p.loops)
  }

  /** End of run: what is still waiting in an outbox. */
  stranded(): number {
    let n = 0
    for (const q of this.queues) n += q.length
    return n
  }
}
