/**
 * The member runtime on Redis, end to end, against a raw ioredis loop on the
 * same server in the same run (docs/runtime.md, "On Redis"):
 *
 * - runtime: one runtime (`start({ redis: { url } })`), one explicit member
 *   with 4 workers owning 16 shards (embedded coordinator, owner-token
 *   fence on every read and ack), no-op `eachMessage` (and `eachBatch`),
 *   batches of 32. The group settles with every shard paused, the backlog is
 *   produced, then every shard is resumed: messages/s from the resume to the
 *   last handled message. Cases for two fences of the Redis
 *   `ShardStreams`: `gated` (the default) and `script` (the optimistic
 *   fence is measured by redis-store's own bench, part (a)).
 * - baseline: 4 concurrent loops (the same 4 workers) on one ioredis
 *   connection, each taking the next shard in turn and running XREADGROUP
 *   COUNT 32 + XACK on it, over the same backlog (same keys, same fields),
 *   no fence; and one such loop alone.
 * - the data plane alone: the same 4 loops through redis-store's
 *   ShardStreams, each read carrying the shard's previous batch's ack (what
 *   the runtime sends per batch), no runtime.
 *
 * Each runs on one server (a URL) or on a Redis Cluster (`{ nodes }`): then
 * the raw loops use an ioredis `Cluster` client, the runtime and
 * ShardStreams `redis: { nodes }`, and the Redis CPU is summed over the
 * nodes (docs/redis.md, "Benchmarks").
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { performance } from "node:perf_hooks"
import { Layout } from "@shardline/core"
import {
  type Batch,
  consumer,
  KEY_FIELD,
  LayoutSource,
  type RedisOptions,
  start,
} from "@shardline/member-runtime"
import { Keys, RedisConnection, RedisShardStreams } from "@shardline/redis-store"
import { Effect, Exit, Scope } from "effect"
import { Cluster, Redis } from "ioredis"
import { ownAllPaused, startOneMember, THROUGHPUT_TIMING } from "./oneMember.js"

const group = "bench"
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
let runs = 0

export interface RedisBenchShape {
  readonly messages: number
  readonly shards: number
  readonly workers: number
  readonly batch: number
}

const keyOf = (n: number) => `customer-${n % 500}`

/** Where a case runs: one server's URL, or the nodes of a Redis Cluster. */
export type BenchTarget =
  | string
  | { readonly nodes: ReadonlyArray<{ readonly host: string; readonly port: number }> }

/** A client of the target: a `Redis`, or a `Cluster` client of its nodes. */
const clientOf = (target: BenchTarget): Redis | Cluster =>
  typeof target === "string"
    ? new Redis(target)
    : new Cluster(target.nodes.map((n) => ({ host: n.host, port: n.port })))

/** The runtime's and redis-store's connection options for the target. */
const redisOf = (target: BenchTarget) =>
  typeof target === "string" ? { url: target } : { nodes: target.nodes }
const connectionOf = (target: BenchTarget) =>
  typeof target === "string"
    ? { url: target }
    : { cluster: { nodes: target.nodes.map((n) => ({ host: n.host, port: n.port })) } }

/**
 * A case's rate, the Redis CPU it cost (INFO cpu, user + sys) and this
 * Node process's CPU (user + sys) per message consumed: CPU per message is
 * steadier than the rate on a shared machine (a busy core slows the rate
 * of a round, not the work a message takes).
 */
export interface Measured {
  readonly rate: number
  readonly serverUsPerMessage: number
  readonly nodeUsPerMessage: number
}

/**
 * The server's CPU time so far, µs (INFO cpu: used_cpu_user + used_cpu_sys),
 * summed over every node of a cluster.
 */
