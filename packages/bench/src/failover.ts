/**
 * Entry point: `pnpm --filter @shardline/bench run bench:failover`
 * (docs/runtime.md, "Measured on Redis"; docs/protocol.md rule 20).
 *
 * Four member processes ("pods", src/failoverMember.ts) of one group of 16
 * shards consume from Redis 7.0 (redis-server on a free loopback port,
 * through redis-store's test harness) while this process produces 400
 * messages/s. Each round starts four fresh pods on a stream of its own and
 * hits the pod whose latest coordinator event is `coordinatorElected`:
 *
 * - kill round: kill -9 of the coordinator's pod. Failover time: the kill to
 *   the first `coordinatorElected` on another pod. Members' handling gap:
 *   the longest time between two batches of one shard on the other pods'
 *   shards from the kill until two heartbeat intervals after the successor
 *   serves, beside the same measure over the steady consumption before the
 *   kill (two heartbeat intervals and a second). Collateral: revocations, losses, lapsed leases or
 *   rejoins on the other pods (0 is the aim).
 * - stop round: SIGTERM of the coordinator's pod, then, once its shards
 *   moved, SIGTERM of an ordinary pod of the same run. Handoff latency per
 *   shard: the stopping pod's `revoked` to the next owner's `assigned` (its
 *   read loop starts) and to its first batch; `runtime.stop()` of each.
 *
 * Two timings: the defaults (30 s session, 3 s heartbeats: a 6 s coordinator
 * lease) and the fast timing of the real-process tests (4 s session, 300 ms
 * heartbeats: 1 s). Writes results/failover.{json,md}. BENCH_ROUNDS
 * (default 5) rounds of each kind per timing; BENCH_TIMING=fast or
 * =defaults runs one timing only (results/failover-<timing>.*);
 * BENCH_DUMP=<dir> writes every round's lines there.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { fileURLToPath } from "node:url"
import { LayoutSource, start } from "@shardline/member-runtime"
import { startRedis } from "@shardline/redis-store/testing"
import type { FailoverMemberConfig } from "./failoverMember.js"
import {
  collateral,
  type Handoff,
  handoffsFrom,
  isCoordinator,
  type Line,
  longestGap,
  ownedAt,
  quantile,
} from "./failoverMetrics.js"

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)
const SHARDS = 16
const PODS = ["a", "b", "c", "d"]
const SCRIPT = fileURLToPath(new URL("./failoverMember.js", import.meta.url))

interface Timing {
  readonly name: string
  readonly sessionTimeoutMs: number
  readonly heartbeatIntervalMs: number
  readonly rebalanceTimeoutMs: number
}
const ALL_TIMINGS: ReadonlyArray<Timing> = [
  {
    name: "defaults (30 s session, 3 s heartbeats)",
    sessionTimeoutMs: 30_000,
    heartbeatIntervalMs: 3_000,
    rebalanceTimeoutMs: 60_000,
  },
  {
    name: "fast (4 s session, 300 ms heartbeats)",
    sessionTimeoutMs: 4_000,
    heartbeatIntervalMs: 300,
    rebalanceTimeoutMs: 8_000,
  },
]

const only = process.env.BENCH_TIMING
const TIMINGS = ALL_TIMINGS.filter((t) => only === undefined || t.name.startsWith(only))
if (TIMINGS.length === 0) throw new Error(`BENCH_TIMING=${only}: no such timing (defaults, fast)`)
const resultName = only === undefined ? "failover" : `failover-${only}`
const dump = process.env.BENCH_DUMP

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const now = () => performance.timeOrigin + performance.now()

const until = async (what: string, condition: () => boolean, timeoutMs = 120_000) => {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

class Pod {
  readonly lines: Array<Line> = []
  readonly child: ChildProcess
  readonly exited: Promise<void>
  private partial = ""
  private stderr = ""

  constructor(
    readonly proc: string,
    config: FailoverMemberConfig,
  ) {
    this.child = spawn(process.execPath, [SCRIPT, JSON.stringify(config)], {
      stdio: ["ignore", "pipe", "pipe"],
    })
    this.child.stdout!.setEncoding("utf8")
    this.child.stdout!.on("data", (chunk: string) => {
      const parts = (this.partial + chunk).split("\n")
      this.partial = parts.pop()!
      for (const part of parts)
        if (part.trim() !== "") this.lines.push({ ...JSON.parse(part), proc: this.proc })
    })
    this.child.stderr!.setEncoding("utf8")
    this.child.stderr!.on("data", (chunk: string) => {
      this.stderr += chunk
    })
    this.exited = new Promise((resolve) => this.child.on("close", () => resolve()))
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null
  }

  async kill(): Promise<void> {
    if (!this.alive) return
    this.child.kill("SIGKILL")
    await this.exited
  }

  failure(): string {
    return this.stderr.slice(-2_000)
  }
}

/** One round's world: a stream, four pods, a producer. */
const world = async (url: string, timing: Timing, round: string) => {
  const stream = `bench-failover-${process.pid}-${round}`
  const group = "bench"
  const pods = PODS.map(
    (id) =>
      new Pod(`${id}@${round}`, {
        url,
        stream,
        group,
        memberId: id,
        shardCount: SHARDS,
        sessionTimeoutMs: timing.sessionTimeoutMs,
        heartbeatIntervalMs: timing.heartbeatIntervalMs,
        rebalanceTimeoutMs: timing.rebalanceTimeoutMs,
      }),
  )
  const settled = (live: ReadonlyArray<Pod>) => {
    const owned = live.map((p) => ownedAt(p.lines, Number.POSITIVE_INFINITY))
    const all = owned.flatMap((o) => [...o])
    return owned.every((o) => o.size > 0) && all.length === SHARDS && new Set(all).size === SHARDS
  }
  try {
    await until(`4 pods own the ${SHARDS} shards`, () => settled(pods))
  } catch (error) {
    throw new Error(`${String(error)}\n${pods.map((p) => p.failure()).join("\n")}`)
  }
  const producerRuntime = await start({
    redis: { url },
    handleSignals: false,
    memberBase: "producer",
  })
  const producer = producerRuntime.producer(stream, {
    layout: LayoutSource.fixed({ [stream]: SHARDS }),
  })
  let producing = true
  let n = 0
  const production = (async () => {
    while (producing) {
      await producer.sendBatch(
        Array.from({ length: 16 }, () => ({ key: `k${n++ % 64}`, fields: { n: String(n) } })),
      )
      await sleep(40)
    }
  })()
  // steady state: a few heartbeats of consumption
  const steadyFrom = now() + 500
  await sleep(2 * timing.heartbeatIntervalMs + 1_000)
  const coordinator = pods.find((p) => isCoordinator(p.lines))
  if (coordinator === undefined) throw new Error("no pod coordinates the group")
  return {
    pods,
    coordinator,
    settled,
    steadyFrom,
    close: async () => {
      if (dump !== undefined)
        writeFileSync(`${dump}/${stream}.json`, JSON.stringify(pods.flatMap((p) => p.lines)))
      producing = false
      await production.catch(() => {})
      await producerRuntime.stop().catch(() => {})
      await Promise.all(pods.map((p) => p.kill()))
    },
  }
}

