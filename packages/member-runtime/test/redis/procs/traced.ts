/**
 * A traced member process (test/redis/tracing.test.ts): the OpenTelemetry
 * SDK registered globally, as an application does before it starts the
 * runtime, with the SDK's in-memory exporter; a runtime on Redis with one
 * member whose handler opens a span of its own. Every finished span is
 * written as one JSON line `{ ev: "span", name, kind, traceId, spanId,
 * parentSpanId, links, attributes }`; `{ ev: "ready" }` once started.
 *
 * argv[2]: JSON `{ redis, stream, group, memberId, shardCount }`.
 */
import { context, trace } from "@opentelemetry/api"
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks"
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base"
import { consumer, start } from "../../../src/index.js"
import type { RedisOptions } from "../../../src/Redis.js"

export interface TracedProcessConfig {
  readonly redis: RedisOptions
  readonly stream: string
  readonly group: string
  readonly memberId: string
  readonly shardCount: number
}

const config = JSON.parse(process.argv[2]!) as TracedProcessConfig
const log = (line: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(line)}\n`)

const exporter = new InMemorySpanExporter()
trace.setGlobalTracerProvider(
  new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
)
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
const tracer = trace.getTracer("app")

const flush = () => {
  for (const s of exporter.getFinishedSpans())
    log({
      ev: "span",
      name: s.name,
      kind: s.kind,
      traceId: s.spanContext().traceId,
      spanId: s.spanContext().spanId,
      parentSpanId: s.parentSpanContext?.spanId,
      links: s.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId })),
      attributes: s.attributes,
    })
  exporter.reset()
}
setInterval(flush, 50)

const runtime = await start({
  redis: config.redis,
  memberBase: config.memberId,
  handleSignals: false,
  consumers: [
    consumer({
      stream: config.stream,
      group: config.group,
      memberId: config.memberId,
      shardCount: config.shardCount,
      sessionTimeoutMs: 4_000,
      heartbeatIntervalMs: 200,
      rebalanceTimeoutMs: 6_000,
      idleWaitMs: 200,
      eachMessage: (m) =>
        tracer.startActiveSpan("handle", async (span) => {
          span.setAttribute("message", `${m.shard}/${m.id}`)
          await new Promise((resolve) => setTimeout(resolve, 1))
          span.end()
        }),
    }),
  ],
})
log({ ev: "ready" })

process.once("SIGTERM", () => {
  void runtime.stop().then(() => {
    flush()
    process.exit(0)
  })
})
