/**
 * A metadata rewind (the `store-rewind` fault; docs/protocol.md rule 23,
 * docs/simulator.md, Faults): the Store fails over to a replica that missed
 * its last commits while the owner tokens written meanwhile stay. The next
 * load sees older metadata than the fence keys; the new leader reads
 * storage's owner tokens, holds every shard whose token is ahead one
 * session with storage's token and fences its recorded owner. No token is
 * reused (every grant goes above every token storage held), the fence
 * holds, no shard has two owners, nothing is lost. With the check reverted
 * (`--broken no-rewind-check`) the leader re-fences the rewound state's
 * lower tokens and grants below storage's: the tokens checker says so, and
 * on churn 23 two members read one shard (the intent checker).
 */
import { describe, expect, it } from "vitest"
import {
  type Broken,
  defaultOptions,
  FAULT_KINDS,
  replayCommand,
  runSeed,
  type SimOptions,
} from "../src/index.js"
import { churnOptions, range, runSet } from "./helpers.js"

const churn = (seed: number, broken?: Broken): SimOptions =>
  churnOptions(seed, { faults: "burst,store-rewind", broken })

describe("store-rewind", () => {
  it("reaches every path over 24 seeds, none failing, with the fence on and off", () => {
    const on = runSet(range(1, 24).map((s) => churn(s)))
    expect(on.failures).toEqual([])
    for (const k of [
      "rewind:replicaLags",
      "rewind:failovers",
      "rewind:detected",
      // the leader's commit after a failover fails the CAS (it holds the lease): it reloads
      "coordinator:staleCommit",
    ])
      expect(on.counters[k] ?? 0, k).toBeGreaterThan(0)
    const off = runSet(range(1, 24).map((s) => ({ ...churn(s), fence: "off" as const })))
    expect(off.failures).toEqual([])
  })

  it("among coordinator crashes and pauses, member crashes and lost messages: 12 seeds, none failing", () => {
    const { failures, counters } = runSet(
      range(200, 12).map((s) =>
        churnOptions(s, { faults: "burst,store-rewind,coord-crash,coord-stale,crash,loss" }),
      ),
    )
    expect(failures).toEqual([])
    expect(counters["rewind:detected"] ?? 0).toBeGreaterThan(0)
  })

  it("is off in the swarm mix (the pinned digests stay) and on when listed", () => {
    const swarm = runSeed({ ...churn(12), scenario: "swarm", faults: "swarm" }).summary
    expect(swarm.counters["fault:store-rewind"]).toBeUndefined()
    expect(runSeed(churn(12)).summary.counters["fault:store-rewind"] ?? 0).toBeGreaterThan(0)
  })

  const pinned: ReadonlyArray<readonly [string, number, string]> = [
    [
      "churn 12: the store loses its last commits; the next load finds storage ahead and holds those shards (fails with --broken no-rewind-check)",
      12,
      "tokens",
    ],
    [
      "churn 23: without the check a shard granted in the lost commits is granted again while its owner reads it (fails with --broken no-rewind-check)",
      23,
      "intent",
    ],
  ]
  it.each(pinned)("%s", (_, seed, checker) => {
    const good = runSeed(churn(seed)).summary
    expect(good.violations, replayCommand(churn(seed))).toEqual([])
    expect(good.counters["rewind:detected"] ?? 0).toBeGreaterThan(0)
    const bad = runSeed(churn(seed, "no-rewind-check")).summary
    expect(bad.violations.map((v) => v.checker)).toContain(checker)
  })
})

describe("store-rewind: a paused ex-leader after a rewind to its revision (docs/simulator.md, Findings; fixed by docs/protocol.md rule 32)", () => {
  // Coordinator #1 is paused at 30.1 s, #0 takes over at 32.6 s and commits
  // its election; at 35.5 s the Store fails over to a replica that missed
  // that one commit, so the Store's revision is #1's again. #1 wakes at
  // 41.3 s and its session deadlines fire on its stale memory. Its commit
  // passes the CAS (the election commit that stops a paused ex-leader,
  // docs/protocol.md "Takeover", was lost), but not the lease fence: #0
  // holds the lease, so the Store refuses #1's term and #1 steps down.
  // With `--broken no-commit-lease-fence` (the CAS alone, as before) it
  // expires members whose leases #0 renewed: the lease checker.
  it("churn 23 with coordinator pauses: the stale commit is refused by the lease fence (fails with --broken no-commit-lease-fence)", () => {
    const options = churnOptions(23, { faults: "burst,store-rewind,coord-stale" })
    const run = runSeed(options).summary
    expect(run.violations, replayCommand(options)).toEqual([])
    expect(run.counters["rewind:failovers"] ?? 0).toBeGreaterThan(0)
    expect(run.counters["store:leaseFencedCommits"] ?? 0).toBeGreaterThan(0)
    const bad = runSeed({ ...options, broken: "no-commit-lease-fence" }).summary
    expect(bad.counters["store:leaseFenceSkipped"] ?? 0).toBeGreaterThan(0)
    expect(bad.violations.map((v) => v.checker)).toContain("lease")
  })

  // issue 34's sweep with every kind on (`swarm --swarm 100 --from-seed S
  // --members M --shards N --duration 5m --faults <every kind>`): the five
  // seeds of this class, with the workers and rate the sweep drew for them
  const sweep: ReadonlyArray<readonly [number, number, number, number, number]> = [
    [9034, 4, 64, 1, 0.4],
    [9043, 4, 64, 4, 1.7],
    [9059, 4, 64, 3, 0.4],
    [9566, 20, 16, 2, 0.3],
    [9588, 20, 16, 7, 1.5],
  ]
  it.each(sweep)(
    "swarm %i (%i x %i, every kind): passes, and fails the lease checker with --broken no-commit-lease-fence",
    (seed, members, shards, workers, ratePerShard) => {
      const options: SimOptions = {
        ...defaultOptions,
        scenario: "swarm",
        seed,
        members,
        shards,
        workers,
        ratePerShard,
        durationMs: 300_000,
        faults: FAULT_KINDS.join(","),
      }
      const good = runSeed(options).summary
      expect(good.violations, replayCommand(options)).toEqual([])
      const bad = runSeed({ ...options, broken: "no-commit-lease-fence" }).summary
      expect(bad.violations.map((v) => v.checker)).toContain("lease")
    },
    120_000,
  )
})

describe("store-rewind: an open finding (docs/simulator.md, Findings)", () => {
  // Shard 11's owner token is evicted at 272.9 s (`evict`); at 275.1 s the
  // Store fails over, losing the commit that granted shard 11 with token
  // 237380 (storage held it until the eviction). At 277.9 s the takeover's
  // rule 23 check reads no token for shard 11 (a missing token compares with
  // nothing), so the loaded state's owner is re-fenced with its older token
  // 237379, which storage accepts (a missing token is written again, rule
  // 30); the owner of the lost grant reads on with 237380, above it, and the
  // fence lets it through (it refuses only lower tokens).
  it("swarm 9655 (20 x 16, every kind): an evicted token hides a rewind from rule 23's check", () => {
    const options: SimOptions = {
      ...defaultOptions,
      scenario: "swarm",
      seed: 9655,
      members: 20,
      shards: 16,
      workers: 8,
      ratePerShard: 0.9,
      durationMs: 300_000,
      // every kind there was when it was found (the later opt-in kinds draw after these)
      faults: FAULT_KINDS.filter((k) => k !== "coord-stop" && k !== "outbox-relay").join(","),
    }
    const run = runSeed(options).summary
    expect(run.violations.map((v) => v.checker)).toContain("tokens")
  }, 120_000)
})