const serverCpuUs = async (target: BenchTarget) => {
  const nodes =
    typeof target === "string"
      ? [new Redis(target)]
      : target.nodes.map((n) => new Redis(n.port, n.host))
  try {
    const infos = await Promise.all(nodes.map((c) => c.info("cpu")))
    let us = 0
    for (const info of infos) {
      const field = (name: string) =>
        Number(new RegExp(`^${name}:([0-9.]+)`, "m").exec(info)?.[1] ?? 0)
      us += (field("used_cpu_user") + field("used_cpu_sys")) * 1e6
    }
    return us
  } finally {
    for (const c of nodes) c.disconnect()
  }
}

/**
 * `BENCH_CPU_PROFILE=<dir>`: a CPU profile of each consume phase (not the
 * backlog's production nor the group's start) is written to <dir> as
 * `<stream>.cpuprofile`; `BENCH_HEAP_PROFILE=<dir>`: a sampling heap profile
 * of the same phase, counting every allocation, collected or not, as
 * `<stream>.heapprofile` (docs/runtime.md, "Where the time goes").
 */
const profileDir = process.env.BENCH_CPU_PROFILE
const heapDir = process.env.BENCH_HEAP_PROFILE
const profiled = async <A>(name: string, body: () => Promise<A>): Promise<A> => {
  if (profileDir === undefined && heapDir === undefined) return body()
  const session = new Session()
  session.connect()
  if (profileDir !== undefined) {
    await session.post("Profiler.enable")
    await session.post("Profiler.start")
  }
  if (heapDir !== undefined)
    await session.post("HeapProfiler.startSampling", {
      samplingInterval: 4096,
      includeObjectsCollectedByMajorGC: true,
      // BENCH_HEAP_MINOR=0: only what survived a scavenge (what costs the collector most)
      includeObjectsCollectedByMinorGC: process.env.BENCH_HEAP_MINOR !== "0",
    })
  try {
    return await body()
  } finally {
    if (profileDir !== undefined) {
      const { profile } = await session.post("Profiler.stop")
      mkdirSync(profileDir, { recursive: true })
      writeFileSync(`${profileDir}/${name}.cpuprofile`, JSON.stringify(profile))
    }
    if (heapDir !== undefined) {
      const { profile } = await session.post("HeapProfiler.stopSampling")
      mkdirSync(heapDir, { recursive: true })
      writeFileSync(`${heapDir}/${name}.heapprofile`, JSON.stringify(profile))
    }
    session.disconnect()
  }
}

/** Runs `consume` (messages/s) and measures the Redis CPU it cost per message. */
const measured = async (
  target: BenchTarget,
  messages: number,
  consume: () => Promise<number>,
  name = "consume",
): Promise<Measured> => {
  const before = await serverCpuUs(target)
  const node = process.cpuUsage()
  const rate = await profiled(name, consume)
  const used = process.cpuUsage(node)
  return {
    rate,
    serverUsPerMessage: ((await serverCpuUs(target)) - before) / messages,
    nodeUsPerMessage: (used.user + used.system) / messages,
  }
}

/** messages/s of the runtime draining a backlog of `messages` on `redis`. */
export const runtimeOnRedis = async (
  url: BenchTarget,
  shape: RedisBenchShape,
  mode: "each" | "batch",
  read: "gated" | "script",
): Promise<Measured> => {
  const stream = `bench-runtime-${process.pid}-${++runs}`
  const redis: RedisOptions = { ...redisOf(url), ports: { shardStreams: { read } } }
  let handled = 0
  const handler =
    mode === "each"
      ? {
          eachMessage: () => {
            handled++
          },
        }
      : {
          eachBatch: (b: Batch) => {
            handled += b.messages.length
          },
        }
  const runtime = await startOneMember(
    { redis },
    {
      stream,
      group,
      shardCount: shape.shards,
      ...THROUGHPUT_TIMING,
      batchSize: shape.batch,
      runtimeMaxConcurrency: shape.workers,
      ...handler,
    },
  )
  try {
    await ownAllPaused(runtime, stream, group, shape.shards)
    const producer = runtime.producer(stream, {
      layout: LayoutSource.fixed({ [stream]: shape.shards }),
    })
    const chunk = 1_000
    for (let n = 0; n < shape.messages; n += chunk)
      await producer.sendBatch(
        Array.from({ length: Math.min(chunk, shape.messages - n) }, (_, i) => ({
          key: keyOf(n + i),
          fields: { n: String(n + i) },
        })),
      )
    await producer.flush()
    return await measured(
      url,
      shape.messages,
      async () => {
        const t0 = performance.now()
        for (let shard = 0; shard < shape.shards; shard++) runtime.resume(stream, group, shard)
        while (handled < shape.messages) await sleep(1)
        const seconds = (performance.now() - t0) / 1000
        if (handled !== shape.messages) throw new Error(`handled ${handled} of ${shape.messages}`)
        return Math.round(shape.messages / seconds)
      },
      stream,
    )
  } finally {
    await runtime.stop()
  }
}

