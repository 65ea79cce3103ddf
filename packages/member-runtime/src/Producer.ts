/**
 * The producer (docs/runtime.md, "Producer"): `send(key, fields)` routes the
 * key to its shard with core's documented routing (`Layout.shardOf`:
 * MurmurHash3 of the key over the stream's current generation) and appends
 * the entry to that shard, the key in the `shardline-key` field.
 *
 * - Batching: sends queue up and one flusher appends them, up to `maxBatch`
 *   at a time (after `lingerMs` if set); shards of one flush are appended
 *   concurrently, each shard's entries in send order, so per-key order is the
 *   order of `send` calls.
 * - Trimming: `trim` (MAXLEN / MINID) on every append, or per send.
 * - `ShardSealed` (a reshard sealed the shard): refresh the layout from the
 *   `LayoutSource`, route again, retry (`maxAttempts`).
 * - Idempotent sends (`idempotent`): each send carries (producer id, message
 *   id), so an append retried after an unknown outcome is never duplicated
 *   (a dedupe window per shard and producer, in the memory port and on every
 *   Redis). A retry goes to the shard of the first attempt even when a
 *   reshard sealed it meanwhile: the window is checked before the seal, so
 *   an append that landed answers with its id and is never re-routed to the
 *   new generation (stored twice).
 * - Tracing (docs/observability.md): a send made inside a span (the Effect
 *   parent span, or the caller's active OpenTelemetry span through the
 *   Promise API) gets a `send <stream>` span, and the entry carries its W3C
 *   trace context in the reserved `shardline-traceparent` field; a send
 *   outside any span adds nothing.
 *
 * @example
 * const producer = runtime.producer("orders", { idempotent: true })
 * const { shard, id } = await producer.send("customer-42", { amount: "12.50" })
 * await producer.close()
 */
import { randomUUID } from "node:crypto"
import { Layout, type ShardStreams } from "@shardline/core"
import {
  Clock,
  Context,
  Deferred,
  Effect,
  Option,
  Queue,
  References,
  type Scope,
  Tracer,
} from "effect"
import { type CodecOption, codecOf, encodeFields, type Fields } from "./Codec.js"
import { type LayoutUnavailable, RuntimeStopped, SendFailed, type UnknownStream } from "./Errors.js"
import { traceStateOf } from "./internal/telemetry/otel.js"
import {
  formatTraceparent,
  TRACEPARENT_FIELD,
  TRACESTATE_FIELD,
} from "./internal/telemetry/propagation.js"
import { ATTR, SYSTEM } from "./internal/telemetry/Telemetry.js"
import type { LayoutSource } from "./LayoutSource.js"
import { describeError } from "./Logging.js"
import { KEY_FIELD } from "./Message.js"

/** How a producer routes and writes (`runtime.producer(stream, options)`, `makeProducer`). */
export interface ProducerOptions {
  /** The layout to route by (the runtime's `producer()` defaults it from its consumers' shard counts). */
  readonly layout: LayoutSource
  /**
   * How values are written (docs/runtime.md, "Typed messages"): `raw`
   * (default: `send(key, fields)` with a string map), `json`, or a `Codec`
   * (`send(key, value)`: the value encoded into the `shardline-payload`
   * field, its content type beside it).
   */
  // biome-ignore lint/suspicious/noExplicitAny: the codec's value type is the producer's `T`
  readonly codec?: CodecOption<any>
  /** Sends appended per flush at most (default 256). */
  readonly maxBatch?: number
  /** Wait this long for more sends before flushing a partial batch (default 0). */
  readonly lingerMs?: number
  /** Trim every append (XADD MAXLEN / MINID). */
  readonly trim?: ShardStreams.TrimOptions
  /** Idempotent sends; `producerId` defaults to a random UUID per producer. */
  readonly idempotent?: boolean | { readonly producerId: string }
  /** Attempts per send across re-routes and retries (default 3). */
  readonly maxAttempts?: number
}

/** Options of one send. */
export interface SendOptions {
  /** With `idempotent`: the message id of this send (default: a per-producer sequence number). */
  readonly idempotencyKey?: string
  /** Trim this append (overrides the producer's `trim`). */
  readonly trim?: ShardStreams.TrimOptions
}

/** Where a send landed: its shard, its entry id and the layout generation it was routed by. */
export interface Sent {
  readonly shard: number
  readonly id: string
  /** The layout generation the key was routed by. */
  readonly generation: number
}

