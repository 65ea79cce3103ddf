/**
 * Master failures on a real 3 + 3 Redis Cluster (3 masters, one replica
 * each) with real member and producer processes (issue 32, items 3 and 4;
 * docs/redis.md, "Recommended settings" and "Durability"; docs/protocol.md
 * rules 27 and 28). The cluster runs with the settings docs/redis.md
 * recommends: `cluster-require-full-coverage no`, `cluster-node-timeout`
 * 2,000 ms, AOF (`appendfsync always`).
 *
 * The victim is a master that holds neither the group's control-plane slot
 * (`group:{<stream>:<group>}`: the coordinator's lease, heartbeats, the
 * Store) nor the stream's layout record nor the schema key: the stream name
 * is chosen so. It holds some of the 16 shards. Four member pods consume
 * (session 10 s, heartbeats every 500 ms);
 * a producer process sends with `durability: { replicas: 1 }`, one send
 * loop per key, every send confirmed or retried with the same id.
 *
 * - kill -9 of the victim: its replica takes over; no pod revokes, loses or
 *   rejoins anything (0 collateral, from every pod's lines); the victim's
 *   shards are handled again within a generous bound after the promotion;
 *   every confirmed send is in its shard stream and handled, per-key order
 *   holds.
 * - SIGSTOP of the victim past `cluster-node-timeout`, then SIGCONT (it
 *   comes back as a replica): the same.
 * - a pod killed, and the victim SIGSTOPped just before the pod's expiry
 *   frees its shards (some on the victim): the grant of a victim's shard
 *   writes its owner token to the hung master, outside the coordinator's
 *   lock (docs/protocol.md rule 31), so the other pods lose nothing and
 *   their shards and heartbeats are not held up (the slowest answers of
 *   the grantees and of the rest are reported apart).
 * - `CLUSTER FAILOVER` on the victim's replica (manual, graceful; the
 *   victim stays up as a replica): the same, and no shard has two owners
 *   at once nor is handled by a pod that does not own it.
 * - Without durability, kill -9 of a master under a producer alone: the
 *   confirmed sends that died with it are counted, not asserted.
 *
 * What each fault cost is printed as a table and kept in
 * test-output/cluster-failover.{json,md} (docs/redis.md's stall table);
 * each scenario's pod lines in test-output/cluster-failover-<name>.lines.json.
 * `SHARDLINE_FULL_COVERAGE=yes` runs the cluster with Redis' default
 * (`cluster-require-full-coverage yes`) to show what that setting costs.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import path from "node:path"
import { Layout } from "@shardline/core"
import { Keys } from "@shardline/redis-store"
import type { RedisServer } from "@shardline/redis-store/testing"
import { Cluster } from "ioredis"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { RedisOptions } from "../../src/Redis.js"
import {
  COLLATERAL,
  eventsBetween,
  longestShardGap,
  realNow,
} from "../support/availabilityChecks.js"
import {
  handledOutsideOwnership,
  overlappingOwners,
  ownershipIntervals,
  perKeyOrderViolations,
  storedChecks,
} from "../support/groupChecks.js"
import {
  buildMemberScript,
  type Line,
  type MemberProcess,
  ProducerProcess,
} from "../support/processes.js"
import { sleep, World } from "../support/processWorld.js"
import { eventually, useRedisCluster } from "../support/redis.js"
import { shardEntries } from "../support/shardEntries.js"

const SESSION_MS = 10_000
const HEARTBEAT_MS = 500
const SHARDS = 16
const PODS = ["a", "b", "c", "d"]
/** Two keys per shard (so every shard, the victim's included, has traffic). */
const KEYS = (() => {
  const generation = { generation: 0, firstShard: 0, shardCount: SHARDS }
  const perShard = new Map<number, number>()
  const keys: Array<string> = []
  for (let i = 0; keys.length < 2 * SHARDS; i++) {
    const shard = Layout.shardOf(generation, `k${i}`)
    if ((perShard.get(shard) ?? 0) >= 2) continue
    perShard.set(shard, (perShard.get(shard) ?? 0) + 1)
    keys.push(`k${i}`)
  }
  return keys
})()
/** `cluster-node-timeout` of the test cluster (redis-store's `clusterNodeArgs`). */
const NODE_TIMEOUT_MS = 2_000
/** Generous: the victim's shards are handled again this long after the promotion at most. */
const BACK_AFTER_PROMOTION_MS = 20_000
const DURABILITY = { replicas: 1, timeoutMs: 2_000 }
const SCENARIO_TIMEOUT_MS = 180_000
/** docs/redis.md, "Recommended settings" (the node timeout is redis-store's harness's). */
const RECOMMENDED = ["--cluster-require-full-coverage", process.env.SHARDLINE_FULL_COVERAGE ?? "no"]

