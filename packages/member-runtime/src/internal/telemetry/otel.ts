/**
 * The optional OpenTelemetry API (docs/observability.md, "How it is wired"):
 * `@opentelemetry/api` is an optional peer dependency, loaded once when a
 * runtime starts; without it, or without an SDK registered, the runtime
 * traces and measures nothing and pays one check per batch. With it, an
 * Effect `Tracer` over the OpenTelemetry tracer (`bridgeTracer`) creates the
 * runtime's spans, so Effect code and OpenTelemetry code share one tracer.
 */
import type * as Otel from "@opentelemetry/api"
import { Cause, Context, type Exit, Option, Tracer } from "effect"
import { RemoteTraceState } from "./propagation.js"

export type OtelApi = typeof Otel

let loaded: Promise<OtelApi | undefined> | undefined

/** `@opentelemetry/api` if it is installed (loaded once per process), else undefined. */
export const loadOtel = (): Promise<OtelApi | undefined> => {
  if (loaded === undefined) {
    const name = "@opentelemetry/api"
    loaded = import(/* @vite-ignore */ name).then(
      (m: OtelApi & { readonly default?: OtelApi }) =>
        typeof m.trace?.getTracerProvider === "function" ? m : m.default,
      () => undefined,
    )
  }
  return loaded
}

/** The global tracer provider, if an SDK registered one (the API alone answers with a no-op). */
export const registeredTracerProvider = (api: OtelApi): Otel.TracerProvider | undefined => {
  const provider = api.trace.getTracerProvider() as Otel.TracerProvider & {
    readonly getDelegate?: () => Otel.TracerProvider
  }
  const delegate = typeof provider.getDelegate === "function" ? provider.getDelegate() : provider
  const noop = new api.ProxyTracerProvider().getDelegate()
  return delegate === noop || delegate.constructor === noop.constructor ? undefined : delegate
}

/** The global meter provider, if an SDK registered one. */
export const registeredMeterProvider = (api: OtelApi): Otel.MeterProvider | undefined => {
  const provider = api.metrics.getMeterProvider()
  const noop = api.createNoopMeter()
  return provider.getMeter("@shardline/member-runtime").constructor === noop.constructor
    ? undefined
    : provider
}

const KIND: Record<Tracer.SpanKind, Otel.SpanKind> = {
  internal: 0,
  server: 1,
  client: 2,
  producer: 3,
  consumer: 4,
}

/** An attribute value OpenTelemetry accepts. */
export const attributeValue = (value: unknown): Otel.AttributeValue =>
  typeof value === "string" || typeof value === "number" || typeof value === "boolean"
    ? value
    : Array.isArray(value) && value.every((v) => typeof v === "number")
      ? (value as Array<number>)
      : Array.isArray(value) && value.every((v) => typeof v === "string")
        ? (value as Array<string>)
        : String(value)

const attributesOf = (record: Readonly<Record<string, unknown>>): Otel.Attributes => {
  const out: Otel.Attributes = {}
  for (const key of Object.keys(record)) out[key] = attributeValue(record[key])
  return out
}

/** Epoch milliseconds (OpenTelemetry's numeric time input) from Effect's nanoseconds. */
const millis = (nanos: bigint): number => Number(nanos) / 1e6

/** An Effect span backed by an OpenTelemetry span. */
class BridgeSpan implements Tracer.Span {
  readonly _tag = "Span"
  readonly name: string
  readonly parent: Option.Option<Tracer.AnySpan>
  readonly annotations: Context.Context<never>
  readonly links: Array<Tracer.SpanLink>
  readonly kind: Tracer.SpanKind
  readonly otel: Otel.Span
  readonly spanId: string
  readonly traceId: string
  readonly sampled: boolean
  status: Tracer.SpanStatus
  private attributeMap: Map<string, unknown> | undefined

