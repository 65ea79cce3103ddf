/**
 * Refused commands (the `refused` fault; docs/simulator.md, Faults): a full
 * server (`noeviction` with `maxmemory`: OOM) refuses heartbeats, Store
 * commits and transactional commits; one member's Redis user after an ACL
 * change (NOPERM) is refused a drawn mix of its reads, acks, heartbeats and
 * transactional commits. A refused command wrote nothing: a refused ack
 * leaves its batch pending, read and handled again; a refused heartbeat is
 * a failed one, retried; a refused Store commit makes the leader step down.
 * Nothing is lost in silence, no shard has two owners, the group converges
 * after the episode. A loop that takes a refused ack for done
 * (`--broken refused-ack-counted-as-acked`) leaves what it handled pending
 * and unread, and the starvation checker says so.
 */
import { describe, expect, it } from "vitest"
import { type Broken, replayCommand, runSeed, type SimOptions } from "../src/index.js"
import { churnOptions, range, runSet } from "./helpers.js"

const churn = (seed: number, broken?: Broken): SimOptions =>
  churnOptions(seed, { faults: "burst,refused", broken })

describe("refused", () => {
  it("reaches every path over 16 seeds, none failing, with the fence on and off", () => {
    const on = runSet(range(1, 16).map((s) => churn(s)))
    expect(on.failures).toEqual([])
    for (const k of [
      "refused:oom",
      "refused:noperm",
      "refused:read",
      "refused:ack",
      "refused:heartbeat",
      "refused:storeCommit",
      "refused:electionCommit",
    ])
      expect(on.counters[k] ?? 0, k).toBeGreaterThan(0)
    const off = runSet(range(1, 16).map((s) => ({ ...churn(s), fence: "off" as const })))
    expect(off.failures).toEqual([])
  })

  it("refuses transactional commits (nothing committed, handled again): 8 seeds, none failing", () => {
    const { failures, counters } = runSet(range(1, 8).map((s) => ({ ...churn(s), tx: true })))
    expect(failures).toEqual([])
    expect(counters["refused:txCommit"] ?? 0).toBeGreaterThan(0)
  })

  it("among crashes, partitions and coordinator failovers: 12 seeds, none failing", () => {
    const { failures } = runSet(
      range(100, 12).map((s) =>
        churnOptions(s, { faults: "burst,refused,crash,partition,coord-crash,coord-stale" }),
      ),
    )
    expect(failures).toEqual([])
  })

  it("is off in the swarm mix (the pinned digests stay) and on when listed", () => {
    const swarm = runSeed({ ...churn(4), scenario: "swarm", faults: "swarm" }).summary
    expect(swarm.counters["fault:refused"]).toBeUndefined()
    expect(runSeed(churn(4)).summary.counters["fault:refused"] ?? 0).toBeGreaterThan(0)
  })

  it("churn 4: the server is full; the leader's commit is refused, it steps down, and the group converges after", () => {
    const good = runSeed(churn(4)).summary
    expect(good.violations, replayCommand(churn(4))).toEqual([])
    expect(good.counters["refused:storeCommit"] ?? 0).toBeGreaterThan(0)
  })

  it("churn 1: a member's acks are refused; its batches stay pending and are read again (fails with --broken refused-ack-counted-as-acked)", () => {
    const good = runSeed(churn(1)).summary
    expect(good.violations, replayCommand(churn(1))).toEqual([])
    expect(good.counters["refused:ack"] ?? 0).toBeGreaterThan(0)
    const bad = runSeed(churn(1, "refused-ack-counted-as-acked")).summary
    expect(bad.violations.map((v) => v.checker)).toContain("starvation")
  })
})