interface KillSample {
  readonly failoverMs: number
  readonly gapMs: number
  readonly steadyGapMs: number
  readonly collateral: number
}

const killRound = async (url: string, timing: Timing, round: string): Promise<KillSample> => {
  const w = await world(url, timing, round)
  try {
    const others = w.pods.filter((p) => p !== w.coordinator)
    const from = now()
    await w.coordinator.kill()
    await until("a successor", () =>
      others.some((p) => p.lines.some((l) => l.ev === "coordinatorElected" && l.t >= from)),
    )
    const elected = others
      .flatMap((p) => p.lines)
      .filter((l) => l.ev === "coordinatorElected" && l.t >= from)
      .sort((a, b) => a.t - b.t)[0]!
    // members answered by the successor: two heartbeat intervals after it serves
    const to = elected.t + 2 * timing.heartbeatIntervalMs + 1_000
    await sleep(Math.max(0, to - now()))
    const lines = others.map((p) => p.lines)
    return {
      failoverMs: elected.t - from,
      gapMs: longestGap(lines, from, to),
      steadyGapMs: longestGap(lines, w.steadyFrom, from, 0),
      collateral: collateral(lines.flat(), from).length,
    }
  } finally {
    await w.close()
  }
}

interface StopSample {
  readonly stopMs: number
  readonly successorMs: number | undefined
  readonly handoffs: ReadonlyArray<Handoff>
  readonly collateral: number
}

const stop = async (pod: Pod): Promise<number> => {
  pod.child.kill("SIGTERM")
  await pod.exited
  const exit = pod.lines.find((l) => l.ev === "exit")
  if (exit === undefined) throw new Error(`${pod.proc} did not stop gracefully\n${pod.failure()}`)
  return exit.stopMs!
}

