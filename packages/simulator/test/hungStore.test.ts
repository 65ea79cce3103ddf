/**
 * A store command that never answers (the `hung-store` fault; docs/simulator.md,
 * Faults; docs/redis.md "Command deadline", docs/protocol.md rule 27): the
 * lease holder's commit or fence write hangs with its lock held, its
 * renewal loop keeping the lease. At the command's deadline it fails and
 * the host steps down, so members are answered again within the liveness
 * bound; with no deadline (`--broken no-command-deadline`) the coordinator
 * hangs for good and the liveness checker says so; a host that keeps its
 * shell after the failed command (`--broken hung-commit-keeps-shell`) loses
 * the deadline whose commit hung, and the deadline checker says so.
 */
import { describe, expect, it } from "vitest"
import { type Broken, replayCommand, runSeed, type SimOptions } from "../src/index.js"
import { churnOptions, range, runSet } from "./helpers.js"

const churn = (seed: number, broken?: Broken): SimOptions =>
  churnOptions(seed, { faults: "burst,crash,hung-store", broken })

const failover = (seed: number): SimOptions => ({
  ...churn(seed),
  scenario: "coordinator-failover",
  durationMs: 120_000,
  faults: "coord-crash,coord-stale,redis-outage,stale-claim,clock-step,hung-store,burst,loss,delay",
})

describe("hung-store", () => {
  it("reaches every path over 12 seeds, none failing", () => {
    const { failures, counters } = runSet(range(1, 12).map((s) => churn(s)))
    expect(failures).toEqual([])
    for (const k of [
      "hungStore:armed",
      "hungStore:armedDeadline",
      "hungStore:hung",
      "hungStore:hungAtDeadline",
      "hungStore:ranUnanswered",
      "hungStore:requestsHeld",
      "hungStore:deadlinePassed",
    ])
      expect(counters[k] ?? 0, k).toBeGreaterThan(0)
    // the command ran without an answer in some hangs, not in others
    expect(counters["hungStore:ranUnanswered"]).toBeLessThan(counters["hungStore:hung"]!)
  })

  it("among coordinator crashes, pauses, outages, stale claims and clock steps: 12 seeds, none failing", () => {
    const { failures, counters } = runSet(range(1, 12).map(failover))
    expect(failures).toEqual([])
    expect(counters["hungStore:deadlinePassed"] ?? 0).toBeGreaterThan(0)
  })

  it("is off in the swarm mix (the pinned digests stay) and on when listed", () => {
    const swarm = runSeed({ ...churn(2), scenario: "swarm", faults: "swarm" }).summary
    expect(swarm.counters["fault:hung-store"]).toBeUndefined()
    expect(runSeed(churn(2)).summary.counters["fault:hung-store"] ?? 0).toBeGreaterThan(0)
  })

  it("churn 2: a commit hangs; at its deadline the leader steps down and members are answered again (fails with --broken no-command-deadline)", () => {
    const good = runSeed(churn(2)).summary
    expect(good.violations, replayCommand(churn(2))).toEqual([])
    expect(good.counters["hungStore:deadlinePassed"] ?? 0).toBeGreaterThan(0)
    const bad = runSeed(churn(2, "no-command-deadline")).summary
    expect(bad.violations.map((v) => v.checker)).toContain("liveness")
  })

  it("churn 2: an expiry's commit hangs; the leader steps down and its successor expires the member (fails with --broken hung-commit-keeps-shell)", () => {
    const good = runSeed(churn(2)).summary
    expect(good.violations, replayCommand(churn(2))).toEqual([])
    expect(good.counters["hungStore:hungAtDeadline"] ?? 0).toBeGreaterThan(0)
    const bad = runSeed(churn(2, "hung-commit-keeps-shell")).summary
    expect(bad.violations.map((v) => v.checker)).toContain("deadline")
  })
})
