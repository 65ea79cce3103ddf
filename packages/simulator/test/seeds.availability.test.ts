/**
 * CI seeds of issues 19 and 20 (docs/simulator.md, Faults and Checkers):
 * lost, duplicated, delayed and replayed messages among bursts; coordinator
 * failovers with wall-clock steps and Redis outages shorter than the
 * session; colliding incarnations; fan-out groups with every ack mode. Every run is held to the owner-token,
 * lease-config and (where its faults touch no member) collateral checkers,
 * and each fault path's counter is asserted.
 */
import { beforeAll, describe, expect, it } from "vitest"
import { range, runSet, type SetResult, smallOptions } from "./helpers.js"

describe("fixed seeds: availability, ordering and process identity", () => {
  const fence = (seed: number) => (seed % 2 === 0 ? "on" : "off") as "on" | "off"
  const sets: Record<string, SetResult> = {}

  beforeAll(() => {
    sets.lossy = runSet(
      range(1, 80).map((s) =>
        smallOptions("churn", s, {
          faults: "burst,weights,loss,dup,delay,replay",
          fence: fence(s),
          ratePerShard: 5,
        }),
      ),
    )
    sets.failover = runSet(
      range(1, 80).map((s) =>
        smallOptions("coordinator-failover", s, {
          faults: "coord-crash,coord-stale,clock-step,redis-outage,clock,loss,dup,delay",
          fence: fence(s),
        }),
      ),
    )
    sets.outage = runSet(
      range(1, 60).map((s) =>
        smallOptions("rolling-restart", s, {
          faults: "redis-outage,clock-step,delay",
          fence: fence(s),
        }),
      ),
    )
    sets.collide = runSet(
      range(1, 80).map((s) =>
        smallOptions("churn", s, {
          faults: "burst,collide,twin,dup,delay,replay",
          fence: fence(s),
          workers: 4,
        }),
      ),
    )
    sets.fanout = runSet(
      range(1, 40).map((s) =>
        smallOptions("churn", s, {
          faults: "burst,loss,dup,crash",
          fence: fence(s),
          groups: 2 + (s % 3),
          ratePerShard: 5,
        }),
      ),
    )
  }, 600_000)

  it("fan-out: 2-4 groups on the stream, ack modes drawn: 40 seeds, zero violations", () =>
    expect(sets.fanout!.failures).toEqual([]))

  it("lost, duplicated, delayed and replayed messages among bursts: 80 seeds, zero violations", () =>
    expect(sets.lossy!.failures).toEqual([]))
  it("coordinator failovers with clock steps and Redis outages: 80 seeds, zero violations", () =>
    expect(sets.failover!.failures).toEqual([]))
  it("rolling restarts through Redis outages: 60 seeds, zero violations", () =>
    expect(sets.outage!.failures).toEqual([]))
  it("colliding incarnations and twins: 80 seeds, zero violations", () =>
    expect(sets.collide!.failures).toEqual([]))

  it.each([
    ["lossy", "net:lost", "messages lost"],
    ["lossy", "net:duplicated", "messages duplicated (requests and answers)"],
    ["lossy", "replay:requests", "old requests delivered again"],
    ["lossy", "member:responsesAfterTheirRequestEnded", "answers after their request's timeout"],
    ["failover", "coordinator:crashes", "coordinator crashes"],
    ["failover", "coordinator:stalePauses", "coordinator pauses past its lease"],
    ["failover", "clockStep:back", "wall clock stepped back"],
    ["failover", "clockStep:forward", "wall clock stepped forward"],
    ["failover", "clockStep:leader", "the leader's wall clock stepped"],
    ["failover", "redis:outages", "Redis outages"],
    ["outage", "redis:messagesLost", "requests and answers lost to an outage"],
    ["outage", "redis:commitsFailed", "commits refused while Redis is down"],
    ["outage", "member:stopAll:lease-lost", "members suspended (rule 22), not fenced"],
    ["collide", "collide:started", "a second process with the same incarnation"],
    ["collide", "collide:firstExited", "... the first one exits"],
    ["collide", "collide:secondExited", "... the second one exits"],
    ["collide", "twin:superseded", "the older process told FENCED_INSTANCE_ID"],
    ["fanout", "fanout:group0:xackdel", "the simulated group deletes with xackdel"],
    ["fanout", "fanout:group0:ack", "the simulated group acks only"],
    ["fanout", "fanout:group1:xackdel", "a fan-out group deletes with xackdel"],
    ["fanout", "fanout:deletionsChecked", "entries deleted, each judged"],
    ["fanout", "fanout:spells", "fan-out groups stuck or stopped for a while"],
  ])("%s reaches %s (%s)", (set, counter) =>
    expect(sets[set]!.counters[counter] ?? 0).toBeGreaterThan(0),
  )

  it("every run checks owner tokens", () => {
    for (const s of Object.values(sets))
      expect(s.counters["tokens:grantsChecked"] ?? 0).toBeGreaterThan(s.runs)
  })
})
