/**
 * OpenTelemetry traces and metrics (docs/observability.md) through the
 * OpenTelemetry SDK's in-memory exporter and a manual metric reader, on the
 * memory ports in real time (every wait is for a condition, never a
 * duration): the producer's trace context in the entry, a process span per
 * message (per batch for batch handlers) under the producer's send span,
 * outcomes (acked, retried, dead-lettered), the user's own spans nested in
 * the process span (Promise and Effect handlers), a rebalance with its reason
 * on the coordinator, member spans, the metrics, Effect users' own tracer,
 * and nothing at all without an SDK.
 */
import * as OtelTracer from "@effect/opentelemetry/OtelTracer"
import * as otel from "@opentelemetry/api"
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks"
import {
  AggregationTemporality,
  MeterProvider,
  MetricReader,
  type ResourceMetrics,
} from "@opentelemetry/sdk-metrics"
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base"
import { Effect, Exit, Layer, Metric, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { consumer, effectConsumer } from "../src/Consumer.js"
import type { Message } from "../src/Message.js"
import { memoryPorts } from "../src/Ports.js"
import { make, type ShardlineRuntime, start } from "../src/Runtime.js"
import { TRACEPARENT_FIELD } from "../src/Telemetry.js"
import { until } from "./support/until.js"

const fast = {
  shardCount: 4,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 4_000,
  heartbeatIntervalMs: 100,
}

class Reader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE })
  }
  protected override async onForceFlush() {}
  protected override async onShutdown() {}
}

const sdk = () => {
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  })
  const reader = new Reader()
  const meterProvider = new MeterProvider({ readers: [reader] })
  return { exporter, tracerProvider, reader, meterProvider }
}

const spans = (exporter: InMemorySpanExporter, name?: string): Array<ReadableSpan> =>
  exporter.getFinishedSpans().filter((s) => name === undefined || s.name === name)

const parentId = (s: ReadableSpan) => s.parentSpanContext?.spanId

/** Every data point of a metric, by name, after a collection. */
const points = async (reader: Reader, name: string) => {
  const { resourceMetrics } = await reader.collect()
  return (resourceMetrics as ResourceMetrics).scopeMetrics
    .flatMap((s) => s.metrics)
    .filter((m) => m.descriptor.name === name)
    .flatMap((m) => m.dataPoints as Array<{ attributes: otel.Attributes; value: unknown }>)
}

const counted = (ps: ReadonlyArray<{ value: unknown }>) =>
  ps.reduce((n, p) => n + (typeof p.value === "number" ? p.value : 0), 0)

let contextManager: AsyncLocalStorageContextManager
beforeAll(() => {
  // what an SDK's start does: the active span follows async calls
  contextManager = new AsyncLocalStorageContextManager().enable()
  otel.context.setGlobalContextManager(contextManager)
})
afterAll(() => {
  otel.context.disable()
})

const running: Array<ShardlineRuntime> = []
const startRuntime = async (options: Parameters<typeof start>[0]) => {
  const runtime = await start({ handleSignals: false, ...options })
  running.push(runtime)
  return runtime
}
afterAll(async () => {
  await Promise.all(running.map((r) => r.stop()))
})

