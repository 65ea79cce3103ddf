/**
 * Redis Sentinel as a topology (`redis: { sentinels, name }`, docs/redis.md,
 * "Sentinel"), on a real deployment the test starts and stops
 * (test/support/redis.ts `useRedisSentinel`: a primary, one replica, three
 * sentinels, quorum 2, down-after 1 s, failover-timeout 5 s).
 *
 * Two runtimes consume one group through the sentinels while a backlog is
 * being handled; the primary is killed (SIGKILL); the sentinels promote the
 * replica; the runtimes reconnect to it and keep consuming. Every message
 * sent before the kill was replicated (a write of the test's own after the
 * sends, then `WAIT 1` on the primary, answered by the replica), so every
 * one of them must be handled; every message sent after the failover must
 * be handled; nothing is left pending. A retried send may land twice and a
 * message whose ack died with the primary is handled again (at least once):
 * neither is an error. The times (kill -> promoted, -> sending again, ->
 * consuming again) are reported, not asserted.
 */
import { Keys } from "@shardline/redis-store"
import { Redis } from "ioredis"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { Message } from "../../src/Message.js"
import { type ShardlineRuntime, start } from "../../src/Runtime.js"
import { eventually, useRedisSentinel } from "../support/redis.js"

const fast = { sessionTimeoutMs: 6_000, rebalanceTimeoutMs: 12_000, heartbeatIntervalMs: 300 }
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe("start({ redis: { sentinels, name } }) on a primary, a replica and 3 sentinels", () => {
  const deployment = useRedisSentinel("redis7")

  it("connects through the sentinels, and through a failover (primary SIGKILLed) keeps consuming: nothing replicated or sent after it is lost, nothing pending", async () => {
    const d = deployment()
    const stream = "orders-sentinel"
    const shards = 4
    const before = 600
    const after = 300
    const redis = { sentinels: d.sentinels.map((s) => `${s.host}:${s.port}`), name: d.name }

    /** Handler calls per message number, and when each was first handled. */
    const calls = new Map<number, number>()
    const handledAt: Array<number> = []
    const record = async (m: Message) => {
      const n = Number(m.fields.n)
      calls.set(n, (calls.get(n) ?? 0) + 1)
      handledAt.push(performance.now())
      // a backlog that is still being worked through when the primary dies
      await sleep(2)
    }
    const declared = { stream, group: "g", shardCount: shards, ...fast, eachMessage: record }
    const runtimes: Array<ShardlineRuntime> = []
    try {
      for (const base of ["a", "b"])
        runtimes.push(
          await start({
            redis,
            handleSignals: false,
            logLevel: "silent",
            memberBase: base,
            consumers: [consumer(declared)],
          }),
        )
      const producer = runtimes[0]!.producer(stream)
      const primary = await d.primary()
      expect(primary).toBe(d.servers[0])

      // 1. a backlog, replicated: a write of our own after the sends, acknowledged by the replica
      await producer.sendBatch(
        Array.from({ length: before }, (_, n) => ({ key: `k${n % 13}`, fields: { n: String(n) } })),
      )
      await producer.flush()
      const raw = new Redis(primary.port, primary.host, { lazyConnect: true })
      raw.on("error", () => {})
      await raw.connect()
      await raw.set("sentinel-test:replicated", "1")
      expect(await raw.wait(1, 10_000)).toBe(1)
      raw.disconnect()
      await eventually("the backlog being handled", () => calls.size >= 200)

      // 2. the primary dies
      const killedAt = performance.now()
      const handledBeforeKill = calls.size
      process.kill(primary.pid, "SIGKILL")
      const promoted = await d.waitForFailover(primary, 60_000)
      const promotedAt = performance.now()
      expect(promoted).toBe(d.servers[1])

      // 3. sends after the failover, each batch retried until the new primary takes it
      let firstSentAt: number | undefined
      for (let from = before; from < before + after; from += 50) {
        const batch = Array.from({ length: 50 }, (_, i) => ({
          key: `k${(from + i) % 13}`,
          fields: { n: String(from + i) },
        }))
        for (let attempt = 0; ; attempt++) {
          try {
            await producer.sendBatch(batch)
            await producer.flush()
            firstSentAt ??= performance.now()
            break
          } catch (error) {
            if (attempt > 200) throw error
            await sleep(100)
          }
        }
      }

      const total = before + after
      await eventually(`every message handled (${total})`, () => calls.size >= total, 120_000)
      for (let n = 0; n < total; n++) expect(calls.get(n), `message ${n}`).toBeGreaterThanOrEqual(1)

      // nothing pending in any shard's group on the new primary
      const admin = new Redis(promoted.port, promoted.host)
      try {
        await eventually(
          "nothing pending",
          async () => {
            const pending = await Promise.all(
              Array.from({ length: shards }, (_, s) =>
                admin
                  .xpending(Keys.defaultKeys.shardKey(stream, s), "g")
                  .then((r) => Number((r as [number])[0])),
              ),
            )
            return pending.every((p) => p === 0)
          },
          60_000,
        )
      } finally {
        admin.disconnect()
      }

      const consumingAgainAt = handledAt.find((t) => t >= promotedAt)
      const twice = (from: number, to: number) =>
        [...calls.entries()].filter(([n, c]) => n >= from && n < to && c > 1).length
      console.log(
        `[sentinel failover] primary SIGKILLed with ${handledBeforeKill}/${before} of the backlog handled; ` +
          `kill -> replica promoted (every sentinel agrees, ROLE master): ${Math.round(promotedAt - killedAt)} ms; ` +
          `kill -> first send accepted: ${Math.round((firstSentAt ?? Number.NaN) - killedAt)} ms; ` +
          `kill -> first message handled after the promotion: ${Math.round((consumingAgainAt ?? Number.NaN) - killedAt)} ms; ` +
          `handled more than once: ${twice(0, before)} of the backlog, ${twice(before, total)} of those sent after the failover`,
      )
    } finally {
      await Promise.all(runtimes.map((r) => r.stop()))
    }
  }, 240_000)
})
