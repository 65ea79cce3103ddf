/**
 * Simulator speed (docs/simulator.md, Speed): events/s of the full simulator
 * (real coordinator and member machines, faults, every checker on) against a
 * bare event loop (the same queue and PRNG, a trivial handler) measured in
 * the same process, events/s of a large group (5,000 members x 1,024
 * shards) against a mid-sized one, and wall time of the 5,000 members x
 * 1,024 shards x 1 virtual hour run with the swarm fault mix.
 *
 * @module
 */
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { defaultOptions, EventQueue, Prng, runSeed, type SimOptions } from "@shardline/simulator"

export interface Rate {
  readonly events: number
  readonly wallMs: number
  readonly eventsPerSec: number
  /**
   * CPU time of the whole process (every thread: V8's concurrent collector
   * too) and events per CPU second: on a shared machine a process waiting
   * for a core loses wall time, not CPU time, so these move less with the
   * load than the wall-clock figures.
   */
  readonly cpuMs: number
  readonly eventsPerCpuSec: number
}

/** Process CPU time so far, ms (user + system, all threads). */
export const cpuNow = (): number => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

const rate = (events: number, wallMs: number, cpuMs: number): Rate => ({
  events,
  wallMs: Math.round(wallMs),
  eventsPerSec: Math.round(events / (wallMs / 1000)),
  cpuMs: Math.round(cpuMs),
  eventsPerCpuSec: Math.round(events / (cpuMs / 1000)),
})

/**
 * Baseline: a bare discrete-event loop. `pending` events in flight; each pop
 * schedules one successor at a random delay (one PRNG draw), like the
 * simulator's cheapest events, with no model behind them.
 */
export const bareLoop = (events: number, pending = 10_000): Rate => {
  const q = new EventQueue(pending * 2)
  const rng = Prng.stream(1, "bench")
  for (let i = 0; i < pending; i++) q.push(rng.next() * 1000, 1, i)
  let n = 0
  let sink = 0
  const c0 = cpuNow()
  const t0 = performance.now()
  while (n < events && q.pop()) {
    n++
    sink += q.a
    q.push(q.t + rng.exp(100), q.kind, q.a, q.b)
  }
  const wall = performance.now() - t0
  const cpu = cpuNow() - c0
  if (sink < 0) console.log(sink)
  return rate(n, wall, cpu)
}

export interface SimRun extends Rate {
  readonly virtualMs: number
  readonly violations: number
  readonly digest: string
}

export const simRun = (options: SimOptions): SimRun => {
  const c0 = cpuNow()
  const t0 = performance.now()
  const { summary } = runSeed(options)
  const wall = performance.now() - t0
  const cpu = cpuNow() - c0
  return {
    ...rate(summary.events, wall, cpu),
    virtualMs: summary.virtualMs,
    violations: summary.violations.length,
    digest: summary.digest,
  }
}

export const big = (durationMs: number): SimOptions => ({
  ...defaultOptions,
  scenario: "swarm",
  seed: 1,
  members: 5_000,
  shards: 1_024,
  workers: 2,
  durationMs,
  faults: "swarm",
})

/**
 * The CLI's arguments for a swarm run of seed 1 (run from the repository
 * root), `--json` last; `extra` goes before it.
 */
export const swarmArgs = (
  members: number,
  shards: number,
  workers: number,
  duration: string,
  extra: ReadonlyArray<string> = [],
): Array<string> => [
  "packages/simulator/dist/cli.js",
  "swarm",
  "--seed",
  "1",
  "--members",
  String(members),
  "--shards",
  String(shards),
  "--workers",
  String(workers),
  "--duration",
  duration,
  ...extra,
  "--json",
]

/**
 * The same event mix at two sizes: the swarm with no faults and no messages,
 * so nearly every event is a heartbeat's (a member's timer, the request at
 * the coordinator, its answer, its timeout). Measured as the marginal rate
 * between a short and a long run of one seed, so the join storm at the start
 * (every member joins, one target recomputation each) cancels out: what is
 * left is the cost of a steady event at that size (docs/simulator.md, "A
 * fifth look"). Each run is the CLI in a Node process of its own, as the
 * hour is: run after other simulations in one process, the same runs
 * measured 20-40% slower.
 */
