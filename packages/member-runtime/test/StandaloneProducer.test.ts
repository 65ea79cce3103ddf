/**
 * A producer of its own on the memory ports (docs/runtime.md, "A producer of
 * its own"): it routes by the stream's stored layout, creates it with an
 * explicit `shardCount`, and refuses what it cannot route by, typed. The
 * same on real Redis and a cluster: test/redis/standaloneProducer.test.ts.
 */
import { Layout } from "@shardline/core"
import { Effect, Option } from "effect"
import { describe, expect, it } from "vitest"
import { consumer } from "../src/Consumer.js"
import { memoryPorts } from "../src/Ports.js"
import { start } from "../src/Runtime.js"
import { createProducer } from "../src/StandaloneProducer.js"
import { eventually } from "./support/redis.js"

const storedCount = (ports: ReturnType<typeof memoryPorts>, stream: string) =>
  Effect.runSync(ports.layouts.load(stream)).pipe(
    Option.map((s) => Layout.StreamLayout.current(s.record).shardCount),
    Option.getOrUndefined,
  )

describe("createProducer on the memory ports", () => {
  it("a stream without a layout and no shardCount is UnknownStream, saying how to fix it", async () => {
    const ports = memoryPorts()
    const error = await createProducer({ ports, stream: "orders" }).catch((e: unknown) => e)
    expect(error).toMatchObject({ _tag: "UnknownStream", stream: "orders" })
    expect((error as Error).message).toContain("shardCount")
    expect(storedCount(ports, "orders")).toBeUndefined()
  })

  it("shardCount creates the layout; another count is ShardCountMismatch; none routes by the stored one", async () => {
    const ports = memoryPorts()
    const first = await createProducer({ ports, stream: "orders", shardCount: 6 })
    expect(storedCount(ports, "orders")).toBe(6)
    const sent = await first.send("customer-42", { amount: "12.50" })
    expect(sent).toMatchObject({
      generation: 0,
      shard: Layout.shardOf({ generation: 0, firstShard: 0, shardCount: 6 }, "customer-42"),
    })
    await first.close()
    const error = await createProducer({ ports, stream: "orders", shardCount: 4 }).catch(
      (e: unknown) => e,
    )
    expect(error).toMatchObject({ _tag: "ShardCountMismatch", given: 4, stored: 6 })
    expect(storedCount(ports, "orders")).toBe(6)
    const again = await createProducer({ ports, stream: "orders" })
    expect((await again.send("customer-42")).shard).toBe(sent.shard)
    await again.close()
  })

  it("bad options are InvalidRuntimeConfig naming the field, before anything is created", async () => {
    const ports = memoryPorts()
    const cases: ReadonlyArray<[Record<string, unknown>, string]> = [
      [{ ports, stream: "" }, "stream"],
      [{ ports, stream: "s", shardCount: 0 }, "shardCount"],
      [{ ports, stream: "s", shardCount: 70_000 }, "shardCount"],
      [{ ports, stream: "s", shardCount: 1.5 }, "shardCount"],
      [{ ports, stream: "s", maxBatch: 0 }, "maxBatch"],
      [{ ports, stream: "s", idempotent: { producerId: "" } }, "idempotent.producerId"],
      [{ ports, stream: "s", shardCunt: 4 }, "shardCunt"],
      [{ stream: "s" }, "redis"],
      [{ ports, redis: { url: "redis://127.0.0.1:1" }, stream: "s" }, "redis"],
      [{ redis: { url: "http://x" }, stream: "s" }, "redis.url"],
    ]
    for (const [options, field] of cases) {
      const error = await createProducer(options as never).catch((e: unknown) => e)
      expect(error, JSON.stringify(options)).toMatchObject({ _tag: "InvalidRuntimeConfig", field })
    }
    expect(storedCount(ports, "s")).toBeUndefined()
  })

  it("a group started after the producer consumes what it sent, by the layout the producer created", async () => {
    const ports = memoryPorts()
    const producer = await createProducer({ ports, stream: "orders", shardCount: 4 })
    await producer.sendBatch(
      Array.from({ length: 40 }, (_, n) => ({ key: `k${n % 7}`, fields: { n: String(n) } })),
    )
    const seen: Array<number> = []
    const runtime = await start({
      ports,
      handleSignals: false,
      consumers: [
        consumer({
          stream: "orders",
          group: "billing",
          shardCount: 4,
          eachMessage: async (m) => {
            seen.push(Number(m.fields.n))
          },
        }),
      ],
    })
    try {
      await eventually("every message handled", () => seen.length >= 40, 10_000)
      expect([...seen].sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, n) => n))
    } finally {
      await producer.close()
      await runtime.stop()
    }
  })

  it("close flushes what was sent, then sends are refused with RuntimeStopped", async () => {
    const ports = memoryPorts()
    const producer = await createProducer({ ports, stream: "orders", shardCount: 2 })
    const pending = producer.send("k", { n: "1" })
    await producer.close()
    expect((await pending).generation).toBe(0)
    await expect(producer.send("k")).rejects.toMatchObject({ _tag: "RuntimeStopped" })
    await producer.close() // idempotent
  })
})
