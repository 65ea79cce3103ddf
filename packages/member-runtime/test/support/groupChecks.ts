/**
 * Checks over the lines member processes wrote (test/support/processes.ts):
 * per-key order, every message handled, ownership intervals per shard.
 * Pure functions over the collected lines; each returns the violations it
 * found (empty when the rule held), so a failure prints what went wrong.
 */
import type { Line } from "./processes.js"

export const begins = (lines: ReadonlyArray<Line>) => lines.filter((l) => l.ev === "begin")

/**
 * An entry's identity, `<shard>/<id>`: stream ids are per shard stream, and
 * entries appended in one millisecond to two shards share an id.
 */
export const entryOf = (shard: unknown, id: unknown): string => `${String(shard)}/${String(id)}`
/** The entry a `begin` / `done` / `aborted` line is about. */
export const entryOfLine = (l: Line): string => entryOf(l.shard, l.id)
export const dones = (lines: ReadonlyArray<Line>) => lines.filter((l) => l.ev === "done")

/**
 * What happened to an entry, for a failure message: every batch that held
 * it, every start, end and abort of it, and every ownership event of its
 * shard, by process, with times relative to `t0` (ms).
 */
export const historyOf = (entry: string, lines: ReadonlyArray<Line>, t0: number): string => {
  const [shard, id] = entry.split("/") as [string, string]
  const about = (l: Line) =>
    String(l.shard) === shard &&
    (l.ev === "batch"
      ? (l.ids as ReadonlyArray<string>).includes(id)
      : ["begin", "done", "aborted"].includes(l.ev as string)
        ? l.id === id
        : ["assigned", "revoking", "revoked", "lost"].includes(l.ev as string))
  return lines
    .filter(about)
    .sort((a, b) => a.t - b.t)
    .map(
      (l) =>
        `${l.proc} ${l.ev} at ${Math.round(l.t - t0)} ms${l.dc === undefined ? "" : ` dc ${l.dc}`}`,
    )
    .join("; ")
}

/**
 * Handler starts by a process that was no longer the shard's latest owner:
 * a newer `assigned` of the shard to another process came before it (a
 * fenced process finishing a batch it read before the fence).
 */
export const isZombie = (lines: ReadonlyArray<Line>): ((begin: Line) => boolean) => {
  const assigned = lines
    .filter((l) => l.ev === "assigned")
    .map((l) => ({ proc: l.proc, shard: l.shard as number, at: l.at as number }))
    .sort((a, b) => a.at - b.at)
  return (begin) => {
    let latest: string | undefined
    for (const a of assigned) {
      if (a.at > begin.t) break
      if (a.shard === begin.shard) latest = a.proc
    }
    return latest !== undefined && latest !== begin.proc
  }
}

/**
 * Per-key order on every handled message: for each key, the handler starts
 * (`begin` lines of every process, by time) of the shard's current owner
 * walk the key's produced sequence in order, where a re-delivery may restart
 * from an earlier message (the pending entries of a crashed or fenced owner)
 * but never skip one: each start is the next message after the previous
 * start, or a rewind to an earlier one. Starts by a fenced process after
 * another took the shard (`isZombie`) are left out: its reads and acks are
 * refused, and the scenarios check that the new owner handled those
 * messages too.
 */
export const perKeyOrderViolations = (
  lines: ReadonlyArray<Line>,
  producedByKey: ReadonlyMap<string, ReadonlyArray<number>>,
): Array<string> => {
  const out: Array<string> = []
  const byKey = new Map<string, Array<Line>>()
  const zombie = isZombie(lines)
  for (const l of begins(lines)) {
    if (zombie(l)) continue
    const key = l.key as string
    const list = byKey.get(key) ?? []
    list.push(l)
    byKey.set(key, list)
  }
  for (const [key, list] of byKey) {
    const produced = producedByKey.get(key) ?? []
    const position = new Map(produced.map((n, i) => [n, i]))
    list.sort((a, b) => a.t - b.t)
    let last = -1
    for (const l of list) {
      const pos = position.get(l.n as number)
      if (pos === undefined) {
        out.push(`${key}: n=${l.n} was never produced`)
        continue
      }
      if (pos > last + 1)
        out.push(
          `${key}: ${l.proc} started n=${l.n} (#${pos}) after #${last} (n=${produced[last] ?? "none"}): skipped ${pos - last - 1}`,
        )
      last = pos
    }
  }
  return out
}

/** Messages (by `n`) no process finished handling as the shard's current owner (see `isZombie`). */
export const unhandled = (lines: ReadonlyArray<Line>, total: number): Array<number> => {
  const zombie = isZombie(lines)
  const done = new Set(
    dones(lines)
      .filter((l) => !zombie(l))
      .map((l) => l.n as number),
  )
  const out: Array<number> = []
  for (let n = 0; n < total; n++) if (!done.has(n)) out.push(n)
  return out
}

