import { describe, expect, it } from "vitest"
import { defaultOptions, runSeed, type Scenario } from "../src/index.js"

// The checkers can fail: a protocol variant that hands a shard to its new
// owner before the previous owner finished revoking it is caught at once by
// the intent checker (the new owner reads while the old one still holds a
// valid grant), whatever storage says.
describe("broken protocol variant (assign-before-revoke)", () => {
  const firstCaught = (scenario: Scenario, broken: boolean): number | undefined => {
    for (let seed = 1; seed <= 5; seed++) {
      const { summary } = runSeed({
        ...defaultOptions,
        scenario,
        seed,
        durationMs: 30_000,
        ratePerShard: 20,
        ...(broken ? { broken: "assign-before-revoke" as const } : {}),
      })
      if (summary.violations.some((v) => v.checker === "intent")) return seed
    }
    return undefined
  }

  it("is caught by the intent checker within 5 seeds (swarm)", () => {
    expect(firstCaught("swarm", true)).toBeDefined()
  })

  it("is caught within 5 seeds (scale-out)", () => {
    expect(firstCaught("scale-out", true)).toBeDefined()
  })

  it("the same seeds pass with the real protocol", () => {
    expect(firstCaught("swarm", false)).toBeUndefined()
    expect(firstCaught("scale-out", false)).toBeUndefined()
  })
})

describe("broken protocol variant (skip-election)", () => {
  // Found by this simulator (before the fix): a new leader that serves
  // without committing its election leaves storeRevision where a paused
  // ex-leader's state still is; the ex-leader resumes, its session timers
  // fire and its commits pass the CAS while the new leader keeps answering
  // from its stale state: it expires members whose leases the new leader
  // keeps renewing (the lease checker), and storage ends up fenced for a
  // member the leader still grants. The core's election commit closes it.
  const firstCaught = (broken: boolean): number | undefined => {
    for (let seed = 1; seed <= 5; seed++) {
      const { summary } = runSeed({
        ...defaultOptions,
        scenario: "coordinator-failover",
        seed,
        durationMs: 60_000,
        ...(broken ? { broken: "skip-election" as const } : {}),
      })
      if (summary.violations.length > 0) return seed
    }
    return undefined
  }

  it("is caught by the checkers within 5 seeds (coordinator-failover)", () => {
    expect(firstCaught(true)).toBeDefined()
  })

  it("the same seeds pass with the election commit", () => {
    expect(firstCaught(false)).toBeUndefined()
  })
})
