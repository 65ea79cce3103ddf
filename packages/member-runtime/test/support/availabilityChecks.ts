/**
 * Measurements over the lines member processes wrote, for the availability
 * scenarios (test/redis/availability.test.ts; docs/protocol.md rules 20-22):
 * who coordinates, what a fault cost the processes it did not hit, how long
 * their shards went unhandled, how fast the successor served, how fast a
 * stopping process's shards reached their next owner. Pure functions over
 * the collected lines (`t`: real ms, comparable across processes).
 */
import type { Line } from "./processes.js"

/** Events that cost a process shards or its membership: none may hit a process the fault did not hit. */
export const COLLATERAL = new Set([
  "revoking",
  "revoked",
  "lost",
  "leaseLost",
  "joined",
  "superseded",
  "staleOwner",
  "handlerStuck",
])

/** The real time on the processes' scale (`t` of their lines). */
export const realNow = (): number => performance.timeOrigin + performance.now()

/** Is the process's latest coordinator event an election? */
export const isCoordinator = (lines: ReadonlyArray<Line>): boolean => {
  for (let i = lines.length - 1; i >= 0; i--) {
    const ev = lines[i]!.ev
    if (ev === "coordinatorElected") return true
    if (ev === "coordinatorResigned") return false
  }
  return false
}

/** Lines with `ev` in `evs` and `from <= t <= to`, as `proc ev shard(s) reason` strings. */
export const eventsBetween = (
  lines: ReadonlyArray<Line>,
  evs: ReadonlySet<string>,
  from: number,
  to = Number.POSITIVE_INFINITY,
): Array<string> =>
  lines
    .filter((l) => evs.has(l.ev) && l.t >= from && l.t <= to)
    .map(
      (l) =>
        `${l.proc} ${l.ev}${l.shard === undefined ? "" : ` shard ${String(l.shard)}`}${
          l.shards === undefined ? "" : ` shards ${JSON.stringify(l.shards)}`
        }${l.reason === undefined ? "" : ` (${String(l.reason)})`} at +${Math.round(l.t - from)} ms`,
    )

/** The first line at or after `from` matching `predicate`, over several processes' lines. */
export const firstAfter = (
  lines: ReadonlyArray<Line>,
  from: number,
  predicate: (l: Line) => boolean,
): Line | undefined =>
  lines
    .filter((l) => l.t >= from && predicate(l))
    .reduce<Line | undefined>((a, l) => (a === undefined || l.t < a.t ? l : a), undefined)

/** Shards a process owned continuously from `from` to `to` (assigned before, not let go in between). */
export const heldThroughout = (
  lines: ReadonlyArray<Line>,
  from: number,
  to: number,
): Array<number> => {
  const owned = new Set<number>()
  for (const l of lines) {
    if (l.t > from) break
    if (l.ev === "assigned") owned.add(l.shard as number)
    else if (l.ev === "revoked") owned.delete(l.shard as number)
    else if (l.ev === "lost") for (const s of l.shards as Array<number>) owned.delete(s)
  }
  for (const l of lines) {
    if (l.t <= from || l.t > to) continue
    if (l.ev === "revoking" || l.ev === "revoked") owned.delete(l.shard as number)
    else if (l.ev === "lost" || l.ev === "leaseLost")
      for (const s of l.shards as Array<number>) owned.delete(s)
  }
  return [...owned].sort((a, b) => a - b)
}

export interface Gap {
  readonly ms: number
  readonly proc: string
  readonly shard: number
  /** When the gap began, relative to the window's `from`. */
  readonly atMs: number
}

/**
 * The longest time between two handler starts of one shard by its one
 * owner, over the shards each process held throughout [from, to], counting
 * the handling from `leadMs` before `from` (so a stall that began at the
 * fault counts whole). With a producer writing every ~50 ms to every shard,
 * a healthy shard's gaps are tens of ms.
 */
export const longestGap = (
  procs: ReadonlyArray<{ readonly proc: string; readonly lines: ReadonlyArray<Line> }>,
  from: number,
  to: number,
  leadMs = 1_000,
): Gap | undefined => {
  let worst: Gap | undefined
  for (const p of procs)
    for (const shard of heldThroughout(p.lines, from, to)) {
      const starts = p.lines
        .filter((l) => l.ev === "begin" && l.shard === shard && l.t >= from - leadMs && l.t <= to)
        .map((l) => l.t)
      for (let i = 1; i < starts.length; i++) {
        const ms = starts[i]! - starts[i - 1]!
        if (worst === undefined || ms > worst.ms)
          worst = { ms, proc: p.proc, shard, atMs: starts[i - 1]! - from }
      }
    }
  return worst
}