/** One message of `sendBatch`: its fields (raw producer) or its value (typed producer). */
export type OutgoingMessage<T = Fields> = [T] extends [Fields]
  ? { readonly key: string; readonly fields?: T; readonly options?: SendOptions }
  : { readonly key: string; readonly value: T; readonly options?: SendOptions }

/**
 * What `send` takes after the key: a raw producer's fields (optional), or
 * a typed producer's value.
 */
export type SendArgs<T> = [T] extends [Fields]
  ? [fields?: T, options?: SendOptions]
  : [value: T, options?: SendOptions]

/** Why a send failed. */
export type SendError = SendFailed | UnknownStream | LayoutUnavailable | RuntimeStopped

/** The producer with Effect results; `T` is what it sends (`Fields` for a raw producer). */
export interface EffectProducer<T = Fields> {
  readonly stream: string
  readonly send: (key: string, ...args: SendArgs<T>) => Effect.Effect<Sent, SendError>
  readonly sendBatch: (
    messages: ReadonlyArray<OutgoingMessage<T>>,
  ) => Effect.Effect<ReadonlyArray<Sent>, SendError>
  /** Wait until everything sent so far is appended (or failed). */
  readonly flush: Effect.Effect<void>
  /** Refuse new sends, flush the queued ones. */
  readonly close: Effect.Effect<void>
}

/**
 * The producer with Promise results; `T` is what it sends (`Fields` for a
 * raw producer; `runtime.producer<Order>("orders", { codec: "json" })` sends
 * `Order` values).
 */
export interface Producer<T = Fields> {
  readonly stream: string
  readonly send: (key: string, ...args: SendArgs<T>) => Promise<Sent>
  readonly sendBatch: (messages: ReadonlyArray<OutgoingMessage<T>>) => Promise<ReadonlyArray<Sent>>
  readonly flush: () => Promise<void>
  readonly close: () => Promise<void>
}

interface Pending {
  readonly key: string
  readonly fields: Readonly<Record<string, string>>
  readonly options: ShardStreams.AppendOptions
  readonly done: Deferred.Deferred<Sent, SendError>
}

const failed = (stream: string, key: string, attempts: number, message: string, cause?: unknown) =>
  new SendFailed({
    stream,
    key,
    attempts,
    message,
    ...(cause !== undefined ? { cause } : {}),
  })

/**
 * A producer for `stream` over the `ShardStreams` given; its flusher lives in
 * the scope. Its send spans come from `tracer` (default: the Effect tracer in
 * context; none when that is Effect's default tracer).
 */
