/**
 * The workload: Poisson arrivals over shards with skewed rates (a few hot
 * shards), and per-message processing times around a per-shard mean. Arrivals
 * stop 15 s before the end so the last messages can be acknowledged.
 *
 * @module
 */
import type { Ctx } from "./ctx.js"
import type { WorkloadOptions } from "./options.js"
import { K } from "./world.js"

export class Workload {
  constructor(
    private readonly ctx: Ctx,
    readonly options: WorkloadOptions,
    private readonly endArrivals: number,
  ) {}

  /** Arrivals per second: keyed runs (reshard scenarios) produce `ratePerShard` x the first count. */
  private rate(): number {
    const { layouts, options } = this.ctx
    return layouts.enabled ? options.ratePerShard * options.shards : this.options.totalRate
  }

  start(): void {
    const { w } = this.ctx
    if (this.rate() > 0) w.q.push(w.rng.arrivals.exp(1000 / this.rate()), K.PRODUCE)
  }

  produce(): void {
    if (this.ctx.layouts.enabled) {
      this.produceKeyed()
      return
    }
    const { w, data, members } = this.ctx
    const { cumRate, totalRate } = this.options
    const x = w.rng.arrivals.next() * totalRate
    let lo = 0
    let hi = w.S - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (cumRate[mid]! > x) hi = mid
      else lo = mid + 1
    }
    data.produced(lo)
    const reader = data.readerPid[lo]!
    if (reader >= 0) members.wakeFor(reader, lo)
    const next = w.now + w.rng.arrivals.exp(1000 / totalRate)
    if (next < this.endArrivals) w.q.push(next, K.PRODUCE)
  }

  /**
   * Reshard scenarios: a message for a random key (a tenth of the keys are
   * hot, drawing half the traffic), routed by its producer's layout; the
   * next arrival is scheduled unless it is one of a `burst`.
   */
  produceKeyed(burst = false): void {
    const { w, data, members, layouts, checks } = this.ctx
    const keys = layouts.keys.length
    const r = w.rng.arrivals
    const hot = Math.max(1, Math.floor(keys / 10))
    const key = r.chance(0.5) ? r.int(hot) : r.int(keys)
    const { shard, generation } = layouts.route(key)
    const id = data.produced(shard, key)
    checks.keyOrder?.produced(shard, id, key, generation, w.now)
    const reader = data.readerPid[shard]!
    if (reader >= 0) members.wakeFor(reader, shard)
    if (burst) return
    const next = w.now + r.exp(1000 / this.rate())
    if (next < this.endArrivals) w.q.push(next, K.PRODUCE)
  }

  /** Processing time of a batch of `n` messages on `shard`. */
  processing(shard: number, n: number): number {
    const mean = this.options.procMeanMs[shard]!
    const r = this.ctx.w.rng.processing
    let d = 0
    for (let j = 0; j < n; j++) d += mean * r.range(0.5, 1.5)
    return d
  }
}