/**
 * The longest time one shard went without a handler start, whoever owned
 * it (a shard whose owner's lease lapsed and came back counts whole),
 * counting from `leadMs` before `from`.
 */
export const longestShardGap = (
  lines: ReadonlyArray<Line>,
  shards: number,
  from: number,
  to: number,
  leadMs = 1_000,
): Gap | undefined => {
  let worst: Gap | undefined
  for (let shard = 0; shard < shards; shard++) {
    const starts = lines
      .filter((l) => l.ev === "begin" && l.shard === shard && l.t >= from - leadMs && l.t <= to)
      .sort((a, b) => a.t - b.t)
    for (let i = 1; i < starts.length; i++) {
      const ms = starts[i]!.t - starts[i - 1]!.t
      if (worst === undefined || ms > worst.ms)
        worst = { ms, proc: starts[i]!.proc, shard, atMs: starts[i - 1]!.t - from }
    }
  }
  return worst
}

export interface Handoff {
  readonly shard: number
  readonly to: string
  /** The old owner's `revoking` (told to let go) to its `revoked` (drained). */
  readonly drainMs: number
  /** The old owner's `revoked` to the next owner's `assigned` (its read loop starts). */
  readonly assignedMs: number
  /** The old owner's `revoked` to the next owner's first batch of the shard (its first read that returned entries). */
  readonly firstReadMs: number
}

/** Each shard `proc` revoked at or after `from`, to its next owner among `lines`. */
export const handoffsFrom = (
  lines: ReadonlyArray<Line>,
  proc: string,
  from: number,
): Array<Handoff> => {
  const out: Array<Handoff> = []
  for (const r of lines) {
    if (r.proc !== proc || r.ev !== "revoked" || r.t < from) continue
    const shard = r.shard as number
    const revoking = [...lines]
      .reverse()
      .find((l) => l.proc === proc && l.ev === "revoking" && l.shard === shard && l.t <= r.t)
    const assigned = firstAfter(
      lines,
      r.t,
      (l) => l.proc !== proc && l.ev === "assigned" && l.shard === shard,
    )
    if (assigned === undefined) continue
    const read = firstAfter(
      lines,
      assigned.t,
      (l) => l.proc === assigned.proc && l.ev === "batch" && l.shard === shard,
    )
    out.push({
      shard,
      to: assigned.proc,
      drainMs: revoking === undefined ? Number.NaN : r.t - revoking.t,
      assignedMs: assigned.t - r.t,
      firstReadMs: read === undefined ? Number.NaN : read.t - r.t,
    })
  }
  return out
}

/** The q-quantile (nearest rank) of `xs`; NaN when empty. */
export const quantile = (xs: ReadonlyArray<number>, q: number): number => {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!
}

/** Lines about the handling of single messages: left out of a trail. */
const MESSAGE_LINES = new Set(["batch", "begin", "done", "aborted"])

/**
 * Everything but message handling that `procs` logged from `from` on, one
 * line each (`proc +ms {fields}`), in time order: what a failed check prints,
 * so a rare outcome (a rejoin) can be read from the run that met it.
 */
export const trail = (
  procs: ReadonlyArray<{ readonly lines: ReadonlyArray<Line> }>,
  from: number,
): string =>
  procs
    .flatMap((p) => p.lines.filter((l) => l.t >= from && !MESSAGE_LINES.has(l.ev)))
    .sort((a, b) => a.t - b.t)
    .map((l) => {
      const { proc, t, ...rest } = l
      return `${proc} +${Math.round(t - from)} ${JSON.stringify(rest)}`
    })
    .join("\n")

/** `joined` lines per process: 1 means it never rejoined. */
export const joinsPerProc = (
  procs: ReadonlyArray<{ readonly proc: string; readonly lines: ReadonlyArray<Line> }>,
): Record<string, number> =>
  Object.fromEntries(procs.map((p) => [p.proc, p.lines.filter((l) => l.ev === "joined").length]))
