/**
 * The W3C trace context in an entry's reserved fields
 * (src/internal/telemetry/propagation.ts, docs/observability.md "Trace
 * context in the entry"): what is written, and every malformed value the
 * consumer refuses (it then starts a trace of its own).
 */
import { Context, Tracer } from "effect"
import { describe, expect, it } from "vitest"
import {
  formatTraceparent,
  parseTraceparent,
  RemoteTraceState,
} from "../../src/internal/telemetry/propagation.js"

const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
const spanId = "00f067aa0ba902b7"

describe("traceparent", () => {
  it("round trip: version 00, the ids, the sampled flag; tracestate kept on the remote span", () => {
    const sampled = Tracer.externalSpan({ traceId, spanId, sampled: true })
    expect(formatTraceparent(sampled)).toBe(`00-${traceId}-${spanId}-01`)
    expect(formatTraceparent({ ...sampled, sampled: false })).toBe(`00-${traceId}-${spanId}-00`)
    const parsed = parseTraceparent(`00-${traceId}-${spanId}-01`, "vendor=abc")!
    expect([parsed.traceId, parsed.spanId, parsed.sampled]).toEqual([traceId, spanId, true])
    expect(Context.getOrUndefined(parsed.annotations, RemoteTraceState)).toBe("vendor=abc")
    expect(parseTraceparent(`00-${traceId}-${spanId}-00`)!.sampled).toBe(false)
    expect(
      Context.getOrUndefined(
        parseTraceparent(`00-${traceId}-${spanId}-01`, "")!.annotations,
        RemoteTraceState,
      ),
    ).toBeUndefined()
  })

  it("a later version is read as 00 (its first four fields); trailing data only there", () => {
    expect(parseTraceparent(`01-${traceId}-${spanId}-01-extra`)?.spanId).toBe(spanId)
    expect(parseTraceparent(`00-${traceId}-${spanId}-01-extra`)).toBeUndefined()
  })

  it("malformed or all-zero values are refused", () => {
    for (const bad of [
      undefined,
      "",
      "garbage",
      `ff-${traceId}-${spanId}-01`, // version ff is invalid
      `0g-${traceId}-${spanId}-01`,
      `00-${traceId.toUpperCase()}-${spanId}-01`, // lowercase hex only
      `00-${traceId}-${spanId}-0x`,
      `00-${"0".repeat(32)}-${spanId}-01`,
      `00-${traceId}-${"0".repeat(16)}-01`,
      `00_${traceId}-${spanId}-01`,
      `00-${traceId.slice(1)}-${spanId}-011`,
    ])
      expect(parseTraceparent(bad), String(bad)).toBeUndefined()
  })

  it("spans whose ids are not W3C ids are not written", () => {
    expect(formatTraceparent(Tracer.externalSpan({ traceId: "trace-1", spanId }))).toBeUndefined()
    expect(
      formatTraceparent(Tracer.externalSpan({ traceId, spanId: "0".repeat(16) })),
    ).toBeUndefined()
  })
})
