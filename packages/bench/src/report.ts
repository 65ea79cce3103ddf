/** Result types of the assignor benchmark and their markdown rendering (pure). */
import type { Operation } from "./metrics.js"

export const algorithms = ["sticky", "hashRing", "roundRobin"] as const
export type Algorithm = (typeof algorithms)[number]

export const algorithmLabel: Record<Algorithm, string> = {
  sticky: "sticky (ours)",
  hashRing: "effect HashRing.getShards",
  roundRobin: "round robin (shard % members)",
}

export interface AlgorithmResult {
  readonly opsPerSec: number
  readonly meanMs: number
  /** Relative margin of error of the mean, in percent. */
  readonly rmePercent: number
  readonly samples: number
  /** Shards moved from this algorithm's own previous assignment. */
  readonly moved: number
  /** `movementLowerBound` for the same previous assignment and members. */
  readonly lowerBound: number
  /** max - min shards per live member. */
  readonly balance: number
}

export interface CaseResult {
  readonly shards: number
  /** Members before the change (the group size the case is named by). */
  readonly members: number
  readonly operation: Operation
  readonly results: Record<Algorithm, AlgorithmResult>
}

export interface AssignorReport {
  readonly suite: "assignor"
  readonly date: string
  readonly node: string
  readonly cpus: number
  readonly benny: { readonly minSamples: number; readonly maxTime: number }
  readonly cases: ReadonlyArray<CaseResult>
}

const fmtMs = (ms: number): string =>
  ms >= 100 ? ms.toFixed(0) : ms >= 1 ? ms.toFixed(2) : ms.toFixed(3)

const fmtTime = (r: AlgorithmResult): string => `${fmtMs(r.meanMs)} ±${r.rmePercent.toFixed(0)}%`

const fmtRatio = (r: number): string => (r >= 10 ? r.toFixed(0) : r.toFixed(1))

const fmtMoved = (r: AlgorithmResult): string => `${r.moved} / ${r.lowerBound}`

/** Speed of `ours` relative to `baseline` (> 1: ours is faster). */
export const speedup = (ours: AlgorithmResult, baseline: AlgorithmResult): number =>
  baseline.meanMs / ours.meanMs

/** The markdown table written to `results/assignor.md`. */
export const renderMarkdown = (report: AssignorReport): string => {
  const lines = [
    "# Assignor benchmark",
    "",
    `Node ${report.node}, ${report.cpus} CPUs, ${report.date}; benny minSamples ${report.benny.minSamples}, maxTime ${report.benny.maxTime}s.`,
    "Command: `pnpm --filter @shardline/bench bench` (or `pnpm bench`).",
    "",
    "Time is the mean per call ± benny's relative margin of error (the machine is shared: expect noise).",
    "Speedup = baseline mean / sticky mean. Moved = shards moved from the",
    "algorithm's own previous assignment / `movementLowerBound` for that previous assignment.",
    "Balance = max - min shards per live member. HashRing time excludes building the ring.",
    "",
    "| shards × members | change | sticky ms | HashRing ms | round robin ms | speedup vs HashRing | speedup vs round robin | moved / lower bound: sticky | HashRing | round robin | balance: sticky | HashRing | round robin |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
  ]
  for (const c of report.cases) {
    const { sticky, hashRing, roundRobin } = c.results
    lines.push(
      `| ${c.shards.toLocaleString("en-US")} × ${c.members.toLocaleString("en-US")} | ${c.operation} | ${fmtTime(sticky)} | ${fmtTime(hashRing)} | ${fmtTime(roundRobin)} | ${fmtRatio(speedup(sticky, hashRing))}× | ${fmtRatio(speedup(sticky, roundRobin))}× | ${fmtMoved(sticky)} | ${fmtMoved(hashRing)} | ${fmtMoved(roundRobin)} | ${sticky.balance} | ${hashRing.balance} | ${roundRobin.balance} |`,
    )
  }
  return `${lines.join("\n")}\n`
}
