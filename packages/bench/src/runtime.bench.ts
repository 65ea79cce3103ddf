/**
 * Member runtime benchmarks, in memory, each against a baseline measured in
 * the same run (docs/runtime.md, "Measured"):
 *
 * - throughput: messages/s the demo's group (embedded coordinator, pod-a's
 *   two listener members + pod-b's member with 2 workers, 16 shards)
 *   handles through the public API, against a bare loop that reads and
 *   acks the same backlog on the same memory data plane with no runtime;
 * - producer: messages/s of `producer.sendBatch` against bare appends;
 * - the runtime's own cost per message, over a data plane that costs
 *   nothing, against bare loops over it (src/runtimeOverhead.ts);
 * - fairness: with skewed backlogs on 64 shards (1 and 4 workers), the
 *   runtime's rotation against a lowest-index-first scheduler (the naive
 *   "poll shards in order, serve the first with entries" loop): Jain's
 *   index of per-shard service while every shard has backlog, and the
 *   worst wait of a backlogged shard in rounds (turns of other shards / N).
 */

import { Layout, ShardStreams } from "@shardline/core"
import type { Batch, Message } from "@shardline/member-runtime"
import {
  consumer,
  KEY_FIELD,
  LayoutSource,
  makeEventHub,
  memoryPorts,
  type ShardlineRuntime,
  StreamListener,
  start,
} from "@shardline/member-runtime"
import { Effect } from "effect"
import { jainIndex, serviceCounts, skewedBacklog, worstWaitRounds } from "./fairness.js"
import { startOneMember } from "./oneMember.js"
import { type OverheadSample, runtimeOverhead } from "./runtimeOverhead.js"

const stream = "orders"
const group = "billing"
const timing = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

// ---------------------------------------------------------------------------
// fairness: the runtime

export interface FairnessResult {
  readonly workers: number
  readonly shards: number
  readonly window: number
  readonly jain: number
  readonly worstWaitRounds: number
  readonly highestShardFirstTurn: number
}

const analyse = (
  order: ReadonlyArray<number>,
  backlog: ReadonlyArray<number>,
  batch: number,
  workers: number,
  minTurns: number,
): FairnessResult => {
  const shards = backlog.length
  const window = shards * minTurns
  const turns = new Map(backlog.map((n, s) => [s, Math.min(minTurns, Math.ceil(n / batch))]))
  return {
    workers,
    shards,
    window,
    jain: jainIndex(serviceCounts(order, shards, window)),
    worstWaitRounds: worstWaitRounds(order, turns, shards),
    highestShardFirstTurn: order.indexOf(shards - 1),
  }
}

/** One explicit member with `workers` workers owning every shard; a batch handler logs each turn. */
export const runtimeFairness = async (
  workers: number,
  shards = 64,
  batch = 8,
  minTurns = 8,
): Promise<FairnessResult> => {
  const ports = memoryPorts()
  const backlog = skewedBacklog(shards, batch, minTurns)
  for (const [shard, n] of backlog.entries())
    for (let i = 0; i < n; i++)
      await Effect.runPromise(
        ports.streams.append(stream, shard, { [KEY_FIELD]: `k${shard}`, i: String(i) }),
      )
  const order: Array<number> = []
  const total = backlog.reduce((a, b) => a + b, 0)
  let handled = 0
  const runtime = await startOneMember(
    { ports },
    {
      stream,
      group,
      shardCount: shards,
      ...timing,
      batchSize: batch,
      runtimeMaxConcurrency: workers,
      eachBatch: async (b: Batch) => {
        order.push(b.shard)
        handled += b.messages.length
        // a little asynchronous work so that workers interleave
        await new Promise<void>((resolve) => setImmediate(resolve))
      },
    },
  )
  while (handled < total) await sleep(10)
  await runtime.stop()
  return analyse(order, backlog, batch, workers, minTurns)
}

/**
 * Baseline: `workers` loops, each taking the lowest-index shard that has
 * entries and is not being served, one batch at a time (no rotation).
 */
