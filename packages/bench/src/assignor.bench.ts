/** The assignor benchmark: sticky assignor vs effect's HashRing vs round robin. */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { movementLowerBound, stickyAssign } from "@shardline/core"
import { add, configure, suite } from "benny"
import { hashRingAssign, hashRingShards, makeRing, roundRobin } from "./baselines.js"
import type { Operation } from "./metrics.js"
import { balance, countMoved, scenario } from "./metrics.js"
import type { Algorithm, AlgorithmResult, AssignorReport, CaseResult } from "./report.js"
import { algorithms, renderMarkdown } from "./report.js"

export interface CaseSpec {
  readonly shards: number
  readonly members: number
  readonly operations: ReadonlyArray<Operation>
}

export const fullCases: ReadonlyArray<CaseSpec> = [
  { shards: 256, members: 10, operations: ["initial", "join", "leave"] },
  { shards: 1_024, members: 100, operations: ["initial", "join", "leave"] },
  { shards: 10_000, members: 1_000, operations: ["initial", "join", "leave"] },
  { shards: 10_000, members: 2_000, operations: ["initial", "join", "leave"] },
  { shards: 100_000, members: 10_000, operations: ["join", "leave"] },
]

export const quickCases: ReadonlyArray<CaseSpec> = [
  { shards: 256, members: 10, operations: ["initial", "join", "leave"] },
  { shards: 1_024, members: 100, operations: ["join"] },
]

interface Prepared {
  /** The timed call. */
  readonly run: () => unknown
  /** Owners after the change, computed once outside the timing. */
  readonly owners: ReadonlyArray<string | null>
  readonly previous: ReadonlyArray<string | null>
}

const prepare = (
  algorithm: Algorithm,
  shards: number,
  before: ReadonlyArray<string>,
  after: ReadonlyArray<string>,
): Prepared => {
  switch (algorithm) {
    case "sticky": {
      const previous =
        before.length === 0
          ? []
          : stickyAssign({ shardCount: shards, members: before.map((id) => ({ id })) })
      const input = { shardCount: shards, members: after.map((id) => ({ id })), previous }
      return { run: () => stickyAssign(input), owners: stickyAssign(input), previous }
    }
    case "hashRing": {
      const previous = before.length === 0 ? [] : hashRingAssign(makeRing(before), shards)
      const ring = makeRing(after)
      return {
        run: () => hashRingShards(ring, shards),
        owners: hashRingAssign(ring, shards),
        previous,
      }
    }
    case "roundRobin": {
      const previous = before.length === 0 ? [] : roundRobin(shards, before)
      return { run: () => roundRobin(shards, after), owners: roundRobin(shards, after), previous }
    }
  }
}

export interface BenchOptions {
  readonly cases: ReadonlyArray<CaseSpec>
  readonly minSamples: number
  readonly maxTime: number
  readonly outDir: URL
}

export const runAssignorBench = async (options: BenchOptions): Promise<AssignorReport> => {
  const results: Array<CaseResult> = []
  for (const spec of options.cases) {
    for (const operation of spec.operations) {
      const { before, after } = scenario(operation, spec.members)
      const name = `assignor ${spec.shards}x${spec.members} ${operation}`
      const metrics = new Map<
        Algorithm,
        Omit<AlgorithmResult, "opsPerSec" | "meanMs" | "rmePercent" | "samples">
      >()
      const runs = algorithms.map((algorithm) => {
        const prepared = prepare(algorithm, spec.shards, before, after)
        metrics.set(algorithm, {
          moved: countMoved(prepared.previous, prepared.owners),
          lowerBound: movementLowerBound({
            shardCount: spec.shards,
            members: after.map((id) => ({ id })),
            previous: prepared.previous,
          }),
          balance: balance(after, prepared.owners),
        })
        return add(algorithm, () => {
          prepared.run()
        })
      })
      const summary = await suite(
        name,
        configure({ cases: { minSamples: options.minSamples, maxTime: options.maxTime } }),
        ...runs,
      )
      const byAlgorithm = {} as Record<Algorithm, AlgorithmResult>
      for (const algorithm of algorithms) {
        const r = summary.results.find((x) => x.name === algorithm)
        if (r === undefined) throw new Error(`${name}: no result for ${algorithm}`)
        byAlgorithm[algorithm] = {
          opsPerSec: r.ops,
          meanMs: r.details.mean * 1000,
          rmePercent: r.details.relativeMarginOfError,
          samples: r.samples,
          ...metrics.get(algorithm)!,
        }
      }
      results.push({ shards: spec.shards, members: spec.members, operation, results: byAlgorithm })
    }
  }
  const report: AssignorReport = {
    suite: "assignor",
    date: new Date().toISOString(),
    node: process.version,
    cpus: cpus().length,
    benny: { minSamples: options.minSamples, maxTime: options.maxTime },
    cases: results,
  }
  mkdirSync(options.outDir, { recursive: true })
  writeFileSync(new URL("assignor.json", options.outDir), `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(new URL("assignor.md", options.outDir), renderMarkdown(report))
  return report
}