/** The backlog of `shape.messages` entries over the shard streams of `stream`; their keys. */
const produceBacklog = async (client: Redis | Cluster, stream: string, shape: RedisBenchShape) => {
  const generation = { generation: 0, firstShard: 0, shardCount: shape.shards }
  // the shard streams as redis-store names them (in its default namespace), so
  // that ShardStreams alone reads this backlog; raw loops read the same keys
  const keys = Array.from({ length: shape.shards }, (_, s) => Keys.defaultKeys.shardKey(stream, s))
  const byShard = keys.map((): Array<number> => [])
  for (let i = 0; i < shape.messages; i++) byShard[Layout.shardOf(generation, keyOf(i))]!.push(i)
  // a pipeline per shard (in a cluster, a pipeline's keys share one slot)
  for (let shard = 0; shard < shape.shards; shard++) {
    const all = byShard[shard]!
    for (let n = 0; n < all.length; n += 1_000) {
      const p = client.pipeline()
      for (const i of all.slice(n, n + 1_000))
        p.xadd(keys[shard]!, "*", KEY_FIELD, keyOf(i), "n", String(i))
      await p.exec()
    }
  }
  return keys
}

/**
 * messages/s of `loops` concurrent loops draining the backlog, each taking
 * the next shard no other loop reads (one reader per shard, as the runtime)
 * and running `batch` on it (how many entries it consumed).
 */
const drainInLoops = async (
  shape: RedisBenchShape,
  loops: number,
  batch: (shard: number) => Promise<number>,
) => {
  let handled = 0
  let next = 0
  const busy = new Set<number>()
  const loop = async () => {
    while (handled < shape.messages) {
      let shard = -1
      for (let i = 0; i < shape.shards; i++) {
        const s = (next + i) % shape.shards
        if (!busy.has(s)) {
          shard = s
          break
        }
      }
      if (shard < 0) {
        await sleep(0)
        continue
      }
      next = (shard + 1) % shape.shards
      busy.add(shard)
      try {
        // not `handled += await ...`: that reads `handled` before the await
        const n = await batch(shard)
        handled += n
      } finally {
        busy.delete(shard)
      }
    }
  }
  const t0 = performance.now()
  await Promise.all(Array.from({ length: loops }, loop))
  return Math.round(shape.messages / ((performance.now() - t0) / 1000))
}

/** messages/s of `loops` raw XREADGROUP + XACK loops draining the same kind of backlog. */
export const rawOnRedis = async (url: BenchTarget, shape: RedisBenchShape, loops: number) => {
  const stream = `bench-raw-${process.pid}-${++runs}`
  const client = clientOf(url)
  try {
    const keys = await produceBacklog(client, stream, shape)
    for (const key of keys) await client.xgroup("CREATE", key, group, "0", "MKSTREAM")
    return await measured(
      url,
      shape.messages,
      () =>
        drainInLoops(shape, loops, async (shard) => {
          const reply = (await client.xreadgroup(
            "GROUP",
            group,
            "raw",
            "COUNT",
            shape.batch,
            "STREAMS",
            keys[shard]!,
            ">",
          )) as Array<[string, Array<[string, Array<string>]>]> | null
          const entries = reply?.[0]?.[1] ?? []
          if (entries.length > 0)
            await client.xack(keys[shard]!, group, ...entries.map(([id]) => id))
          return entries.length
        }),
      stream,
    )
  } finally {
    client.disconnect()
  }
}

