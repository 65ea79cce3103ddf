#!/usr/bin/env node
/**
 * shardline-sim: run a scenario, replay a seed, check determinism, write an
 * HTML report, or run a swarm of seeds over worker threads.
 *
 *   node packages/simulator/dist/cli.js <scenario> [--seed N] [--members N]
 *     [--shards N] [--workers N] [--duration 60s] [--faults swarm|none|a,b]
 *     [--rate N] [--fence on|off] [--json] [--report out.html] [--check-determinism]
 *     [--swarm N --from-seed S --jobs J]
 *
 * Exit code: 0 when every checker passed, 1 on a violation or a
 * determinism mismatch, 2 on bad arguments.
 *
 * @module
 */
import { writeFileSync } from "node:fs"
import { type Cli, parseArgs, UsageError, usage } from "./args.js"
import type { Scenario, SimOptions } from "./options.js"
import { renderReport } from "./report.js"
import { replayCommand, runSeed } from "./run.js"
import { formatSummary, formatTrace, type Summary } from "./summary.js"
import { runSwarm } from "./swarm.js"

const progressBar = () => {
  if (!process.stderr.isTTY) return undefined
  return (f: number) => {
    const width = 40
    const n = Math.round(f * width)
    process.stderr.write(`\r[${"#".repeat(n)}${".".repeat(width - n)}] ${Math.round(f * 100)}%`)
  }
}

/** Clears the progress bar's line so the summary starts on a clean line. */
const clearProgress = () => {
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[K")
}

const printFailure = (s: Summary, options: SimOptions) => {
  console.error(`\nFAILED seed ${s.seed}: ${s.violations.length} violation(s)`)
  for (const v of s.violations.slice(0, 10))
    console.error(`  [${v.checker}] at ${v.timeMs}ms: ${v.message}`)
  console.error(`replay: ${replayCommand(ofSummary(s, options))}`)
  if (s.around !== undefined)
    console.error(`events around the first violation:\n${formatTrace(s.around)}`)
}

/** The options a summary was run with (its seed and shape over the base). */
const ofSummary = (s: Summary, base: SimOptions): SimOptions => ({
  ...base,
  seed: s.seed,
  scenario: s.scenario as Scenario,
  members: s.members,
  shards: s.shards,
  workers: s.workers,
  ratePerShard: s.ratePerShard,
})

const main = async (): Promise<number> => {
  let cli: Cli
  try {
    cli = parseArgs(process.argv.slice(2))
  } catch (e) {
    if (e instanceof UsageError) {
      if (e.message !== "") console.error(`error: ${e.message}`)
      console.error(usage)
      return e.message === "" ? 0 : 2
    }
    throw e
  }
  const o = cli.options
  if (cli.swarm !== undefined) {
    const tty = process.stderr.isTTY === true
    const report = await runSwarm({
      base: o,
      fromSeed: cli.fromSeed,
      count: cli.swarm,
      jobs: cli.jobs,
      fixed: cli.fixed,
      onResult: (s, done) => {
        if (tty) process.stderr.write(`\r${done}/${cli.swarm} seeds`)
        if (s.violations.length > 0 && !cli.json) printFailure(s, o)
      },
    })
    if (tty) process.stderr.write("\n")
    const out = {
      seeds: report.seeds,
      fromSeed: cli.fromSeed,
      scenario: o.scenario,
      failedSeeds: report.failed.map((s) => s.seed).sort((a, b) => a - b),
      events: report.events,
      wallMs: report.wallMs,
      eventsPerSec: Math.round(report.events / Math.max(1e-9, report.wallMs / 1000)),
      failures: report.failed.map((s) => ({
        seed: s.seed,
        violations: s.violations,
        replay: replayCommand(ofSummary(s, o)),
      })),
    }
    if (cli.json) console.log(JSON.stringify(out, null, 2))
    else
      console.log(
        `swarm ${o.scenario}: ${report.seeds} seeds from ${cli.fromSeed}, ${out.failedSeeds.length} failed, ${report.events.toLocaleString("en-US")} events in ${report.wallMs}ms (${out.eventsPerSec.toLocaleString("en-US")} events/s)`,
      )
    return out.failedSeeds.length > 0 ? 1 : 0
  }

  const run = runSeed({ ...o, timeline: cli.report !== undefined }, { progress: progressBar() })
  clearProgress()
  let exit = run.summary.violations.length > 0 ? 1 : 0
  let determinism: { ok: boolean; first: string; second: string } | undefined
  if (cli.determinism) {
    const again = runSeed({ ...o, timeline: cli.report !== undefined }, { progress: progressBar() })
    clearProgress()
    determinism = {
      ok:
        again.summary.digest === run.summary.digest && again.summary.events === run.summary.events,
      first: run.summary.digest,
      second: again.summary.digest,
    }
    if (!determinism.ok) exit = 1
  }
  if (cli.report !== undefined) writeFileSync(cli.report, renderReport(run.result, run.summary))
  if (cli.json) {
    console.log(
      JSON.stringify(
        { ...run.summary, replay: replayCommand(o), ...(determinism ? { determinism } : {}) },
        null,
        2,
      ),
    )
  } else {
    console.log(formatSummary(run.summary))
    if (determinism)
      console.log(
        determinism.ok
          ? `determinism OK: two runs, digest ${determinism.first}`
          : `DETERMINISM MISMATCH: ${determinism.first} vs ${determinism.second}`,
      )
    if (cli.report !== undefined) console.log(`report written to ${cli.report}`)
  }
  if (run.summary.violations.length > 0) printFailure(run.summary, o)
  return exit
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (e) => {
    console.error(e)
    process.exitCode = 1
  },
)