describe("tracing", () => {
  it("a message sent inside a span forms one trace: request -> send -> process -> the handler's own span; the entry carries the trace context", async () => {
    const { exporter, tracerProvider, meterProvider } = sdk()
    const userTracer = tracerProvider.getTracer("app")
    const seen: Array<Message> = []
    const runtime = await startRuntime({
      ports: memoryPorts(),
      memberBase: "traced",
      telemetry: { tracerProvider, meterProvider },
      consumers: [
        consumer({
          stream: "orders",
          group: "billing",
          ...fast,
          eachMessage: async (m) => {
            seen.push(m)
            // the user's own span: a child of the message's process span
            await userTracer.startActiveSpan("charge", async (span) => {
              await new Promise((resolve) => setTimeout(resolve, 1))
              span.end()
            })
          },
        }),
      ],
    })
    const producer = runtime.producer("orders")
    const sent = await userTracer.startActiveSpan("request", async (span) => {
      const result = await producer.send("customer-42", { amount: "12.50" })
      span.end()
      return result
    })
    await until("handled", () => spans(exporter, "charge").length === 1)

    const [request] = spans(exporter, "request")
    const [send] = spans(exporter, "send orders")
    const [processSpan] = spans(exporter, "process orders")
    const [charge] = spans(exporter, "charge")
    expect(request).toBeDefined()
    expect(send).toBeDefined()
    expect(processSpan).toBeDefined()
    const traceId = request!.spanContext().traceId
    for (const s of [send!, processSpan!, charge!]) expect(s.spanContext().traceId).toBe(traceId)
    expect(parentId(send!)).toBe(request!.spanContext().spanId)
    expect(parentId(processSpan!)).toBe(send!.spanContext().spanId)
    expect(parentId(charge!)).toBe(processSpan!.spanContext().spanId)
    // the process span is also linked to the producer's context (messaging conventions)
    expect(processSpan!.links.map((l) => l.context.spanId)).toEqual([send!.spanContext().spanId])
    expect(send!.kind).toBe(otel.SpanKind.PRODUCER)
    expect(processSpan!.kind).toBe(otel.SpanKind.CONSUMER)
    expect(send!.attributes).toMatchObject({
      "messaging.system": "shardline",
      "messaging.operation.type": "send",
      "messaging.destination.name": "orders",
      "messaging.destination.partition.id": String(sent.shard),
      "messaging.message.id": sent.id,
    })
    expect(processSpan!.attributes).toMatchObject({
      "messaging.system": "shardline",
      "messaging.operation.name": "process",
      "messaging.operation.type": "process",
      "messaging.destination.name": "orders",
      "messaging.consumer.group.name": "billing",
      "messaging.destination.partition.id": String(sent.shard),
      "messaging.message.id": sent.id,
      "messaging.client.id": "traced",
      "shardline.message.key": "customer-42",
      "shardline.message.delivery_count": 1,
      "shardline.outcome": "acked",
    })
    expect(processSpan!.status.code).toBe(otel.SpanStatusCode.UNSET)
    // the reserved field, visible to the handler, holds the send span's traceparent
    expect(seen[0]!.fields[TRACEPARENT_FIELD]).toBe(
      `00-${traceId}-${send!.spanContext().spanId}-01`,
    )
    expect(seen[0]!.fields.amount).toBe("12.50")
  })

  it("a send outside any span adds nothing; its message's process span is a root", async () => {
    const { exporter, tracerProvider } = sdk()
    const seen: Array<Message> = []
    const runtime = await startRuntime({
      ports: memoryPorts(),
      telemetry: { tracerProvider },
      consumers: [
        consumer({ stream: "orders", group: "g", ...fast, eachMessage: (m) => void seen.push(m) }),
      ],
    })
    await runtime.producer("orders").send("k", { a: "1" })
    await until("handled", () => spans(exporter, "process orders").length === 1)
    expect(seen[0]!.fields).toEqual({ a: "1" })
    expect(spans(exporter, "send orders")).toHaveLength(0)
    const [root] = spans(exporter, "process orders")
    expect(parentId(root!)).toBeUndefined()
    expect(root!.links).toHaveLength(0)
  })

  it("outcomes: a failing message is retried (error on its span), then dead-lettered", async () => {
    const { exporter, tracerProvider, reader, meterProvider } = sdk()
    const runtime = await startRuntime({
      ports: memoryPorts(),
      telemetry: { tracerProvider, meterProvider },
      consumers: [
        consumer({
          stream: "orders",
          group: "g",
          ...fast,
          maxDeliveries: 2,
          retryBackoff: { initialMs: 5, maxMs: 5 },
          eachMessage: () => {
            throw new TypeError("poison")
          },
        }),
      ],
    })
    const tracer = tracerProvider.getTracer("app")
    await tracer.startActiveSpan("request", async (span) => {
      await runtime.producer("orders").send("k", {})
      span.end()
    })
    await until("dead-lettered", () =>
      spans(exporter, "process orders").some(
        (s) => s.attributes["shardline.outcome"] === "dead_lettered",
      ),
    )
    const processed = spans(exporter, "process orders")
    expect(processed.map((s) => s.attributes["shardline.outcome"])).toEqual([
      "retried",
      "dead_lettered",
    ])
    expect(processed.map((s) => s.attributes["shardline.message.delivery_count"])).toEqual([1, 2])
    for (const s of processed) {
      expect(s.status.code).toBe(otel.SpanStatusCode.ERROR)
      expect(s.attributes["error.type"]).toBe("TypeError")
      expect(s.events.map((e) => e.name)).toContain("exception")
    }
    // both deliveries in the producer's trace
    const [send] = spans(exporter, "send orders")
    for (const s of processed) expect(parentId(s)).toBe(send!.spanContext().spanId)
    expect(counted(await points(reader, "shardline.messages.failed"))).toBe(2)
    expect(counted(await points(reader, "shardline.messages.dead_lettered"))).toBe(1)
    const durations = await points(reader, "messaging.process.duration")
    expect(durations.map((p) => p.attributes["shardline.outcome"]).sort()).toEqual([
      "dead_lettered",
      "retried",
    ])
  })

  it("a batch handler's call is one span linked to each message's producer span", async () => {
    const { exporter, tracerProvider } = sdk()
    const runtime = await startRuntime({
      ports: memoryPorts(),
      telemetry: { tracerProvider },
      consumers: [
        consumer({
          stream: "orders",
          group: "g",
          ...fast,
          shardCount: 1,
          batchSize: 10,
          eachBatch: () => {},
        }),
      ],
    })
    const runtimePaused = runtime
    runtimePaused.pause("orders", "g", 0)
    const tracer = tracerProvider.getTracer("app")
    await tracer.startActiveSpan("request", async (span) => {
      await runtime.producer("orders").sendBatch([{ key: "a" }, { key: "b" }, { key: "c" }])
      span.end()
    })
    runtime.resume("orders", "g", 0)
    await until("batch", () => spans(exporter, "process orders").length > 0)
    const [batch] = spans(exporter, "process orders")
    const sends = spans(exporter, "send orders")
    expect(sends).toHaveLength(3)
    expect(batch!.attributes["messaging.batch.message_count"]).toBe(3)
    expect(batch!.links.map((l) => l.context.spanId).sort()).toEqual(
      sends.map((s) => s.spanContext().spanId).sort(),
    )
    expect(batch!.attributes["shardline.outcome"]).toBe("acked")
  })
})

