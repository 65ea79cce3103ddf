/**
 * Availability with real processes on a real Redis (issue 19, "How it is
 * shown"; docs/protocol.md rules 20-22, docs/runtime.md "Measured on
 * Redis"). Four member processes ("pods", test/redis/procs/member.ts) of one
 * group consume while this process produces keyed messages; each scenario
 * hits one thing and checks, from the OTHER pods' lines, that the fault cost
 * only what it must:
 *
 * - the coordinator's pod (the one whose latest coordinator event is
 *   `coordinatorElected`) is killed (kill -9), paused (SIGSTOP) past the
 *   coordinator lease but shorter than the session, paused past the session,
 *   or stopped gracefully (SIGTERM): no other pod revokes, loses (`lost`,
 *   `leaseLost`) or rejoins anything, a successor serves, and the others'
 *   shards keep being handled (their longest gap stays below the session);
 *   a short pause costs the paused pod no rejoin either; a graceful stop's
 *   shards reach their next owners (handoff latency) as an ordinary pod's
 *   do;
 * - Redis restarts (AOF), pauses (SIGSTOP) past the members' lease, or
 *   every client connection is killed (CLIENT KILL), each shorter than the
 *   session: no pod rejoins (`joined` once per pod), a pod may lose its
 *   lease and resume (`leaseLost`, `leaseRegained`; after the pause at
 *   least one does), nothing is revoked;
 * - the wall clock of the coordinator's pod and of another pod is stepped
 *   an hour forward, then back (processes started with a patched
 *   `Date.now`): no expiry, no self-fence, no fence, no new coordinator; a
 *   pod killed while the clocks are an hour behind is still expired one
 *   session later.
 *
 * Every scenario ends with the checks of every process test: nothing lost
 * (every message handled, nothing pending), per-key order. Timing is only
 * reported (a table per scenario on stdout, all of them in
 * test-output/availability.{json,md}), except bounds that are protocol
 * properties, far from what a healthy run measures: a successor serves and a
 * gap ends within a session. The same scenarios run on one redis-server and
 * on a 3-node cluster, both with AOF (`appendfsync always`), so a restart
 * loses nothing.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import type { RedisServer } from "@shardline/redis-store/testing"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { RedisOptions } from "../../src/Redis.js"
import {
  COLLATERAL,
  eventsBetween,
  firstAfter,
  handoffsFrom,
  isCoordinator,
  joinsPerProc,
  longestGap,
  longestShardGap,
  quantile,
  realNow,
  trail,
} from "../support/availabilityChecks.js"
import { begins, ownedNow } from "../support/groupChecks.js"
import { buildMemberScript, type MemberProcess } from "../support/processes.js"
import { sleep, World, type WorldOptions } from "../support/processWorld.js"
import { eventually, useRedisCluster, useRedisServer } from "../support/redis.js"
import type { MemberProcessConfig } from "./procs/member.js"

const SESSION_MS = 4_000
const HEARTBEAT_MS = 300
/** Past the coordinator lease (defaultCoordinatorLeaseMs: 1 s here), well inside the session. */
const SHORT_PAUSE_MS = 2_000
const HOUR_MS = 3_600_000
const PODS = ["a", "b", "c", "d"]
/** Each wait polls for up to 60 s; a scenario has several. */
const SCENARIO_TIMEOUT_MS = 300_000

let script = ""
beforeAll(async () => {
  // a copy of its own: processes.test.ts may build the default one meanwhile
  script = await buildMemberScript("member-availability")
}, 120_000)

// -- what each scenario measured ------------------------------------------------

type Measured = Record<string, string | number>
const measured: Array<{ topology: string; scenario: string; values: Measured }> = []
const fmt = (v: string | number) => (typeof v === "number" ? String(Math.round(v)) : v)

/** Print what a scenario measured (a small table) and keep it for test-output/. */
const report = (topology: string, scenario: string, values: Measured): void => {
  measured.push({ topology, scenario, values })
  const rows = Object.entries(values).map(([k, v]) => `| ${k} | ${fmt(v)} |`)
  console.log(
    [`\n### ${scenario} (${topology})`, "", "| measured | value |", "|---|---:|", ...rows].join(
      "\n",
    ),
  )
}

