/**
 * The polling adapter on real Redis (docs/runtime.md, "The polling
 * adapter"): one member owning 64 shards with skewed backlogs (shard 63 has
 * 400 entries, the others 12-51), with 1 and with 4 workers. Counted in
 * turns, never in time: while every shard has backlog, service is fair
 * (Jain's index >= 0.99 over the first 6 rounds), the highest index is
 * served in the first round, no backlogged shard waits more than a round
 * (plus the other turns in flight, one per lane), and no shard ever has two
 * batches in flight.
 */
import { Keys } from "@shardline/redis-store"
import { Redis } from "ioredis"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import { READS_PER_WORKER } from "../../src/internal/Poller.js"
import { KEY_FIELD } from "../../src/Message.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const N = 64
const BATCH = 2
const ROUNDS = 6

const jain = (xs: ReadonlyArray<number>) => {
  const sum = xs.reduce((a, b) => a + b, 0)
  const squares = xs.reduce((a, b) => a + b * b, 0)
  return squares === 0 ? 1 : (sum * sum) / (xs.length * squares)
}

/** The most turns of other shards between two turns of one shard. */
const worstWait = (order: ReadonlyArray<number>) => {
  const last = new Map<number, number>()
  let worst = 0
  order.forEach((shard, i) => {
    const prev = last.get(shard)
    if (prev !== undefined) worst = Math.max(worst, i - prev - 1)
    last.set(shard, i)
  })
  return worst
}

describe("polling on Redis: 64 shards, skewed backlogs", () => {
  const server = useRedisServer("redis7")

  for (const workers of [1, 4])
    it(`${workers} worker(s): fair rotation, the highest index served in the first round, one batch per shard`, async () => {
      const stream = `polling-${workers}`
      const order: Array<number> = []
      const inFlight = new Set<number>()
      let overlapping = 0
      // the backlog is there before the member starts: its 64 read loops start
      // together with it (pausing a live group to fill it would start the
      // loops in the order their idle waits happen to wake in)
      const client = new Redis(server().url)
      let total = 0
      try {
        const pipeline = client.pipeline()
        for (let s = 0; s < N; s++) {
          const n = s === N - 1 ? 400 : 12 + ((s * 7) % 40)
          total += Math.ceil(n / BATCH)
          for (let i = 0; i < n; i++)
            pipeline.xadd(
              Keys.defaultKeys.shardKey(stream, s),
              "*",
              KEY_FIELD,
              `k${s}`,
              "i",
              String(i),
            )
        }
        await pipeline.exec()
      } finally {
        client.disconnect()
      }
      const runtime = await start({
        redis: { url: server().url },
        handleSignals: false,
        memberBase: `poller-${workers}`,
        consumers: [
          consumer({
            stream,
            group: "g",
            shardCount: N,
            sessionTimeoutMs: 10_000,
            rebalanceTimeoutMs: 20_000,
            heartbeatIntervalMs: 1_000,
            batchSize: BATCH,
            runtimeMaxConcurrency: workers,
            eachBatch: async (batch) => {
              if (inFlight.has(batch.shard)) overlapping++
              inFlight.add(batch.shard)
              order.push(batch.shard)
              // a little asynchronous work, so that workers interleave
              await new Promise<void>((resolve) => setImmediate(resolve))
              inFlight.delete(batch.shard)
            },
          }),
        ],
      })
      try {
        await eventually("every backlog handled", () => order.length >= total)
      } finally {
        await runtime.stop()
      }
      expect(overlapping).toBe(0)
      const window = order.slice(0, ROUNDS * N)
      const counts = Array.from({ length: N }, (_, s) => window.filter((x) => x === s).length)
      expect(jain(counts)).toBeGreaterThanOrEqual(0.99)
      // the highest index is served in the first round, plus the other turns
      // in flight (one per lane, READS_PER_WORKER lanes per worker; a
      // lowest-index-first loop would reach it after ~800 turns)
      const lanes = workers * READS_PER_WORKER
      expect(order.indexOf(N - 1)).toBeLessThan(N + lanes - 1)
      expect(worstWait(window)).toBeLessThanOrEqual(N - 1 + (lanes - 1))
      // shard 63's backlog outlasts the others': it alone is served at the end
      expect(order.slice(-50).every((s) => s === N - 1)).toBe(true)
    })
})
