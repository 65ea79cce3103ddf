/**
 * `durability: { replicas: 1 }` through a Sentinel failover (issue 32, item
 * 3; docs/redis.md, "Durability"; docs/protocol.md rule 28): a producer
 * process sends through the sentinels (one send loop per key, every send
 * retried with the same id until confirmed) while the primary is killed
 * (kill -9) and the sentinels promote a replica. The deployment has two
 * replicas, so the promoted primary still has one and durable sends go on.
 * Every send the producer logged as confirmed must be in its shard stream
 * on the promoted primary, in send order per key. The same run without
 * durability reports how many confirmed sends died with the primary (a
 * count, not asserted: loopback replication is fast and it is often 0).
 */
import { mkdirSync, writeFileSync } from "node:fs"
import path from "node:path"
import type { RedisServer } from "@shardline/redis-store/testing"
import { Redis } from "ioredis"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { storedChecks } from "../support/groupChecks.js"
import { buildMemberScript, ProducerProcess } from "../support/processes.js"
import { sleep } from "../support/processWorld.js"
import { useRedisSentinel } from "../support/redis.js"
import { shardEntries } from "../support/shardEntries.js"

const SHARDS = 8
const KEYS = Array.from({ length: 24 }, (_, i) => `k${i}`)
const DURABILITY = { replicas: 1, timeoutMs: 2_000 }

let script = ""
beforeAll(async () => {
  script = await buildMemberScript("producer-sentinel-durability", "producer")
}, 120_000)

const measured: Array<{ scenario: string; values: Record<string, number> }> = []
afterAll(() => {
  if (measured.length === 0) return
  const dir = path.resolve(import.meta.dirname, "../../test-output")
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    path.join(dir, "sentinel-durability.json"),
    `${JSON.stringify({ date: new Date().toISOString(), measured }, null, 2)}\n`,
  )
})

/** Each shard's entries on `server`: the `n` and key of each, in stream order. */
const entriesOn = async (server: RedisServer, stream: string) => {
  const client = new Redis(server.port, server.host)
  client.on("error", () => {})
  try {
    return await shardEntries(client, stream, SHARDS)
  } finally {
    client.disconnect()
  }
}

describe("durability through a Sentinel failover (primary kill -9; a primary, 2 replicas, 3 sentinels)", () => {
  const deployment = useRedisSentinel("redis7", { replicas: 2 })
  let producer: ProducerProcess | undefined
  let stream = ""
  afterEach(async () => {
    await producer?.kill()
    producer = undefined
    // the killed primary back (the sentinels make it a replica) for the next run
    for (const s of deployment().servers) if (!s.running()) await s.restart()
  }, 60_000)

  const run = async (durable: boolean) => {
    const d = deployment()
    stream = `sentinel-durability-${durable ? "on" : "off"}-${process.pid}`
    const primary = await d.primary()
    producer = new ProducerProcess(
      {
        redis: {
          sentinels: d.sentinels.map((s) => `${s.host}:${s.port}`),
          name: d.name,
          ...(durable ? { durability: DURABILITY } : {}),
        },
        stream,
        shardCount: SHARDS,
        keys: KEYS,
        first: 0,
        intervalMs: 0,
        retryMs: 100,
      },
      script,
    )
    await producer.waitFor("producer ready", (l) => l.ev === "ready")
    await sleep(2_000)
    const killedAt = performance.now()
    await primary.kill()
    const promoted = await d.waitForFailover(primary, 60_000)
    const promotedAt = performance.now()
    // sends through the promoted primary
    const before = producer.confirmed().size
    await sleep(2_000)
    producer.signal("SIGTERM")
    await producer.waitFor("producer exit", (l) => l.ev === "exit", 60_000)
    const byShard = await entriesOn(promoted, stream)
    const confirmed = producer.confirmed()
    const { missing, duplicates, outOfOrder } = storedChecks(
      new Set(confirmed.keys()),
      producer.producedByKey(),
      byShard,
    )
    const firstAfter = producer.lines.find(
      (l) => l.ev === "sent" && l.t >= performance.timeOrigin + promotedAt,
    )
    const values = {
      "kill -> promoted (ms)": promotedAt - killedAt,
      "confirmed sends": confirmed.size,
      "confirmed after the promotion": confirmed.size - before,
      "confirmed sends missing": missing.length,
      "stored twice": duplicates,
      "kill -> first confirmed send after the promotion (ms)":
        firstAfter === undefined ? Number.NaN : firstAfter.t - (performance.timeOrigin + killedAt),
    }
    const scenario = `Sentinel: kill -9 of the primary, ${durable ? "durability replicas 1" : "no durability"}`
    measured.push({ scenario, values })
    console.log(`\n### ${scenario}\n`, values)
    return { missing, outOfOrder, confirmed: confirmed.size, after: confirmed.size - before }
  }

  it("with durability replicas 1: 0 confirmed sends lost, per-key order holds, sends go on after the promotion", async () => {
    const r = await run(true)
    expect(r.confirmed).toBeGreaterThan(100)
    expect(r.after, "sends confirmed after the promotion").toBeGreaterThan(0)
    expect(r.missing.join(", "), "confirmed sends missing on the promoted primary").toBe("")
    expect(r.outOfOrder.join("\n"), "per-key order").toBe("")
  }, 180_000)

  it("without durability: the confirmed sends that died with the primary are counted", async () => {
    const r = await run(false)
    expect(r.confirmed).toBeGreaterThan(100)
  }, 180_000)
})
