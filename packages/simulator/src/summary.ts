/**
 * The machine-readable summary of a run (`--json`) and its human rendering.
 *
 * @module
 */
import { livenessBoundMs, timing } from "./options.js"
import type { SimResult, TraceLine } from "./Simulation.js"

export interface Summary {
  readonly seed: number
  readonly scenario: string
  readonly members: number
  readonly shards: number
  readonly workers: number
  readonly durationMs: number
  readonly ratePerShard: number
  /** "on": storage refuses stale tokens; "off": safety from the protocol alone. */
  readonly fence: "on" | "off"
  readonly faults: Record<string, number>
  /** No disruptive fault: the run was held to exactness. */
  readonly exact: boolean
  readonly events: number
  readonly virtualMs: number
  readonly wallMs: number
  readonly eventsPerSec: number
  readonly digest: string
  readonly violations: ReadonlyArray<{
    checker: string
    timeMs: number
    shard?: number | undefined
    message: string
  }>
  readonly convergence: {
    readonly episodes: number
    readonly p50Ms: number
    readonly p99Ms: number
    readonly maxMs: number
    readonly p50Heartbeats: number
    readonly p99Heartbeats: number
    readonly maxHeartbeats: number
    /** After faults stopped: time to a balanced assignment (null = not converged). */
    readonly livenessMs: number | null
    readonly livenessBoundMs: number
  }
  /** Rebalance episodes (membership change to balance) after the initial ramp. */
  readonly episodes: number
  readonly shardsMoved: number
  readonly movementLowerBound: number
  readonly produced: number
  readonly acked: number
  readonly handled: number
  readonly duplicates: number
  /** Messages never acknowledged, and the shards they are on. */
  readonly lost: number
  readonly lostShards: number
  readonly fencedReads: number
  readonly fencedAcks: number
  /** Acks storage accepted (fence off) from fenced or replaced lifecycles. */
  readonly zombieAcks: number
  /** How member lifecycles ended in the committed state. */
  readonly lifecycleEnds: Readonly<Record<string, number>>
  readonly storeCommits: number
  readonly staleCommitsRejected: number
  readonly worstStarvationWaitMs: number
  readonly throughputPerShard: {
    readonly minPerSec: number
    readonly meanPerSec: number
    readonly maxPerSec: number
    readonly perShard?: ReadonlyArray<number>
  }
  /**
   * Reshard runs: per key and newer generation reached, how long its
   * consumption paused at the cutover (from the later of its last old
   * acknowledgement and its first new message to that message's delivery).
   */
  readonly keyPause?: {
    readonly keys: number
    readonly p50Ms: number
    readonly p99Ms: number
    readonly maxMs: number
  }
  /** What each fault kind and checker did (paths reached). */
  readonly counters: Readonly<Record<string, number>>
  readonly around?: ReadonlyArray<TraceLine>
}

export const percentile = (sorted: ReadonlyArray<number>, p: number): number => {
  if (sorted.length === 0) return 0
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[i]!
}

const r1 = (x: number) => Math.round(x * 10) / 10

export const summarize = (r: SimResult, wallMs: number): Summary => {
  const conv = [...r.convergenceMs].sort((a, b) => a - b)
  const hb = timing.heartbeatIntervalMs
  const secs = Math.max(1e-9, r.virtualMs / 1000)
  const per = r.ackedPerShard.map((n) => n / secs)
  const o = r.options
  return {
    seed: o.seed,
    scenario: o.scenario,
    members: o.members,
    shards: o.shards,
    workers: o.workers,
    durationMs: o.durationMs,
    ratePerShard: o.ratePerShard,
    fence: o.fence,
    exact: r.exact,
    faults: Object.fromEntries(
      Object.entries(r.faults.intensity)
        .filter(([, v]) => v > 0)
        .map(([k, v]) => [k, Math.round(v * 100) / 100]),
    ),
    events: r.events,
    virtualMs: Math.round(r.virtualMs),
    wallMs: Math.round(wallMs),
    eventsPerSec: Math.round(r.events / Math.max(1e-9, wallMs / 1000)),
    digest: r.digest,
    violations: r.violations.map((v) => ({
      checker: v.checker,
      timeMs: Math.round(v.time),
      shard: v.shard,
      message: v.message,
    })),
    convergence: {
      episodes: conv.length,
      p50Ms: Math.round(percentile(conv, 50)),
      p99Ms: Math.round(percentile(conv, 99)),
      maxMs: Math.round(conv[conv.length - 1] ?? 0),
      p50Heartbeats: r1(percentile(conv, 50) / hb),
      p99Heartbeats: r1(percentile(conv, 99) / hb),
      maxHeartbeats: r1((conv[conv.length - 1] ?? 0) / hb),
      livenessMs:
        r.livenessConvergedMs === undefined || Number.isNaN(r.livenessConvergedMs)
          ? null
          : Math.round(r.livenessConvergedMs),
      livenessBoundMs,
    },
    episodes: r.episodes,
    shardsMoved: r.shardsMoved,
    movementLowerBound: r.movementLowerBound,
    produced: r.produced,
    acked: r.acked,
    handled: r.handled,
    duplicates: r.duplicates,
    lost: r.lost,
    lostShards: r.lostShards,
    fencedReads: r.fencedReads,
    fencedAcks: r.fencedAcks,
    zombieAcks: r.zombieAcks,
    lifecycleEnds: r.lifecycleEnds,
    storeCommits: r.commits,
    staleCommitsRejected: r.staleCommitsRejected,
    worstStarvationWaitMs: Math.round(r.worstStarvationWaitMs),
    throughputPerShard: {
      minPerSec: r1(Math.min(...per)),
      meanPerSec: r1(per.reduce((a, b) => a + b, 0) / Math.max(1, per.length)),
      maxPerSec: r1(Math.max(...per)),
      ...(per.length <= 1024 ? { perShard: per.map(r1) } : {}),
    },
    ...(r.keyPausesMs.length > 0
      ? {
          keyPause: ((p) => ({
            keys: p.length,
            p50Ms: r1(percentile(p, 50)),
            p99Ms: r1(percentile(p, 99)),
            maxMs: r1(p[p.length - 1]!),
          }))([...r.keyPausesMs].sort((a, b) => a - b)),
        }
      : {}),
    counters: Object.fromEntries(Object.entries(r.counters).sort(([a], [b]) => (a < b ? -1 : 1))),
    ...(r.around.length > 0 ? { around: r.around } : {}),
  }
}

