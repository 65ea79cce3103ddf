/**
 * W3C trace context in a stream entry (docs/observability.md, "Trace
 * context in the entry"): the producer writes the `traceparent` of its send
 * span into the reserved field `shardline-traceparent` (and a non-empty
 * `tracestate` into `shardline-tracestate`); the consumer parses it back into
 * the parent of the message's process span. Written and read here, with no
 * OpenTelemetry package: an Effect tracer of any kind propagates the same way.
 */
import { Context, Tracer } from "effect"

/** The reserved field holding the W3C `traceparent` of the producer's span. */
export const TRACEPARENT_FIELD = "shardline-traceparent"
/** The reserved field holding the W3C `tracestate`, when the producer's span has one. */
export const TRACESTATE_FIELD = "shardline-tracestate"

/** The `tracestate` of a remote span context, kept on the external span it becomes. */
export class RemoteTraceState extends Context.Service<RemoteTraceState, string>()(
  "@shardline/member-runtime/RemoteTraceState",
) {}

const HEX32 = /^[0-9a-f]{32}$/
const HEX16 = /^[0-9a-f]{16}$/
const ZERO32 = "0".repeat(32)
const ZERO16 = "0".repeat(16)

/** `00-<trace id>-<span id>-<flags>`, or undefined when the span's ids are not W3C ids. */
export const formatTraceparent = (span: Tracer.AnySpan): string | undefined =>
  HEX32.test(span.traceId) &&
  HEX16.test(span.spanId) &&
  span.traceId !== ZERO32 &&
  span.spanId !== ZERO16
    ? `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`
    : undefined

/**
 * The remote span a `traceparent` names (version 00, or a later version read
 * as 00 as the W3C spec asks); undefined for anything malformed or all-zero.
 */
export const parseTraceparent = (
  traceparent: string | undefined,
  tracestate?: string,
): Tracer.ExternalSpan | undefined => {
  if (traceparent === undefined || traceparent.length < 55) return undefined
  const version = traceparent.slice(0, 2)
  if (version === "ff" || !/^[0-9a-f]{2}$/.test(version)) return undefined
  if (version === "00" && traceparent.length !== 55) return undefined
  if (traceparent[2] !== "-" || traceparent[35] !== "-" || traceparent[52] !== "-") return undefined
  const traceId = traceparent.slice(3, 35)
  const spanId = traceparent.slice(36, 52)
  const flags = traceparent.slice(53, 55)
  if (!HEX32.test(traceId) || !HEX16.test(spanId) || !/^[0-9a-f]{2}$/.test(flags)) return undefined
  if (traceId === ZERO32 || spanId === ZERO16) return undefined
  return Tracer.externalSpan({
    traceId,
    spanId,
    sampled: (Number.parseInt(flags, 16) & 1) === 1,
    ...(tracestate !== undefined && tracestate !== ""
      ? { annotations: Context.make(RemoteTraceState, tracestate) }
      : {}),
  })
}
