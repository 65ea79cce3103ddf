/**
 * How long a key's consumption pauses across a reshard (docs/resharding.md,
 * "Measured"), through the member runtime on the memory ports, in real time.
 *
 * A group of two runtimes consumes a stream of 4 shards. The old shards are
 * paused while a backlog is written to them (`hot` entries on shard 0,
 * `cold` on each of shards 1-3), the stream is resharded 4 -> 8 (contiguous
 * hash ranges: each new shard is fed by one old shard), one message per key
 * is written under the new layout, and the old shards are resumed. A key's
 * pause is the time between its last old-layout message being handled and
 * its first new-layout message being handled: the new shard waits for its
 * old shard to drain, for the drain to reach the coordinator in a heartbeat,
 * and for the grant to come back in the next one.
 *
 * The baseline, in the same run, is the same backlog and the same extra
 * message per key without a reshard (the key stays on its shard, so the gap
 * is the in-shard queueing alone).
 */

import { Layout, ShardStreams, StreamLayouts } from "@shardline/core"
import type { Message } from "@shardline/member-runtime"
import { consumer, KEY_FIELD, memoryPorts, start } from "@shardline/member-runtime"
import { RedisPorts } from "@shardline/redis-store"
import { Effect, ManagedRuntime } from "effect"

const group = "billing"
export const reshardTiming = {
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 6_000,
  heartbeatIntervalMs: 200,
} as const

let runs = 0
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export interface PauseStats {
  readonly keys: number
  readonly medianMs: number
  readonly maxMs: number
}

export interface ReshardPauseResult {
  /** Entries written to the hot old shard (0) / each cold old shard (1-3) before the reshard. */
  readonly hot: number
  readonly cold: number
  readonly resharded: boolean
  readonly resumeAfterMs: number
  /** Keys routed to the hot old shard. */
  readonly hotKeys: PauseStats
  /** Keys routed to the other old shards. */
  readonly coldKeys: PauseStats
  /** Resume to the key's new-layout message handled, hot shard's keys. */
  readonly hotLatency: PauseStats
  /** Resume to the key's new-layout message handled, the other keys. */
  readonly coldLatency: PauseStats
  /** Resume to the last message handled. */
  readonly totalMs: number
  /** Messages handled out of per-key order (must be 0). */
  readonly orderViolations: number
  /** Messages never handled (must be 0). */
  readonly lost: number
}

const stats = (xs: ReadonlyArray<number>): PauseStats => {
  const s = [...xs].sort((a, b) => a - b)
  const round = (n: number) => Math.round(n * 10) / 10
  return {
    keys: s.length,
    medianMs: round(s[Math.floor(s.length / 2)] ?? 0),
    maxMs: round(s[s.length - 1] ?? 0),
  }
}

/** Keys of the form `customer-N` until `perShard` land on each of the 4 old shards. */
const keysByOldShard = (perShard: number): ReadonlyArray<ReadonlyArray<string>> => {
  const g0 = { generation: 0, firstShard: 0, shardCount: 4 }
  const out: Array<Array<string>> = [[], [], [], []]
  for (let n = 0; out.some((ks) => ks.length < perShard); n++) {
    const key = `customer-${n}`
    const ks = out[Layout.shardOf(g0, key)]!
    if (ks.length < perShard) ks.push(key)
  }
  return out
}

