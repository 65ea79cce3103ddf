/**
 * Key eviction (the `evict` fault, docs/protocol.md rule 26; docs/simulator.md,
 * Faults): an owner token, a consumer group or a shard stream vanishes. The
 * fence holds with a missing token (every token refused until a coordinator
 * writes one again) and nothing is lost in silence (a vanished stream is
 * reported lost, a vanished group is created again at the stream's start).
 * Each pinned seed passes with the model as redis-store and the runtime
 * behave and fails with the model's mutant (`--broken`).
 */
import { describe, expect, it } from "vitest"
import {
  type Broken,
  defaultOptions,
  replayCommand,
  runSeed,
  type SimOptions,
} from "../src/index.js"
import { range, runSet } from "./helpers.js"

const churn = (seed: number, broken?: Broken): SimOptions => ({
  ...defaultOptions,
  scenario: "churn",
  seed,
  members: 6,
  shards: 16,
  workers: 2,
  durationMs: 60_000,
  ratePerShard: 5,
  faults: "burst,evict",
  broken,
})

describe("evict", () => {
  it("reaches every path over 16 seeds, none failing", () => {
    const { failures, counters } = runSet(range(1, 16).map((s) => churn(s)))
    expect(failures).toEqual([])
    for (const k of [
      "evict:token",
      "evict:group",
      "evict:stream",
      "evict:readRefused",
      "evict:tokenWrittenAgain",
      "evict:coordinatorRestarted",
      "dataLost:group",
      "dataLost:stream",
    ])
      expect(counters[k] ?? 0, k).toBeGreaterThan(0)
  })

  const pinned: ReadonlyArray<readonly [string, number, Broken, string]> = [
    [
      "churn 5: a token vanishes; the fence holds (fails with --broken missing-token-is-zero)",
      5,
      "missing-token-is-zero",
      "tokens",
    ],
    [
      "churn 2: a stream vanishes; its loss is said (fails with --broken vanished-read-as-empty)",
      2,
      "vanished-read-as-empty",
      "message-loss",
    ],
    [
      "churn 5: a group vanishes; read again from the start (fails with --broken vanished-read-as-empty)",
      5,
      "vanished-read-as-empty",
      "message-loss",
    ],
  ]
  it.each(pinned)("%s", (_, seed, broken, checker) => {
    const good = runSeed(churn(seed)).summary
    expect(good.violations, replayCommand(churn(seed))).toEqual([])
    const bad = runSeed(churn(seed, broken)).summary
    expect(bad.violations.map((v) => v.checker)).toContain(checker)
  })
})
