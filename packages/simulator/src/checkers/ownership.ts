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

interface Interval {
  proc: number
  start: number
  end: number
}

export class OwnershipChecker {
  /** Per shard: the last few effective intervals of distinct processes. */
  private readonly recent: Array<Array<Interval>>

  constructor(
    shards: number,
    private readonly report: Report,
    private readonly label: (proc: number) => string = (p) => `#${p}`,
  ) {
    this.recent = Array.from({ length: shards }, () => [])
  }

  batch(shard: number, proc: number, start: number, end: number): void {
    const list = this.recent[shard]!
    for (const iv of list) {
      if (iv.proc !== proc && iv.start < end && start < iv.end) {
        this.report({
          checker: "ownership",
          time: Math.max(start, iv.start),
          shard,
          message: `shard ${shard}: ${this.label(iv.proc)} [${fmt(iv.start)}, ${fmt(iv.end)}) and ${this.label(proc)} [${fmt(start)}, ${fmt(end)}) had effective batches (read and ack accepted by storage) at once`,
        })
        return
      }
    }
    const mine = list.find((iv) => iv.proc === proc)
    if (mine !== undefined) {
      mine.start = start
      mine.end = end
    } else {
      if (list.length >= 4) {
        let oldest = 0
        for (let i = 1; i < list.length; i++) if (list[i]!.end < list[oldest]!.end) oldest = i
        list.splice(oldest, 1)
      }
      list.push({ proc, start, end })
    }
  }
}
