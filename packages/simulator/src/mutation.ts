/**
 * The simulator's side of the mutation harness (`pnpm mutate`, see
 * scripts/mutate.mjs): a fixed list of runs on seeds outside the CI seed set
 * (CI uses seeds below 100,000; these start at 1,000,001): cheap exact
 * scenarios first (bursts of rebalances among them), then liars and echoes
 * among bursts, then fault mixes (swarm with drawn shapes, partition storms,
 * coordinator failovers), with the storage fence on and off, then the
 * reshard scenarios, then the fault kinds added since (each block appended,
 * so the runs before it keep their seeds). A mutant is caught at its first run with a violation (or a
 * crash of the simulator, which a mutant can cause by throwing).
 *
 * @module
 */
import {
  type Broken,
  defaultOptions,
  drawShape,
  type Scenario,
  type SimOptions,
} from "./options.js"
import { runSeed } from "./run.js"

const SEED_BASE = 1_000_000

/** The fixed mutation seed set, in the order it is run. */
export const mutationSeeds = (): Array<SimOptions> => {
  const out: Array<SimOptions> = []
  const small = (
    scenario: Scenario,
    seed: number,
    extra: Partial<SimOptions> = {},
  ): SimOptions => ({
    ...defaultOptions,
    scenario,
    seed,
    members: 3 + (seed % 6),
    shards: 8 + ((seed * 7) % 25),
    workers: 1 + (seed % 3),
    durationMs: 60_000,
    ratePerShard: 5,
    ...extra,
  })
  let seed = SEED_BASE
  for (const scenario of ["scale-out", "scale-in", "churn", "rolling-restart", "steady"] as const)
    for (let i = 0; i < 3; i++) out.push(small(scenario, ++seed))
  for (let i = 0; i < 12; i++) out.push(small("churn", ++seed, { ratePerShard: 8, workers: 4 }))
  // Liars and echoes among back-to-back rebalances.
  for (let i = 0; i < 20; i++)
    out.push(
      small("churn", ++seed, {
        ratePerShard: 8,
        workers: 4,
        faults: "burst,forge,replay,dup",
        fence: i % 2 === 0 ? "on" : "off",
      }),
    )
  for (let i = 0; i < 40; i++) {
    for (const scenario of ["swarm", "partition-storm", "coordinator-failover"] as const) {
      const s = ++seed
      const base = small(scenario, s, { fence: i % 2 === 0 ? "on" : "off" })
      const shape = scenario === "swarm" ? drawShape(s, base, new Set(["members"])) : {}
      out.push({ ...base, ...shape, members: Math.min(base.members, 12) })
    }
  }
  // Resharding under the reshard scenarios' faults (4 -> 8, 8 -> 4, 4 -> 8 -> 4).
  for (let i = 0; i < 10; i++)
    for (const scenario of ["reshard-up", "reshard-down", "reshard-rollback"] as const) {
      const s = ++seed
      out.push(small(scenario, s, { shards: scenario === "reshard-down" ? 8 : 4 }))
    }
  // Issue 20 and 19 (appended, so the runs above keep their numbers): lost
  // and late answers among bursts (the collateral checker), coordinator
  // failovers with wall-clock steps and Redis outages (tokens, collateral),
  // colliding incarnations, members at the edges of the lease config.
  for (let i = 0; i < 10; i++) {
    out.push(small("churn", ++seed, { faults: "burst,loss,dup,delay,replay", ratePerShard: 8 }))
    out.push(
      small("coordinator-failover", ++seed, {
        faults: "coord-crash,coord-stale,clock-step,redis-outage,loss,dup,delay",
      }),
    )
    out.push(small("churn", ++seed, { faults: "burst,collide,dup,delay", workers: 4 }))
    out.push(small("churn", ++seed, { faults: "burst,weights,configs" }))
  }
  // Fan-out: two or three groups on the stream, ack modes drawn per seed.
  for (let i = 0; i < 10; i++)
    out.push(small("churn", ++seed, { faults: "burst,loss,dup,crash", groups: 2 + (i % 2) }))
  // Transactional handlers (issue 24): crashes, pauses, partitions and
  // storage outages (fenced and failed commits), lost commit answers,
  // coordinator failovers, the fence off, a reshard.
  for (let i = 0; i < 4; i++) {
    out.push(small("swarm", ++seed, { faults: "crash,pause,partition,store-partition", tx: true }))
    out.push(small("partition-storm", ++seed, { fence: "off", tx: true }))
    out.push(
      small("coordinator-failover", ++seed, {
        faults: "coord-crash,coord-stale,loss,crash",
        tx: true,
      }),
    )
    out.push(small("reshard-up", ++seed, { shards: 4, tx: true }))
  }
  // Issue 34: lost granting answers among bursts (a revoke of a grant the
  // member never heard of must not fence it: the collateral checker).
  for (let i = 0; i < 40; i++)
    out.push(small("churn", ++seed, { faults: "burst,loss,dup,delay,replay", ratePerShard: 5 }))
  // Key eviction (rule 26): tokens, groups and streams that vanish.
  for (let i = 0; i < 10; i++) out.push(small("churn", ++seed, { faults: "burst,evict" }))
  // Opt-in kinds (issue 34): a store command that never answers, handlers
  // that ignore their abort signal, refused commands (OOM, NOPERM), a Store
  // rewound behind its fences (rule 23).
  for (let i = 0; i < 16; i++) {
    out.push(small("churn", ++seed, { faults: "burst,crash,hung-store" }))
    out.push(
      small("churn", ++seed, {
        faults: "burst,pause,partition,crash,handler-ignores-abort",
        workers: 4,
        ratePerShard: 8,
      }),
    )
  }
  for (let i = 0; i < 24; i++) out.push(small("churn", ++seed, { faults: "burst,refused" }))
  for (let i = 0; i < 10; i++) out.push(small("churn", ++seed, { faults: "burst,store-rewind" }))
  // A shard's storage node hangs (rules 27 and 31): grants' fence writes
  // outside the lock, withheld until written, bounded waits.
  for (let i = 0; i < 12; i++)
    out.push(small("churn", ++seed, { faults: "burst,crash,coord-crash,fence-hang" }))
  return out
}

export interface MutationRun {
  readonly caught: boolean
  /** "violation" or "crash" (the simulator threw), when caught. */
  readonly how?: "violation" | "crash"
  readonly options?: SimOptions
  readonly detail?: string
  readonly runs: number
  readonly events: number
}

/**
 * Runs `list` in order and stops at the first violation or crash. `broken`
 * (a simulator-side mutant, `--broken` of the CLI) applies to every run.
 */
export const runMutationSeeds = (
  list: ReadonlyArray<SimOptions> = mutationSeeds(),
  broken?: Broken,
): MutationRun => {
  let events = 0
  for (let i = 0; i < list.length; i++) {
    const options = broken === undefined ? list[i]! : { ...list[i]!, broken }
    try {
      const { summary } = runSeed(options)
      events += summary.events
      if (summary.violations.length > 0)
        return {
          caught: true,
          how: "violation",
          options,
          detail: summary.violations
            .slice(0, 3)
            .map((v) => `[${v.checker}] ${v.message}`)
            .join("; "),
          runs: i + 1,
          events,
        }
    } catch (e) {
      return { caught: true, how: "crash", options, detail: String(e), runs: i + 1, events }
    }
  }
  return { caught: false, runs: list.length, events }
}