export const steadyArgs = (members: number, shards: number, minutes: number): Array<string> =>
  swarmArgs(members, shards, 2, `${minutes}m`, ["--faults", "none", "--rate", "0"])

export interface Marginal {
  readonly short: Rate
  readonly long: Rate
  /** (events of the long run - the short one's) / (their wall time's difference) */
  readonly eventsPerSec: number
  readonly eventsPerCpuSec: number
}

/**
 * The rate of the events the long run had beyond the short one's. Refuses a
 * pair whose long run did not take longer (a machine stalled in the short
 * one): a rate from it would be negative or infinite.
 */
export const marginalRate = (short: Rate, long: Rate): Marginal => {
  const events = long.events - short.events
  const wallMs = long.wallMs - short.wallMs
  const cpuMs = long.cpuMs - short.cpuMs
  if (!(events > 0 && wallMs > 0 && cpuMs > 0))
    throw new Error(
      `marginal rate: the long run (${long.events} events, ${long.wallMs} ms wall, ${long.cpuMs} ms CPU) must have more events and take longer than the short one (${short.events} events, ${short.wallMs} ms wall, ${short.cpuMs} ms CPU)`,
    )
  return {
    short,
    long,
    eventsPerSec: Math.round(events / (wallMs / 1000)),
    eventsPerCpuSec: Math.round(events / (cpuMs / 1000)),
  }
}

export const marginal = (
  members: number,
  shards: number,
  shortMinutes: number,
  longMinutes: number,
): Marginal =>
  marginalRate(
    cliRun(steadyArgs(members, shards, shortMinutes)),
    cliRun(steadyArgs(members, shards, longMinutes)),
  )

export const mid: SimOptions = {
  ...defaultOptions,
  scenario: "swarm",
  seed: 1,
  members: 200,
  shards: 512,
  workers: 4,
  durationMs: 600_000,
  faults: "swarm",
}

/** The 1-hour command, exactly as docs/simulator.md gives it (run from the repository root). */
export const HOUR_ARGS: ReadonlyArray<string> = swarmArgs(5_000, 1_024, 2, "1h")

export interface CliRun extends SimRun {
  readonly command: string
}

/**
 * CPU time of this process's waited-for children so far, ms (Linux: fields
 * cutime and cstime of /proc/self/stat, in clock ticks of 10 ms); NaN where
 * there is no /proc.
 */
const childrenCpuMs = (): number => {
  try {
    const stat = readFileSync("/proc/self/stat", "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    // fields[0] is field 3 (state): cutime is field 16, cstime field 17
    return (Number(fields[13]) + Number(fields[14])) * 10
  } catch {
    return Number.NaN
  }
}

/** Runs the CLI as a child process (its own Node, as a user would) and times it. */
export const cliRun = (args: ReadonlyArray<string>): CliRun => {
  const root = fileURLToPath(new URL("../../../", import.meta.url))
  const t0 = performance.now()
  const before = childrenCpuMs()
  const child = spawnSync(process.execPath, args, {
    cwd: root,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  })
  const wall = performance.now() - t0
  const cpu = childrenCpuMs() - before
  // exit code 1 is a run with violations: its summary still counts
  if (child.status !== 0 && child.status !== 1)
    throw new Error(`node ${args.join(" ")} exited ${child.status}: ${child.stderr}`)
  const out = child.stdout
  const s = JSON.parse(out) as {
    events: number
    virtualMs: number
    violations: ReadonlyArray<unknown>
    digest: string
  }
  return {
    ...rate(s.events, wall, cpu),
    virtualMs: s.virtualMs,
    violations: s.violations.length,
    digest: s.digest,
    command: `node ${args.join(" ")}`,
  }
}