describe("rebalances, revocations, fences, coordinator changes", () => {
  it("a member joining shows up as a coordinator rebalance span with its reason, member rebalance and revoke spans, and an election", async () => {
    const { exporter, tracerProvider, reader, meterProvider } = sdk()
    const ports = memoryPorts()
    const declare = (memberId: string) =>
      consumer({ stream: "orders", group: "g", memberId, ...fast, eachMessage: () => {} })
    const a = await startRuntime({
      ports,
      telemetry: { tracerProvider, meterProvider },
      consumers: [declare("pod-a")],
    })
    await until("a owns 4", () => a.members()[0]!.owned.length === 4)
    const b = await startRuntime({
      ports,
      telemetry: { tracerProvider, meterProvider },
      consumers: [declare("pod-b")],
    })
    await until("b owns 2", () => b.members()[0]!.owned.length === 2)
    await until("a's revoke spans", () =>
      spans(exporter, "shardline.member.revoke").some(
        (s) => s.attributes["messaging.client.id"] === "pod-a",
      ),
    )
    expect(
      spans(exporter, "shardline.member.rebalance").some(
        (s) => s.attributes["messaging.client.id"] === "pod-b",
      ),
    ).toBe(true)
    const rebalances = spans(exporter, "shardline.coordinator.rebalance")
    const join = rebalances.find((s) =>
      String(s.attributes["shardline.rebalance.reason"]).includes("pod-b"),
    )
    expect(
      join,
      rebalances.map((s) => s.attributes["shardline.rebalance.reason"]).join(),
    ).toBeDefined()
    expect(join!.attributes["shardline.rebalance.reason"]).toMatch(/join/)
    expect(join!.attributes["messaging.consumer.group.name"]).toBe("g")
    expect(join!.events.map((e) => e.name)).toContain("TargetAssignmentChanged")
    // the old owner drained two shards: a revoke span each
    const revokes = spans(exporter, "shardline.member.revoke").filter(
      (s) => s.attributes["messaging.client.id"] === "pod-a",
    )
    expect(revokes).toHaveLength(2)
    expect(spans(exporter, "shardline.coordinator.elected").length).toBeGreaterThanOrEqual(1)
    expect(
      spans(exporter, "shardline.coordinator.reconcile").some((s) =>
        s.events.some((e) => e.name === "RevokeAccepted"),
      ),
    ).toBe(true)
    expect(counted(await points(reader, "shardline.rebalances"))).toBeGreaterThanOrEqual(2)
    const owned = await points(reader, "shardline.shards.owned")
    expect(owned.map((p) => [p.attributes["messaging.client.id"], p.value]).sort()).toEqual([
      ["pod-a", 2],
      ["pod-b", 2],
    ])
    const heartbeats = await points(reader, "shardline.heartbeat.duration")
    expect(heartbeats.length).toBeGreaterThan(0)
  })
})