  constructor(
    readonly api: OtelApi,
    tracer: Otel.Tracer,
    options: Parameters<Tracer.Tracer["span"]>[0],
  ) {
    this.name = options.name
    this.annotations = options.annotations
    this.links = options.links
    this.kind = options.kind
    let parent = options.parent
    let context: Otel.Context
    // a root span has no parent: the root context, not a copy of the active one (one object less)
    if (options.root) context = api.ROOT_CONTEXT
    else if (Option.isSome(parent))
      context = api.trace.setSpanContext(api.context.active(), spanContextOf(api, parent.value))
    else {
      const active = api.context.active()
      // no Effect parent: the active OpenTelemetry span (a handler's caller, an HTTP request)
      context = active
      const current = api.trace.getSpan(active)?.spanContext()
      if (current !== undefined && api.isSpanContextValid(current))
        parent = Option.some(
          Tracer.externalSpan({
            traceId: current.traceId,
            spanId: current.spanId,
            sampled: (current.traceFlags & 1) === 1,
          }),
        )
    }
    this.parent = parent
    this.otel = tracer.startSpan(
      options.name,
      {
        startTime: millis(options.startTime),
        kind: KIND[options.kind],
        ...(options.links.length > 0
          ? {
              links: options.links.map((l) => ({
                context: spanContextOf(api, l.span),
                attributes: attributesOf(l.attributes),
              })),
            }
          : {}),
      },
      context,
    )
    const own = this.otel.spanContext()
    this.spanId = own.spanId
    this.traceId = own.traceId
    this.sampled = (own.traceFlags & 1) === 1
    this.status = { _tag: "Started", startTime: options.startTime }
  }

  get attributes(): ReadonlyMap<string, unknown> {
    if (this.attributeMap === undefined) this.attributeMap = new Map()
    return this.attributeMap
  }

  attribute(key: string, value: unknown): void {
    if (this.status._tag === "Ended") return
    this.otel.setAttribute(key, attributeValue(value))
  }

  event(name: string, startTime: bigint, attributes?: Record<string, unknown>): void {
    if (this.status._tag === "Ended") return
    this.otel.addEvent(
      name,
      attributes === undefined ? undefined : attributesOf(attributes),
      millis(startTime),
    )
  }

  addLinks(links: ReadonlyArray<Tracer.SpanLink>): void {
    if (this.status._tag === "Ended") return
    for (const l of links)
      this.otel.addLink({
        context: spanContextOf(this.api, l.span),
        attributes: attributesOf(l.attributes),
      })
  }

  end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (this.status._tag === "Ended") return
    this.status = { _tag: "Ended", startTime: this.status.startTime, endTime, exit }
    if (exit._tag === "Failure" && !Cause.hasInterruptsOnly(exit.cause)) {
      const error = Cause.squash(exit.cause)
      const message = error instanceof Error ? error.message : String(error)
      if (error instanceof Error) this.otel.recordException(error, millis(endTime))
      else this.otel.recordException({ message }, millis(endTime))
      this.otel.setStatus({ code: 2, message })
    }
    this.otel.end(millis(endTime))
  }
}

/** The OpenTelemetry span context of an Effect span (its own for a bridge span). */
export const spanContextOf = (api: OtelApi, span: Tracer.AnySpan): Otel.SpanContext => {
  if (span instanceof BridgeSpan) return span.otel.spanContext()
  const traceState = Context.getOrUndefined(span.annotations, RemoteTraceState)
  return {
    traceId: span.traceId,
    spanId: span.spanId,
    traceFlags: span.sampled ? 1 : 0,
    isRemote: span._tag === "ExternalSpan",
    ...(traceState !== undefined ? { traceState: api.createTraceState(traceState) } : {}),
  }
}

/** The `tracestate` of a span, when it has a non-empty one. */
export const traceStateOf = (span: Tracer.AnySpan): string | undefined => {
  const state =
    span instanceof BridgeSpan
      ? span.otel.spanContext().traceState?.serialize()
      : Context.getOrUndefined(span.annotations, RemoteTraceState)
  return state === "" ? undefined : state
}

/** An Effect `Tracer` over an OpenTelemetry tracer: Effect spans become OpenTelemetry spans. */
export const bridgeTracer = (api: OtelApi, tracer: Otel.Tracer): Tracer.Tracer =>
  Tracer.make({ span: (options) => new BridgeSpan(api, tracer, options) })

/** The OpenTelemetry context with `span` active (so user code's own spans become its children). */
export const contextWith = (api: OtelApi, span: Tracer.AnySpan): Otel.Context =>
  span instanceof BridgeSpan
    ? api.trace.setSpan(api.context.active(), span.otel)
    : api.trace.setSpanContext(api.context.active(), spanContextOf(api, span))

/** The active OpenTelemetry span as an Effect parent, if there is a valid one. */
export const activeSpan = (api: OtelApi): Tracer.ExternalSpan | undefined => {
  const current = api.trace.getSpan(api.context.active())?.spanContext()
  if (current === undefined || !api.isSpanContextValid(current)) return undefined
  const state = current.traceState?.serialize()
  return Tracer.externalSpan({
    traceId: current.traceId,
    spanId: current.spanId,
    sampled: (current.traceFlags & 1) === 1,
    ...(state !== undefined && state !== ""
      ? { annotations: Context.make(RemoteTraceState, state) }
      : {}),
  })
}
