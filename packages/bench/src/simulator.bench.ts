/**
 * Simulator speed: events/s of the full simulator (real coordinator and
 * member machines, faults, checkers on) against a bare event loop (the same
 * heap queue and PRNG, a trivial handler) measured in the same process, and
 * wall time of the 5,000 members x 1,024 shards x 1 virtual hour run with the
 * swarm fault mix.
 *
 * @module
 */
import { defaultOptions, EventQueue, Prng, runSeed, type SimOptions } from "@shardline/simulator"

export interface Rate {
  readonly events: number
  readonly wallMs: number
  readonly eventsPerSec: number
}

const rate = (events: number, wallMs: number): Rate => ({
  events,
  wallMs: Math.round(wallMs),
  eventsPerSec: Math.round(events / (wallMs / 1000)),
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
  const t0 = performance.now()
  while (n < events && q.pop()) {
    n++
    sink += q.a
    q.push(q.t + rng.exp(100), q.kind, q.a, q.b)
  }
  const wall = performance.now() - t0
  if (sink < 0) console.log(sink)
  return rate(n, wall)
}

export interface SimRun extends Rate {
  readonly virtualMs: number
  readonly violations: number
  readonly digest: string
}

export const simRun = (options: SimOptions): SimRun => {
  const t0 = performance.now()
  const { summary } = runSeed(options)
  const wall = performance.now() - t0
  return {
    ...rate(summary.events, wall),
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
