/**
 * Command-line arguments of shardline-sim. Bad input is a `UsageError`
 * (exit code 2), never a silent fix: a zero member, shard or worker count and
 * an unknown fault kind are refused here, before anything runs.
 *
 * @module
 */
import {
  BROKEN,
  defaultOptions,
  FAULT_KINDS,
  SCENARIOS,
  type Scenario,
  type ShapeDim,
  type SimOptions,
} from "./options.js"

export const usage = `usage: shardline-sim <scenario> [options]
scenarios: ${SCENARIOS.join(", ")}
options:
  --seed N               run seed (default 1)
  --members N            logical members (default ${defaultOptions.members})
  --shards N             shards (default ${defaultOptions.shards})
  --workers N            local workers per member (default ${defaultOptions.workers})
  --duration D           safety phase with faults: 90s, 5m, 1h, 500ms (bare number = seconds; default 60s)
  --faults F             default | none | swarm | comma list of: ${FAULT_KINDS.join(", ")}
  --rate N               messages per second per shard (default ${defaultOptions.ratePerShard})
  --fence on|off         storage refuses stale owner tokens (on, default) or accepts any (off:
                         safety must come from the protocol alone)
  --json                 machine-readable summary on stdout
  --report FILE          self-contained HTML report
  --check-determinism    run the seed twice and compare the event digests
  --swarm N              run N seeds (from --from-seed, default 1) on --jobs threads (default: all cores);
                         members, shards, workers and rate not given are drawn per seed
  --broken KIND          test-only protocol breakage: ${BROKEN.join(" | ")}
  --groups N             consumer groups on the stream (fan-out; default 1), ack modes drawn per seed
  --tx                   transactional handlers: effects commit with the ack; checked exactly once
  --strict               (the default) hold every process to the honest-report rule
  --lenient              excuse a process that got two answers to one request (the old F2 excuse)
`

export class UsageError extends Error {}

const parseDuration = (s: string): number => {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(s.trim())
  if (m === null) throw new UsageError(`bad duration "${s}"`)
  const n = Number(m[1])
  const unit = m[2] ?? "s"
  return Math.round(
    n * (unit === "ms" ? 1 : unit === "s" ? 1000 : unit === "m" ? 60_000 : 3_600_000),
  )
}

const nonNegativeInt = (name: string, s: string | undefined): number => {
  const n = Number(s)
  if (s === undefined || !Number.isInteger(n) || n < 0)
    throw new UsageError(`${name} needs a non-negative integer, got "${s}"`)
  return n
}

const positiveInt = (name: string, s: string | undefined): number => {
  const n = Number(s)
  if (s === undefined || !Number.isInteger(n) || n < 1)
    throw new UsageError(`${name} needs a positive integer, got "${s}"`)
  return n
}

const FAULT_WORDS: ReadonlyArray<string> = [...FAULT_KINDS, "default", "none", "swarm"]

const parseFaults = (s: string): string => {
  const words = s.split(",").map((w) => w.trim())
  for (const w of words)
    if (!FAULT_WORDS.includes(w))
      throw new UsageError(`unknown fault kind "${w}" (known: ${FAULT_WORDS.join(", ")})`)
  if (words.length > 1 && words.some((w) => w === "default" || w === "none" || w === "swarm"))
    throw new UsageError(`--faults: default, none and swarm stand alone, got "${s}"`)
  return s
}

export interface Cli {
  options: SimOptions
  json: boolean
  report: string | undefined
  determinism: boolean
  swarm: number | undefined
  fromSeed: number
  jobs: number | undefined
  /** Shape dimensions given on the command line (a swarm draws the others per seed). */
  fixed: Set<ShapeDim>
}

export const parseArgs = (argv: ReadonlyArray<string>): Cli => {
  let o: SimOptions = { ...defaultOptions }
  const cli: Cli = {
    options: o,
    json: false,
    report: undefined,
    determinism: false,
    swarm: undefined,
    fromSeed: 1,
    jobs: undefined,
    fixed: new Set(),
  }
  let scenarioSet = false
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!
    const val = () => {
      const v = argv[++i]
      if (v === undefined) throw new UsageError(`${a} needs a value`)
      return v
    }
    switch (a) {
      case "--":
        break
      case "--seed":
        o = { ...o, seed: nonNegativeInt(a, val()) }
        break
      case "--members":
        o = { ...o, members: positiveInt(a, val()) }
        if (o.members > 9_999) throw new UsageError("--members is at most 9999")
        cli.fixed.add("members")
        break
      case "--shards":
        o = { ...o, shards: positiveInt(a, val()) }
        cli.fixed.add("shards")
        break
      case "--workers":
        o = { ...o, workers: positiveInt(a, val()) }
        cli.fixed.add("workers")
        break
      case "--duration":
        o = { ...o, durationMs: parseDuration(val()) }
        break
      case "--faults":
        o = { ...o, faults: parseFaults(val()) }
        break
      case "--rate": {
        const r = Number(val())
        if (!(r >= 0)) throw new UsageError("--rate needs a number >= 0")
        o = { ...o, ratePerShard: r }
        cli.fixed.add("ratePerShard")
        break
      }
      case "--groups":
        o = { ...o, groups: positiveInt(a, val()) }
        break
      case "--fence": {
        const f = val()
        if (f !== "on" && f !== "off") throw new UsageError(`--fence needs on or off, got "${f}"`)
        o = { ...o, fence: f }
        break
      }
      case "--broken": {
        const b = val()
        const known = BROKEN.find((k) => k === b)
        if (known === undefined) throw new UsageError(`unknown --broken "${b}"`)
        o = { ...o, broken: known }
        break
      }
      case "--tx":
        o = { ...o, tx: true }
        break
      case "--strict":
        o = { ...o, strict: true }
        break
      case "--lenient":
        o = { ...o, strict: false }
        break
      case "--json":
        cli.json = true
        break
      case "--report":
        cli.report = val()
        break
      case "--check-determinism":
        cli.determinism = true
        break
      case "--swarm":
        cli.swarm = positiveInt(a, val())
        break
      case "--from-seed":
        cli.fromSeed = nonNegativeInt(a, val())
        break
      case "--jobs":
        cli.jobs = positiveInt(a, val())
        break
      case "-h":
      case "--help":
        throw new UsageError("")
      default:
        if (a.startsWith("-") || scenarioSet) throw new UsageError(`unknown argument "${a}"`)
        if (!(SCENARIOS as ReadonlyArray<string>).includes(a))
          throw new UsageError(`unknown scenario "${a}"`)
        o = { ...o, scenario: a as Scenario }
        scenarioSet = true
    }
  }
  if (cli.swarm !== undefined && !scenarioSet) o = { ...o, scenario: "swarm" }
  cli.options = o
  return cli
}