afterAll(() => {
  if (measured.length === 0) return
  const dir = path.resolve(import.meta.dirname, "../../test-output")
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    path.join(dir, "availability.json"),
    `${JSON.stringify({ date: new Date().toISOString(), measured }, null, 2)}\n`,
  )
  writeFileSync(
    path.join(dir, "availability.md"),
    measured
      .map(({ topology, scenario, values }) =>
        [
          `### ${scenario} (${topology})`,
          "",
          "| measured | value |",
          "|---|---:|",
          ...Object.entries(values).map(([k, v]) => `| ${k} | ${fmt(v)} |`),
          "",
        ].join("\n"),
      )
      .join("\n"),
  )
})

// -- helpers -----------------------------------------------------------------------

/** The one live pod whose latest coordinator event is an election (waits for it). */
const coordinatorPod = async (pods: ReadonlyArray<MemberProcess>): Promise<MemberProcess> => {
  let found: Array<MemberProcess> = []
  await eventually("exactly one pod coordinates the group", () => {
    found = pods.filter((p) => p.child.exitCode === null && isCoordinator(p.lines))
    return found.length === 1
  })
  return found[0]!
}

const linesOf = (procs: ReadonlyArray<MemberProcess>) => procs.flatMap((p) => p.lines)

/** The first election on one of `procs` at or after `from` (waits for it). */
const successorAfter = async (procs: ReadonlyArray<MemberProcess>, from: number) => {
  await eventually("a successor coordinator on another pod", () =>
    procs.some((p) => p.lines.some((l) => l.ev === "coordinatorElected" && l.t >= from)),
  )
  return firstAfter(linesOf(procs), from, (l) => l.ev === "coordinatorElected")!
}

/** Every shard was handled again after `from` (a begin line of each shard). */
const everyShardHandledAfter = (w: World, from: number, what: string) =>
  eventually(what, () => {
    const seen = new Set(
      begins(w.lines)
        .filter((l) => l.t > from)
        .map((l) => l.shard),
    )
    return seen.size === w.shards
  })

/** Heartbeats of `procs` not answered NONE after `from` (transport errors, NOT_COORDINATOR, ...). */
const failedHeartbeats = (procs: ReadonlyArray<MemberProcess>, from: number) =>
  linesOf(procs).filter((l) => l.ev === "heartbeat" && l.t >= from)

const gapValue = (gap: ReturnType<typeof longestGap>) =>
  gap === undefined ? "none" : `${Math.round(gap.ms)} ms (${gap.proc}, shard ${gap.shard})`

/** No collateral on `others` from `from` on: no revoke, loss, suspension or rejoin. */
const expectNoCollateral = (others: ReadonlyArray<MemberProcess>, from: number) =>
  expect(
    eventsBetween(linesOf(others), COLLATERAL, from).join("\n"),
    "collateral on other pods",
  ).toBe("")