export const formatTrace = (lines: ReadonlyArray<TraceLine>): string =>
  lines
    .map((l) => `  ${l.time.toFixed(3).padStart(12)}ms  ${l.event.padEnd(15)} a=${l.a} b=${l.b}`)
    .join("\n")

export const formatSummary = (s: Summary): string => {
  const c = s.convergence
  const lines = [
    `scenario ${s.scenario}  seed ${s.seed}  members ${s.members}  shards ${s.shards}  workers ${s.workers}  rate ${s.ratePerShard}/s  storage fence ${s.fence}${s.exact ? "  (exact run)" : ""}`,
    `faults   ${
      Object.keys(s.faults).length === 0
        ? "none"
        : Object.entries(s.faults)
            .map(([k, v]) => `${k}=${v}`)
            .join(" ")
    }`,
    `events   ${s.events.toLocaleString("en-US")} in ${(s.virtualMs / 1000).toFixed(1)}s virtual, ${s.wallMs}ms wall (${s.eventsPerSec.toLocaleString("en-US")} events/s)  digest ${s.digest}`,
    `messages produced ${s.produced}, acked ${s.acked}, handled ${s.handled}, duplicates ${s.duplicates}, lost ${s.lost}${s.lost > 0 ? ` (on ${s.lostShards} shards)` : ""}`,
    `fencing  reads refused ${s.fencedReads}, acks refused ${s.fencedAcks}, zombie acks accepted ${s.zombieAcks}; store commits ${s.storeCommits}, stale commits rejected ${s.staleCommitsRejected}`,
    `ends     ${
      Object.entries(s.lifecycleEnds)
        .filter(([, v]) => v > 0)
        .map(([k, v]) => `${k.replace("Member", "").toLowerCase()} ${v}`)
        .join(", ") || "none"
    }`,
    `converge ${c.episodes} episodes, p50 ${c.p50Ms}ms (${c.p50Heartbeats} hb), p99 ${c.p99Ms}ms (${c.p99Heartbeats} hb), max ${c.maxMs}ms (${c.maxHeartbeats} hb); after faults: ${c.livenessMs === null ? "NOT CONVERGED" : `${c.livenessMs}ms`} (bound ${c.livenessBoundMs}ms)`,
    `moved    ${s.shardsMoved} shards in ${s.episodes} episodes (lower bound ${s.movementLowerBound})`,
    `shards   throughput min ${s.throughputPerShard.minPerSec}/s mean ${s.throughputPerShard.meanPerSec}/s max ${s.throughputPerShard.maxPerSec}/s; worst starvation wait ${s.worstStarvationWaitMs}ms`,
    ...(s.keyPause === undefined
      ? []
      : [
          `reshard  key pause at the cutover: ${s.keyPause.keys} keys, p50 ${s.keyPause.p50Ms}ms, p99 ${s.keyPause.p99Ms}ms, max ${s.keyPause.maxMs}ms`,
        ]),
    `result   ${s.violations.length === 0 ? "OK: no violations" : `${s.violations.length} VIOLATION(S)`}`,
  ]
  for (const v of s.violations.slice(0, 10))
    lines.push(`  [${v.checker}] at ${v.timeMs}ms: ${v.message}`)
  return lines.join("\n")
}
