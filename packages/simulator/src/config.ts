/**
 * Run options and everything derived from the seed (fault mix, clocks,
 * workload shape). One seed + these options determine the whole run.
 *
 * @module
 */
import { Prng } from "./engine/Prng.js"

export const SCENARIOS = [
  "steady",
  "rolling-restart",
  "scale-out",
  "scale-in",
  "partition-storm",
  "coordinator-failover",
  "swarm",
] as const
export type Scenario = (typeof SCENARIOS)[number]

export const FAULT_KINDS = [
  "loss",
  "dup",
  "delay",
  "partition",
  "oneway",
  "store-partition",
  "crash",
  "pause",
  "coord-crash",
  "coord-stale",
  "slow-drain",
  "clock",
] as const
export type FaultKind = (typeof FAULT_KINDS)[number]

/**
 * Faults that are episodes with a start and an end (scheduled and healed);
 * the others (loss, dup, delay, clock) act on every message or clock read.
 */
export const EPISODIC_FAULTS: ReadonlySet<FaultKind> = new Set(
  FAULT_KINDS.filter((k) => k !== "loss" && k !== "dup" && k !== "delay" && k !== "clock"),
)

/**
 * Test-only protocol breakages, proving the checkers can fail:
 * - `assign-before-revoke`: hand a pending shard over before its previous
 *   owner reported REVOKED.
 * - `skip-election`: a new coordinator leader serves without committing its
 *   election (`CoordinatorElected`), as `CoordinatorHost` did before the fix:
 *   a paused ex-leader's commit can then pass the storeRevision CAS.
 */
export type Broken = "assign-before-revoke" | "skip-election"
export const BROKEN: ReadonlyArray<Broken> = ["assign-before-revoke", "skip-election"]

export interface SimOptions {
  readonly scenario: Scenario
  readonly seed: number
  readonly members: number
  readonly shards: number
  /** Local workers per logical member. */
  readonly workers: number
  /** Safety phase (faults on) in virtual ms; a liveness phase follows. */
  readonly durationMs: number
  /** "default" (the scenario's mix), "none", "swarm", or a comma list of fault kinds. */
  readonly faults: string
  /** Produced messages per second per shard (average; skewed per seed). */
  readonly ratePerShard: number
  readonly broken?: Broken | undefined
  /** Record ownership segments for the HTML report. */
  readonly timeline?: boolean | undefined
}

export const defaultOptions: SimOptions = {
  scenario: "steady",
  seed: 1,
  members: 5,
  shards: 16,
  workers: 2,
  durationMs: 60_000,
  faults: "default",
  ratePerShard: 1,
}

/** Protocol timing used by every run (ms). */
export const timing = {
  heartbeatIntervalMs: 1_000,
  sessionTimeoutMs: 10_000,
  revokeTimeoutMs: 5_000,
  requestTimeoutMs: 1_500,
  /** Member self-fences this long before its session would expire. */
  safetyMarginMs: 1_500,
  coordinatorLeaseMs: 3_000,
  /** Clock bound: offsets within ±maxSkewMs, rates within ±maxDriftPpm. */
  maxSkewMs: 100,
  maxDriftPpm: 500,
  batchSize: 16,
  sampleEveryMs: 1_000,
} as const

const scenarioFaults: Record<Scenario, string> = {
  steady: "none",
  "rolling-restart": "none",
  "scale-out": "none",
  "scale-in": "none",
  "partition-storm": "partition,oneway,store-partition,loss,delay,dup",
  "coordinator-failover": "coord-crash,coord-stale,delay",
  swarm: "swarm",
}

/** Per-seed fault mix: intensity 0 = off. Drawn from the "faults" stream only. */
export interface FaultMix {
  readonly intensity: Readonly<Record<FaultKind, number>>
  readonly lossP: number
  readonly dupP: number
  readonly delayMeanMs: number
}

export const drawFaults = (options: SimOptions): FaultMix => {
  const spec = options.faults === "default" ? scenarioFaults[options.scenario] : options.faults
  const rng = Prng.stream(options.seed, "faults")
  const intensity = {} as Record<FaultKind, number>
  const listed = new Set(spec.split(",").map((s) => s.trim()))
  for (const k of FAULT_KINDS) {
    // Always draw both numbers so the mix of one kind never depends on another.
    const on = rng.chance(0.5)
    const level = rng.range(0.2, 1)
    const enabled = spec === "swarm" ? on : listed.has(k)
    intensity[k] = enabled ? level : 0
  }
  for (const k of listed)
    if (k !== "none" && k !== "swarm" && !(FAULT_KINDS as ReadonlyArray<string>).includes(k))
      throw new Error(`unknown fault kind "${k}" (known: ${FAULT_KINDS.join(", ")}, swarm, none)`)
  return {
    intensity,
    lossP: intensity.loss * 0.05,
    dupP: intensity.dup * 0.03,
    delayMeanMs: 1 + intensity.delay * 60,
  }
}