const stopRound = async (
  url: string,
  timing: Timing,
  round: string,
): Promise<{ readonly coordinator: StopSample; readonly ordinary: StopSample }> => {
  const w = await world(url, timing, round)
  try {
    const others = w.pods.filter((p) => p !== w.coordinator)
    const from = now()
    const stopMs = await stop(w.coordinator)
    await until("the others own every shard", () => w.settled(others))
    await sleep(1_000)
    const elected = others
      .flatMap((p) => p.lines)
      .filter((l) => l.ev === "coordinatorElected" && l.t >= from)
      .sort((a, b) => a.t - b.t)[0]
    const ordinary = others.find((p) => !isCoordinator(p.lines))!
    const rest = others.filter((p) => p !== ordinary)
    const ordinaryFrom = now()
    const ordinaryStopMs = await stop(ordinary)
    await until("the rest own every shard", () => w.settled(rest))
    await sleep(1_000)
    const all = w.pods.flatMap((p) => p.lines)
    return {
      coordinator: {
        stopMs,
        successorMs: elected === undefined ? undefined : elected.t - from,
        handoffs: handoffsFrom(all, w.coordinator.proc, from),
        collateral: collateral(
          others.flatMap((p) => p.lines),
          from,
          ordinaryFrom,
        ).length,
      },
      ordinary: {
        stopMs: ordinaryStopMs,
        successorMs: undefined,
        handoffs: handoffsFrom(all, ordinary.proc, ordinaryFrom),
        collateral: collateral(
          rest.flatMap((p) => p.lines),
          ordinaryFrom,
        ).length,
      },
    }
  } finally {
    await w.close()
  }
}

// ----------------------------------------------------------------------------

const server = await startRedis({ kind: "redis7" })
console.log(`on Redis ${server.version} (${server.url}), ${ROUNDS} rounds of each kind per timing`)
const results: Array<{
  readonly timing: Timing
  readonly kills: Array<KillSample>
  readonly stops: Array<{ readonly coordinator: StopSample; readonly ordinary: StopSample }>
}> = []
try {
  let rounds = 0
  for (const timing of TIMINGS) {
    const kills: Array<KillSample> = []
    const stops: Array<{ coordinator: StopSample; ordinary: StopSample }> = []
    for (let i = 0; i < ROUNDS; i++) {
      // alternate the two kinds of rounds
      const k = await killRound(server.url, timing, `${++rounds}k`)
      kills.push(k)
      console.log(
        `  ${timing.name} kill ${i + 1}: successor after ${Math.round(k.failoverMs)} ms, members' longest gap ${Math.round(k.gapMs)} ms (steady ${Math.round(k.steadyGapMs)} ms), collateral ${k.collateral}`,
      )
      const s = await stopRound(server.url, timing, `${++rounds}s`)
      stops.push(s)
      console.log(
        `  ${timing.name} stop ${i + 1}: coordinator pod handoffs ${s.coordinator.handoffs.map((h) => Math.round(h.assignedMs)).join(", ")} ms (stop ${Math.round(s.coordinator.stopMs)} ms), ordinary pod ${s.ordinary.handoffs.map((h) => Math.round(h.assignedMs)).join(", ")} ms (stop ${Math.round(s.ordinary.stopMs)} ms)`,
      )
    }
    results.push({ timing, kills, stops })
  }
} finally {
  await server.stop()
}

// ----------------------------------------------------------------------------

