/**
 * Exact runs (no fault that legitimately fences, expires or duplicates: see
 * `DISRUPTIVE_FAULTS`) must be exact, not merely safe: zero duplicates, zero
 * fenced reads and acks, zero fences, expiries, replacements, rejoins and
 * self-fences, zero stale commits; every rebalance episode converges within
 * the scenario's tight bound (in heartbeat intervals) of its last membership
 * change, and an episode of one membership change moves exactly the
 * assignor's lower bound.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export interface RunTotals {
  readonly duplicates: number
  readonly fencedReads: number
  readonly fencedAcks: number
  readonly fences: number
  readonly expiries: number
  readonly replaced: number
  readonly rejoined: number
  readonly selfFences: number
  readonly staleCommits: number
}

export class ExactnessChecker {
  episodes = 0
  singleChangeEpisodes = 0
  /** Longest time from an episode's last change to balance. */
  worstMs = 0

  constructor(
    private readonly report: Report,
    private readonly boundMs: number,
  ) {}

  episode(
    time: number,
    durationMs: number,
    changes: number,
    moved: number,
    lowerBound: number | undefined,
  ): void {
    this.episodes++
    if (durationMs > this.worstMs) this.worstMs = durationMs
    if (durationMs > this.boundMs)
      this.report({
        checker: "exactness",
        time,
        message: `a rebalance of ${changes} membership change(s) took ${fmt(durationMs)} after the last change to converge (bound ${fmt(this.boundMs)})`,
      })
    if (changes !== 1 || lowerBound === undefined) return
    this.singleChangeEpisodes++
    if (moved !== lowerBound)
      this.report({
        checker: "exactness",
        time,
        message: `a rebalance of one membership change moved ${moved} shards, lower bound ${lowerBound}`,
      })
  }

  finish(time: number, t: RunTotals): void {
    const bad = Object.entries(t).filter(([, v]) => v !== 0)
    if (bad.length > 0)
      this.report({
        checker: "exactness",
        time,
        message: `a run without disruptive faults must be exact, got ${bad.map(([k, v]) => `${k} ${v}`).join(", ")}`,
      })
  }
}