export const lowestIndexFirstFairness = async (
  workers: number,
  shards = 64,
  batch = 8,
  minTurns = 8,
): Promise<FairnessResult> => {
  const backlog = skewedBacklog(shards, batch, minTurns)
  const remaining = [...backlog]
  const busy = new Set<number>()
  const order: Array<number> = []
  const worker = async () => {
    for (;;) {
      const shard = remaining.findIndex((n, s) => n > 0 && !busy.has(s))
      if (shard < 0) {
        if (remaining.every((n) => n === 0)) return
        await new Promise<void>((resolve) => setImmediate(resolve))
        continue
      }
      busy.add(shard)
      order.push(shard)
      remaining[shard] = Math.max(0, remaining[shard]! - batch)
      await new Promise<void>((resolve) => setImmediate(resolve))
      busy.delete(shard)
    }
  }
  await Promise.all(Array.from({ length: workers }, worker))
  return analyse(order, backlog, batch, workers, minTurns)
}

// ---------------------------------------------------------------------------
// throughput

export interface ThroughputResult {
  readonly messages: number
  readonly runtimeMsgsPerSec: number
  readonly runtimeBatchMsgsPerSec: number
  readonly bareMsgsPerSec: number
  readonly producerMsgsPerSec: number
  readonly bareAppendMsgsPerSec: number
  readonly runs: number
}

/**
 * The demo's group in memory (pod-a: a listener with 2 logical members;
 * pod-b: one member with 2 workers; 16 shards; embedded coordinator). The
 * group settles with every shard paused, the backlog is produced, then every
 * shard is resumed: messages/s from the resume to the last handled message.
 */
export const runtimeThroughput = async (
  messages: number,
  mode: "each" | "batch" = "each",
  shards = 16,
): Promise<number> => {
  const ports = memoryPorts()
  const eventHub = makeEventHub()
  let handled = 0
  const declared = { stream, group, shardCount: shards, ...timing }
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
  class Billing {
    @StreamListener({ ...declared, concurrency: 2, batch: mode === "batch" })
    async onOrder(arg: Message | Batch) {
      if (mode === "each") handled++
      else handled += (arg as Batch).messages.length
    }
  }
  const common = { ports, eventHub, handleSignals: false } as const
  const runtimes: Array<ShardlineRuntime> = [
    await start({ ...common, memberBase: "pod-a", listeners: [new Billing()] }),
    await start({
      ...common,
      memberBase: "pod-b",
      consumers: [consumer({ ...declared, runtimeMaxConcurrency: 2, ...handler })],
    }),
  ]
  const owned = () =>
    runtimes.flatMap((r) => r.members().map((m) => m.owned.length)).sort((a, b) => a - b)
  while (owned().reduce((a, b) => a + b, 0) !== shards || owned()[0]! < 5) await sleep(10)
  for (const r of runtimes)
    for (let shard = 0; shard < shards; shard++) r.pause(stream, group, shard)
  const producer = runtimes[0]!.producer(stream)
  const chunk = 1_000
  for (let n = 0; n < messages; n += chunk)
    await producer.sendBatch(
      Array.from({ length: Math.min(chunk, messages - n) }, (_, i) => ({
        key: `customer-${(n + i) % 500}`,
        fields: { n: String(n + i) },
      })),
    )
  const t0 = performance.now()
  for (const r of runtimes)
    for (let shard = 0; shard < shards; shard++) r.resume(stream, group, shard)
  while (handled < messages) await sleep(2)
  const seconds = (performance.now() - t0) / 1000
  await Promise.all(runtimes.map((r) => r.stop()))
  return Math.round(messages / seconds)
}

