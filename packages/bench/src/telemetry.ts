/**
 * Entry point: `pnpm --filter @shardline/bench run bench:telemetry`. What
 * tracing and OpenTelemetry metrics cost the runtime per message
 * (docs/observability.md, "What it costs"): the runtime's own cost per
 * message (src/runtimeOverhead.ts: one member, 4 workers, 16 shards, batches
 * of 32, a no-op handler, over a data plane that costs nothing, less 4 bare
 * loops over the same data plane in the same round) with
 *
 * - `off`: `telemetry: false`;
 * - `no SDK`: the default, `@opentelemetry/api` installed and no SDK
 *   registered (what every runtime without an SDK runs);
 * - `tracing`: an SDK tracer provider, `BatchSpanProcessor` with an exporter
 *   that drops everything;
 * - `tracing + metrics`: the same and an SDK meter provider.
 *
 * The four cases run in a rotating order in each round; BENCH_ROUNDS (default
 * 5) and BENCH_MESSAGES (default 200,000 per case and round). Writes
 * results/telemetry.{json,md}.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import type { ExportResult } from "@opentelemetry/core"
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics"
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
} from "@opentelemetry/sdk-trace-base"
import type { StartOptions } from "@shardline/member-runtime"
import { type OverheadSample, runtimeOverhead } from "./runtimeOverhead.js"

const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
const messages = Number(process.env.BENCH_MESSAGES ?? 200_000)

/** An exporter that drops every span at once. */
class DropExporter implements SpanExporter {
  export(_spans: Array<ReadableSpan>, done: (result: ExportResult) => void): void {
    done({ code: 0 })
  }
  async shutdown(): Promise<void> {}
}

/** A reader nobody collects from: what the instruments cost when recording. */
class IdleReader extends MetricReader {
  protected override async onForceFlush() {}
  protected override async onShutdown() {}
}

type Case = "off" | "no SDK" | "tracing" | "tracing + metrics"
const CASES: ReadonlyArray<Case> = ["off", "no SDK", "tracing", "tracing + metrics"]

const telemetryOf = (c: Case): StartOptions["telemetry"] => {
  if (c === "off") return false
  if (c === "no SDK") return undefined
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new BatchSpanProcessor(new DropExporter())],
  })
  return c === "tracing"
    ? { tracerProvider }
    : { tracerProvider, meterProvider: new MeterProvider({ readers: [new IdleReader()] }) }
}

const micros = (s: OverheadSample) => 1e6 / s.runtime - 1e6 / s.bare
const cpu = (s: OverheadSample) => s.runtimeCpuMicros - s.bareCpuMicros
const median = (xs: ReadonlyArray<number>) =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const round2 = (n: number) => Math.round(n * 100) / 100

const load = loadavg()
const samples = new Map<Case, Array<OverheadSample>>(CASES.map((c) => [c, []]))
// a warm-up round, not counted
for (const c of CASES)
  await runtimeOverhead(Math.min(messages, 50_000), { telemetry: telemetryOf(c) })
for (let r = 0; r < rounds; r++)
  for (let i = 0; i < CASES.length; i++) {
    const c = CASES[(i + r) % CASES.length]!
    samples.get(c)!.push(await runtimeOverhead(messages, { telemetry: telemetryOf(c) }))
  }

const off = samples.get("off")!
const perCase = CASES.map((c) => {
  const s = samples.get(c)!
  return {
    case: c,
    runtimeRates: s.map((x) => x.runtime),
    bareRates: s.map((x) => x.bare),
    microsPerMessage: s.map((x) => round2(micros(x))),
    medianMicrosPerMessage: round2(median(s.map(micros))),
    /** Median over rounds of (this case's µs per message - off's in the same round). */
    medianMicrosOverOff: round2(median(s.map((x, i) => micros(x) - micros(off[i]!)))),
    cpuMicrosPerMessage: s.map((x) => round2(cpu(x))),
    /** CPU time per message above the bare loops' (median), and over `off`'s in the same round. */
    medianCpuMicrosPerMessage: round2(median(s.map(cpu))),
    medianCpuMicrosOverOff: round2(median(s.map((x, i) => cpu(x) - cpu(off[i]!)))),
    /** Median over rounds of the runtime's rate / the bare loops' rate in the same round. */
    medianRuntimeOverBare: Math.round(median(s.map((x) => x.runtime / x.bare)) * 1000) / 1000,
  }
})
const out = {
  command: "pnpm --filter @shardline/bench run bench:telemetry",
  date: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  loadAverageAtStart: load.map((l) => Math.round(l * 100) / 100),
  rounds,
  messages,
  cases: perCase,
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("telemetry.json", dir), `${JSON.stringify(out, null, 2)}\n`)
const fmt = (n: number) => n.toLocaleString("en-US")
const md = `# What tracing and metrics cost the runtime (in memory)

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores shared with other work, load average ${out.loadAverageAtStart.join(" / ")} at the start, ${out.date}).

One member, 4 workers, 16 shards, batches of 32, a no-op \`eachMessage\`, over a
data plane that costs nothing (src/runtimeOverhead.ts); each case's rate
against 4 bare loops over the same data plane in the same round; ${fmt(messages)}
messages per case and round, ${rounds} rounds, the cases in a rotating order.
CPU µs per message: this process's CPU time (user + system, all its threads)
per message while the runtime handled the backlog, less the bare loops'
(steadier than rates when other work shares the cores); wall µs per message
= 1 / runtime rate - 1 / bare rate.

| case | CPU µs per message above bare (median) | CPU µs over \`off\`, same round (median) | wall µs per message above bare (median) | wall µs over \`off\` (median) | runtime / bare rate (median) | CPU µs per round |
|---|---:|---:|---:|---:|---:|---|
${perCase.map((c) => `| ${c.case} | ${c.medianCpuMicrosPerMessage.toFixed(2)} | ${c.case === "off" ? "-" : c.medianCpuMicrosOverOff.toFixed(2)} | ${c.medianMicrosPerMessage.toFixed(2)} | ${c.case === "off" ? "-" : c.medianMicrosOverOff.toFixed(2)} | ${c.medianRuntimeOverBare.toFixed(3)} | ${c.cpuMicrosPerMessage.map((x) => x.toFixed(2)).join(", ")} |`).join("\n")}

\`off\` is \`telemetry: false\`; \`no SDK\` the default with \`@opentelemetry/api\`
installed and no SDK registered; \`tracing\` an SDK tracer provider with a
\`BatchSpanProcessor\` whose exporter drops everything (its default queue of
2,048 spans drops the rest: spans are created, filled and ended, not
serialized); \`tracing + metrics\` adds an SDK meter provider (a histogram
record per message, counters per batch).
`
writeFileSync(new URL("telemetry.md", dir), md)
process.stdout.write(md)
process.exit(0)
