/**
 * Checkers: independent observers of what the simulated world did. They see
 * only data-plane facts (fenced reads, handled and acknowledged messages),
 * store commits and member-side ownership, never the protocol's own state,
 * so a bug in the coordinator or member cannot hide itself.
 *
 * Each checker is a small class fed with plain facts, so hand-made traces can
 * exercise it directly (see `test/checkers.test.ts`).
 *
 * @module
 */

export type CheckerName =
  | "ownership"
  | "message-loss"
  | "starvation"
  | "store-revision"
  | "convergence"

export interface Violation {
  readonly checker: CheckerName
  readonly time: number
  readonly shard?: number | undefined
  readonly message: string
}

export type Report = (v: Violation) => void

/**
 * Never two members reading or processing the same shard at the same instant.
 *
 * The data plane reports every *effective* batch: read with a fence token that
 * storage accepted, and whose handling was acknowledged with a token storage
 * still accepted. A zombie's batch refused by the token check did not take
 * effect and is not ownership. Intervals are half-open `[start, end)`.
 */
export class OwnershipChecker {
  // Per shard: the last few effective intervals of distinct members.
  private readonly recent: Array<Array<{ member: number; start: number; end: number }>>

  constructor(
    shards: number,
    private readonly report: Report,
  ) {
    this.recent = Array.from({ length: shards }, () => [])
  }

  batch(shard: number, member: number, start: number, end: number): void {
    const list = this.recent[shard]!
    for (const iv of list) {
      if (iv.member !== member && iv.start < end && start < iv.end) {
        this.report({
          checker: "ownership",
          time: Math.max(start, iv.start),
          shard,
          message: `shard ${shard}: members #${iv.member} [${fmt(iv.start)}, ${fmt(iv.end)}) and #${member} [${fmt(start)}, ${fmt(end)}) read/processed concurrently`,
        })
        return
      }
    }
    const mine = list.find((iv) => iv.member === member)
    if (mine !== undefined) {
      mine.start = start
      mine.end = end
    } else {
      if (list.length >= 4) {
        let oldest = 0
        for (let i = 1; i < list.length; i++) if (list[i]!.end < list[oldest]!.end) oldest = i
        list.splice(oldest, 1)
      }
      list.push({ member, start, end })
    }
  }
}

/**
 * No message lost: every produced message is acknowledged at least once by
 * the end of the liveness phase. Duplicates (handled more than once) are
 * allowed and counted.
 */
export class MessageChecker {
  private produced: Int32Array
  private acked: Array<Uint8Array>
  private handled: Array<Uint8Array>
  duplicates = 0
  handledTotal = 0
  ackedTotal = 0

  constructor(shards: number) {
    this.produced = new Int32Array(shards)
    this.acked = Array.from({ length: shards }, () => new Uint8Array(64))
    this.handled = Array.from({ length: shards }, () => new Uint8Array(64))
  }

  produce(shard: number): number {
    const id = this.produced[shard]!
    this.produced[shard] = id + 1
    ensure(this.acked, shard, id)
    ensure(this.handled, shard, id)
    return id
  }

  handle(shard: number, id: number): void {
    const h = this.handled[shard]!
    if (h[id]! > 0) this.duplicates++
    if (h[id]! < 255) h[id] = h[id]! + 1
    this.handledTotal++
  }

  ack(shard: number, id: number): void {
    const a = this.acked[shard]!
    if (a[id] === 0) this.ackedTotal++
    if (a[id]! < 255) a[id] = a[id]! + 1
  }

  producedOn(shard: number): number {
    return this.produced[shard]!
  }

  /** Reports every shard with unacknowledged messages (at most `limit` reports). */
  finish(time: number, report: Report, limit = 5): number {
    let lost = 0
    let reported = 0
    for (let s = 0; s < this.produced.length; s++) {
      const a = this.acked[s]!
      let first = -1
      let count = 0
      for (let id = 0; id < this.produced[s]!; id++)
        if (a[id] === 0) {
          if (first < 0) first = id
          count++
        }
      if (count > 0) {
        lost += count
        if (reported++ < limit)
          report({
            checker: "message-loss",
            time,
            shard: s,
            message: `shard ${s}: ${count} message(s) never acknowledged (first id ${first})`,
          })
      }
    }
    return lost
  }
}

const ensure = (arrays: Array<Uint8Array>, shard: number, id: number): void => {
  const cur = arrays[shard]!
  if (id < cur.length) return
  const next = new Uint8Array(Math.max(cur.length * 2, id + 1))
  next.set(cur)
  arrays[shard] = next
}

/**
 * No starvation: a shard with backlog whose owner is able to serve it (alive,
 * not paused, lease valid, store reachable) is served within its bound.
 */
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

/**
 * storeRevision is never overwritten stale: every accepted write names the
 * revision it read, that revision is the current one, and the new revision is
 * exactly one more. Rejected stale writes are counted.
 */
export class RevisionChecker {
  private current = 0
  accepted = 0
  rejected = 0

  constructor(private readonly report: Report) {}

  commit(time: number, expected: number, written: number): void {
    if (expected !== this.current || written !== this.current + 1)
      this.report({
        checker: "store-revision",
        time,
        message: `store write based on revision ${expected} stored ${written} over revision ${this.current}`,
      })
    this.current = written
    this.accepted++
  }

  reject(): void {
    this.rejected++
  }
}

/**
 * Convergence: member-side ownership is balanced (every shard read by exactly
 * one live member, counts differ by at most one). Measures every unbalanced
 * stretch; in the liveness phase the group must converge within its bound.
 */
export class ConvergenceChecker {
  readonly durations: Array<number> = []
  private unbalancedSince: number | undefined = undefined
  convergedAt: number | undefined = undefined

  constructor(private readonly report: Report) {}

  /** A change that may unbalance the group (membership, fault). */
  change(time: number): void {
    if (this.unbalancedSince === undefined) this.unbalancedSince = time
  }

  sample(time: number, balanced: boolean): boolean {
    if (balanced) {
      if (this.unbalancedSince !== undefined && time > this.unbalancedSince)
        this.durations.push(time - this.unbalancedSince)
      this.unbalancedSince = undefined
      return true
    }
    if (this.unbalancedSince === undefined) this.unbalancedSince = time
    return false
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
 * Is the member-side ownership balanced? `owners[s]` = members reading shard s
 * (count), `ownerOf[s]` = one of them; `live` = ids of live members.
 */
export const balanced = (
  shardOwnerCount: ArrayLike<number>,
  shardOwner: ArrayLike<number>,
  live: ReadonlyArray<number>,
): { ok: boolean; why: string } => {
  if (live.length === 0) return { ok: true, why: "" }
  const counts = new Map<number, number>()
  for (const m of live) counts.set(m, 0)
  for (let s = 0; s < shardOwnerCount.length; s++) {
    if (shardOwnerCount[s] !== 1)
      return { ok: false, why: `shard ${s} has ${shardOwnerCount[s]} readers` }
    const m = shardOwner[s]!
    const c = counts.get(m)
    if (c === undefined) return { ok: false, why: `shard ${s} read by non-live member #${m}` }
    counts.set(m, c + 1)
  }
  let min = Number.POSITIVE_INFINITY
  let max = 0
  for (const c of counts.values()) {
    if (c < min) min = c
    if (c > max) max = c
  }
  return max - min <= 1
    ? { ok: true, why: "" }
    : { ok: false, why: `imbalance max ${max} min ${min}` }
}

export const fmt = (ms: number): string =>
  ms >= 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms)}ms`
