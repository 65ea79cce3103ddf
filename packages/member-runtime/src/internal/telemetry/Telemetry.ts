/**
 * Traces and OpenTelemetry metrics of one runtime (docs/observability.md).
 * `resolveTelemetry` decides once, when the runtime starts, whether anything
 * is traced or measured:
 *
 * - the Effect `Tracer` in context, when it is not Effect's default (an
 *   Effect user provided `@effect/opentelemetry`, effect's OTLP tracer, ...):
 *   the runtime's spans come from it, so one tracer serves the user's Effects
 *   and the runtime;
 * - else `@opentelemetry/api`, when it is installed and an SDK registered a
 *   tracer provider (or `telemetry.tracerProvider` names one): an Effect
 *   tracer over it (`bridgeTracer`), also handed to Effect handlers;
 * - metrics when a meter provider is registered (or given).
 *
 * Otherwise it is `undefined` and the runtime runs exactly as without this
 * module: the per-batch path checks one field.
 */
import type * as Otel from "@opentelemetry/api"
import { type Clock, Context, Effect, Exit, Option, References, Tracer } from "effect"
import type { EventHub, RuntimeEvent } from "../../Events.js"
import type { Message } from "../../Message.js"
import type { TelemetryOptions } from "../../Telemetry.js"
import type { TurnRecord } from "../ShardRunner.js"
import {
  bridgeTracer,
  contextWith,
  loadOtel,
  type OtelApi,
  registeredMeterProvider,
  registeredTracerProvider,
} from "./otel.js"
import { parseTraceparent, TRACEPARENT_FIELD, TRACESTATE_FIELD } from "./propagation.js"

/** The instrumentation scope of every span and instrument. */
export const SCOPE = "@shardline/member-runtime"

// attribute names: OpenTelemetry's messaging conventions, then our own
export const ATTR = {
  system: "messaging.system",
  operationName: "messaging.operation.name",
  operationType: "messaging.operation.type",
  destination: "messaging.destination.name",
  consumerGroup: "messaging.consumer.group.name",
  partition: "messaging.destination.partition.id",
  messageId: "messaging.message.id",
  clientId: "messaging.client.id",
  batchCount: "messaging.batch.message_count",
  errorType: "error.type",
  key: "shardline.message.key",
  deliveryCount: "shardline.message.delivery_count",
  outcome: "shardline.outcome",
} as const

export const SYSTEM = "shardline"

/** How a message (or a batch) ended, on its span and in `messaging.process.duration`. */
export type HandleOutcome = "acked" | "retried" | "dead_lettered" | "abandoned"

/** What the runtime traces and measures with; `undefined` when nothing is. */
export interface Telemetry {
  /** The tracer of the runtime's spans, or undefined when nothing is traced. */
  readonly tracer: Tracer.Tracer | undefined
  /** The tracer is ours (over the OpenTelemetry API), not the one in the Effect context. */
  readonly bridged: boolean
  readonly api: OtelApi | undefined
  readonly instruments: Instruments | undefined
}

/** The OpenTelemetry instruments (docs/observability.md, "Metrics"). */
export interface Instruments {
  readonly meter: Otel.Meter
  readonly processDuration: Otel.Histogram
  readonly handled: Otel.Counter
  readonly failed: Otel.Counter
  readonly acked: Otel.Counter
  readonly deadLettered: Otel.Counter
  readonly staleOwner: Otel.Counter
  readonly dataLost: Otel.Counter
  readonly batches: Otel.Counter
  readonly rebalances: Otel.Counter
  readonly fences: Otel.Counter
  readonly heartbeatDuration: Otel.Histogram
  readonly ownedShards: Otel.ObservableGauge
  readonly lag: Otel.ObservableGauge
}

