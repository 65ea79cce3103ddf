/**
 * The Promise API with @StreamListener (standard decorators on Node 20,
 * which has no Symbol.metadata), batch listeners, Effect consumers beside
 * them, events that never block, Prometheus metrics, stop. Real time, so
 * every wait is for a count, never a duration.
 */
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { effectConsumer } from "../src/Consumer.js"
import type { Batch, BatchContext, Message, MessageContext } from "../src/Message.js"
import { memoryPorts } from "../src/Ports.js"
import { start } from "../src/Runtime.js"
import { listenersOf, StreamListener } from "../src/StreamListener.js"
import { until } from "./support/until.js"

const fast = {
  shardCount: 8,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 4_000,
  heartbeatIntervalMs: 200,
}

describe("Promise API", () => {
  it("Node 20 has no Symbol.metadata; @StreamListener registers per instance anyway", () => {
    const major = Number(process.versions.node.split(".")[0])
    if (major < 22) expect((Symbol as { metadata?: symbol }).metadata).toBeUndefined()
    class Two {
      @StreamListener({ stream: "a", group: "g", concurrency: 2 })
      async one(_m: Message) {}
      @StreamListener({ stream: "b", group: "g", batch: true })
      async many(_b: Batch) {}
      notAListener() {}
    }
    const defs = listenersOf(new Two())
    expect(defs.map((d) => d.label)).toEqual(["Two.one", "Two.many"])
    expect(listenersOf({})).toEqual([])
  })

  it("listeners with concurrency 4, a batch listener and an Effect consumer handle everything; events never block; metrics; stop", async () => {
    const seen = new Map<string, Array<number>>()
    const batches: Array<number> = []
    let effectHandled = 0
    class Billing {
      readonly prefix = "bill"
      @StreamListener({ stream: "orders", group: "billing", concurrency: 4, ...fast })
      async onOrder(message: Message, context: MessageContext) {
        // `this` is the instance
        expect(this.prefix).toBe("bill")
        expect(context.signal.aborted).toBe(false)
        const list = seen.get(message.key!) ?? []
        list.push(Number(message.fields.n))
        seen.set(message.key!, list)
      }
      @StreamListener({ stream: "orders", group: "audit", batch: true, ...fast })
      async onBatch(batch: Batch, context: BatchContext) {
        batches.push(batch.messages.length)
        context.resolve(batch.messages[batch.messages.length - 1]!)
      }
    }
    const types = new Set<string>()
    const runtime = await start({
      ports: memoryPorts(),
      // subscribed before anything starts: sees the election too
      onEvent: (e) => {
        types.add(e.type)
      },
      handleSignals: false,
      memberBase: "10.0.0.9",
      listeners: [new Billing()],
      consumers: [
        effectConsumer({
          stream: "orders",
          group: "effects",
          ...fast,
          eachMessage: () =>
            Effect.sync(() => {
              effectHandled++
            }),
        }),
      ],
    })
    // a listener that never resolves, and one that throws: members go on
    runtime.on(() => new Promise<void>(() => {}))
    runtime.on(() => {
      throw new Error("listener bug")
    })
    expect(
      runtime
        .members()
        .filter((m) => m.group === "billing")
        .map((m) => m.memberId),
    ).toEqual(["10.0.0.9-m0", "10.0.0.9-m1", "10.0.0.9-m2", "10.0.0.9-m3"])

    const producer = runtime.producer("orders")
    const total = 400
    await producer.sendBatch(
      Array.from({ length: total }, (_, n) => ({ key: `k${n % 13}`, fields: { n: String(n) } })),
    )
    await until("all handled", () => {
      const billed = [...seen.values()].reduce((a, l) => a + l.length, 0)
      return (
        billed === total && effectHandled === total && batches.reduce((a, b) => a + b, 0) === total
      )
    })
    for (const [, ns] of seen) expect(ns).toEqual([...ns].sort((a, b) => a - b))
    await until("balanced", () =>
      runtime
        .members()
        .filter((m) => m.group === "billing")
        .every((m) => m.owned.length === 2),
    )
    const metrics = await runtime.metrics()
    expect(metrics).toMatch(/shardline_messages_handled_total\{[^}]*group="billing"[^}]*\} 400/)
    // every batch counted, and its duration observed once
    const batchCount = /shardline_batches_total\{[^}]*group="billing"[^}]*\} (\d+)/.exec(metrics)
    const observed = /shardline_batch_duration_ms_count\{[^}]*group="billing"[^}]*\} (\d+)/.exec(
      metrics,
    )
    expect(Number(batchCount?.[1])).toBeGreaterThan(0)
    expect(observed?.[1]).toBe(batchCount?.[1])
    expect(metrics).toMatch(/shardline_messages_acked_total\{[^}]*group="billing"[^}]*\} 400/)
    await until("events delivered", () => types.has("batchEnd") && types.has("joined"))
    expect([...types]).toEqual(
      expect.arrayContaining([
        "joined",
        "assigned",
        "rebalance",
        "heartbeat",
        "batchStart",
        "batchEnd",
        "coordinatorElected",
      ]),
    )
    await runtime.stop()
    await runtime.stopped
    await expect(producer.send("k")).rejects.toMatchObject({ _tag: "RuntimeStopped" })
    // stop is idempotent
    await runtime.stop()
  })
})
