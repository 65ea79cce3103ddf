/**
 * Storage-level ownership: never two processes with an *effective* batch on
 * one shard at the same instant. The data plane reports every batch whose
 * read storage accepted and whose ack storage accepted, as an interval
 * `[read, ack)`; intervals of different processes on one shard must not
 * overlap. With the storage fence on, a zombie refused by the token check
 * does not count (the fence is the second line that makes it safe); with it
 * off, every batch counts, so this checker then sees what the protocol alone
 * lets happen (the intent checker sees it in both modes).
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

/** Intervals kept per shard (of distinct processes); the oldest-ending one makes room. */
const KEPT = 4

export class OwnershipChecker {
  /**
   * Per shard: the last few effective intervals of distinct processes, in
   * arrival order, in flat typed arrays (slot `shard * KEPT + i`) rather than
   * objects: every acknowledged batch scans its shard's list, and objects
   * scattered over the heap made it a cache miss per interval
   * (docs/simulator.md, Speed).
   */
  private readonly procs: Int32Array
  private readonly starts: Float64Array
  private readonly ends: Float64Array
  private readonly lengths: Uint8Array

  constructor(
    shards: number,
    private readonly report: Report,
    private readonly label: (proc: number) => string = (p) => `#${p}`,
  ) {
    this.procs = new Int32Array(shards * KEPT)
    this.starts = new Float64Array(shards * KEPT)
    this.ends = new Float64Array(shards * KEPT)
    this.lengths = new Uint8Array(shards)
  }

  batch(shard: number, proc: number, start: number, end: number): void {
    const base = shard * KEPT
    const n = this.lengths[shard]!
    const { procs, starts, ends } = this
    let mine = -1
    for (let i = base; i < base + n; i++) {
      if (procs[i] === proc) {
        if (mine < 0) mine = i
        continue
      }
      if (starts[i]! < end && start < ends[i]!) {
        this.report({
          checker: "ownership",
          time: Math.max(start, starts[i]!),
          shard,
          message: `shard ${shard}: ${this.label(procs[i]!)} [${fmt(starts[i]!)}, ${fmt(ends[i]!)}) and ${this.label(proc)} [${fmt(start)}, ${fmt(end)}) had effective batches (read and ack accepted by storage) at once`,
        })
        return
      }
    }
    if (mine >= 0) {
      starts[mine] = start
      ends[mine] = end
      return
    }
    let at = base + n
    if (n >= KEPT) {
      // evict the interval that ended first (the first of equals), keeping the order
      let oldest = base
      for (let i = base + 1; i < base + n; i++) if (ends[i]! < ends[oldest]!) oldest = i
      for (let i = oldest; i < base + n - 1; i++) {
        procs[i] = procs[i + 1]!
        starts[i] = starts[i + 1]!
        ends[i] = ends[i + 1]!
      }
      at = base + n - 1
    } else this.lengths[shard] = n + 1
    procs[at] = proc
    starts[at] = start
    ends[at] = end
  }
}