const makeInstruments = (meter: Otel.Meter): Instruments => ({
  meter,
  processDuration: meter.createHistogram("messaging.process.duration", {
    description: "Duration of a handler call: one message (eachMessage) or one batch (eachBatch)",
    unit: "s",
    advice: {
      explicitBucketBoundaries: [
        0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
      ],
    },
  }),
  handled: meter.createCounter("shardline.messages.handled", {
    description: "Messages whose handler succeeded",
    unit: "{message}",
  }),
  failed: meter.createCounter("shardline.messages.failed", {
    description: "Handler calls that threw, rejected, failed or timed out",
    unit: "{message}",
  }),
  acked: meter.createCounter("shardline.messages.acked", {
    description: "Messages acknowledged (ack or xackdel)",
    unit: "{message}",
  }),
  deadLettered: meter.createCounter("shardline.messages.dead_lettered", {
    description:
      "Messages moved to the dead-letter stream: after maxDeliveries, or at once when non-retryable, undecodable or invalid",
    unit: "{message}",
  }),
  staleOwner: meter.createCounter("shardline.stale_owner", {
    description: "Reads or acks refused by the storage's owner fence",
    unit: "{call}",
  }),
  dataLost: meter.createCounter("shardline.data_lost", {
    description:
      "Times a member found something Shardline stored for its group gone from a shard (shardline.what: token, stream, group; docs/protocol.md rule 26)",
    unit: "{loss}",
  }),
  batches: meter.createCounter("shardline.batches", {
    description: "Batches read and handled",
    unit: "{batch}",
  }),
  rebalances: meter.createCounter("shardline.rebalances", {
    description: "Assignment epochs applied by members",
    unit: "{rebalance}",
  }),
  fences: meter.createCounter("shardline.fences", {
    description: "Times a member dropped all ownership at once (fenced, lease lost, superseded)",
    unit: "{fence}",
  }),
  heartbeatDuration: meter.createHistogram("shardline.heartbeat.duration", {
    description: "Heartbeat round trip, request sent to answer received (or failed)",
    unit: "s",
    advice: {
      explicitBucketBoundaries: [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
      ],
    },
  }),
  ownedShards: meter.createObservableGauge("shardline.shards.owned", {
    description: "Shards owned by each logical member of this process",
    unit: "{shard}",
  }),
  lag: meter.createObservableGauge("shardline.shard.lag", {
    description:
      "Entries of an owned shard not yet delivered to the group (refreshed once per heartbeat interval)",
    unit: "{message}",
  }),
})

/**
 * Decide what the runtime traces and measures (once, at start). `false`
 * switches everything off.
 */
export const resolveTelemetry = (
  options: TelemetryOptions | false | undefined,
): Effect.Effect<Telemetry | undefined> =>
  Effect.gen(function* () {
    if (options === false) return undefined
    const inContext = yield* Effect.tracer
    const enabled = yield* References.TracerEnabled
    const api = yield* Effect.promise(loadOtel)
    let tracer: Tracer.Tracer | undefined
    let bridged = false
    if (enabled && inContext !== Tracer.nativeTracer) tracer = inContext
    else if (enabled && api !== undefined) {
      const provider =
        (options?.tracerProvider as Otel.TracerProvider | undefined) ??
        registeredTracerProvider(api)
      if (provider !== undefined) {
        tracer = bridgeTracer(api, provider.getTracer(SCOPE))
        bridged = true
      }
    }
    let instruments: Instruments | undefined
    if (api !== undefined) {
      const meters =
        (options?.meterProvider as Otel.MeterProvider | undefined) ?? registeredMeterProvider(api)
      if (meters !== undefined) instruments = makeInstruments(meters.getMeter(SCOPE))
    }
    if (tracer === undefined && instruments === undefined) return undefined
    return { tracer, bridged, api, instruments }
  })

// ---------------------------------------------------------------------------
// the handler path (ShardRunner)

/** One traced handler call: its span (when tracing) and its start (performance.now ms). */
export interface Traced {
  readonly span: Tracer.Span | undefined
  readonly started: number
}

/**
 * What a shard's turn calls when telemetry is on (`TurnEnv.telemetry`); the
 * turn skips every call when it is undefined.
 */
