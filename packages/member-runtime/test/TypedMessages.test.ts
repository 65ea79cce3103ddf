/**
 * Typed messages (docs/runtime.md, "Typed messages") and errors not worth
 * retrying ("Errors not worth retrying"), on the memory ports: a json
 * producer and consumer round-trip a value; zod and valibot schemas (the
 * real libraries, through Standard Schema) validate it; undecodable JSON, a
 * schema failure and a codec that throws go to the dead letters at once
 * with the reason, not retried and not counted as handler failures; a
 * `NonRetryableError` from eachMessage, eachBatch and the Effect form goes
 * straight to the dead letters. Real time: every wait is for a count.
 */
import { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import * as v from "valibot"
import { describe, expect, it } from "vitest"
import { z } from "zod"
import {
  CONTENT_TYPE_FIELD,
  type Codec,
  PAYLOAD_FIELD,
  type StandardSchemaV1,
} from "../src/Codec.js"
import { type ConsumerDefinition, consumer, effectConsumer } from "../src/Consumer.js"
import { InvalidRuntimeConfig, NonRetryableError } from "../src/Errors.js"
import type { RuntimeEvent } from "../src/Events.js"
import { KEY_FIELD, type Message } from "../src/Message.js"
import { memoryPorts } from "../src/Ports.js"
import { type ShardlineRuntime, start } from "../src/Runtime.js"
import { until } from "./support/until.js"

const fast = {
  shardCount: 2,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 4_000,
  heartbeatIntervalMs: 200,
  retryBackoff: { initialMs: 10, maxMs: 20 },
} as const

interface Order {
  readonly amount: number
}

const running = async (consumers: ReadonlyArray<ConsumerDefinition>) => {
  const events: Array<RuntimeEvent> = []
  const ports = memoryPorts()
  const runtime = await start({
    ports,
    handleSignals: false,
    memberBase: "typed",
    logLevel: "silent",
    consumers,
    onEvent: (e) => {
      events.push(e)
    },
  })
  return { runtime, events, ports }
}

const deadLettered = (events: ReadonlyArray<RuntimeEvent>) =>
  events.flatMap((e) => (e.type === "deadLettered" ? [e] : []))
const handlerErrors = (events: ReadonlyArray<RuntimeEvent>) =>
  events.filter((e) => e.type === "handlerError").length

/** Append an entry as a foreign producer would (docs/runtime.md, "The wire format"). */
const appendRaw = (runtime: ShardlineRuntime, key: string, fields: Record<string, string>) =>
  runtime.producer("orders").send(key, fields)

describe("typed messages", () => {
  it("json: producer<T>() sends a value, the consumer gets it decoded and validated (zod), typed", async () => {
    const got: Array<Message<Order>> = []
    const { runtime } = await running([
      consumer({
        stream: "orders",
        group: "billing",
        ...fast,
        codec: "json",
        schema: z.object({ amount: z.number() }),
        eachMessage: (m) => {
          got.push(m)
        },
      }),
    ])
    try {
      const orders = runtime.producer<Order>("orders", { codec: "json" })
      await orders.send("customer-42", { amount: 12.5 })
      await orders.sendBatch([{ key: "customer-7", value: { amount: 1 } }])
      await until("both handled", () => got.length === 2)
      const first = got.find((m) => m.key === "customer-42")!
      expect(first.value).toEqual({ amount: 12.5 })
      expect(first.fields).toEqual({
        [PAYLOAD_FIELD]: '{"amount":12.5}',
        [CONTENT_TYPE_FIELD]: "application/json",
      })
      expect(first.replay).toBeUndefined()
    } finally {
      await runtime.stop()
    }
  })

  it("valibot, and a custom codec", async () => {
    const csv: Codec<readonly [string, number]> = {
      contentType: "text/csv",
      encode: ([name, n]) => `${name},${n}`,
      decode: (payload) => {
        const [name, n, extra] = payload.split(",")
        if (name === undefined || n === undefined || extra !== undefined)
          throw new Error("expected name,number")
        return [name, Number(n)] as const
      },
    }
    const viaValibot: Array<Order> = []
    const viaCsv: Array<readonly [string, number]> = []
    const { runtime, events } = await running([
      consumer({
        stream: "orders",
        group: "valibot",
        ...fast,
        codec: "json",
        schema: v.object({ amount: v.number() }),
        eachMessage: (m) => {
          viaValibot.push(m.value)
        },
      }),
      consumer({
        stream: "pairs",
        group: "csv",
        ...fast,
        codec: csv,
        eachMessage: (m) => {
          viaCsv.push(m.value)
        },
      }),
    ])
    try {
      await runtime.producer<Order>("orders", { codec: "json" }).send("k", { amount: 3 })
      const pairs = runtime.producer("pairs", { codec: csv })
      await pairs.send("k", ["a", 1])
      // a payload the codec's decode throws on: dead-lettered, never retried
      await runtime.producer("pairs").send("k", {
        [PAYLOAD_FIELD]: "a,1,2",
        [CONTENT_TYPE_FIELD]: "text/csv",
      })
      await until("handled and rejected", () => viaValibot.length === 1 && viaCsv.length === 1)
      await until("rejected", () => deadLettered(events).length === 1)
      expect(viaValibot).toEqual([{ amount: 3 }])
      expect(viaCsv).toEqual([["a", 1]])
      const [rejected] = deadLettered(events)
      expect(rejected!.cause).toBe("undecodable")
      expect(rejected!.deliveryCount).toBe(1)
      expect(rejected!.reason).toContain("expected name,number")
      expect(handlerErrors(events)).toBe(0)
    } finally {
      await runtime.stop()
    }
  })

  it("bad input: undecodable JSON, no payload, another content type and a schema failure are dead-lettered at once with the reason; the rest is handled", async () => {
    const got: Array<number> = []
    let calls = 0
    const { runtime, events, ports } = await running([
      consumer({
        stream: "orders",
        group: "billing",
        ...fast,
        shardCount: 1,
        maxDeliveries: 5,
        circuitBreaker: { failures: 1 },
        codec: "json",
        schema: z.object({ amount: z.number() }),
        eachMessage: (m) => {
          calls++
          got.push(m.value.amount)
        },
      }),
    ])
    try {
      await appendRaw(runtime, "k", { [PAYLOAD_FIELD]: "{not json" })
      await appendRaw(runtime, "k", { amount: "12.5" })
      await appendRaw(runtime, "k", {
        [PAYLOAD_FIELD]: "{}",
        [CONTENT_TYPE_FIELD]: "application/xml",
      })
      await appendRaw(runtime, "k", { [PAYLOAD_FIELD]: '{"amount":"12.5"}' })
      await runtime.producer<Order>("orders", { codec: "json" }).send("k", { amount: 7 })
      await until("four rejected", () => deadLettered(events).length === 4)
      await until("one handled", () => got.length === 1)
      expect(got).toEqual([7])
      expect(calls).toBe(1)
      const reasons = deadLettered(events).map((e) => [e.cause, e.deliveryCount, e.reason])
      expect(reasons.map(([cause, count]) => [cause, count])).toEqual([
        ["undecodable", 1],
        ["undecodable", 1],
        ["undecodable", 1],
        ["invalid", 1],
      ])
      expect(String(reasons[0]![2])).toMatch(/^undecodable application\/json: .*JSON/)
      expect(String(reasons[1]![2])).toContain(`no ${PAYLOAD_FIELD} field`)
      expect(String(reasons[2]![2])).toContain('content type "application/xml"')
      expect(String(reasons[3]![2])).toMatch(/^invalid: at amount: /)
      // not handler failures: no error event, the breaker stayed closed
      expect(handlerErrors(events)).toBe(0)
      expect(events.some((e) => e.type === "circuitOpened")).toBe(false)
      const metrics = await runtime.metrics()
      expect(metrics).toMatch(
        /shardline_messages_rejected_total\{[^}]*reason="undecodable"[^}]*\} 3/,
      )
      expect(metrics).toMatch(/shardline_messages_rejected_total\{[^}]*reason="invalid"[^}]*\} 1/)
      // the dead letters hold each entry with its reason
      const letters = await Effect.runPromise(
        ShardStreams.ShardStreams.use((s) => s.range(ShardStreams.deadLetterKey("orders", 0))).pipe(
          Effect.provide(ports.layer),
        ),
      )
      expect(letters.map((l) => l.fields[ShardStreams.DeadLetterFields.reason])).toEqual(
        reasons.map((r) => r[2]),
      )
    } finally {
      await runtime.stop()
    }
  })

  it("a schema whose validate throws, or validates asynchronously", async () => {
    const throwing: StandardSchemaV1<unknown, Order> = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (value: unknown) => {
          if ((value as { boom?: boolean }).boom) throw new Error("validator crashed")
          return { value: value as Order }
        },
      },
    }
    const asyncSchema: StandardSchemaV1<unknown, Order> = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: async (value: unknown) =>
          typeof (value as Order).amount === "number"
            ? { value: value as Order }
            : { issues: [{ message: "amount must be a number", path: ["amount"] }] },
      },
    }
    const sync: Array<Order> = []
    const later: Array<Order> = []
    const { runtime, events } = await running([
      consumer({
        stream: "orders",
        group: "throwing",
        ...fast,
        codec: "json",
        schema: throwing,
        eachMessage: (m) => {
          sync.push(m.value)
        },
      }),
      consumer({
        stream: "orders",
        group: "async",
        ...fast,
        codec: "json",
        schema: asyncSchema,
        eachMessage: (m) => {
          later.push(m.value)
        },
      }),
    ])
    try {
      const p = runtime.producer<Order | { boom: true }>("orders", { codec: "json" })
      await p.send("a", { boom: true })
      await p.send("b", { amount: 2 })
      await until("handled", () => sync.length === 1 && later.length === 1)
      await until("rejected by both", () => deadLettered(events).length === 2)
      const byGroup = Object.fromEntries(deadLettered(events).map((e) => [e.group, e.reason]))
      expect(byGroup.throwing).toContain("the schema's validate threw: ")
      expect(byGroup.throwing).toContain("validator crashed")
      expect(byGroup.async).toBe("invalid: at amount: amount must be a number")
    } finally {
      await runtime.stop()
    }
  })

  it("bad options: a codec or schema of the wrong shape is an InvalidRuntimeConfig naming the field; a value json cannot hold is a SendFailed", async () => {
    await expect(
      start({
        handleSignals: false,
        consumers: [
          consumer({
            stream: "s",
            group: "g",
            codec: { encode: String } as never,
            eachMessage: () => {},
          }),
        ],
      }),
    ).rejects.toMatchObject({ _tag: "InvalidRuntimeConfig", field: "consumers[0].codec" })
    await expect(
      start({
        handleSignals: false,
        consumers: [
          consumer({ stream: "s", group: "g", schema: {} as never, eachMessage: () => {} }),
        ],
      }),
    ).rejects.toBeInstanceOf(InvalidRuntimeConfig)
    const { runtime } = await running([
      consumer({ stream: "orders", group: "g", ...fast, eachMessage: () => {} }),
    ])
    try {
      const p = runtime.producer<unknown>("orders", { codec: "json" })
      await expect(p.send("k", undefined)).rejects.toMatchObject({
        _tag: "SendFailed",
        message: expect.stringContaining("could not encode the value (application/json)"),
      })
      await expect(p.send("k", { n: 1n })).rejects.toMatchObject({ _tag: "SendFailed" })
      // a raw producer refuses what is not a string map
      await expect(runtime.producer("orders").send("k", "text" as never)).rejects.toMatchObject({
        _tag: "SendFailed",
      })
    } finally {
      await runtime.stop()
    }
  })
})