let memberScript = ""
let producerScript = ""
beforeAll(async () => {
  memberScript = await buildMemberScript("member-cluster-failover")
  producerScript = await buildMemberScript("producer-cluster-failover", "producer")
}, 120_000)

// -- what each fault cost -----------------------------------------------------------

type Measured = Record<string, string | number>
const measured: Array<{ scenario: string; values: Measured }> = []
const fmt = (v: string | number) => (typeof v === "number" ? String(Math.round(v)) : v)
const report = (scenario: string, values: Measured): void => {
  measured.push({ scenario, values })
  console.log(
    [
      `\n### ${scenario}`,
      "",
      "| measured | value |",
      "|---|---:|",
      ...Object.entries(values).map(([k, v]) => `| ${k} | ${fmt(v)} |`),
    ].join("\n"),
  )
}
afterAll(() => {
  if (measured.length === 0) return
  const dir = path.resolve(import.meta.dirname, "../../test-output")
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    path.join(dir, "cluster-failover.json"),
    `${JSON.stringify({ date: new Date().toISOString(), measured }, null, 2)}\n`,
  )
  writeFileSync(
    path.join(dir, "cluster-failover.md"),
    measured
      .map(({ scenario, values }) =>
        [
          `### ${scenario}`,
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

/**
 * A scenario's pod lines (but each handling's end) with its marks, kept in
 * test-output/cluster-failover-<name>.lines.json: where a stall's time went.
 */
const keepLines = (name: string, lines: ReadonlyArray<Line>, marks: Record<string, number>) => {
  const dir = path.resolve(import.meta.dirname, "../../test-output")
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    path.join(dir, `cluster-failover-${name}.lines.json`),
    `${JSON.stringify({ marks, lines: lines.filter((l) => l.ev !== "done") })}\n`,
  )
}

// -- helpers ------------------------------------------------------------------------

/** Every entry of every shard stream, each shard's in stream order. */
const readShards = async (redis: { nodes: ReadonlyArray<string> }, stream: string) => {
  const client = new Cluster(redis.nodes.map((n) => n))
  client.on("error", () => {})
  try {
    return await shardEntries(client, stream, SHARDS)
  } finally {
    client.disconnect()
  }
}

/** The streams against the producer's log (support/groupChecks.ts `storedChecks`). */
const checkStored = (
  producer: ProducerProcess,
  byShard: ReadonlyArray<ReadonlyArray<{ n: number; key: string }>>,
) => {
  const confirmed = new Set(producer.confirmed().keys())
  return {
    confirmed: confirmed.size,
    ...storedChecks(confirmed, producer.producedByKey(), byShard),
  }
}

/** The master of each slot Shardline's group and stream keep outside the shards. */
const controlKeys = (stream: string, group: string) => [
  Keys.defaultKeys.groupBase({ stream, group }),
  Keys.defaultKeys.layoutKey(stream),
  Keys.defaultKeys.schema,
]

describe("master failures on a 3 + 3 Redis Cluster (recommended settings, AOF)", () => {
  const cluster = useRedisCluster("redis7", {
    persistence: true,
    replicas: 1,
    args: RECOMMENDED,
  })
  const redisOf = (durability: boolean) => ({
    nodes: cluster().nodes.map((n) => `${n.host}:${n.port}`),
    ...(durability ? { durability: DURABILITY } : {}),
  })

  let world: World | undefined
  let producer: ProducerProcess | undefined
  afterEach(async () => {
    await world?.close()
    await producer?.kill()
    world = undefined
    producer = undefined
    // every node back and in sync for the next scenario
    for (const s of cluster().servers) {
      s.resume()
      if (!s.running()) await s.restart()
    }
    await cluster().waitForHealthy(60_000)
  }, 120_000)

  /**
   * A stream whose control-plane keys are all away from one master that
   * holds some of its shards: that master is the victim.
   */
  const pickStream = (redis: RedisOptions) => {
    for (let i = 0; i < 200; i++) {
      const w = new World(redis, { script: memberScript, prefix: `fo${i}`, shards: SHARDS })
      const control = new Set(controlKeys(w.stream, w.group).map((k) => cluster().masterOf(k)))
      const shardMasters = Array.from({ length: SHARDS }, (_, s) =>
        cluster().masterOf(Keys.defaultKeys.shardKey(w.stream, s)),
      )
      const victim = cluster()
        .masters()
        .find((m) => !control.has(m) && shardMasters.includes(m))
      if (victim !== undefined) {
        const victimShards = shardMasters.flatMap((m, s) => (m === victim ? [s] : []))
        return { w, victim, victimShards }
      }
    }
    throw new Error("no stream name puts the control-plane keys away from a master")
  }

  const steadyGroup = async (durability: boolean) => {
    const redis = redisOf(durability)
    const picked = pickStream(redis)
    world = picked.w
    const pods = PODS.map((id) =>
      picked.w.spawn(id, { sessionTimeoutMs: SESSION_MS, heartbeatIntervalMs: HEARTBEAT_MS }),
    )
    await picked.w.settled(pods, "4 pods own every shard")
    producer = new ProducerProcess(
      {
        redis,
        stream: picked.w.stream,
        shardCount: SHARDS,
        keys: KEYS,
        first: 0,
        intervalMs: 40,
        retryMs: 100,
      },
      producerScript,
    )
    await producer.waitFor("producer ready", (l) => l.ev === "ready")
    // steady: every shard's messages are being handled
    const since = realNow()
    await eventually("every shard handled", () => {
      const seen = new Set(
        picked.w.lines.filter((l) => l.ev === "begin" && l.t > since).map((l) => l.shard),
      )
      return seen.size === SHARDS
    })
    await sleep(1_000)
    return { ...picked, pods, redis }
  }

  /** Stops the producer, waits until every confirmed send was handled, then checks the streams. */
  const finish = async (
    w: World,
    pods: ReadonlyArray<MemberProcess>,
    p: ProducerProcess,
    redis: { nodes: ReadonlyArray<string> },
  ) => {
    p.signal("SIGTERM")
    await p.waitFor("producer exit", (l) => l.ev === "exit", 60_000)
    const confirmed = p.confirmed()
    const handled = () => new Set(w.lines.filter((l) => l.ev === "done").map((l) => l.n as number))
    await eventually(
      `every confirmed send (${confirmed.size}) handled`,
      () => {
        const done = handled()
        return [...confirmed.keys()].every((n) => done.has(n))
      },
      60_000,
    )
    // reported, not asserted: in 2 of 4 SIGSTOP runs a few entries of the very
    // first batches (handled, long before the fault) stayed pending; not
    // explained yet (listed in the report of issue 32)
    let pending = 0
    await eventually(
      "no entry pending in any shard",
      async () => {
        pending = (await w.pending()).reduce((a, b) => a + b, 0)
        return pending === 0
      },
      20_000,
    ).catch(() => {})
    const stored = checkStored(p, await readShards(redis, w.stream))
    const order = perKeyOrderViolations(
      pods.flatMap((x) => x.lines),
      p.producedByKey(),
    )
    return { stored, order, pending }
  }

  /** The fault's cost from the pods' lines: collateral, the victim's shards' gap, the others'. */
  const cost = (
    lines: ReadonlyArray<Line>,
    victimShards: ReadonlyArray<number>,
    from: number,
    to: number,
  ) => {
    const victim = new Set(victimShards)
    const others = lines.filter((l) => l.shard === undefined || !victim.has(l.shard as number))
    const own = lines.filter((l) => l.shard === undefined || victim.has(l.shard as number))
    // the victim's shards: from the last handling before the fault to the first after it
    const stalls = victimShards.map((shard) => {
      const starts = own.filter((l) => l.ev === "begin" && l.shard === shard).map((l) => l.t)
      const before = Math.max(...starts.filter((t) => t <= from))
      const after = Math.min(...starts.filter((t) => t > from))
      return { shard, ms: after - before }
    })
    const victimStall = stalls.reduce((a, b) => (b.ms > a.ms ? b : a))
    // the consumers' share of it: from the first entry written after the fault
    // (its id's time, on the new master) to its batch. The rest is the
    // producer's: with durability a key's sends wait for a replica's
    // confirmation, and a promoted master has none until one attaches
    const readLags = victimShards.flatMap((shard) => {
      const first = own.find(
        (l) =>
          l.ev === "batch" &&
          l.shard === shard &&
          l.t > from &&
          (l.ids as ReadonlyArray<string>).some((id) => Number(id.split("-")[0]) > from),
      )
      if (first === undefined) return []
      const written = Math.min(
        ...(first.ids as ReadonlyArray<string>)
          .map((id) => Number(id.split("-")[0]))
          .filter((ms) => ms > from),
      )
      return [{ shard, written: written - from, ms: first.t - written }]
    })
    const readLag = readLags.reduce((a, b) => (b.ms > a.ms ? b : a), {
      shard: -1,
      written: 0,
      ms: 0,
    })
    return {
      collateral: eventsBetween(lines, COLLATERAL, from),
      othersGap: longestShardGap(others, SHARDS, from, to),
      victimStall,
      readLag,
      dataPlaneErrors: lines.filter((l) => l.ev === "dataPlaneError" && l.t >= from).length,
      failedHeartbeats: lines.filter((l) => l.ev === "heartbeat" && l.t >= from).length,
      slowestHeartbeat: slowestHeartbeat(lines, from, to),
    }
  }

  /** The slowest heartbeat answer logged (a pod logs those that took a heartbeat interval or more). */
  const slowestHeartbeat = (lines: ReadonlyArray<Line>, from: number, to: number) =>
    Math.max(
      0,
      ...lines
        .filter((l) => l.ev === "heartbeat" && l.t >= from && l.t <= to)
        .map((l) => Number(l.latencyMs ?? 0)),
    )

  const gapText = (g: ReturnType<typeof longestShardGap>) =>
    g === undefined ? "none" : `${Math.round(g.ms)} ms (shard ${g.shard})`

  /** Waits until every victim shard was handled after `from`: when the last came back. */
  const victimBack = async (w: World, victimShards: ReadonlyArray<number>, from: number) => {
    let at = 0
    await eventually(
      `the victim's shards (${victimShards.join(", ")}) handled again`,
      () => {
        const firsts = victimShards.map(
          (s) => w.lines.find((l) => l.ev === "begin" && l.shard === s && l.t > from)?.t,
        )
        if (firsts.some((t) => t === undefined)) return false
        at = Math.max(...(firsts as Array<number>))
        return true
      },
      90_000,
    )
    return at
  }

  const scenario = async (
    name: string,
    fault: (victim: RedisServer) => Promise<{ faultAt: number; promotedAt: number }>,
  ) => {
    const { w, victim, victimShards, pods, redis } = await steadyGroup(true)
    const { faultAt, promotedAt } = await fault(victim)
    const keep = (backAt: number) =>
      keepLines(
        name
          .split(" ")
          .slice(0, 2)
          .join("-")
          .replace(/[^\w-]/g, ""),
        w.lines,
        {
          faultAt,
          promotedAt,
          backAt,
        },
      )
    const backAt = await victimBack(w, victimShards, faultAt).catch((e: unknown) => {
      keep(0)
      throw e
    })
    await sleep(2_000)
    const end = realNow()
    keep(backAt)
    const c = cost(w.lines, victimShards, faultAt, end)
    const { stored, order, pending } = await finish(w, pods, producer!, redis)
    report(name, {
      "victim's shards": victimShards.join(" "),
      "fault -> replica promoted (ms)": promotedAt - faultAt,
      "fault -> every victim shard handled again (ms)": backAt - faultAt,
      "longest stall of a victim's shard (last handled before the fault -> first after)": `${Math.round(c.victimStall.ms)} ms (shard ${c.victimStall.shard})`,
      "of which the consumers': first entry written after the fault -> its batch, longest": `${Math.round(c.readLag.ms)} ms (shard ${c.readLag.shard}, written at +${Math.round(c.readLag.written)} ms)`,
      "longest gap, other shards": gapText(c.othersGap),
      "collateral events (revoke, loss, lease loss, rejoin)": c.collateral.length,
      "data-plane errors logged": c.dataPlaneErrors,
      "heartbeats not answered NONE or slow": c.failedHeartbeats,
      "slowest heartbeat answer (ms)": c.slowestHeartbeat,
      "confirmed sends": stored.confirmed,
      "confirmed sends missing": stored.missing.length,
      "stored twice": stored.duplicates,
      "entries left pending at the end (not asserted)": pending,
    })
    expect(c.collateral.join("\n"), "collateral on the pods").toBe("")
    expect(backAt - promotedAt, "victim's shards back after the promotion (ms)").toBeLessThan(
      BACK_AFTER_PROMOTION_MS,
    )
    expect(stored.missing.join(", "), "confirmed sends missing from the streams").toBe("")
    expect(stored.outOfOrder.join("\n"), "per-key order in the streams").toBe("")
    expect(order.join("\n"), "per-key order of the handling").toBe("")
  }

  it(
    "kill -9 of a master that holds neither the group's metadata nor the coordinator's keys: only its shards stall, 0 collateral, 0 confirmed sends lost (durability replicas 1)",
    () =>
      scenario("kill -9 of a master (no control-plane keys), durability replicas 1", async (v) => {
        const faultAt = realNow()
        await v.kill()
        await cluster().waitForFailover(v, 60_000)
        return { faultAt, promotedAt: realNow() }
      }),
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "SIGSTOP of such a master past cluster-node-timeout, then SIGCONT: only its shards stall, 0 collateral, 0 confirmed sends lost (durability replicas 1)",
    () =>
      scenario(
        `SIGSTOP of a master past cluster-node-timeout (${NODE_TIMEOUT_MS} ms), durability replicas 1`,
        async (v) => {
          const faultAt = realNow()
          v.pause()
          await cluster().waitForFailover(v, 60_000)
          const promotedAt = realNow()
          v.resume()
          return { faultAt, promotedAt }
        },
      ),
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "a grant of a hung master's shard (SIGSTOP, a pod's shards freed meanwhile) holds up no other pod: the others' heartbeats are answered, 0 collateral (docs/protocol.md rule 31)",
    async () => {
      const { w, victim, victimShards, pods, redis } = await steadyGroup(true)
      const victimSet = new Set(victimShards)
      // the pod that handled a victim's shard last: its shards are freed at its expiry
      const lastOnVictim = w.lines
        .filter((l) => l.ev === "begin" && victimSet.has(l.shard as number))
        .at(-1)
      const gone = pods.find((p) => p.proc === lastOnVictim?.proc)!
      const freed = [
        ...new Set(
          w.lines
            .filter((l) => l.ev === "begin" && l.proc === gone.proc)
            .map((l) => l.shard as number),
        ),
      ]
      const killedAt = realNow()
      gone.signal("SIGKILL")
      // hang the victim just before the coordinator expires the pod (a session
      // after its last heartbeat) and grants its shards: a grant of the
      // victim's shard then writes its owner token to the hung master
      await sleep(SESSION_MS - 1_500)
      const faultAt = realNow()
      victim.pause()
      await cluster().waitForFailover(victim, 60_000)
      const promotedAt = realNow()
      victim.resume()
      const back = await victimBack(w, freed, killedAt)
      await sleep(2_000)
      const end = realNow()
      const others = pods.filter((p) => p !== gone)
      const otherLines = others.flatMap((p) => p.lines)
      const untouched = Array.from({ length: SHARDS }, (_, s) => s).filter(
        (s) => !victimSet.has(s) && !freed.includes(s),
      )
      const keep = new Set(untouched)
      const gap = longestShardGap(
        otherLines.filter((l) => keep.has(l.shard as number)),
        SHARDS,
        faultAt,
        end,
      )
      const c = cost(otherLines, victimShards, faultAt, end)
      keepLines("grant-on-hung-master", w.lines, { killedAt, faultAt, promotedAt, back })
      // the pods granted one of the hung master's shards: their own answer waits for its write
      const grantees = new Set(
        otherLines
          .filter((l) => l.ev === "begin" && l.t > killedAt && victimSet.has(l.shard as number))
          .filter((l) => freed.includes(l.shard as number))
          .map((l) => l.proc),
      )
      const bystanders = otherLines.filter((l) => !grantees.has(l.proc))
      const { stored, order } = await finish(w, pods, producer!, redis)
      report(
        `SIGSTOP of a master past cluster-node-timeout while a killed pod's shards (some on it) are granted, durability replicas 1`,
        {
          "victim's shards": victimShards.join(" "),
          "killed pod's shards": freed.join(" "),
          "pod killed -> master hung (ms)": faultAt - killedAt,
          "fault -> replica promoted (ms)": promotedAt - faultAt,
          "pod killed -> its shards all handled again (ms)": back - killedAt,
          "longest gap, shards neither on the master nor the killed pod's": gapText(gap),
          "slowest heartbeat answer, pods granted a hung shard (ms)": slowestHeartbeat(
            otherLines.filter((l) => grantees.has(l.proc)),
            faultAt,
            end,
          ),
          "slowest heartbeat answer, the other pods (ms)": slowestHeartbeat(
            bystanders,
            faultAt,
            end,
          ),
          "heartbeats not answered NONE or slow, other pods": c.failedHeartbeats,
          "collateral events on other pods (revoke, loss, lease loss, rejoin)": c.collateral.length,
          "confirmed sends": stored.confirmed,
          "confirmed sends missing": stored.missing.length,
        },
      )
      expect(c.collateral.join("\n"), "collateral on the other pods").toBe("")
      // a grantee's own answer waits for its write at most fenceWaitMs (1 s
      // here), not the command deadline (5 s): well within its heartbeat
      // timeout (a third of the session; docs/protocol.md rule 31)
      expect(
        slowestHeartbeat(
          otherLines.filter((l) => grantees.has(l.proc)),
          faultAt,
          end,
        ),
        "slowest heartbeat answer of a pod granted a hung shard (ms)",
      ).toBeLessThan(SESSION_MS / 3)
      // generous: a grant's write to the hung master held every answer up to
      // the command deadline (5 s) before rule 31; a session is 10 s
      expect(gap?.ms ?? 0, "longest gap on the untouched shards (ms)").toBeLessThan(SESSION_MS / 2)
      expect(
        back - promotedAt,
        "the killed pod's shards back after the promotion (ms)",
      ).toBeLessThan(BACK_AFTER_PROMOTION_MS)
      expect(stored.missing.join(", "), "confirmed sends missing from the streams").toBe("")
      expect(order.join("\n"), "per-key order of the handling").toBe("")
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "CLUSTER FAILOVER (manual, graceful) of such a master: only its shards stall, 0 collateral, no two owners, 0 confirmed sends lost (durability replicas 1)",
    async () => {
      let window = { faultAt: 0, promotedAt: 0 }
      let victimShards: Array<number> = []
      await scenario(
        "CLUSTER FAILOVER of a master (no control-plane keys), durability replicas 1",
        async (v) => {
          victimShards = Array.from({ length: SHARDS }, (_, s) => s).filter(
            (s) => cluster().masterOf(Keys.defaultKeys.shardKey(world!.stream, s)) === v,
          )
          const faultAt = realNow()
          // on the victim's replica: it waits for the victim's writes, then takes its slots
          await cluster().failover(v, 60_000)
          window = { faultAt, promotedAt: realNow() }
          return window
        },
      )
      // the graceful stall may begin after the first handling past the command
      // (the old master pauses its clients once its replica asks): the
      // longest gap on the victim's shards from the command on, reported
      const victim = new Set(victimShards)
      const gap = longestShardGap(
        world!.lines.filter((l) => victim.has(l.shard as number)),
        SHARDS,
        window.faultAt,
        window.promotedAt + 5_000,
      )
      report("CLUSTER FAILOVER: the victim's shards from the command on", {
        "longest gap on a victim's shard, from the command to 5 s after the promotion":
          gapText(gap),
      })
      const intervals = ownershipIntervals(world!.lines)
      expect(overlappingOwners(intervals).join("\n"), "two owners at once").toBe("")
      expect(
        handledOutsideOwnership(world!.lines, intervals).join("\n"),
        "handled without owning",
      ).toBe("")
    },
    SCENARIO_TIMEOUT_MS,
  )

  it(
    "without durability, kill -9 of a master under load: the confirmed sends that died with it are counted",
    async () => {
      const redis = redisOf(false)
      const { w, victim } = pickStream(redis)
      producer = new ProducerProcess(
        {
          redis,
          stream: w.stream,
          shardCount: SHARDS,
          keys: KEYS,
          first: 0,
          intervalMs: 0,
          retryMs: 100,
        },
        producerScript,
      )
      await producer.waitFor("producer ready", (l) => l.ev === "ready")
      await sleep(2_000)
      await victim.kill()
      await cluster().waitForFailover(victim, 60_000)
      await sleep(1_000)
      producer.signal("SIGTERM")
      await producer.waitFor("producer exit", (l) => l.ev === "exit", 60_000)
      const stored = checkStored(producer, await readShards(redis, w.stream))
      report("kill -9 of a master, no durability (producer only)", {
        "confirmed sends": stored.confirmed,
        "confirmed sends missing": stored.missing.length,
      })
      expect(stored.confirmed).toBeGreaterThan(100)
    },
    SCENARIO_TIMEOUT_MS,
  )
})