export interface TurnTelemetry {
  /** A process span for one message, child of (and linked to) the producer's span. */
  readonly startMessage: (shard: number, m: Message) => Traced
  /** One process span for a batch handler's call, linked to each message's producer span. */
  readonly startBatch: (shard: number, messages: ReadonlyArray<Message>) => Traced
  readonly end: (traced: Traced, shard: number, outcome: HandleOutcome, error?: unknown) => void
  /** `f(...args)` with the span active in the OpenTelemetry context (plain user code). */
  readonly within: <A extends Array<unknown>, R>(
    traced: Traced,
    f: (...args: A) => R,
    ...args: A
  ) => R
  /** An Effect handler inside the span (its own spans become children). */
  readonly wrap: <A, E, R>(traced: Traced, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** The member's counters, as its Prometheus metrics (`TurnEnv.record`). */
  readonly record: (what: TurnRecord) => void
}

const NO_ANNOTATIONS: Context.Context<never> = Context.empty()

const remoteParent = (m: Message): Tracer.ExternalSpan | undefined => {
  const traceparent = m.fields[TRACEPARENT_FIELD]
  return traceparent === undefined
    ? undefined
    : parseTraceparent(traceparent, m.fields[TRACESTATE_FIELD])
}

/** The handler-path telemetry of one logical member. */
export const turnTelemetry = (
  telemetry: Telemetry,
  key: { readonly stream: string; readonly group: string },
  memberId: string,
  clock: Clock.Clock,
): TurnTelemetry => {
  const { tracer, api, instruments } = telemetry
  const spanName = `process ${key.stream}`
  const group = { stream: key.stream, group: key.group }
  // metric attributes per shard and outcome, built once (an SDK hashes them on every record)
  const byShard = new Map<number, Map<string, Otel.Attributes>>()
  const attributesOf = (shard: number, outcome: string): Otel.Attributes => {
    let m = byShard.get(shard)
    if (m === undefined) {
      m = new Map()
      byShard.set(shard, m)
    }
    let a = m.get(outcome)
    if (a === undefined) {
      a = {
        [ATTR.system]: SYSTEM,
        [ATTR.operationName]: "process",
        [ATTR.destination]: key.stream,
        [ATTR.consumerGroup]: key.group,
        [ATTR.partition]: String(shard),
        [ATTR.outcome]: outcome,
      }
      if (outcome !== "acked") a[ATTR.errorType] = "handler_error"
      m.set(outcome, a)
    }
    return a
  }
  const groupAttributes: Otel.Attributes = {
    [ATTR.system]: SYSTEM,
    [ATTR.destination]: key.stream,
    [ATTR.consumerGroup]: key.group,
  }

  const open = (
    shard: number,
    parent: Tracer.AnySpan | undefined,
    links: Array<Tracer.SpanLink>,
  ): Tracer.Span | undefined => {
    if (tracer === undefined) return undefined
    const span = tracer.span({
      name: spanName,
      parent: parent === undefined ? Option.none() : Option.some(parent),
      annotations: NO_ANNOTATIONS,
      links,
      startTime: clock.currentTimeNanosUnsafe(),
      kind: "consumer",
      root: parent === undefined,
      sampled: parent === undefined ? true : parent.sampled,
    })
    span.attribute(ATTR.system, SYSTEM)
    span.attribute(ATTR.operationName, "process")
    span.attribute(ATTR.operationType, "process")
    span.attribute(ATTR.destination, group.stream)
    span.attribute(ATTR.consumerGroup, group.group)
    span.attribute(ATTR.partition, String(shard))
    span.attribute(ATTR.clientId, memberId)
    return span
  }

  return {
    startMessage: (shard, m) => {
      const parent = tracer === undefined ? undefined : remoteParent(m)
      const span = open(
        shard,
        parent,
        // a fresh array: a tracer keeps it as the span's links and may add to it
        parent === undefined ? [] : [{ span: parent, attributes: {} }],
      )
      if (span !== undefined) {
        span.attribute(ATTR.messageId, m.id)
        span.attribute(ATTR.deliveryCount, m.deliveryCount)
        if (m.key !== undefined) span.attribute(ATTR.key, m.key)
      }
      return { span, started: performance.now() }
    },
    startBatch: (shard, messages) => {
      let span: Tracer.Span | undefined
      if (tracer !== undefined) {
        const links: Array<Tracer.SpanLink> = []
        for (const m of messages) {
          const parent = remoteParent(m)
          if (parent !== undefined)
            links.push({ span: parent, attributes: { [ATTR.messageId]: m.id } })
        }
        span = open(shard, undefined, links)
        span?.attribute(ATTR.batchCount, messages.length)
      }
      return { span, started: performance.now() }
    },
    end: (traced, shard, outcome, error) => {
      if (instruments !== undefined)
        instruments.processDuration.record(
          (performance.now() - traced.started) / 1000,
          attributesOf(shard, outcome),
        )
      const span = traced.span
      if (span === undefined) return
      span.attribute(ATTR.outcome, outcome)
      if (outcome !== "acked" && outcome !== "abandoned")
        span.attribute(ATTR.errorType, errorType(error))
      span.end(
        clock.currentTimeNanosUnsafe(),
        outcome === "acked" || outcome === "abandoned" ? Exit.void : Exit.fail(error),
      )
    },
    within: (traced, f, ...args) =>
      traced.span === undefined || api === undefined
        ? f(...args)
        : api.context.with(contextWith(api, traced.span), f, undefined, ...args),
    wrap: (traced, effect) => {
      if (traced.span === undefined) return effect
      const inSpan = Effect.withParentSpan(effect, traced.span)
      return telemetry.bridged && tracer !== undefined ? Effect.withTracer(inSpan, tracer) : inSpan
    },
    record: (what) => {
      if (instruments === undefined) return
      switch (what._tag) {
        case "Handled":
          instruments.handled.add(what.count, groupAttributes)
          break
        case "Acked":
          instruments.acked.add(what.count, groupAttributes)
          break
        case "HandlerError":
          instruments.failed.add(1, groupAttributes)
          break
        case "DeadLettered":
          instruments.deadLettered.add(1, groupAttributes)
          break
        case "Rejected":
          break
        case "StaleOwner":
          instruments.staleOwner.add(1, groupAttributes)
          break
        case "DataLost":
          instruments.dataLost.add(1, { ...groupAttributes, "shardline.what": what.what })
          break
        case "Batch":
          instruments.batches.add(1, groupAttributes)
          break
      }
    },
  }
}

const errorType = (error: unknown): string =>
  error instanceof Error ? error.name : error === undefined ? "_OTHER" : typeof error

// ---------------------------------------------------------------------------
// the member's and the coordinator's events (no hook in the member itself)

const nanos = (ms: number): bigint => BigInt(Math.round(ms * 1000)) * 1000n

/**
 * Spans and counters from the runtime's events: a rebalance, a revocation
 * (from `revoking` to `revoked`, its drain), a fence (`lost`), a join, a
 * leave and the coordinator's election or resignation in this process; the
 * heartbeat round trip, rebalances and fences as metrics. Events reach a
 * listener off the members' fibers, so none of this slows a member.
 * Returns the unsubscribe function.
 */
export const observeEvents = (telemetry: Telemetry, events: EventHub): (() => void) => {
  const { tracer, instruments } = telemetry
  const revoking = new Map<string, number>()
  const attributesOf = (e: RuntimeEvent): Record<string, unknown> => ({
    [ATTR.system]: SYSTEM,
    [ATTR.destination]: e.stream,
    [ATTR.consumerGroup]: e.group,
    ...("memberId" in e ? { [ATTR.clientId]: e.memberId } : {}),
  })
  const span = (
    name: string,
    e: RuntimeEvent,
    startMs: number,
    attributes: Record<string, unknown>,
    failure?: string,
  ) => {
    if (tracer === undefined) return
    const s = tracer.span({
      name,
      parent: Option.none(),
      annotations: NO_ANNOTATIONS,
      links: [],
      startTime: nanos(startMs),
      kind: "internal",
      root: true,
      sampled: true,
    })
    const all = { ...attributesOf(e), ...attributes }
    for (const k of Object.keys(all)) s.attribute(k, all[k])
    s.end(nanos(e.at), failure === undefined ? Exit.void : Exit.fail(new Error(failure)))
  }
  return events.on((e) => {
    switch (e.type) {
      case "heartbeat":
        instruments?.heartbeatDuration.record(e.latencyMs / 1000, {
          [ATTR.system]: SYSTEM,
          [ATTR.destination]: e.stream,
          [ATTR.consumerGroup]: e.group,
          "shardline.heartbeat.error_code": e.errorCode,
        })
        return
      case "rebalance":
        instruments?.rebalances.add(1, {
          [ATTR.system]: SYSTEM,
          [ATTR.destination]: e.stream,
          [ATTR.consumerGroup]: e.group,
        })
        span("shardline.member.rebalance", e, e.at, {
          "shardline.assignment_epoch": e.assignmentEpoch,
          "shardline.shards.owned": [...e.owned],
        })
        return
      case "revoking":
        revoking.set(`${e.stream}\u0000${e.group}\u0000${e.memberId}\u0000${e.shard}`, e.at)
        return
      case "revoked": {
        const k = `${e.stream}\u0000${e.group}\u0000${e.memberId}\u0000${e.shard}`
        const started = revoking.get(k) ?? e.at
        revoking.delete(k)
        span("shardline.member.revoke", e, started, {
          [ATTR.partition]: String(e.shard),
          "shardline.revoke.abandoned": e.abandoned,
        })
        return
      }
      case "lost":
        instruments?.fences.add(1, {
          [ATTR.system]: SYSTEM,
          [ATTR.destination]: e.stream,
          [ATTR.consumerGroup]: e.group,
          "shardline.fence.reason": e.reason,
        })
        span(
          "shardline.member.fence",
          e,
          e.at,
          { "shardline.fence.reason": e.reason, "shardline.shards.lost": [...e.shards] },
          `ownership dropped: ${e.reason}`,
        )
        return
      case "joined":
        span("shardline.member.join", e, e.at, { "shardline.member_epoch": e.memberEpoch })
        return
      case "left":
        span("shardline.member.leave", e, e.at, { "shardline.leave.reason": e.reason })
        return
      case "coordinatorElected":
      case "coordinatorResigned":
        span(
          e.type === "coordinatorElected"
            ? "shardline.coordinator.elected"
            : "shardline.coordinator.resigned",
          e,
          e.at,
          { "shardline.coordinator.holder": e.holder },
        )
        return
      default:
        return
    }
  })
}

/** One logical member as the gauges read it. */
export interface GaugeSource {
  readonly stream: string
  readonly group: string
  readonly memberId: string
  readonly owned: () => ReadonlyArray<{ readonly shard: number; readonly lag?: number }>
}

/**
 * Owned shards per member and lag per owned shard, read when the meter
 * collects (no work on the members' path). Returns the unregister function.
 */
export const observeGauges = (
  instruments: Instruments,
  members: () => ReadonlyArray<GaugeSource>,
): (() => void) => {
  const callback: Otel.BatchObservableCallback = (result) => {
    for (const m of members()) {
      const owned = m.owned()
      const base = {
        [ATTR.system]: SYSTEM,
        [ATTR.destination]: m.stream,
        [ATTR.consumerGroup]: m.group,
      }
      result.observe(instruments.ownedShards, owned.length, {
        ...base,
        [ATTR.clientId]: m.memberId,
      })
      for (const p of owned)
        if (p.lag !== undefined)
          result.observe(instruments.lag, p.lag, { ...base, [ATTR.partition]: String(p.shard) })
    }
  }
  instruments.meter.addBatchObservableCallback(callback, [instruments.ownedShards, instruments.lag])
  return () =>
    instruments.meter.removeBatchObservableCallback(callback, [
      instruments.ownedShards,
      instruments.lag,
    ])
}