describe("NonRetryableError", () => {
  it("eachMessage, eachBatch and the Effect form: straight to the dead letters with the reason, no retry, whatever maxDeliveries", async () => {
    const calls = { message: 0, batch: 0, effect: 0 }
    const { runtime, events } = await running([
      consumer({
        stream: "orders",
        group: "each",
        ...fast,
        maxDeliveries: 10,
        circuitBreaker: { failures: 1 },
        eachMessage: (m) => {
          calls.message++
          if (m.fields.bad === "1") throw new NonRetryableError({ message: "no such customer" })
        },
      }),
      consumer({
        stream: "orders",
        group: "batch",
        ...fast,
        maxDeliveries: 10,
        eachBatch: (b, { resolve }) => {
          for (const m of b.messages) {
            calls.batch++
            if (m.fields.bad === "1") throw new NonRetryableError({ message: "batch refused it" })
            resolve(m)
          }
        },
      }),
      effectConsumer({
        stream: "orders",
        group: "effect",
        ...fast,
        maxDeliveries: 10,
        eachMessage: (m) =>
          Effect.suspend(() => {
            calls.effect++
            return m.fields.bad === "1"
              ? Effect.fail(new NonRetryableError({ message: "effect refused it" }))
              : Effect.void
          }),
      }),
    ])
    try {
      const p = runtime.producer("orders")
      await p.send("k", { bad: "1" })
      await p.send("k", { bad: "0" })
      await until("three dead letters", () => deadLettered(events).length === 3)
      await until("the good one handled by all", () => calls.message === 2 && calls.effect === 2)
      const byGroup = Object.fromEntries(deadLettered(events).map((e) => [e.group, e]))
      expect(byGroup.each!.reason).toBe("non-retryable: no such customer")
      expect(byGroup.batch!.reason).toBe("non-retryable: batch refused it")
      expect(byGroup.effect!.reason).toBe("non-retryable: effect refused it")
      for (const e of Object.values(byGroup)) {
        expect(e.cause).toBe("nonRetryable")
        expect(e.deliveryCount).toBe(1)
      }
      // one call for the bad message each: never retried (the breaker did not hold it)
      expect(calls.message).toBe(2)
      expect(calls.effect).toBe(2)
    } finally {
      await runtime.stop()
    }
  })

  it("another error is still retried up to maxDeliveries", async () => {
    let calls = 0
    const { runtime, events } = await running([
      consumer({
        stream: "orders",
        group: "each",
        ...fast,
        maxDeliveries: 3,
        eachMessage: () => {
          calls++
          throw new Error("transient")
        },
      }),
    ])
    try {
      await runtime.producer("orders").send("k", { n: "1" })
      await until("dead-lettered", () => deadLettered(events).length === 1)
      expect(calls).toBe(3)
      expect(deadLettered(events)[0]!.cause).toBe("maxDeliveries")
    } finally {
      await runtime.stop()
    }
  })
})

// the key field name other producers write (docs/runtime.md, "The wire format")
expect(KEY_FIELD).toBe("shardline-key")