/**
 * messages/s of redis-store's ShardStreams alone, no runtime: the same
 * loops, each running the fenced read that carries the shard's previous
 * batch's ack (what the runtime sends per batch): the data plane's ceiling.
 */
export const portOnRedis = async (
  url: BenchTarget,
  shape: RedisBenchShape,
  loops: number,
  read: "gated" | "script",
) => {
  const stream = `bench-port-${process.pid}-${++runs}`
  const client = clientOf(url)
  const scope = Scope.makeUnsafe()
  try {
    const connection = await Effect.runPromise(
      Scope.provide(RedisConnection.make(connectionOf(url)), scope),
    )
    const streams = RedisShardStreams.makeWith(connection, { read })
    await produceBacklog(client, stream, shape)
    for (let shard = 0; shard < shape.shards; shard++)
      await Effect.runPromise(streams.setOwnerToken({ stream, shard, group, token: 1 }))
    const unacked = new Map<number, ReadonlyArray<string>>()
    return await measured(
      url,
      shape.messages,
      () =>
        drainInLoops(shape, loops, async (shard) => {
          const ids = unacked.get(shard) ?? []
          const batch = await Effect.runPromise(
            streams.read({
              stream,
              shard,
              group,
              consumer: "port",
              token: 1,
              count: shape.batch,
              ...(ids.length > 0 ? { ack: { ids, mode: "ack" as const } } : {}),
            }),
          )
          unacked.set(
            shard,
            batch.map((m) => m.id),
          )
          return batch.length
        }),
      stream,
    )
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    client.disconnect()
  }
}

export interface RedisRuntimeBenchResults {
  readonly server: string
  readonly shape: RedisBenchShape
  readonly rounds: number
  /** messages/s per round, by case. */
  readonly samples: Readonly<Record<string, ReadonlyArray<number>>>
  /** Redis CPU per message consumed (µs) per round, by case. */
  readonly serverUs: Readonly<Record<string, ReadonlyArray<number>>>
  /** This Node process's CPU per message consumed (µs) per round, by case. */
  readonly nodeUs: Readonly<Record<string, ReadonlyArray<number>>>
}

export const CASES = {
  runtimeGated: "runtime, eachMessage, gated fence (default)",
  runtimeBatchGated: "runtime, eachBatch, gated fence (default)",
  runtimeScript: "runtime, eachMessage, script fence",
  port4:
    "redis-store ShardStreams alone, gated fence: 4 loops of the fenced read carrying the previous ack",
  port4Script: "redis-store ShardStreams alone, script fence: the same 4 loops",
  raw4: "raw ioredis: 4 loops of XREADGROUP + XACK",
  raw1: "raw ioredis: 1 loop of XREADGROUP + XACK",
} as const

/**
 * Rounds of every case back to back (interleaved, so load drifts hit all
 * alike), each round in an order rotated by one.
 */
