/**
 * No starvation: a shard with backlog whose owner is able to serve it (alive,
 * not paused, lease valid, store reachable) is served within its bound.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class StarvationChecker {
  worstWaitMs = 0

  constructor(private readonly report: Report) {}

  /** `waitingSince`: the later of backlog start, ownership start and last service. */
  sample(time: number, shard: number, waitingSince: number, boundMs: number): void {
    const wait = time - waitingSince
    if (wait > this.worstWaitMs) this.worstWaitMs = wait
    if (wait > boundMs)
      this.report({
        checker: "starvation",
        time,
        shard,
        message: `shard ${shard}: backlog unserved for ${fmt(wait)} (bound ${fmt(boundMs)})`,
      })
  }
}
