/**
 * What the failover benchmark measures (src/failover.ts; docs/runtime.md,
 * "Measured on Redis"), as pure functions over the lines its member
 * processes wrote (src/failoverMember.ts): who coordinates, how long the
 * shards of the pods a fault did not hit went without a batch, what the fault
 * cost them, how fast a stopping pod's shards reached their next owners.
 */

export interface Line {
  /** Real ms, comparable across the processes of one machine. */
  readonly t: number
  readonly ev: string
  /** Which process wrote it (set by the parent). */
  readonly proc: string
  readonly shard?: number
  readonly shards?: ReadonlyArray<number>
  readonly count?: number
  readonly stopMs?: number
  readonly reason?: string
}

/** Events that cost a pod shards or its membership. */
export const COLLATERAL: ReadonlySet<string> = new Set([
  "revoking",
  "revoked",
  "lost",
  "leaseLost",
  "joined",
])

/** Is the process's latest coordinator event an election? */
export const isCoordinator = (lines: ReadonlyArray<Line>): boolean => {
  for (let i = lines.length - 1; i >= 0; i--) {
    const ev = lines[i]!.ev
    if (ev === "coordinatorElected") return true
    if (ev === "coordinatorResigned") return false
  }
  return false
}

/** Shards one process's lines say it owns at `at`. */
export const ownedAt = (lines: ReadonlyArray<Line>, at: number): Set<number> => {
  const owned = new Set<number>()
  for (const l of lines) {
    if (l.t > at) break
    if (l.ev === "assigned") owned.add(l.shard!)
    else if (l.ev === "revoked") owned.delete(l.shard!)
    else if (l.ev === "lost") for (const s of l.shards ?? []) owned.delete(s)
  }
  return owned
}

/** Shards one process owned at `from` and did not let go of until `to`. */
export const heldThroughout = (
  lines: ReadonlyArray<Line>,
  from: number,
  to: number,
): Array<number> => {
  const owned = ownedAt(lines, from)
  for (const l of lines) {
    if (l.t <= from || l.t > to) continue
    if (l.ev === "revoking" || l.ev === "revoked") owned.delete(l.shard!)
    else if (l.ev === "lost" || l.ev === "leaseLost")
      for (const s of l.shards ?? []) owned.delete(s)
  }
  return [...owned].sort((a, b) => a - b)
}

/**
 * The longest time between two batches of one shard by its owner, over the
 * shards each process held throughout [from, to], counting batches from
 * `leadMs` before `from` (a stall that begins at the fault counts whole).
 */
export const longestGap = (
  procs: ReadonlyArray<ReadonlyArray<Line>>,
  from: number,
  to: number,
  leadMs = 1_000,
): number => {
  let worst = 0
  for (const lines of procs)
    for (const shard of heldThroughout(lines, from, to)) {
      let previous: number | undefined
      for (const l of lines) {
        if (l.ev !== "batch" || l.shard !== shard || l.t < from - leadMs || l.t > to) continue
        if (previous !== undefined) worst = Math.max(worst, l.t - previous)
        previous = l.t
      }
    }
  return worst
}

/** Lines with a collateral event at or after `from` (before `to`). */
export const collateral = (
  lines: ReadonlyArray<Line>,
  from: number,
  to = Number.POSITIVE_INFINITY,
): Array<Line> => lines.filter((l) => COLLATERAL.has(l.ev) && l.t >= from && l.t <= to)

export interface Handoff {
  readonly shard: number
  /** The old owner's `revoked` (drained) to the next owner's `assigned` (its read loop starts). */
  readonly assignedMs: number
  /** The old owner's `revoked` to the next owner's first batch of the shard. */
  readonly firstReadMs: number
}

/** Each shard `proc` revoked at or after `from`, to its next owner (another process). */
export const handoffsFrom = (
  lines: ReadonlyArray<Line>,
  proc: string,
  from: number,
): Array<Handoff> => {
  const firstAfter = (t: number, p: (l: Line) => boolean) =>
    lines
      .filter((l) => l.t >= t && p(l))
      .reduce<Line | undefined>((a, l) => (a === undefined || l.t < a.t ? l : a), undefined)
  const out: Array<Handoff> = []
  for (const r of lines) {
    if (r.proc !== proc || r.ev !== "revoked" || r.t < from) continue
    const assigned = firstAfter(
      r.t,
      (l) => l.proc !== proc && l.ev === "assigned" && l.shard === r.shard,
    )
    if (assigned === undefined) continue
    const read = firstAfter(
      assigned.t,
      (l) => l.proc === assigned.proc && l.ev === "batch" && l.shard === r.shard,
    )
    out.push({
      shard: r.shard!,
      assignedMs: assigned.t - r.t,
      firstReadMs: read === undefined ? Number.NaN : read.t - r.t,
    })
  }
  return out
}

/** The q-quantile (nearest rank) of `xs`, NaN left out; NaN when empty. */
export const quantile = (xs: ReadonlyArray<number>, q: number): number => {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!
}
