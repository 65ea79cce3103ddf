/**
 * A graceful coordinator stop (the `coord-stop` fault; docs/simulator.md,
 * Faults; docs/protocol.md rule 20): the lease holder's process stops, hands
 * over at once (releases its lease, leaves a handover mark, wakes the
 * standbys) and a standby serves in the same instant, not when the lease
 * runs out. The handover checker bounds it; the exactness checker holds a
 * run whose only fault is `coord-stop` to "nothing moves"; a stop without
 * the handover (`--broken stop-without-handover`) fails the bound on a
 * pinned seed.
 */
import { describe, expect, it } from "vitest"
import {
  type Broken,
  defaultOptions,
  HandoverChecker,
  handoverBoundMs,
  replayCommand,
  runSeed,
  type SimOptions,
  timing,
  type Violation,
} from "../src/index.js"
import { range, runSet, smallOptions } from "./helpers.js"

describe("HandoverChecker", () => {
  const make = () => {
    const out: Array<Violation> = []
    return { out, c: new HandoverChecker((v) => out.push(v), 100) }
  }

  it("passes a successor that serves within the bound and measures the first answer", () => {
    const { out, c } = make()
    c.stopped(1_000, true)
    c.served(1_000)
    c.answered(1_400)
    c.finish(60_000)
    expect(out).toEqual([])
    expect([c.stops, c.worstServedMs, c.worstAnsweredMs]).toEqual([1, 0, 400])
  })

  it("flags a successor that serves only on the lease expiry path, once", () => {
    const { out, c } = make()
    c.stopped(1_000, true)
    c.served(2_400)
    c.served(3_000)
    expect(out.map((v) => [v.checker, v.time, v.message])).toEqual([
      [
        "handover",
        2_400,
        "a graceful coordinator stop at 1000ms was served again only 1400ms later (bound 100ms, rule 20: the standby is woken by the handover)",
      ],
    ])
  })

  it("does not judge a stop with no standby able to take over, and flags a judged stop never served", () => {
    const { out, c } = make()
    c.stopped(1_000, false)
    c.served(9_000)
    expect(out).toEqual([])
    c.stopped(10_000, true)
    c.finish(60_000)
    expect(out.map((v) => v.message)).toEqual([
      "a graceful coordinator stop at 10.0s was never served again",
    ])
  })
})

/** The exact shape: `coord-stop` alone, so nothing may move (exactness checker). */
const steady = (seed: number, broken?: Broken): SimOptions => ({
  ...defaultOptions,
  scenario: "steady",
  seed,
  durationMs: 120_000,
  faults: "coord-stop",
  broken,
})

/** Among the other coordinator faults, Redis outages and a lossy network. */
const failover = (seed: number): SimOptions =>
  smallOptions("coordinator-failover", seed, {
    durationMs: 90_000,
    faults: "coord-stop,coord-crash,coord-stale,stale-claim,redis-outage,clock-step,loss,delay,dup",
  })

describe("coord-stop", () => {
  it("the bound is far below the lease expiry path (two thirds of a lease at least)", () => {
    expect(handoverBoundMs).toBeLessThan(timing.coordinatorLeaseMs / 10)
  })

  it("alone: 20 seeds are exact (nothing moves) and every stop is served in the same instant", () => {
    const set = runSet(range(1, 20).map((s) => steady(s)))
    expect(set.failures).toEqual([])
    expect(set.exactRuns).toBe(20)
    expect(set.counters["coordStop:handover"] ?? 0).toBeGreaterThan(20)
    expect(set.counters["handover:stopsJudged"]).toBe(set.counters["coordStop:handover"])
    expect(set.counters["handover:worstServedMs"]).toBe(0)
  })

  it("among coordinator crashes, pauses, stale claims, outages and clock steps: 40 seeds, none failing, every path reached", () => {
    const set = runSet(range(1, 40).map(failover))
    expect(set.failures).toEqual([])
    for (const k of [
      "coordStop:stops",
      "coordStop:handover",
      "handover:stopsJudged",
      "handover:requestQueued",
      "handover:requestTaken",
    ])
      expect(set.counters[k] ?? 0, k).toBeGreaterThan(0)
    // some stops had no standby to hand over to (all crashed or paused): not judged
    expect(set.counters["handover:stopsJudged"]!).toBeLessThan(set.counters["coordStop:handover"]!)
  })

  it("is off in the swarm mix (the pinned digests stay) and on when listed", () => {
    const swarm = runSeed({ ...steady(2), scenario: "swarm", faults: "swarm" }).summary
    expect(swarm.counters["coordStop:stops"]).toBeUndefined()
    expect(runSeed(steady(2)).summary.counters["coordStop:stops"] ?? 0).toBeGreaterThan(0)
  })

  it("steady 3: a stop without the handover is served only on the lease expiry path (fails with --broken stop-without-handover)", () => {
    const good = runSeed(steady(3)).summary
    expect(good.violations, replayCommand(steady(3))).toEqual([])
    expect(good.counters["handover:worstServedMs"]).toBe(0)
    const bad = runSeed(steady(3, "stop-without-handover")).summary
    expect(bad.violations.map((v) => [v.checker, v.timeMs, v.message])).toEqual([
      [
        "handover",
        8_789,
        "a graceful coordinator stop at 6791ms was served again only 1998ms later (bound 100ms, rule 20: the standby is woken by the handover)",
      ],
    ])
  })
})