const scenarios = (
  topology: string,
  redis: () => RedisOptions,
  servers: () => ReadonlyArray<RedisServer>,
) => {
  let world: World | undefined
  const make = (options: WorldOptions = {}) => {
    world = new World(redis(), { script, prefix: "avail", ...options })
    return world
  }
  afterEach(async () => {
    await world?.close()
    world = undefined
  })

  /** Four pods own every shard, the producer writes, the group is steady. */
  const steadyGroup = async (
    w: World,
    overrides: (id: string) => Partial<MemberProcessConfig> = () => ({}),
  ) => {
    const pods = PODS.map((id) =>
      w.spawn(id, {
        sessionTimeoutMs: SESSION_MS,
        heartbeatIntervalMs: HEARTBEAT_MS,
        ...overrides(id),
      }),
    )
    await w.settled(pods, "4 pods own every shard")
    await w.startProduction()
    await sleep(1_500)
    return pods
  }

  it(
    "kill -9 of the coordinator's pod: a successor serves, no other pod loses, revokes or rejoins anything",
    async () => {
      const w = make()
      const pods = await steadyGroup(w)
      const hit = await coordinatorPod(pods)
      const others = pods.filter((p) => p !== hit)
      const hitShards = [...ownedNow(hit.lines)]
      const from = realNow()
      hit.signal("SIGKILL")
      await hit.exited
      const successor = await successorAfter(others, from)
      await w.settled(others, "the other pods own every shard")
      const reassigned = firstAfter(
        linesOf(others),
        from,
        (l) => l.ev === "assigned" && hitShards.includes(l.shard as number),
      )!
      await sleep(1_000)
      const to = realNow()
      await w.drained()
      w.commonChecks()
      expectNoCollateral(others, from)
      const gap = longestGap(others, from, to)
      report(topology, "kill -9 of the coordinator's pod", {
        "successor serves after (ms)": successor.t - from,
        successor: successor.proc,
        "collateral revocations / fences / rejoins on other pods": 0,
        "longest gap on other pods' shards": gapValue(gap),
        "killed pod's shards reassigned after (ms, its session)": reassigned.t - from,
        "heartbeats not answered NONE on other pods": failedHeartbeats(others, from).length,
        messages: w.produced,
      })
      expect(successor.t - from).toBeLessThan(SESSION_MS)
      expect(gap?.ms ?? 0).toBeLessThan(SESSION_MS)
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "SIGSTOP of the coordinator's pod past the coordinator lease, shorter than the session: nobody loses or rejoins anything",
    async () => {
      const w = make()
      const pods = await steadyGroup(w)
      const hit = await coordinatorPod(pods)
      const others = pods.filter((p) => p !== hit)
      const hitShards = [...ownedNow(hit.lines)].sort()
      const from = realNow()
      hit.signal("SIGSTOP")
      await sleep(SHORT_PAUSE_MS)
      const contAt = realNow()
      hit.signal("SIGCONT")
      const successor = await successorAfter(others, from)
      await eventually("the paused pod writes again", () => hit.lines.some((l) => l.t > contAt))
      await everyShardHandledAfter(w, contAt, "every shard handled after SIGCONT")
      await sleep(1_000)
      const to = realNow()
      await w.drained()
      w.commonChecks()
      expectNoCollateral(others, from)
      // shorter than the session: the paused pod keeps its membership and shards
      expect(
        joinsPerProc([hit])[hit.proc],
        `the paused pod never rejoined; what it logged:\n${trail([hit], from - 1_000)}`,
      ).toBe(1)
      expect([...ownedNow(hit.lines)].sort()).toEqual(hitShards)
      expect(
        eventsBetween(hit.lines, new Set(["revoking", "revoked", "superseded"]), from).join("\n"),
      ).toBe("")
      const gap = longestGap(others, from, to)
      const ownGap = longestGap([hit], from, to)
      report(topology, `SIGSTOP ${SHORT_PAUSE_MS} ms of the coordinator's pod`, {
        "paused (ms)": contAt - from,
        "successor serves after (ms)": successor.t - from,
        successor: successor.proc,
        "collateral revocations / fences / rejoins on other pods": 0,
        "longest gap on other pods' shards": gapValue(gap),
        "paused pod: rejoins": 0,
        "paused pod: leaseLost": hit.lines.filter((l) => l.ev === "leaseLost" && l.t >= from)
          .length,
        "paused pod: longest gap on its shards": gapValue(ownGap),
        "heartbeats not answered NONE on other pods": failedHeartbeats(others, from).length,
        messages: w.produced,
      })
      expect(successor.t - from).toBeLessThan(SESSION_MS)
      expect(gap?.ms ?? 0).toBeLessThan(SESSION_MS)
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "the coordinator paused, its successor paused while it resumes: the lease holder serves (rule 25)",
    async () => {
      // two candidates (a, b); c and d are members only, so the resumed
      // coordinator is the one that takes the lease again
      const w = make()
      const pods = await steadyGroup(w, (id) =>
        id === "a" || id === "b" ? {} : { coordinator: "standalone" },
      )
      const first = await coordinatorPod(pods)
      const second = pods.find(
        (p) => p !== first && (p.proc.startsWith("a#") || p.proc.startsWith("b#")),
      )!
      const from = realNow()
      first.signal("SIGSTOP")
      // the other candidate takes the lease and claims the group's serve (before its event)
      await eventually("the other candidate coordinates", () =>
        second.lines.some((l) => l.ev === "coordinatorElected" && l.t >= from),
      )
      second.signal("SIGSTOP")
      // its lease (1 s) runs out while it is stopped; the first resumes and
      // takes the lease again, its serve replaced by the second's claim
      await sleep(SHORT_PAUSE_MS)
      const firstBack = realNow()
      first.signal("SIGCONT")
      await sleep(SHORT_PAUSE_MS)
      const bothBack = realNow()
      second.signal("SIGCONT")
      // before rule 25 nobody served from here on: the first renewed a lease it served nothing under
      await everyShardHandledAfter(w, bothBack, "every shard handled after both candidates resumed")
      const served = firstAfter(linesOf(pods), bothBack, (l) => l.ev === "begin")!
      await sleep(1_000)
      await w.drained()
      w.commonChecks()
      const restarts = linesOf(pods).filter(
        (l) => l.ev === "coordinatorServeRestarted" && l.t >= from,
      )
      const unavailable = linesOf(pods).filter(
        (l) => l.ev === "coordinatorUnavailable" && l.t >= from,
      )
      report(topology, "coordinator paused, then its successor while it resumes", {
        "first resumed after (ms)": firstBack - from,
        "second resumed after (ms)": bothBack - from,
        "handled again after the second resumed (ms)": served.t - bothBack,
        "serves restarted under a held lease": restarts.map((l) => l.proc).join(" ") || "none",
        "members told no coordinator serves": unavailable.length,
        messages: w.produced,
      })
      // exactly one candidate coordinates at the end, and it answers
      await coordinatorPod(pods)
      expect(served.t - bothBack).toBeLessThan(SESSION_MS)
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "a starved coordinator (SIGSTOP 300-500 ms, again and again for 10 s): no other pod loses, revokes or rejoins anything",
    async () => {
      const w = make()
      const pods = await steadyGroup(w)
      const hit = await coordinatorPod(pods)
      const others = pods.filter((p) => p !== hit)
      const from = realNow()
      // a CPU-starved or GC-bound process: stopped 300-500 ms, running 100-300 ms
      let stops = 0
      let stoppedMs = 0
      while (realNow() - from < 10_000) {
        const pause = 300 + ((stops * 137) % 201)
        hit.signal("SIGSTOP")
        await sleep(pause)
        hit.signal("SIGCONT")
        stops++
        stoppedMs += pause
        await sleep(100 + ((stops * 89) % 201))
      }
      const to = realNow()
      await everyShardHandledAfter(w, to, "every shard handled after the starvation")
      await sleep(1_000)
      await w.drained()
      w.commonChecks()
      const elections = linesOf(pods).filter(
        (l) => l.ev === "coordinatorElected" && l.t >= from,
      ).length
      const gap = longestGap(others, from, to)
      report(topology, "a starved coordinator (repeated SIGSTOP 300-500 ms)", {
        stops,
        "stopped (ms of 10,000)": stoppedMs,
        "elections meanwhile": elections,
        "collateral revocations / fences / rejoins on other pods": eventsBetween(
          linesOf(others),
          COLLATERAL,
          from,
        ).length,
        "longest gap on other pods' shards": gapValue(gap),
        "heartbeats not answered NONE on other pods": failedHeartbeats(others, from).length,
        messages: w.produced,
      })
      expectNoCollateral(others, from)
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "SIGSTOP of the coordinator's pod past the session: only its own shards move; it rejoins after SIGCONT",
    async () => {
      const w = make()
      const pods = await steadyGroup(w)
      const hit = await coordinatorPod(pods)
      const others = pods.filter((p) => p !== hit)
      const hitShards = [...ownedNow(hit.lines)]
      const from = realNow()
      hit.signal("SIGSTOP")
      const successor = await successorAfter(others, from)
      // its session ends while it is stopped: its shards go to the others
      await w.settled(others, "the other pods own every shard while it is stopped")
      const reassigned = firstAfter(
        linesOf(others),
        from,
        (l) => l.ev === "assigned" && hitShards.includes(l.shard as number),
      )!
      await sleep(500)
      const contAt = realNow()
      hit.signal("SIGCONT")
      await eventually("the paused pod rejoins", () =>
        hit.lines.some((l) => l.ev === "joined" && l.t > contAt),
      )
      await w.settled(pods, "4 pods own every shard again")
      await sleep(1_000)
      await w.drained()
      w.commonChecks()
      // while it was stopped nothing but its own shards moved
      expect(
        eventsBetween(linesOf(others), COLLATERAL, from, contAt).join("\n"),
        "collateral on other pods while it was stopped",
      ).toBe("")
      // after SIGCONT the others only give it its share back
      expect(
        eventsBetween(
          linesOf(others),
          new Set(["lost", "leaseLost", "joined", "superseded", "staleOwner", "handlerStuck"]),
          from,
        ).join("\n"),
        "fences, suspensions or rejoins on other pods",
      ).toBe("")
      const givenBack = linesOf(others).filter((l) => l.ev === "revoking" && l.t > contAt)
      for (const r of givenBack)
        expect(
          firstAfter(w.lines, r.t, (l) => l.ev === "assigned" && l.shard === r.shard)?.proc,
          `shard ${r.shard} revoked from ${r.proc} after SIGCONT goes to the rejoined pod`,
        ).toBe(hit.proc)
      const gap = longestGap(others, from, contAt)
      report(topology, "SIGSTOP of the coordinator's pod past the session", {
        "paused (ms)": contAt - from,
        "successor serves after (ms)": successor.t - from,
        successor: successor.proc,
        "paused pod's shards reassigned after (ms, its session)": reassigned.t - from,
        "collateral revocations / fences / rejoins on other pods while paused": 0,
        "shards given back to the rejoined pod": givenBack.length,
        "longest gap on other pods' shards while paused": gapValue(gap),
        messages: w.produced,
      })
      expect(successor.t - from).toBeLessThan(SESSION_MS)
      expect(gap?.ms ?? 0).toBeLessThan(SESSION_MS)
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "SIGTERM of the coordinator's pod: it hands over at once, its shards move as fast as an ordinary pod's",
    async () => {
      const w = make()
      const pods = await steadyGroup(w)
      const hit = await coordinatorPod(pods)
      const others = pods.filter((p) => p !== hit)
      const from = realNow()
      expect(await hit.stop()).toEqual({ code: 0, signal: null })
      const stopMs = hit.lines.find((l) => l.ev === "exit")!.stopMs as number
      const successor = await successorAfter(others, from)
      await w.settled(others, "the other pods own every shard")
      await sleep(500)
      // then an ordinary pod stops the same way, for comparison
      const ordinary = others.find((p) => !isCoordinator(p.lines))!
      const rest = others.filter((p) => p !== ordinary)
      const ordinaryFrom = realNow()
      expect(await ordinary.stop()).toEqual({ code: 0, signal: null })
      const ordinaryStopMs = ordinary.lines.find((l) => l.ev === "exit")!.stopMs as number
      await w.settled(rest, "the remaining pods own every shard")
      await sleep(500)
      await w.drained()
      w.commonChecks()
      // the ordinary pod's own stop revokes its shards: only before it counts
      expectNoCollateral(rest, from)
      expect(
        eventsBetween(ordinary.lines, COLLATERAL, from, ordinaryFrom).join("\n"),
        "collateral on the ordinary pod before its own stop",
      ).toBe("")
      const coordinatorHandoffs = handoffsFrom(w.lines, hit.proc, from)
      const ordinaryHandoffs = handoffsFrom(w.lines, ordinary.proc, ordinaryFrom)
      expect(coordinatorHandoffs.length).toBeGreaterThan(0)
      expect(ordinaryHandoffs.length).toBeGreaterThan(0)
      // graceful: every entry handled once
      expect(
        begins(w.lines)
          .filter((l) => (l.dc as number) > 1)
          .map((l) => `${l.proc} ${l.shard}/${l.id} dc=${l.dc}`)
          .join("\n"),
        "re-deliveries",
      ).toBe("")
      const gap = longestGap(others, from, ordinaryFrom)
      const ms = (xs: ReadonlyArray<number>) =>
        `${Math.round(quantile(xs, 0.5))} / ${Math.round(quantile(xs, 0.99))}`
      report(topology, "SIGTERM of the coordinator's pod, then of an ordinary pod", {
        "coordinator pod: runtime.stop() (ms)": stopMs,
        "coordinator pod: successor serves after (ms)": successor.t - from,
        "coordinator pod: handoffs": coordinatorHandoffs.length,
        "coordinator pod: revoked -> next owner assigned, p50 / p99 (ms)": ms(
          coordinatorHandoffs.map((h) => h.assignedMs),
        ),
        "coordinator pod: revoked -> next owner's first read, p50 / p99 (ms)": ms(
          coordinatorHandoffs.map((h) => h.firstReadMs),
        ),
        "ordinary pod: runtime.stop() (ms)": ordinaryStopMs,
        "ordinary pod: handoffs": ordinaryHandoffs.length,
        "ordinary pod: revoked -> next owner assigned, p50 / p99 (ms)": ms(
          ordinaryHandoffs.map((h) => h.assignedMs),
        ),
        "ordinary pod: revoked -> next owner's first read, p50 / p99 (ms)": ms(
          ordinaryHandoffs.map((h) => h.firstReadMs),
        ),
        "collateral revocations / fences / rejoins on other pods": 0,
        "longest gap on other pods' shards": gapValue(gap),
        messages: w.produced,
      })
      expect(successor.t - from).toBeLessThan(SESSION_MS)
      expect(stopMs).toBeLessThan(SESSION_MS)
      expect(gap?.ms ?? 0).toBeLessThan(SESSION_MS)
    },
    SCENARIO_TIMEOUT_MS,
  )

  /**
   * A blip of Redis shorter than the session: nobody rejoins or revokes;
   * leases may lapse and resume (`lapses`: at least one must, rule 22).
   */
  const blip = (name: string, fault: () => Promise<void>, lapses = false) =>
    it(
      `${name}, shorter than the session: no rejoin, no revocation, nothing lost`,
      async () => {
        const w = make({ retrySends: true })
        const pods = await steadyGroup(w)
        const from = realNow()
        await fault()
        const back = realNow()
        await everyShardHandledAfter(w, back, "every shard handled after the blip")
        await sleep(1_500)
        const to = realNow()
        await w.drained()
        w.commonChecks()
        const joins = joinsPerProc(pods)
        // a rejoin is rare: the message says what every pod logged from a second before the fault
        expect(
          joins,
          `each pod joined once; what the pods logged:\n${trail(pods, from - 1_000)}`,
        ).toEqual(Object.fromEntries(pods.map((p) => [p.proc, 1])))
        expect(
          eventsBetween(
            w.lines.filter((l) => l.ev !== "lost" || l.reason !== "lease-lost"),
            new Set(["revoking", "revoked", "lost", "superseded", "staleOwner", "handlerStuck"]),
            from,
          ).join("\n"),
          "revocations or fences",
        ).toBe("")
        if (lapses)
          expect(
            pods.filter((p) => p.has((l) => l.ev === "leaseLost")).length,
            "pods whose lease lapsed",
          ).toBeGreaterThan(0)
        // every lost lease came back
        for (const p of pods)
          expect(
            p.lines.filter((l) => l.ev === "leaseRegained").length,
            `${p.proc} regained every lease it lost`,
          ).toBe(p.lines.filter((l) => l.ev === "leaseLost").length)
        const gap = longestShardGap(w.lines, w.shards, from, to)
        const elected = firstAfter(w.lines, from, (l) => l.ev === "coordinatorElected")
        report(topology, name, {
          "outage: fault until every node answers (cluster: serves every slot) (ms)": back - from,
          rejoins: 0,
          "revocations / fences": 0,
          "pods whose lease lapsed (leaseLost, then leaseRegained)": pods.filter((p) =>
            p.has((l) => l.ev === "leaseLost"),
          ).length,
          "coordinator elected after the blip (ms)":
            elected === undefined
              ? "no new election"
              : `${Math.round(elected.t - from)} (${elected.proc})`,
          "longest time a shard went unhandled": gapValue(gap),
          "first handling of every shard after it (ms)": Math.max(
            ...Array.from(
              { length: w.shards },
              (_, s) =>
                firstAfter(w.lines, back, (l) => l.ev === "begin" && l.shard === s)!.t - back,
            ),
          ),
          "heartbeats not answered NONE": failedHeartbeats(pods, from).length,
          "producer batches sent again": w.resends,
          messages: w.produced,
        })
        // once Redis is back, no shard waits out a session
        expect(gap?.ms ?? 0).toBeLessThan(back - from + SESSION_MS)
      },
      SCENARIO_TIMEOUT_MS,
    )

  blip("Redis restart (AOF)", async () => {
    await Promise.all(servers().map((s) => s.restart()))
    // a cluster is back once every node sees every slot served again
    if (servers().length > 1)
      await eventually("cluster_state:ok on every node", () =>
        servers().every((s) => s.cli("CLUSTER", "INFO").includes("cluster_state:ok")),
      )
  })

  // past the members' lease (session minus a fifth: 3.2 s), shorter than the
  // session: every member suspends and resumes with its epoch (rule 22)
  blip(
    "Redis paused (SIGSTOP) 3.6 s, past the members' lease",
    async () => {
      for (const s of servers()) process.kill(s.pid, "SIGSTOP")
      await sleep(3_600)
      for (const s of servers()) process.kill(s.pid, "SIGCONT")
      if (servers().length > 1)
        await eventually("cluster_state:ok on every node", () =>
          servers().every((s) => s.cli("CLUSTER", "INFO").includes("cluster_state:ok")),
        )
    },
    true,
  )

  blip("CLIENT KILL of every client", async () => {
    for (const s of servers()) {
      s.cli("CLIENT", "KILL", "TYPE", "normal")
      s.cli("CLIENT", "KILL", "TYPE", "pubsub")
    }
  })

  it(
    "wall-clock steps of an hour both ways on the coordinator's pod and another pod: no expiry, no fence, no new coordinator",
    async () => {
      const w = make()
      const dir = mkdtempSync(path.join(os.tmpdir(), "shardline-clock-"))
      const clockFile = (id: string) => path.join(dir, id)
      try {
        const pods = await steadyGroup(w, (id) => ({ clockFile: clockFile(id) }))
        const coordinator = await coordinatorPod(pods)
        const [member, victim] = pods.filter((p) => p !== coordinator)
        const stepped = [coordinator, member!]
        const step = async (offsetMs: number) => {
          const at = realNow()
          for (const p of stepped) writeFileSync(clockFile(p.config.memberId), String(offsetMs))
          for (const p of stepped)
            await p.waitFor(
              `${p.proc} clock at ${offsetMs}`,
              (l) => l.ev === "clock" && l.offsetMs === offsetMs && l.t >= at - 100,
            )
        }
        const from = realNow()
        await step(HOUR_MS)
        await sleep(SESSION_MS + 1_000)
        await step(-HOUR_MS)
        await sleep(SESSION_MS + 1_000)
        // an expiry still comes one session after the member stopped, an hour behind
        const victimShards = [...ownedNow(victim!.lines)]
        const killedAt = realNow()
        victim!.signal("SIGKILL")
        await victim!.exited
        const survivors = pods.filter((p) => p !== victim)
        await w.settled(
          survivors,
          "the killed pod's shards reassigned while clocks are an hour behind",
        )
        const reassigned = firstAfter(
          linesOf(survivors),
          killedAt,
          (l) => l.ev === "assigned" && victimShards.includes(l.shard as number),
        )!
        await step(0)
        await sleep(SESSION_MS + 1_000)
        const to = realNow()
        await w.drained()
        w.commonChecks()
        expectNoCollateral(survivors, from)
        expect(
          eventsBetween(victim!.lines, COLLATERAL, from).join("\n"),
          "collateral on the later victim before its kill",
        ).toBe("")
        expect(
          eventsBetween(w.lines, new Set(["coordinatorElected", "coordinatorResigned"]), from).join(
            "\n",
          ),
          "coordinator changes",
        ).toBe("")
        const gap = longestGap(survivors, from, to)
        report(
          topology,
          "wall-clock steps (+1 h, -1 h, back) on the coordinator's pod and a member",
          {
            "stepped pods": stepped.map((p) => p.proc).join(", "),
            "expiries / self-fences / fences / rejoins": 0,
            "coordinator changes": 0,
            "pod killed at -1 h: shards reassigned after (ms, its session)":
              reassigned.t - killedAt,
            "longest gap on survivors' shards": gapValue(gap),
            messages: w.produced,
          },
        )
        // a backward step must not delay the expiry by the step
        expect(reassigned.t - killedAt).toBeLessThan(3 * SESSION_MS)
        expect(gap?.ms ?? 0).toBeLessThan(SESSION_MS)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    },
    SCENARIO_TIMEOUT_MS,
  )
}

describe("availability on one redis-server (AOF)", () => {
  const server = useRedisServer("redis7", { persistence: true })
  scenarios(
    "one node",
    () => ({ url: server().url }),
    () => [server()],
  )
})

describe("availability on a 3-node Redis Cluster (AOF)", () => {
  const cluster = useRedisCluster("redis7", { persistence: true })
  scenarios(
    "3-node cluster",
    () => ({ nodes: cluster().nodes.map((n) => `${n.host}:${n.port}`) }),
    () => cluster().servers,
  )
})