const round1 = (x: number) => Math.round(x * 10) / 10
const summary = (xs: ReadonlyArray<number>) => {
  const known = xs.filter((x) => !Number.isNaN(x))
  return {
    p50: round1(quantile(known, 0.5)),
    p99: round1(quantile(known, 0.99)),
    max: known.length === 0 ? Number.NaN : round1(Math.max(...known)),
    n: known.length,
  }
}
const stopSummary = (samples: ReadonlyArray<StopSample>) => ({
  handoffAssignedMs: summary(samples.flatMap((s) => s.handoffs.map((h) => h.assignedMs))),
  handoffFirstReadMs: summary(samples.flatMap((s) => s.handoffs.map((h) => h.firstReadMs))),
  stopMs: summary(samples.map((s) => s.stopMs)),
  successorMs: summary(
    samples.flatMap((s) => (s.successorMs === undefined ? [] : [s.successorMs])),
  ),
  collateral: samples.reduce((n, s) => n + s.collateral, 0),
})
const out = {
  command: `${ROUNDS === 5 ? "" : `BENCH_ROUNDS=${ROUNDS} `}${only === undefined ? "" : `BENCH_TIMING=${only} `}pnpm --filter @shardline/bench run bench:failover`,
  date: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  server: `Redis ${server.version}`,
  shape: { pods: PODS.length, shards: SHARDS, messagesPerSecond: 400, rounds: ROUNDS },
  timings: results.map((r) => ({
    timing: r.timing,
    kill: {
      failoverMs: summary(r.kills.map((k) => k.failoverMs)),
      gapMs: summary(r.kills.map((k) => k.gapMs)),
      steadyGapMs: summary(r.kills.map((k) => k.steadyGapMs)),
      collateral: r.kills.reduce((n, k) => n + k.collateral, 0),
    },
    coordinatorStop: stopSummary(r.stops.map((s) => s.coordinator)),
    ordinaryStop: stopSummary(r.stops.map((s) => s.ordinary)),
    samples: { kills: r.kills, stops: r.stops },
  })),
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL(`${resultName}.json`, dir), `${JSON.stringify(out, null, 2)}\n`)

const ms = (s: { p50: number; p99: number }) => `${Math.round(s.p50)} / ${Math.round(s.p99)}`
const md = `# Coordinator failover and handoffs on Redis

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores shared with other work, ${out.date}), ${out.server}.
${PODS.length} member processes ("pods") of one group of ${SHARDS} shards, 400 messages/s produced; every round starts
fresh pods on a stream of its own and hits the pod that coordinates the group (embedded coordinator).
${ROUNDS} rounds of each kind per timing; p50 / p99 are nearest-rank over every round's samples (p99 of a few dozen
samples is their maximum).

## kill -9 of the coordinator's pod

Failover: the kill to the first \`coordinatorElected\` on another pod. Members' longest gap: the longest time between
two batches of one shard, over the other pods' shards, from the kill until two heartbeat intervals after the
successor served; steady: the same over the steady consumption before the kill (two heartbeat intervals and a second). Collateral: revocations, losses, lapsed
leases or rejoins on the other pods.

| timing | coordinator lease | failover p50 / max | members' longest gap p50 / max | steady gap p50 / max | collateral |
|---|---:|---:|---:|---:|---:|
${out.timings
  .map(
    (t) =>
      `| ${t.timing.name} | ${Math.max(1_000, Math.min(2 * t.timing.heartbeatIntervalMs, Math.floor(t.timing.sessionTimeoutMs / 4)))} ms | ${Math.round(t.kill.failoverMs.p50)} / ${Math.round(t.kill.failoverMs.max)} ms | ${Math.round(t.kill.gapMs.p50)} / ${Math.round(t.kill.gapMs.max)} ms | ${Math.round(t.kill.steadyGapMs.p50)} / ${Math.round(t.kill.steadyGapMs.max)} ms | ${t.kill.collateral} |`,
  )
  .join("\n")}

## Graceful stop (SIGTERM): the coordinator's pod, then an ordinary pod of the same run

Handoff: the stopping pod's \`revoked\` (drained) to the next owner's \`assigned\` (its read loop starts) and to its
first batch of the shard. Successor: SIGTERM to the first \`coordinatorElected\` elsewhere.

| timing | pod stopped | handoffs | revoked -> assigned p50 / p99 | revoked -> first batch p50 / p99 | \`runtime.stop()\` p50 / max | successor serves p50 / max | collateral |
|---|---|---:|---:|---:|---:|---:|---:|
${out.timings
  .flatMap((t) =>
    (
      [
        ["coordinator's", t.coordinatorStop],
        ["ordinary", t.ordinaryStop],
      ] as const
    ).map(
      ([name, s]) =>
        `| ${t.timing.name} | ${name} | ${s.handoffAssignedMs.n} | ${ms(s.handoffAssignedMs)} ms | ${ms(s.handoffFirstReadMs)} ms | ${Math.round(s.stopMs.p50)} / ${Math.round(s.stopMs.max)} ms | ${s.successorMs.n === 0 ? "" : `${Math.round(s.successorMs.p50)} / ${Math.round(s.successorMs.max)} ms`} | ${s.collateral} |`,
    ),
  )
  .join("\n")}
`
writeFileSync(new URL(`${resultName}.md`, dir), md)
console.log(md)
