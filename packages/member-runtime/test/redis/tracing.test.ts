/**
 * One trace across two processes on a real Redis (docs/observability.md):
 * this process produces inside a span, with the OpenTelemetry SDK and its
 * in-memory exporter registered globally; a child process
 * (test/redis/procs/traced.ts, the SDK registered the same way before its
 * runtime starts) handles the messages. Each message's `process` span in
 * the child is a child of (and linked to) this process's `send` span, in the
 * trace of the span the send was made in, and the handler's own span is a
 * child of the `process` span; a message sent outside any span starts a
 * trace of its own in the child.
 */
import { type ChildProcess, spawn } from "node:child_process"
import path from "node:path"
import { context, trace } from "@opentelemetry/api"
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks"
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base"
import { build } from "tsup"
import { afterAll, beforeAll, expect, it } from "vitest"
import * as LayoutSource from "../../src/LayoutSource.js"
import { type ShardlineRuntime, start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"
import type { TracedProcessConfig } from "./procs/traced.js"

const server = useRedisServer("redis7")
const SCRIPT = path.resolve(import.meta.dirname, "procs/dist/traced.js")
const stream = "traced"
const SHARDS = 4

interface SpanLine {
  readonly name: string
  readonly kind: number
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly links: ReadonlyArray<{ readonly traceId: string; readonly spanId: string }>
  readonly attributes: Readonly<Record<string, unknown>>
}

beforeAll(
  () =>
    build({
      config: false,
      entry: { traced: path.resolve(import.meta.dirname, "procs/traced.ts") },
      outDir: path.dirname(SCRIPT),
      format: ["esm"],
      dts: false,
      clean: false,
      silent: true,
      target: "node20",
      // the SDK stays one copy, shared with the runtime's import of the API
      external: [/^@opentelemetry\//],
    }),
  120_000,
)

const exporter = new InMemorySpanExporter()
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
let child: ChildProcess | undefined
let producerRuntime: ShardlineRuntime | undefined
beforeAll(() => {
  trace.setGlobalTracerProvider(provider)
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
})
afterAll(async () => {
  child?.kill("SIGKILL")
  await producerRuntime?.stop()
  trace.disable()
  context.disable()
})

it("a message produced here and handled in another process forms one trace", async () => {
  const config: TracedProcessConfig = {
    redis: { url: server().url },
    stream,
    group: "g",
    memberId: "consumer-proc",
    shardCount: SHARDS,
  }
  const spans: Array<SpanLine> = []
  let stderr = ""
  let ready = false
  child = spawn(process.execPath, [SCRIPT, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "pipe"],
  })
  let partial = ""
  child.stdout!.setEncoding("utf8")
  child.stdout!.on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n")
    partial = parts.pop()!
    for (const part of parts) {
      if (part.trim() === "") continue
      const line = JSON.parse(part) as { ev: string } & SpanLine
      if (line.ev === "ready") ready = true
      if (line.ev === "span") spans.push(line)
    }
  })
  child.stderr!.on("data", (c) => {
    stderr += String(c)
  })
  await eventually(`the traced process is ready\n${stderr}`, () => ready, 30_000)

  // this process only produces: a runtime with no consumer, the SDK registered before it
  producerRuntime = await start({
    redis: { url: server().url },
    handleSignals: false,
    memberBase: "producer",
  })
  const producer = producerRuntime.producer(stream, {
    layout: LayoutSource.fixed({ [stream]: SHARDS }),
  })
  const tracer = trace.getTracer("app")
  const { checkout, sent } = await tracer.startActiveSpan("checkout", async (span) => {
    const result = await producer.sendBatch([
      { key: "a", fields: { n: "1" } },
      { key: "b", fields: { n: "2" } },
      { key: "c", fields: { n: "3" } },
    ])
    span.end()
    return { checkout: span.spanContext(), sent: result }
  })
  const untraced = await producer.send("d", { n: "4" })

  // entry ids are per shard: two shards can hold the same id
  const processSpan = (m: { readonly id: string; readonly shard: number }) =>
    spans.find(
      (s) =>
        s.name === `process ${stream}` &&
        s.attributes["messaging.message.id"] === m.id &&
        s.attributes["messaging.destination.partition.id"] === String(m.shard),
    )
  await eventually(
    `the child's process spans\n${stderr}`,
    () => [...sent, untraced].every((m) => processSpan(m) !== undefined),
    30_000,
  )
  const sends = exporter.getFinishedSpans().filter((s) => s.name === `send ${stream}`)
  expect(sends).toHaveLength(3)
  for (const m of sent) {
    const send = sends.find(
      (s) =>
        s.attributes["messaging.message.id"] === m.id &&
        s.attributes["messaging.destination.partition.id"] === String(m.shard),
    )!
    expect(send.parentSpanContext?.spanId).toBe(checkout.spanId)
    const processed = processSpan(m)!
    expect(processed.traceId).toBe(checkout.traceId)
    expect(processed.parentSpanId).toBe(send.spanContext().spanId)
    expect(processed.links).toEqual([
      { traceId: checkout.traceId, spanId: send.spanContext().spanId },
    ])
    expect(processed.attributes).toMatchObject({
      "messaging.destination.name": stream,
      "messaging.consumer.group.name": "g",
      "messaging.destination.partition.id": String(m.shard),
      "messaging.client.id": "consumer-proc",
      "shardline.outcome": "acked",
    })
    await eventually("the handler's span", () =>
      spans.some((s) => s.name === "handle" && s.attributes.message === `${m.shard}/${m.id}`),
    )
    const handle = spans.find(
      (s) => s.name === "handle" && s.attributes.message === `${m.shard}/${m.id}`,
    )!
    expect(handle.traceId).toBe(checkout.traceId)
    expect(handle.parentSpanId).toBe(processed.spanId)
  }
  // outside any span: nothing sent along, a trace of its own in the child
  const alone = processSpan(untraced)!
  expect(alone.parentSpanId).toBeUndefined()
  expect(alone.links).toEqual([])
  expect(alone.traceId).not.toBe(checkout.traceId)
})
