/**
 * Convergence: member-side ownership is balanced (every shard read by exactly
 * one live member, each member's count at its weighted quota: floor or ceil
 * of `shards * weight / total weight`, as docs/assignor.md states). Measures
 * every unbalanced stretch; after faults stop the group must converge within
 * its bound.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class ConvergenceChecker {
  readonly durations: Array<number> = []
  private unbalancedSince: number | undefined = undefined

  constructor(private readonly report: Report) {}

  /** A change that may unbalance the group (membership, fault). */
  change(time: number): void {
    if (this.unbalancedSince === undefined) this.unbalancedSince = time
  }

  get open(): boolean {
    return this.unbalancedSince !== undefined
  }

  /** The group is balanced (or not) at `time`; returns the stretch that just ended, if any. */
  sample(time: number, balanced: boolean): number | undefined {
    if (balanced) {
      const since = this.unbalancedSince
      this.unbalancedSince = undefined
      if (since !== undefined && time > since) {
        this.durations.push(time - since)
        return time - since
      }
      return since === undefined ? undefined : 0
    }
    if (this.unbalancedSince === undefined) this.unbalancedSince = time
    return undefined
  }

  /** Called at the liveness deadline when the group is still not balanced. */
  notConverged(time: number, since: number, why: string): void {
    this.report({
      checker: "convergence",
      time,
      message: `no balanced assignment ${fmt(time - since)} after faults stopped: ${why}`,
    })
  }
}

/**
 * Is the member-side ownership balanced? `readers[s]` = processes reading
 * shard s, `readerOf[s]` = the member (slot) of one of them; `live` = the live
 * members in id order with their weights. With `expect` (reshard runs), only
 * shards with `expect[s] = 1` (the stream's current generation) are to be
 * read, once each; every other shard must have no reader.
 */
export const balanced = (
  readers: ArrayLike<number>,
  readerOf: ArrayLike<number>,
  live: ReadonlyArray<number>,
  weights?: ArrayLike<number>,
  expect?: ArrayLike<number>,
): { ok: boolean; why: string } => {
  if (live.length === 0) return { ok: true, why: "" }
  // Counts per member index in typed arrays, not a Map: evaluated at every
  // reader change while the group is unbalanced, over thousands of members
  // (docs/simulator.md, Speed).
  let size = 0
  for (const m of live) if (m >= size) size = m + 1
  for (let s = 0; s < readerOf.length; s++) if (readerOf[s]! >= size) size = readerOf[s]! + 1
  const isLive = new Uint8Array(size)
  const counts = new Int32Array(size)
  for (const m of live) isLive[m] = 1
  let S = 0
  for (let s = 0; s < readers.length; s++) {
    if (expect !== undefined && expect[s] === 0) {
      if (readers[s] !== 0)
        return { ok: false, why: `shard ${s} of an earlier generation has ${readers[s]} readers` }
      continue
    }
    S++
    if (readers[s] !== 1) return { ok: false, why: `shard ${s} has ${readers[s]} readers` }
    const m = readerOf[s]!
    if (m < 0 || isLive[m] !== 1)
      return { ok: false, why: `shard ${s} read by non-live member #${m}` }
    counts[m]!++
  }
  let total = 0
  for (const m of live) total += weights?.[m] ?? 1
  for (const m of live) {
    const q = (S * (weights?.[m] ?? 1)) / total
    const c = counts[m]!
    // floor/ceil of the quota, tolerant of rounding noise (relative: quotas can be 1e-11).
    if (c < Math.floor(q * (1 + 1e-13)) || c > Math.ceil(q * (1 - 1e-13)))
      return {
        ok: false,
        why: `member #${m} reads ${c} shards, quota ${q.toFixed(2)}`,
      }
  }
  return { ok: true, why: "" }
}
