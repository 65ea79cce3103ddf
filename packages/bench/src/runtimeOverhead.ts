/**
 * The member runtime's own cost per message, apart from any data plane
 * (docs/runtime.md, "Measured"): one explicit member (4 workers, 16
 * shards, a no-op `eachMessage`) over a `ShardStreams` whose `read` hands
 * out ready-made entries at once and whose acks cost nothing, against 4
 * bare loops taking the same entries from the same free `read`. What the
 * runtime adds per message is 1 / runtime rate - 1 / bare rate; it bounds
 * how close the runtime can come to raw loops on any real data plane.
 */
import { CoordinatorLease, CoordinatorTransport, ShardStreams, Store } from "@shardline/core"
import { fromServices, KEY_FIELD, type StartOptions } from "@shardline/member-runtime"
import { Effect } from "effect"
import { ownAllPaused, startOneMember, THROUGHPUT_TIMING } from "./oneMember.js"

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** A data plane that costs (almost) nothing: `read` makes up to `count` entries of a budget. */
const freeStreams = (backlog: Map<number, number>) => {
  const memory = Effect.runSync(ShardStreams.makeMemory)
  let seq = 0
  const make = (o: ShardStreams.ReadOptions): Array<ShardStreams.StreamMessage> => {
    const left = backlog.get(o.shard) ?? 0
    const n = Math.min(left, o.count)
    backlog.set(o.shard, left - n)
    const out: Array<ShardStreams.StreamMessage> = []
    for (let i = 0; i < n; i++) {
      seq++
      const key = `customer-${seq % 500}`
      out.push(
        o.keyField === undefined
          ? { id: `1-${seq}`, fields: { [KEY_FIELD]: key, n: String(seq) }, deliveryCount: 1 }
          : { id: `1-${seq}`, fields: { n: String(seq) }, deliveryCount: 1, key },
      )
    }
    return out
  }
  const streams: ShardStreams.ShardStreamsShape = {
    ...memory,
    read: (o) => Effect.sync(() => make(o)),
    claimPending: () => Effect.succeed({ messages: [], next: "0-0", deleted: [] }),
    ack: (o) => Effect.succeed(o.ids.length),
    drainState: (o) =>
      Effect.succeed({
        sealed: false,
        drained: false,
        undelivered: backlog.get(o.shard) ?? 0,
        pending: 0,
      }),
    // the backlog is set after the group settles: poll it instead of waiting on appends
    waitForEntries: () => Effect.as(Effect.sleep(2), false),
  }
  return { streams, make }
}

export interface OverheadSample {
  readonly runtime: number
  readonly bare: number
  /** CPU time of this process per message (µs, user + system): steadier than rates on a loaded machine. */
  readonly runtimeCpuMicros: number
  readonly bareCpuMicros: number
}

const cpuMicros = (since: NodeJS.CpuUsage, messages: number): number => {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / messages
}

/** One round: the runtime over the free data plane, then 4 bare loops over it, messages/s each. */
export const runtimeOverhead = async (
  messages: number,
  options: {
    readonly shards?: number
    readonly workers?: number
    readonly batch?: number
    /** The runtime's `telemetry` option (src/telemetry.ts measures its cost). */
    readonly telemetry?: StartOptions["telemetry"]
  } = {},
): Promise<OverheadSample> => {
  const shards = options.shards ?? 16
  const workers = options.workers ?? 4
  const batch = options.batch ?? 32
  const backlog = new Map<number, number>()
  const { streams, make } = freeStreams(backlog)
  const ports = fromServices({
    streams,
    transport: Effect.runSync(CoordinatorTransport.makeMemory({})),
    store: Effect.runSync(Store.makeMemory),
    lease: Effect.runSync(CoordinatorLease.makeMemory),
  })
  const stream = "overhead"
  const group = "g"
  let handled = 0
  const runtime = await startOneMember(
    { ports, ...(options.telemetry !== undefined ? { telemetry: options.telemetry } : {}) },
    {
      stream,
      group,
      shardCount: shards,
      ...THROUGHPUT_TIMING,
      batchSize: batch,
      runtimeMaxConcurrency: workers,
      eachMessage: () => {
        handled++
      },
    },
  )
  await ownAllPaused(runtime, stream, group, shards)
  await sleep(50)
  const perShard = Math.ceil(messages / shards)
  for (let s = 0; s < shards; s++) backlog.set(s, perShard)
  const total = perShard * shards
  const t0 = performance.now()
  const c0 = process.cpuUsage()
  for (let s = 0; s < shards; s++) runtime.resume(stream, group, s)
  while (handled < total) await sleep(1)
  const runtimeRate = Math.round(total / ((performance.now() - t0) / 1000))
  const runtimeCpuMicros = cpuMicros(c0, total)
  await runtime.stop()

  // bare: `workers` loops over a FIFO of shards, each reading a batch and counting it
  for (let s = 0; s < shards; s++) backlog.set(s, perShard)
  let counted = 0
  const queue = Array.from({ length: shards }, (_, s) => s)
  const address = { stream, group, consumer: "bare", token: 1, count: batch, keyField: KEY_FIELD }
  const t1 = performance.now()
  const c1 = process.cpuUsage()
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (queue.length > 0) {
        const shard = queue.shift()!
        const read = make({ ...address, shard })
        for (const _m of read) counted++
        if (read.length > 0) queue.push(shard)
        await Promise.resolve()
      }
    }),
  )
  const bareRate = Math.round(counted / ((performance.now() - t1) / 1000))
  const bareCpuMicros = cpuMicros(c1, counted)
  return { runtime: runtimeRate, bare: bareRate, runtimeCpuMicros, bareCpuMicros }
}