describe("fences", () => {
  it("a second process with the same member id: a coordinator fence span (MemberReplaced) and the first member's fence span", async () => {
    const { exporter, tracerProvider } = sdk()
    const ports = memoryPorts()
    const declare = () =>
      consumer({ stream: "orders", group: "g", memberId: "twin", ...fast, eachMessage: () => {} })
    const first = await startRuntime({
      ports,
      telemetry: { tracerProvider },
      consumers: [declare()],
    })
    await until("first owns 4", () => first.members()[0]!.owned.length === 4)
    await startRuntime({ ports, telemetry: { tracerProvider }, consumers: [declare()] })
    await until("the first is fenced", () => spans(exporter, "shardline.member.fence").length > 0)
    const [fence] = spans(exporter, "shardline.member.fence")
    expect(fence!.attributes["shardline.fence.reason"]).toBe("superseded")
    expect(fence!.status.code).toBe(otel.SpanStatusCode.ERROR)
    await until(
      "the coordinator's fence span",
      () => spans(exporter, "shardline.coordinator.fence").length > 0,
    )
    const [replaced] = spans(exporter, "shardline.coordinator.fence")
    expect(replaced!.attributes["shardline.coordinator.event"]).toBe("MemberReplaced")
    expect(replaced!.attributes["messaging.client.id"]).toBe("twin")
  })
})

describe("metrics", () => {
  it("handled, lag per shard and the Prometheus text's new series", async () => {
    const { tracerProvider, reader, meterProvider } = sdk()
    const runtime = await startRuntime({
      ports: memoryPorts(),
      telemetry: { tracerProvider, meterProvider },
      consumers: [
        consumer({ stream: "orders", group: "g", ...fast, shardCount: 2, eachMessage: () => {} }),
      ],
    })
    await until("owns 2", () => runtime.members()[0]!.owned.length === 2)
    runtime.pause("orders", "g", 0)
    runtime.pause("orders", "g", 1)
    const producer = runtime.producer("orders")
    await producer.sendBatch(Array.from({ length: 20 }, (_, i) => ({ key: `k${i}` })))
    // the lag is read once per heartbeat interval
    await until("lag 20", async () => counted(await points(reader, "shardline.shard.lag")) === 20)
    const lag = await points(reader, "shardline.shard.lag")
    expect(lag.map((p) => p.attributes["messaging.destination.partition.id"]).sort()).toEqual([
      "0",
      "1",
    ])
    expect(counted(lag)).toBe(20)
    const text = await runtime.metrics()
    expect(text).toMatch(/shardline_shard_lag\{[^}]*shard="0"[^}]*\} \d+/)
    expect(text).toMatch(/shardline_heartbeat_duration_ms_count\{[^}]*\} [1-9]/)
    runtime.resume("orders", "g", 0)
    runtime.resume("orders", "g", 1)
    await until(
      "handled 20",
      async () => counted(await points(reader, "shardline.messages.handled")) === 20,
    )
  })
})