export const makeProducer = <T = Fields>(
  streams: ShardStreams.ShardStreamsShape,
  stream: string,
  options: ProducerOptions & { readonly codec?: CodecOption<T> },
  tracer?: Tracer.Tracer,
): Effect.Effect<EffectProducer<T>, never, Scope.Scope> =>
  Effect.gen(function* () {
    const inContext = yield* Effect.tracer
    const sendTracer =
      tracer ??
      ((yield* References.TracerEnabled) && inContext !== Tracer.nativeTracer
        ? inContext
        : undefined)
    const clock = yield* Clock.Clock
    const maxBatch = Math.max(1, options.maxBatch ?? 256)
    const maxAttempts = Math.max(1, options.maxAttempts ?? 3)
    const lingerMs = options.lingerMs ?? 0
    const idempotent = options.idempotent ?? false
    const producerId =
      typeof idempotent === "object" ? idempotent.producerId : idempotent ? randomUUID() : undefined
    let nextMessageId = 0
    let closed = false
    let outstanding = 0
    const idle: Array<Deferred.Deferred<void>> = []
    const queue = yield* Queue.unbounded<Pending>()
    let generation = yield* Effect.result(options.layout.current(stream))

    const settle = () => {
      if (outstanding === 0) for (const d of idle.splice(0)) Deferred.doneUnsafe(d, Effect.void)
    }

    /** Append one message, re-routing after ShardSealed; resolves its deferred. */
    const appendOne = (p: Pending, first: Layout.Generation): Effect.Effect<void> =>
      Effect.gen(function* () {
        let g = first
        for (let attempt = 1; ; attempt++) {
          const shard = Layout.shardOf(g, p.key)
          const appended = yield* Effect.result(
            streams.append(stream, shard, { ...p.fields, [KEY_FIELD]: p.key }, p.options),
          )
          if (appended._tag === "Success") {
            Deferred.doneUnsafe(
              p.done,
              Effect.succeed({ shard, id: appended.success, generation: g.generation }),
            )
            return
          }
          const e = appended.failure
          const retryable =
            e._tag === "ShardSealed" ||
            (producerId !== undefined && e._tag === "BackendUnavailable")
          if (!retryable || attempt >= maxAttempts) {
            Deferred.doneUnsafe(
              p.done,
              Effect.fail(
                failed(
                  stream,
                  p.key,
                  attempt,
                  e._tag === "ShardSealed"
                    ? `shard ${shard} stayed sealed after ${attempt} layout refreshes`
                    : `${e._tag}: ${e.message}`,
                  e,
                ),
              ),
            )
            return
          }
          if (e._tag === "ShardSealed") {
            const refreshed = yield* Effect.result(options.layout.refresh(stream))
            if (refreshed._tag === "Failure") {
              Deferred.doneUnsafe(p.done, Effect.fail(refreshed.failure))
              return
            }
            g = refreshed.success
            generation = refreshed
          }
        }
      })

    const flushBatch = (batch: ReadonlyArray<Pending>): Effect.Effect<void> =>
      Effect.gen(function* () {
        if (generation._tag === "Failure") {
          generation = yield* Effect.result(options.layout.current(stream))
          if (generation._tag === "Failure") {
            for (const p of batch) Deferred.doneUnsafe(p.done, Effect.fail(generation.failure))
            return
          }
        }
        const g = generation.success
        // per shard, in send order; shards concurrently
        const byShard = new Map<number, Array<Pending>>()
        for (const p of batch) {
          const shard = Layout.shardOf(g, p.key)
          const list = byShard.get(shard)
          if (list === undefined) byShard.set(shard, [p])
          else list.push(p)
        }
        yield* Effect.forEach(
          byShard.values(),
          (list) => Effect.forEach(list, (p) => appendOne(p, g), { discard: true }),
          { concurrency: "unbounded", discard: true },
        )
      })

    const flusher = Effect.forever(
      Effect.gen(function* () {
        let batch = yield* Queue.takeBetween(queue, 1, maxBatch)
        if (lingerMs > 0 && batch.length < maxBatch) {
          yield* Effect.sleep(lingerMs)
          const more = yield* Queue.takeBetween(queue, 0, maxBatch - batch.length)
          batch = [...batch, ...more]
        }
        yield* flushBatch(batch)
        outstanding -= batch.length
        settle()
      }),
    )
    yield* Effect.forkScoped(flusher)

    const codec = codecOf(options.codec as CodecOption<unknown> | undefined)
    /** A send's fields: the raw producer's string map, or the typed producer's value encoded. */
    const fieldsOf = (key: string, given: unknown): Fields | SendFailed => {
      if (codec === undefined) {
        if (given !== undefined && (typeof given !== "object" || given === null))
          return failed(
            stream,
            String(key),
            0,
            `the fields must be a string map, not ${given === null ? "null" : typeof given} (a value of another type needs a codec: docs/runtime.md, "Typed messages")`,
          )
        return (given ?? {}) as Fields
      }
      try {
        return encodeFields(codec, given)
      } catch (error) {
        return failed(
          stream,
          String(key),
          0,
          `could not encode the value (${codec.contentType}): ${describeError(error)}`,
          error,
        )
      }
    }
    const enqueue = (
      key: string,
      fields: Fields,
      sendOptions: SendOptions | undefined,
    ): Effect.Effect<Deferred.Deferred<Sent, SendError>, SendError> =>
      Effect.suspend((): Effect.Effect<Deferred.Deferred<Sent, SendError>, SendError> => {
        if (closed) return Effect.fail(new RuntimeStopped({ message: "the producer is closed" }))
        if (typeof key !== "string")
          return Effect.fail(failed(stream, String(key), 0, "the key must be a string"))
        for (const [name, value] of Object.entries(fields)) {
          if (name === KEY_FIELD)
            return Effect.fail(failed(stream, key, 0, `${KEY_FIELD} is reserved for the key`))
          if (typeof value !== "string")
            return Effect.fail(failed(stream, key, 0, `field ${name} must be a string`))
        }
        const trim = sendOptions?.trim ?? options.trim
        const appendOptions: ShardStreams.AppendOptions = {
          ...(trim !== undefined ? { trim } : {}),
          ...(producerId !== undefined
            ? {
                idempotency: {
                  producerId,
                  messageId: sendOptions?.idempotencyKey ?? String(nextMessageId++),
                },
              }
            : {}),
        }
        const done = Deferred.makeUnsafe<Sent, SendError>()
        outstanding++
        Queue.offerUnsafe(queue, { key, fields, options: appendOptions, done })
        return Effect.succeed(done)
      })

    /** A send span under `parent`, its trace context in the entry's reserved fields. */
    const traced = (
      t: Tracer.Tracer,
      parent: Tracer.AnySpan,
      key: string,
      fields: Readonly<Record<string, string>>,
      sendOptions: SendOptions | undefined,
    ): Effect.Effect<Effect.Effect<Sent, SendError>, SendError> =>
      Effect.suspend(() => {
        const span = t.span({
          name: `send ${stream}`,
          parent: Option.some(parent),
          annotations: Context.empty(),
          links: [],
          startTime: clock.currentTimeNanosUnsafe(),
          kind: "producer",
          root: false,
          sampled: parent.sampled,
        })
        span.attribute(ATTR.system, SYSTEM)
        span.attribute(ATTR.operationName, "send")
        span.attribute(ATTR.operationType, "send")
        span.attribute(ATTR.destination, stream)
        span.attribute(ATTR.key, key)
        const traceparent = formatTraceparent(span)
        const tracestate = traceparent === undefined ? undefined : traceStateOf(span)
        const withContext =
          traceparent === undefined
            ? fields
            : tracestate === undefined
              ? { ...fields, [TRACEPARENT_FIELD]: traceparent }
              : { ...fields, [TRACEPARENT_FIELD]: traceparent, [TRACESTATE_FIELD]: tracestate }
        return enqueue(key, withContext, sendOptions).pipe(
          Effect.onExit((exit) =>
            exit._tag === "Failure"
              ? Effect.sync(() => span.end(clock.currentTimeNanosUnsafe(), exit))
              : Effect.void,
          ),
          Effect.map((done) =>
            Deferred.await(done).pipe(
              Effect.tap((sent) =>
                Effect.sync(() => {
                  span.attribute(ATTR.partition, String(sent.shard))
                  span.attribute(ATTR.messageId, sent.id)
                }),
              ),
              Effect.onExit((exit) =>
                Effect.sync(() => span.end(clock.currentTimeNanosUnsafe(), exit)),
              ),
            ),
          ),
        )
      })

    /** Queue one send; the Effect it returns waits for its append. */
    const prepare = (
      key: string,
      given: unknown,
      sendOptions: SendOptions | undefined,
    ): Effect.Effect<Effect.Effect<Sent, SendError>, SendError> => {
      const fields = fieldsOf(key, given)
      if (fields instanceof SendFailed) return Effect.fail(fields)
      const plain = Effect.map(enqueue(key, fields, sendOptions), Deferred.await)
      if (sendTracer === undefined) return plain
      const t = sendTracer
      return Effect.flatMap(Effect.serviceOption(Tracer.ParentSpan), (parent) =>
        Option.isNone(parent) ? plain : traced(t, parent.value, key, fields, sendOptions),
      )
    }

    const producer: EffectProducer<unknown> = {
      stream,
      send: (key, ...[given, sendOptions]) => {
        if (sendTracer !== undefined) return Effect.flatten(prepare(key, given, sendOptions))
        const fields = fieldsOf(key, given)
        return fields instanceof SendFailed
          ? Effect.fail(fields)
          : Effect.flatMap(enqueue(key, fields, sendOptions), Deferred.await)
      },
      sendBatch: (messages) =>
        Effect.flatMap(
          Effect.forEach(messages, (m) => {
            const one = m as {
              key: string
              fields?: Fields
              value?: unknown
              options?: SendOptions
            }
            return prepare(one.key, codec === undefined ? one.fields : one.value, one.options)
          }),
          (pending) => Effect.forEach(pending, (wait) => wait),
        ),
      flush: Effect.suspend(() => {
        if (outstanding === 0) return Effect.void
        const d = Deferred.makeUnsafe<void>()
        idle.push(d)
        return Deferred.await(d)
      }),
      close: Effect.suspend(() => {
        closed = true
        return producer.flush
      }),
    }
    // the scope's close (a runtime's stop, createProducer's close) appends
    // what is queued before the flusher, forked above, is interrupted:
    // finalizers run last-added first, and a send accepted is never dropped
    yield* Effect.addFinalizer(() => producer.close)
    return producer as unknown as EffectProducer<T>
  })