export const reshardPause = async (options: {
  readonly hot: number
  readonly cold: number
  readonly resharded: boolean
  readonly keysPerShard?: number
  /** Wait this long between the reshard and the resume (the coordinator follows layouts at lease renewals). */
  readonly resumeAfterMs?: number
  /** Run on this Redis (each runtime with its own connections) instead of shared memory ports. */
  readonly redisUrl?: string
}): Promise<ReshardPauseResult> => {
  const keys = keysByOldShard(options.keysPerShard ?? 16)
  // a fresh stream per run: on Redis, runs share the server
  const stream = `orders-${process.pid}-${++runs}`
  const memory = options.redisUrl === undefined ? memoryPorts() : undefined
  const own =
    options.redisUrl === undefined
      ? undefined
      : ManagedRuntime.make(RedisPorts.layer({ url: options.redisUrl }))
  const services = await (own === undefined
    ? Promise.resolve({ streams: memory!.streams, layouts: memory!.layouts })
    : own.runPromise(
        Effect.all({ streams: ShardStreams.ShardStreams, layouts: StreamLayouts.StreamLayouts }),
      ))
  const handled = new Map<string, { at: number; n: number }>() // `${key}/${n}` -> time
  const lastN = new Map<string, number>()
  let violations = 0
  const eachMessage = async (m: Message) => {
    const n = Number(m.fields.n)
    const key = m.key ?? ""
    if (n < (lastN.get(key) ?? -1)) violations++
    lastN.set(key, Math.max(n, lastN.get(key) ?? -1))
    handled.set(`${key}/${n}`, { at: performance.now(), n })
  }
  const runtimes = await Promise.all(
    ["pod-a", "pod-b"].map((memberBase) =>
      start({
        ...(memory !== undefined ? { ports: memory } : { redis: { url: options.redisUrl! } }),
        handleSignals: false,
        memberBase,
        consumers: [
          consumer({ stream, group, shardCount: 4, ...reshardTiming, batchSize: 32, eachMessage }),
        ],
      }),
    ),
  )
  try {
    // the old shards wait, paused, while their backlog is written
    for (const r of runtimes) for (let s = 0; s < 4; s++) r.pause(stream, group, s)
    // wait for the layout record and a settled group
    const settled = () => {
      const owned = runtimes.flatMap((r) => r.members().flatMap((m) => m.owned))
      return owned.length === 4
    }
    while (!settled()) await sleep(20)
    // the backlog on the old shards, round-robin over each shard's keys
    const written = new Map<string, number>()
    const write = (shard: number, key: string) => {
      const n = written.get(key) ?? 0
      written.set(key, n + 1)
      return Effect.runPromise(
        services.streams.append(stream, shard, { [KEY_FIELD]: key, n: String(n) }),
      )
    }
    for (const [shard, ks] of keys.entries()) {
      const count = shard === 0 ? options.hot : options.cold
      for (let i = 0; i < count; i++) await write(shard, ks[i % ks.length]!)
    }
    const lastOld = new Map(written)
    let next = { generation: 0, firstShard: 0, shardCount: 4 }
    if (options.resharded) {
      const stored = await Effect.runPromise(
        Layout.Reshard.reshardStream(stream, 8).pipe(
          Effect.provideService(StreamLayouts.StreamLayouts, services.layouts),
          Effect.provideService(ShardStreams.ShardStreams, services.streams),
        ),
      )
      next = stored.record.generations[stored.record.generations.length - 1]!
    }
    // one message per key under the layout now in force
    for (const ks of keys) for (const key of ks) await write(Layout.shardOf(next, key), key)
    if (options.resumeAfterMs !== undefined) await sleep(options.resumeAfterMs)
    const t0 = performance.now()
    for (const r of runtimes) for (let s = 0; s < 4; s++) r.resume(stream, group, s)
    const total = [...written.values()].reduce((a, b) => a + b, 0)
    const deadline = Date.now() + 120_000
    while (handled.size < total && Date.now() < deadline) await sleep(10)
    const lost = total - handled.size
    let end = t0
    for (const h of handled.values()) end = Math.max(end, h.at)
    const pauseOf = (key: string) => {
      const oldN = lastOld.get(key)
      const newer = handled.get(`${key}/${written.get(key)! - 1}`)
      if (newer === undefined) return Number.POSITIVE_INFINITY
      const before = oldN === undefined ? undefined : handled.get(`${key}/${oldN - 1}`)
      return newer.at - (before?.at ?? t0)
    }
    const latencyOf = (key: string) =>
      (handled.get(`${key}/${written.get(key)! - 1}`)?.at ?? Number.POSITIVE_INFINITY) - t0
    return {
      hot: options.hot,
      cold: options.cold,
      resharded: options.resharded,
      resumeAfterMs: options.resumeAfterMs ?? 0,
      hotKeys: stats(keys[0]!.map(pauseOf)),
      coldKeys: stats(keys.slice(1).flat().map(pauseOf)),
      hotLatency: stats(keys[0]!.map(latencyOf)),
      coldLatency: stats(keys.slice(1).flat().map(latencyOf)),
      totalMs: Math.round(end - t0),
      orderViolations: violations,
      lost,
    }
  } finally {
    await Promise.all(runtimes.map((r) => r.stop()))
    await own?.dispose()
  }
}