describe("Effect users", () => {
  it("the tracer in the Effect context serves the runtime and the handler's own Effect spans", async () => {
    const { exporter, tracerProvider } = sdk()
    const handled: Array<string> = []
    const program = Effect.gen(function* () {
      const scope = yield* Scope.make()
      const runtime = yield* make({
        consumers: [
          effectConsumer({
            stream: "orders",
            group: "g",
            ...fast,
            eachMessage: (m) =>
              Effect.sync(() => handled.push(m.id)).pipe(Effect.withSpan("user effect")),
          }),
        ],
      }).pipe(Scope.provide(scope))
      const producer = yield* runtime.producer("orders").pipe(Scope.provide(scope))
      yield* producer.send("k", { a: "1" }).pipe(Effect.withSpan("effect request"))
      yield* Effect.promise(() => until("handled", () => handled.length === 1))
      yield* Effect.promise(() => until("span", () => spans(exporter, "user effect").length === 1))
      yield* runtime.stop
      yield* Scope.close(scope, Exit.void)
    })
    await Effect.runPromise(
      program.pipe(
        Effect.provide(
          Layer.mergeAll(
            memoryPorts().layer,
            Layer.succeed(Metric.MetricRegistry, new Map()),
            OtelTracer.layer.pipe(
              Layer.provide(Layer.succeed(OtelTracer.OtelTracerProvider, tracerProvider)),
            ),
          ),
        ),
      ) as Effect.Effect<void>,
    )
    const [request] = spans(exporter, "effect request")
    const [send] = spans(exporter, "send orders")
    const [processSpan] = spans(exporter, "process orders")
    const [user] = spans(exporter, "user effect")
    expect(parentId(send!)).toBe(request!.spanContext().spanId)
    expect(parentId(processSpan!)).toBe(send!.spanContext().spanId)
    expect(parentId(user!)).toBe(processSpan!.spanContext().spanId)
    expect(user!.spanContext().traceId).toBe(request!.spanContext().traceId)
  })
})

describe("without an SDK", () => {
  it("nothing is traced or injected; with the API installed but no provider registered either; a registered global provider is picked up", async () => {
    const seen: Array<Message> = []
    const plain = await startRuntime({
      ports: memoryPorts(),
      consumers: [
        consumer({ stream: "orders", group: "g", ...fast, eachMessage: (m) => void seen.push(m) }),
      ],
    })
    const { tracerProvider: appProvider, exporter: appSpans } = sdk()
    // an active span of an SDK the runtime was not given: the runtime ignores it
    await appProvider.getTracer("app").startActiveSpan("request", async (span) => {
      await plain.producer("orders").send("k", { a: "1" })
      span.end()
    })
    await until("handled", () => seen.length === 1)
    expect(seen[0]!.fields).toEqual({ a: "1" })
    expect(spans(appSpans).map((s) => s.name)).toEqual(["request"])
    await expect(
      Effect.runPromise(
        Effect.map(
          Effect.promise(() => import("../src/internal/telemetry/Telemetry.js")),
          (m) => m,
        ).pipe(Effect.flatMap((m) => m.resolveTelemetry(undefined))),
      ),
    ).resolves.toBeUndefined()

    // a globally registered SDK is what a runtime started afterwards uses
    const { exporter, tracerProvider } = sdk()
    expect(otel.trace.setGlobalTracerProvider(tracerProvider)).toBe(true)
    try {
      const traced = await startRuntime({
        ports: memoryPorts(),
        consumers: [consumer({ stream: "orders", group: "g", ...fast, eachMessage: () => {} })],
      })
      await traced.producer("orders").send("k", {})
      await until("traced", () => spans(exporter, "process orders").length === 1)
      let offHandled = 0
      const off = await startRuntime({
        ports: memoryPorts(),
        telemetry: false,
        consumers: [
          consumer({ stream: "other", group: "g", ...fast, eachMessage: () => void offHandled++ }),
        ],
      })
      await off.producer("other").send("k", {})
      await until("off handled", () => offHandled === 1)
      expect(spans(exporter, "process other")).toHaveLength(0)
      expect(
        spans(exporter).some((s) => s.attributes["messaging.destination.name"] === "other"),
      ).toBe(false)
    } finally {
      otel.trace.disable()
    }
  })
})