export interface Interval {
  readonly proc: string
  readonly shard: number
  readonly start: number
  /** Infinity while open (or when the process died without a word). */
  readonly end: number
}

/**
 * Ownership intervals per shard, from each process's events: from
 * `assigned` (its `at`) to the first of `revoked` of that shard, `lost`
 * naming it, `left`, or the graceful `exit` line.
 */
export const ownershipIntervals = (lines: ReadonlyArray<Line>): Array<Interval> => {
  const out: Array<Interval> = []
  const byProc = new Map<string, Array<Line>>()
  for (const l of lines) {
    const list = byProc.get(l.proc) ?? []
    list.push(l)
    byProc.set(l.proc, list)
  }
  for (const [proc, list] of byProc) {
    const open = new Map<number, number>()
    const close = (shard: number, at: number) => {
      const start = open.get(shard)
      if (start === undefined) return
      open.delete(shard)
      out.push({ proc, shard, start, end: at })
    }
    for (const l of list) {
      const at = (l.at as number | undefined) ?? l.t
      if (l.ev === "assigned") open.set(l.shard as number, at)
      else if (l.ev === "revoked") close(l.shard as number, at)
      else if (l.ev === "lost") for (const s of l.shards as Array<number>) close(s, at)
      else if (l.ev === "left" || l.ev === "exit") for (const s of [...open.keys()]) close(s, at)
    }
    for (const [shard, start] of open)
      out.push({ proc, shard, start, end: Number.POSITIVE_INFINITY })
  }
  return out
}

/** Two processes owning one shard at once (intervals of different processes overlapping). */
export const overlappingOwners = (intervals: ReadonlyArray<Interval>): Array<string> => {
  const out: Array<string> = []
  for (let i = 0; i < intervals.length; i++)
    for (let j = i + 1; j < intervals.length; j++) {
      const a = intervals[i]!
      const b = intervals[j]!
      if (a.shard !== b.shard || a.proc === b.proc) continue
      if (a.start < b.end && b.start < a.end)
        out.push(
          `shard ${a.shard}: ${a.proc} [${a.start}, ${a.end}] overlaps ${b.proc} [${b.start}, ${b.end}]`,
        )
    }
  return out
}

/** Handler starts outside every ownership interval of their process for that shard (1 ms slack: `at` is whole ms). */
export const handledOutsideOwnership = (
  lines: ReadonlyArray<Line>,
  intervals: ReadonlyArray<Interval>,
): Array<string> =>
  begins(lines)
    .filter(
      (l) =>
        !intervals.some(
          (i) => i.proc === l.proc && i.shard === l.shard && l.t >= i.start && l.t <= i.end + 1,
        ),
    )
    .map((l) => `${l.proc} started ${l.id} of shard ${l.shard} at ${l.t} without owning it`)

/** The shards a process owns now, from its events. */
export const ownedNow = (lines: ReadonlyArray<Line>): Set<number> => {
  const owned = new Set<number>()
  for (const l of lines) {
    if (l.ev === "assigned") owned.add(l.shard as number)
    else if (l.ev === "revoked") owned.delete(l.shard as number)
    else if (l.ev === "lost") for (const s of l.shards as Array<number>) owned.delete(s)
    else if (l.ev === "left" || l.ev === "exit") owned.clear()
  }
  return owned
}

/**
 * What the shard streams hold against what a producer process logged
 * (test/redis/procs/producer.ts): the confirmed sends (`n`) missing from
 * every stream, the entries stored more than once, and per key the stored
 * order against the send order (`producedByKey`: each key's `n`s in the
 * order they were first sent). `byShard`: each shard stream's entries in
 * stream order.
 */
export const storedChecks = (
  confirmed: ReadonlySet<number>,
  producedByKey: ReadonlyMap<string, ReadonlyArray<number>>,
  byShard: ReadonlyArray<ReadonlyArray<{ readonly n: number; readonly key: string }>>,
): { missing: Array<number>; duplicates: number; outOfOrder: Array<string> } => {
  const stored = new Set(byShard.flatMap((entries) => entries.map((e) => e.n)))
  const missing = [...confirmed].filter((n) => !stored.has(n)).sort((a, b) => a - b)
  const duplicates = byShard.reduce((sum, e) => sum + e.length, 0) - stored.size
  const position = new Map<number, number>()
  for (const list of producedByKey.values()) for (const [i, n] of list.entries()) position.set(n, i)
  const outOfOrder: Array<string> = []
  for (const entries of byShard) {
    const last = new Map<string, number>()
    for (const e of entries) {
      const pos = position.get(e.n) ?? -1
      if (pos < (last.get(e.key) ?? -1))
        outOfOrder.push(`${e.key}: n=${e.n} stored after a later send`)
      last.set(e.key, pos)
    }
  }
  return { missing, duplicates, outOfOrder }
}
