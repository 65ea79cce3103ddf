/**
 * A producer of its own on the memory ports (docs/runtime.md, "A producer of
 * its own"): it routes by the stream's stored layout, creates it with an
 * explicit `shardCount`, and refuses what it cannot route by, typed. The
 * same on real Redis and a cluster: test/redis/standaloneProducer.test.ts.
 */
import { Layout, ShardStreams } from "@shardline/core"
import { Effect, Option } from "effect"
import { describe, expect, it } from "vitest"
import { CONTENT_TYPE_FIELD, type Codec, PAYLOAD_FIELD } from "../src/Codec.js"
import { consumer } from "../src/Consumer.js"
import type { Message } from "../src/Message.js"
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
      [{ ports, stream: "s", codec: "yaml" }, "codec"],
      [{ ports, stream: "s", codec: { contentType: "text/plain", encode: String } }, "codec"],
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

  it("codec json: a typed producer of its own, its value consumed by a json consumer unchanged", async () => {
    interface Order {
      readonly amount: number
      readonly currency: string
      readonly lines: ReadonlyArray<{ readonly sku: string; readonly n: number }>
    }
    const ports = memoryPorts()
    const producer = await createProducer<Order>({
      ports,
      stream: "orders",
      shardCount: 2,
      codec: "json",
    })
    const order: Order = { amount: 12.5, currency: "EUR", lines: [{ sku: "a-1", n: 3 }] }
    const sent = await producer.send("customer-42", order)
    // the wire format (docs/runtime.md, "The wire format"): payload and content type
    const [entry] = Effect.runSync(ports.streams.range(ShardStreams.shardKey("orders", sent.shard)))
    expect(entry?.fields[PAYLOAD_FIELD]).toBe(JSON.stringify(order))
    expect(entry?.fields[CONTENT_TYPE_FIELD]).toBe("application/json")
    const seen: Array<Message<Order>> = []
    const runtime = await start({
      ports,
      handleSignals: false,
      consumers: [
        consumer<Order>({
          stream: "orders",
          group: "billing",
          shardCount: 2,
          codec: "json",
          eachMessage: async (m) => {
            seen.push(m)
          },
        }),
      ],
    })
    try {
      await eventually("the order handled", () => seen.length >= 1, 10_000)
      expect(seen[0]?.key).toBe("customer-42")
      expect(seen[0]?.value).toEqual(order)
    } finally {
      await producer.close()
      await runtime.stop()
    }
  })

  it("a custom codec: encoded by it on send, decoded by the same codec in the consumer", async () => {
    const pair: Codec<readonly [string, number]> = {
      contentType: "text/csv",
      encode: ([name, n]) => `${name},${n}`,
      decode: (payload) => {
        const [name, n] = payload.split(",")
        if (name === undefined || n === undefined) throw new Error("expected name,number")
        return [name, Number(n)]
      },
    }
    const ports = memoryPorts()
    const producer = await createProducer({ ports, stream: "pairs", shardCount: 1, codec: pair })
    await producer.sendBatch([
      { key: "a", value: ["apples", 3] },
      { key: "b", value: ["pears", 5] },
    ])
    const stored = Effect.runSync(ports.streams.range(ShardStreams.shardKey("pairs", 0)))
    expect(stored.map((e) => [e.fields[PAYLOAD_FIELD], e.fields[CONTENT_TYPE_FIELD]])).toEqual([
      ["apples,3", "text/csv"],
      ["pears,5", "text/csv"],
    ])
    // a value the codec cannot encode is SendFailed, and nothing is appended
    const throwing = await createProducer<number>({
      ports,
      stream: "pairs",
      codec: {
        contentType: "text/plain",
        encode: (n) => {
          if (!Number.isFinite(n)) throw new RangeError("not a finite number")
          return String(n)
        },
        decode: Number,
      },
    })
    await expect(throwing.send("c", Number.NaN)).rejects.toMatchObject({
      _tag: "SendFailed",
      message: expect.stringContaining("not a finite number"),
    })
    const seen: Array<readonly [string, number]> = []
    const runtime = await start({
      ports,
      handleSignals: false,
      consumers: [
        consumer({
          stream: "pairs",
          group: "g",
          shardCount: 1,
          codec: pair,
          eachMessage: async (m) => {
            seen.push(m.value)
          },
        }),
      ],
    })
    try {
      await eventually("both handled", () => seen.length >= 2, 10_000)
      expect(seen).toEqual([
        ["apples", 3],
        ["pears", 5],
      ])
    } finally {
      await Promise.all([producer.close(), throwing.close()])
      await runtime.stop()
    }
  })
})