/** Baseline: one loop reading and acking every shard's backlog on the same memory data plane. */
export const bareThroughput = async (
  messages: number,
  shards = 16,
  batch = 32,
): Promise<number> => {
  const streams = Effect.runSync(ShardStreams.makeMemory)
  const g = { generation: 0, firstShard: 0, shardCount: shards }
  // every shard granted (its owner token written, as a coordinator does): a
  // missing token refuses every read (docs/protocol.md rule 26)
  Effect.runSync(
    Effect.forEach(
      Array.from({ length: shards }, (_, shard) => shard),
      (shard) => streams.setOwnerToken({ stream, shard, group, token: 0 }),
      { discard: true },
    ),
  )
  Effect.runSync(
    Effect.forEach(
      Array.from({ length: messages }, (_, n) => n),
      (n) => {
        const key = `customer-${n % 500}`
        return streams.append(stream, Layout.shardOf(g, key), { [KEY_FIELD]: key, n: String(n) })
      },
      { discard: true },
    ),
  )
  let handled = 0
  const t0 = performance.now()
  await Effect.runPromise(
    Effect.gen(function* () {
      while (handled < messages)
        for (let shard = 0; shard < shards; shard++) {
          const read = yield* streams.read({
            stream,
            shard,
            group,
            consumer: "bare",
            token: 0,
            count: batch,
          })
          if (read.length === 0) continue
          for (const _m of read) handled++
          yield* streams.ack({
            stream,
            shard,
            group,
            token: 0,
            ids: read.map((m) => m.id),
            mode: "ack",
          })
        }
    }),
  )
  return Math.round(messages / ((performance.now() - t0) / 1000))
}

/** Producer `sendBatch` (routing, batching, the key field) against bare appends, messages/s. */
export const producerThroughput = async (messages: number, shards = 16) => {
  const ports = memoryPorts()
  const runtime = await start({ ports, handleSignals: false, coordinator: "standalone" })
  const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: shards }) })
  const chunk = 1_000
  const t0 = performance.now()
  for (let n = 0; n < messages; n += chunk)
    await producer.sendBatch(
      Array.from({ length: Math.min(chunk, messages - n) }, (_, i) => ({
        key: `customer-${(n + i) % 500}`,
        fields: { n: String(n + i) },
      })),
    )
  const produced = Math.round(messages / ((performance.now() - t0) / 1000))
  await runtime.stop()
  const streams = Effect.runSync(ShardStreams.makeMemory)
  const g = { generation: 0, firstShard: 0, shardCount: shards }
  const t1 = performance.now()
  Effect.runSync(
    Effect.forEach(
      Array.from({ length: messages }, (_, n) => n),
      (n) => {
        const key = `customer-${n % 500}`
        return streams.append(stream, Layout.shardOf(g, key), { [KEY_FIELD]: key, n: String(n) })
      },
      { discard: true },
    ),
  )
  const bare = Math.round(messages / ((performance.now() - t1) / 1000))
  return { produced, bare }
}

/** Rounds of the free data plane are short: more messages, so the JIT settles within them. */
export const OVERHEAD_MESSAGES = 200_000

export const runRuntimeBench = async (options: {
  readonly messages: number
  readonly runs: number
}) => {
  const runtimeRates: Array<number> = []
  const batchRates: Array<number> = []
  const bareRates: Array<number> = []
  const producerRates: Array<number> = []
  const appendRates: Array<number> = []
  const overhead: Array<OverheadSample> = []
  for (let i = 0; i < options.runs; i++) {
    overhead.push(await runtimeOverhead(OVERHEAD_MESSAGES))
    bareRates.push(await bareThroughput(options.messages))
    runtimeRates.push(await runtimeThroughput(options.messages, "each"))
    batchRates.push(await runtimeThroughput(options.messages, "batch"))
    const p = await producerThroughput(options.messages)
    producerRates.push(p.produced)
    appendRates.push(p.bare)
  }
  const throughput: ThroughputResult = {
    messages: options.messages,
    runs: options.runs,
    runtimeMsgsPerSec: median(runtimeRates),
    runtimeBatchMsgsPerSec: median(batchRates),
    bareMsgsPerSec: median(bareRates),
    producerMsgsPerSec: median(producerRates),
    bareAppendMsgsPerSec: median(appendRates),
  }
  const fairness = []
  for (const workers of [1, 4])
    fairness.push({
      runtime: await runtimeFairness(workers),
      lowestIndexFirst: await lowestIndexFirstFairness(workers),
    })
  return {
    throughput,
    samples: { runtimeRates, batchRates, bareRates, producerRates, appendRates },
    overhead,
    fairness,
  }
}