export const runRedisRuntimeBench = async (
  url: BenchTarget,
  server: string,
  shape: RedisBenchShape,
  rounds: number,
  onSample: (name: string, rate: number) => void = () => {},
): Promise<RedisRuntimeBenchResults> => {
  const samples: Record<string, Array<number>> = Object.fromEntries(
    Object.values(CASES).map((name) => [name, []]),
  )
  const serverUs: Record<string, Array<number>> = Object.fromEntries(
    Object.values(CASES).map((name) => [name, []]),
  )
  const nodeUs: Record<string, Array<number>> = Object.fromEntries(
    Object.values(CASES).map((name) => [name, []]),
  )
  const add = (name: string, m: Measured) => {
    samples[name]!.push(m.rate)
    serverUs[name]!.push(m.serverUsPerMessage)
    nodeUs[name]!.push(m.nodeUsPerMessage)
    onSample(name, m.rate)
  }
  const only = (process.env.BENCH_CASES ?? "").split(",").filter((c) => c !== "")
  const want = (key: keyof typeof CASES) => only.length === 0 || only.includes(key)
  const cases: ReadonlyArray<readonly [keyof typeof CASES, () => Promise<Measured>]> = [
    ["raw4", () => rawOnRedis(url, shape, shape.workers)],
    ["runtimeGated", () => runtimeOnRedis(url, shape, "each", "gated")],
    ["runtimeBatchGated", () => runtimeOnRedis(url, shape, "batch", "gated")],
    ["runtimeScript", () => runtimeOnRedis(url, shape, "each", "script")],
    ["port4", () => portOnRedis(url, shape, shape.workers, "gated")],
    ["port4Script", () => portOnRedis(url, shape, shape.workers, "script")],
    ["raw1", () => rawOnRedis(url, shape, 1)],
  ]
  const chosen = cases.filter(([key]) => want(key))
  for (let round = 0; round < rounds; round++) {
    // each round starts one case later: in an A/B of two builds doing the same
    // Node work, the one that always ran right after the raw loops measured
    // 0.72x of them against 0.85x, and alternating the order turned it around
    // (0.88x / 0.80x): a fixed order biases a case by its predecessor
    for (let i = 0; i < chosen.length; i++) {
      const [key, run] = chosen[(round + i) % chosen.length]!
      add(CASES[key], await run())
    }
  }
  return { server, shape, rounds, samples, serverUs, nodeUs }
}

export interface HandoffSample {
  /** Old owner's drain done (`revoked`) -> new owner's read loop started (`assigned`), ms. */
  readonly revokedToAssigned: number
  /** Old owner told to revoke (`revoking`) -> new owner's read loop started, ms. */
  readonly revokingToAssigned: number
}

/**
 * Handoff through the runtime with a 3 s heartbeat interval: member a owns
 * every shard, member b joins; for each shard that moves, the time from a's
 * `revoked` (drained, about to be reported) and from a's `revoking` to b's
 * `assigned` (its read loop starts), from the runtimes' events.
 */
export const runtimeHandoff = async (url: string, shards = 16): Promise<Array<HandoffSample>> => {
  const stream = `bench-handoff-${process.pid}-${++runs}`
  const declared = {
    stream,
    group,
    shardCount: shards,
    sessionTimeoutMs: 30_000,
    rebalanceTimeoutMs: 60_000,
    heartbeatIntervalMs: 3_000,
    eachMessage: () => {},
  }
  const revoking = new Map<number, number>()
  const revoked = new Map<number, number>()
  const assigned = new Map<number, number>()
  const common = { redis: { url }, handleSignals: false } as const
  const a = await start({
    ...common,
    memberBase: "a",
    consumers: [consumer(declared)],
    onEvent: (e) => {
      if (e.type === "revoking") revoking.set(e.shard, e.at)
      if (e.type === "revoked") revoked.set(e.shard, e.at)
    },
  })
  let b: Awaited<ReturnType<typeof start>> | undefined
  try {
    while ((a.members()[0]?.owned.length ?? 0) !== shards) await sleep(10)
    b = await start({
      ...common,
      memberBase: "b",
      consumers: [consumer(declared)],
      onEvent: (e) => {
        if (e.type === "assigned") assigned.set(e.shard, e.at)
      },
    })
    const half = Math.floor(shards / 2)
    while (assigned.size < half) await sleep(10)
    return [...assigned].map(([shard, at]) => ({
      revokedToAssigned: at - (revoked.get(shard) ?? Number.NaN),
      revokingToAssigned: at - (revoking.get(shard) ?? Number.NaN),
    }))
  } finally {
    await Promise.all([a.stop(), b?.stop()])
  }
}
