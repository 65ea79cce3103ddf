/**
 * An idle shard on real Redis (docs/redis.md, "Idle shards"; docs/runtime.md,
 * "The polling adapter"): once its group has read everything, the runtime
 * issues no read on it, only blocking waits, so nothing modifies the shard's
 * key: another client's WATCH on it survives the idle period, keyspace
 * notifications show nothing for it, and RENAMENX (the gated read's pair)
 * is not called; its lag is reported 0 meanwhile. An append wakes it and
 * that read (which finds entries) moves the key as before. Observed in
 * commands and events, never in time.
 */
import { Keys } from "@shardline/redis-store"
import { Redis } from "ioredis"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { RuntimeEvent } from "../../src/Events.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

/** `calls` of one command in INFO commandstats (the commands scripts call included). */
const calls = async (client: Redis, command: string): Promise<number> => {
  const stats = await client.info("commandstats")
  return Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, "m").exec(stats)?.[1] ?? 0)
}

describe("an idle shard on Redis", () => {
  it("no read while idle: a WATCH on the shard survives, no keyspace event, no RENAMENX; lag 0; an append wakes it", async () => {
    const stream = "idle-watch"
    const key = Keys.defaultKeys.shardKey(stream, 0)
    const admin = new Redis(server().url)
    const watcher = new Redis(server().url)
    const notifications = new Redis(server().url)
    const events: Array<RuntimeEvent> = []
    const handled: Array<string> = []
    const runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      logLevel: "silent",
      memberBase: "idle",
      onEvent: (e) => {
        events.push(e)
      },
      consumers: [
        consumer({
          stream,
          group: "g",
          shardCount: 1,
          sessionTimeoutMs: 3_000,
          rebalanceTimeoutMs: 6_000,
          heartbeatIntervalMs: 200,
          // many idle timeouts within the observed period
          idleWaitMs: 100,
          eachMessage: (m) => {
            handled.push(m.fields.n!)
          },
        }),
      ],
    })
    try {
      const producer = runtime.producer(stream)
      for (const n of ["1", "2", "3"]) await producer.send(`k${n}`, { n })
      await producer.flush()
      await eventually("3 handled", () => handled.length === 3)
      // acknowledged (the next read carried the ack) and idle: nothing pending
      await eventually(
        "acknowledged",
        async () => Number((await admin.xpending(key, "g"))[0]) === 0,
      )
      const readsBefore = await calls(admin, "xread")
      await eventually("idle waits", async () => (await calls(admin, "xread")) >= readsBefore + 2)

      // the idle period, observed
      await admin.config("SET", "notify-keyspace-events", "KA")
      const seen: Array<string> = []
      notifications.on("message", (_channel: string, event: string) => {
        seen.push(event)
      })
      await notifications.subscribe(`__keyspace@0__:${key}`)
      await watcher.watch(key)
      const renames = await calls(admin, "renamenx")
      const waits = await calls(admin, "xread")
      const heartbeats = events.filter((e) => e.type === "heartbeat").length
      // at least ten idle timeouts and five heartbeats (each refreshes lag)
      await eventually("ten idle waits", async () => (await calls(admin, "xread")) >= waits + 10)
      await eventually(
        "five heartbeats",
        () => events.filter((e) => e.type === "heartbeat").length >= heartbeats + 5,
      )
      expect(await calls(admin, "renamenx")).toBe(renames)
      expect(seen).toEqual([])
      expect(await watcher.multi().ping().exec()).not.toBeNull()
      // lag is still reported: 0 for the idle shard
      expect(await runtime.metrics()).toMatch(/shardline_shard_lag\{[^}]*shard="0"[^}]*\} 0\b/)

      // an append wakes it; that read finds an entry and moves the key as before
      await watcher.watch(key)
      await producer.send("k4", { n: "4" })
      await producer.flush()
      await eventually("4 handled", () => handled.length === 4)
      expect(await calls(admin, "renamenx")).toBeGreaterThan(renames)
      expect(seen).toContain("xadd")
      expect(seen).toContain("rename_from")
      expect(await watcher.multi().ping().exec()).toBeNull()
    } finally {
      await runtime.stop()
      await admin.config("SET", "notify-keyspace-events", "")
      for (const c of [admin, watcher, notifications]) c.disconnect()
    }
  })
})
