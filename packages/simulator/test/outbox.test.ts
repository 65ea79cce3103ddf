/**
 * The cluster outbox relay (the `outbox-relay` fault with `--tx`;
 * docs/simulator.md, Transactions; docs/exactly-once.md, "Redis Cluster and
 * the outbox"): sends committed to a shard's outbox are relayed exactly once
 * per (outbox, target) by the delivered-mark, re-routed once when their
 * target was sealed, in per-key order, and nothing is stranded; two
 * relayers on one outbox (a relayer paused between its read and its
 * deliveries) and relays failing at a seal change none of it. The mutants:
 * the re-route's -1 ("entry already gone") read as a shard number (issue
 * 32 item 9) and a sealed shard drained while its outbox holds entries.
 */
import { describe, expect, it } from "vitest"
import {
  type Broken,
  OutboxChecker,
  type OutboxEntry,
  replayCommand,
  reshardShape,
  runSeed,
  type SimOptions,
  type Violation,
} from "../src/index.js"
import { churnOptions, range, runSet } from "./helpers.js"

const FAULTS = "burst,crash,pause,clog,loss,dup,partition,outbox-relay"

const churn = (seed: number, broken?: Broken): SimOptions =>
  churnOptions(seed, { tx: true, faults: FAULTS, broken })

const reshard = (seed: number, broken?: Broken): SimOptions =>
  reshardShape("reshard-up", seed, {
    tx: true,
    faults: "partition,crash,coord-crash,loss,delay,outbox-relay",
    broken,
  })

describe("OutboxChecker", () => {
  // two target layouts: 4 shards (0-3), then 8 (4-11)
  const routed = (key: number, from: number) =>
    from < 4 ? [key % 4, 4 + (key % 8)] : [4 + (key % 8)]
  const make = () => {
    const out: Array<Violation> = []
    return { out, c: new OutboxChecker((v) => out.push(v), routed) }
  }
  const entry = (id: number, key: number, seq: number, target = key % 4): OutboxEntry => ({
    id,
    source: 0,
    key,
    seq,
    target,
  })

  it("passes every entry delivered once, to its target or its key's re-routed shard, in key order", () => {
    const { out, c } = make()
    c.committed(entry(1, 5, 0))
    c.committed(entry(2, 5, 1))
    c.delivered(1, entry(1, 5, 0), 1)
    c.delivered(2, entry(2, 5, 1), 4 + 5)
    c.finish(10)
    expect(out).toEqual([])
  })

  it("flags a second delivery, a target the key does not route to, a key out of order, and what is stranded", () => {
    const { out, c } = make()
    for (const e of [entry(1, 5, 0), entry(2, 5, 1), entry(3, 6, 0)]) c.committed(e)
    c.delivered(1, entry(2, 5, 1), 1)
    c.delivered(2, entry(1, 5, 0), 1)
    c.delivered(3, entry(1, 5, 0), -1)
    c.finish(10)
    expect(out.map((v) => v.message)).toEqual([
      "key 5: its send #0 (outbox entry 1 of shard 0) delivered after its send #1",
      "outbox entry 1 of shard 0 (key 5) delivered 2 times, now to target -1",
      "outbox entry 1 of shard 0 (key 5, routed to 1) delivered to target -1, not a shard its key routes to",
      "1 of 3 outbox entries never delivered at 10ms (stranded), first: 3 of shard 0",
    ])
  })
})

describe("outbox-relay", () => {
  it("churn: 12 seeds pass, two relayers and re-routes reached", () => {
    const set = runSet(range(1, 12).map((s) => churn(s)))
    expect(set.failures).toEqual([])
    for (const k of [
      "outbox:delivered",
      "outbox:alreadyDelivered",
      "outbox:relayerPaused",
      "outbox:pausedRelayerResumed",
      "outbox:relayFailed",
      "outbox:relayStoppedAtFailure",
      "outbox:targetResharded",
      "outbox:targetSealed",
      "outbox:rerouted",
      "outbox:rerouteGone",
    ])
      expect(set.counters[k] ?? 0, k).toBeGreaterThan(0)
    expect(set.counters["outbox:appends"]).toBe(set.counters["outbox:entriesCommitted"])
  })

  it("reshard-up: 12 seeds pass, relays failing at the seal", () => {
    const set = runSet(range(1, 12).map((s) => reshard(s)))
    expect(set.failures).toEqual([])
    for (const k of ["outbox:failureAtSeal", "outbox:delivered", "reshard:shardExhausted"])
      expect(set.counters[k] ?? 0, k).toBeGreaterThan(0)
  })

  it("is off in the swarm mix and without --tx, on when listed with it", () => {
    const swarm = runSeed({ ...churn(2), scenario: "swarm", faults: "swarm" }).summary
    expect(swarm.counters["outbox:entriesCommitted"]).toBeUndefined()
    const noTx = runSeed({ ...churn(2), tx: false }).summary
    expect(noTx.counters["outbox:entriesCommitted"]).toBeUndefined()
    expect(runSeed(churn(2)).summary.counters["outbox:entriesCommitted"] ?? 0).toBeGreaterThan(0)
  })

  it("churn 4: the re-route's -1 read as a shard delivers an entry twice (fails with --broken outbox-gone-as-shard)", () => {
    const good = runSeed(churn(4)).summary
    expect(good.violations, replayCommand(churn(4))).toEqual([])
    expect(good.counters["outbox:rerouteGone"] ?? 0).toBeGreaterThan(0)
    const bad = runSeed(churn(4, "outbox-gone-as-shard")).summary
    expect(bad.violations.slice(0, 2).map((v) => [v.checker, v.timeMs, v.message])).toEqual([
      [
        "outbox",
        13_100,
        "outbox entry 819 of shard 11 (key 91) delivered 2 times, now to target -1",
      ],
      [
        "outbox",
        13_100,
        "outbox entry 819 of shard 11 (key 91, routed to 3) delivered to target -1, not a shard its key routes to",
      ],
    ])
  })

  it("the -1 mutant is caught on 4 of these 12 churn seeds", () => {
    const caught = range(1, 12).filter(
      (s) => runSeed(churn(s, "outbox-gone-as-shard")).summary.violations.length > 0,
    )
    expect(caught).toEqual([1, 4, 5, 8])
  })

  it("reshard-up 1: a sealed shard drained with entries in its outbox strands them (fails with --broken drain-with-outbox)", () => {
    const good = runSeed(reshard(1)).summary
    expect(good.violations, replayCommand(reshard(1))).toEqual([])
    const bad = runSeed(reshard(1, "drain-with-outbox")).summary
    expect(bad.violations.map((v) => v.checker)).toContain("outbox")
    expect(bad.violations.find((v) => v.checker === "outbox")!.message).toMatch(
      /outbox entries never delivered at .* \(stranded\)/,
    )
  })
})
