/**
 * A producer without a runtime (docs/runtime.md, "A producer of its own"):
 * a process that only sends needs no consumer, no coordinator and no shard
 * count of its own. It routes by the stream's stored layout (core's
 * `StreamLayouts`, the record every group's coordinator and
 * `shardline reshard` keep), so it follows reshards as a runtime's producer
 * does: an append refused as sealed re-reads the layout and routes again.
 * Given a `shardCount`, it creates the layout when the stream has none yet
 * (a producer that starts before any consumer), and refuses a count that
 * disagrees with the stored one (`ShardCountMismatch`), so a producer can
 * never route by a layout its consumers do not use.
 *
 * The sends are the runtime producer's (src/Producer.ts: batching, trimming,
 * idempotent sends, tracing, and the `codec` option: `createProducer<Order>({
 * ..., codec: "json" })` sends `Order` values, encoded by src/Codec.ts as a
 * runtime's typed producer does); on Redis it opens one command connection (one
 * per master of a cluster), none of the subscriber or blocking connections
 * a consumer needs.
 *
 * @example
 * const producer = await createProducer({ redis: { url: "redis://127.0.0.1:6379" }, stream: "orders" })
 * await producer.send("customer-42", { amount: "12.50" })
 * await producer.close()
 */
import { Layout, MAX_SHARD_COUNT, ShardStreams, StreamLayouts } from "@shardline/core"
import {
  Acl,
  type BackendUnavailable,
  type PermissionDenied,
  RedisConnection,
  RedisShardStreams,
  RedisStreamLayouts,
} from "@shardline/redis-store"
import {
  Effect,
  Exit,
  Layer,
  ManagedRuntime,
  Option,
  Result,
  Schema,
  Scope,
  type Tracer,
} from "effect"
import type { Codec } from "./Codec.js"
import { CodecOptionSchema, decodeOptions, invalid } from "./Config.js"
import {
  type InvalidRuntimeConfig,
  LayoutUnavailable,
  ShardCountMismatch,
  UnknownStream,
} from "./Errors.js"
import { resolveTelemetry } from "./internal/telemetry/Telemetry.js"
import * as LayoutSource from "./LayoutSource.js"
import { effectLoggerLayer, type Logger, type LogLevel, makeLevelLogger } from "./Logging.js"
import {
  type EffectProducer,
  makeProducer,
  type Producer,
  type ProducerOptions,
} from "./Producer.js"
import { decodeRedisOptions, type RedisOptions } from "./Redis.js"
import { makeProducerGate, promiseProducer } from "./Runtime.js"
import type { TelemetryOptions } from "./Telemetry.js"

/** What a producer of its own needs: the stream, and the send options of any producer. */
export interface StreamProducerOptions extends Omit<ProducerOptions, "layout"> {
  /** The logical stream to send to. */
  readonly stream: string
  /**
   * The stream's shard count: creates the layout (generation 0) when the
   * stream has none yet, and must equal the stored count when it has one
   * (else `ShardCountMismatch`). Leave it out to route by the stored layout
   * only (a stream without one is then `UnknownStream`).
   */
  readonly shardCount?: number
}

/** `createProducer`'s options: where the stream is, and the producer's own. */
export interface CreateProducerOptions extends StreamProducerOptions {
  /** The stream's Redis (the options `start({ redis })` takes). One of `redis` and `ports`. */
  readonly redis?: RedisOptions
  /** Ports with a `StreamLayouts` (`memoryPorts()`: in one process with runtimes given the same ports). */
  readonly ports?: {
    readonly layer: Layer.Layer<ShardStreams.ShardStreams | StreamLayouts.StreamLayouts, unknown>
  }
  /** Where warnings go (the ports' own, an evicting server: docs/redis.md, "Eviction"); default `console`. */
  readonly logger?: Logger | Console
  /** The least severe level written (default `warn`). */
  readonly logLevel?: LogLevel
  /** OpenTelemetry, as the runtime's option (docs/observability.md): send spans and trace context. */
  readonly telemetry?: TelemetryOptions | false
}

/** What `makeStreamProducer` runs in: its scope, and the ports it sends and reads layouts on. */
export type StreamProducerServices =
  | Scope.Scope
  | ShardStreams.ShardStreams
  | StreamLayouts.StreamLayouts

/** Why a producer of its own did not start. */
export type StreamProducerError =
  | InvalidRuntimeConfig
  | PermissionDenied
  | BackendUnavailable
  | UnknownStream
  | ShardCountMismatch
  | LayoutUnavailable

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

const ProducerOptionsSchema = Schema.Struct({
  stream: Schema.String.check(
    Schema.isNonEmpty({ message: "must be a non-empty string" }),
    Schema.isMaxLength(256),
  ),
  shardCount: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(MAX_SHARD_COUNT))),
  codec: Schema.optional(CodecOptionSchema),
  maxBatch: Schema.optional(PositiveInt),
  lingerMs: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
  maxAttempts: Schema.optional(PositiveInt),
  trim: Schema.optional(Schema.Record(Schema.String, Schema.Unknown)),
  idempotent: Schema.optional(
    Schema.Union([
      Schema.Boolean,
      Schema.Struct({
        producerId: Schema.String.check(
          Schema.isNonEmpty({ message: "must be a non-empty string" }),
        ),
      }),
    ]),
  ),
})

const CreateOptionsSchema = Schema.Struct({
  ...ProducerOptionsSchema.fields,
  redis: Schema.optional(Schema.Unknown),
  ports: Schema.optional(Schema.Unknown),
  logger: Schema.optional(Schema.Unknown),
  logLevel: Schema.optional(Schema.Literals(["debug", "info", "warn", "error", "silent"])),
  telemetry: Schema.optional(Schema.Unknown),
})

const layoutUnavailable = (stream: string, cause: { readonly _tag: string; message: string }) =>
  new LayoutUnavailable({ stream, message: `${cause._tag}: ${cause.message}`, cause })

/**
 * The stream's layout as this producer will route by it: the stored one
 * (checked against `shardCount` when given), or a new one with `shardCount`.
 */
const resolveLayout = (
  stream: string,
  shardCount: number | undefined,
): Effect.Effect<
  Layout.Generation,
  UnknownStream | ShardCountMismatch | LayoutUnavailable,
  StreamLayouts.StreamLayouts
> =>
  Effect.gen(function* () {
    const layouts = yield* StreamLayouts.StreamLayouts
    const stored =
      shardCount === undefined
        ? yield* Effect.mapError(layouts.load(stream), (e) => layoutUnavailable(stream, e))
        : Option.some(
            yield* Effect.mapError(Layout.Reshard.loadOrCreate(stream, shardCount), (e) =>
              layoutUnavailable(stream, e),
            ),
          )
    if (Option.isNone(stored))
      return yield* new UnknownStream({
        stream,
        message: `stream ${JSON.stringify(stream)} has no shard layout yet: no consumer group has started on it and this producer was given no shardCount. Start a consumer of the stream first, or give the producer the shard count its consumers use: createProducer({ stream: ${JSON.stringify(stream)}, shardCount: <the groups' shardCount>, ... })`,
      })
    const current = Layout.StreamLayout.current(stored.value.record)
    // a stream being resharded routes by its newest generation: the count to agree with
    if (shardCount !== undefined && current.shardCount !== shardCount)
      return yield* new ShardCountMismatch({
        stream,
        given: shardCount,
        stored: current.shardCount,
        message: `stream ${JSON.stringify(stream)} has ${current.shardCount} shards (generation ${current.generation} of its stored layout), not the ${shardCount} this producer was given: drop shardCount to route by the stored layout, or change the stream's count with shardline reshard (docs/resharding.md)`,
      })
    return current
  })

/**
 * A producer of its own (Effect API) over the `ShardStreams` and
 * `StreamLayouts` in context; its flusher lives in the scope. Fails with
 * `InvalidRuntimeConfig` (naming the field), on Redis (a `RedisConnection`
 * in context, as `producerPorts` gives) `PermissionDenied` when the ACL
 * user lacks a command or key a producer needs (redis-store
 * `Acl.checkProducerPermissions`), `UnknownStream` (no stored layout, no
 * `shardCount`), `ShardCountMismatch` or `LayoutUnavailable`.
 *
 * @example
 * const program = Effect.scoped(
 *   Effect.gen(function* () {
 *     const producer = yield* makeStreamProducer({ stream: "orders", shardCount: 16 })
 *     yield* producer.send("customer-42", { amount: "12.50" })
 *   }),
 * )
 * // with memoryPorts().layer, or producerPorts({ url }) on Redis
 *
 * // typed (docs/runtime.md, "Typed messages"): a producer of Order values
 * const orders = yield* makeStreamProducer<Order>({ stream: "orders", codec: "json" })
 * yield* orders.send("customer-42", { amount: 12.5, currency: "EUR" })
 */
export const makeStreamProducer: {
  (
    options: Omit<StreamProducerOptions, "codec"> & { readonly codec?: "raw" },
    tracer?: Tracer.Tracer,
  ): Effect.Effect<EffectProducer, StreamProducerError, StreamProducerServices>
  <T>(
    options: Omit<StreamProducerOptions, "codec"> & { readonly codec: "json" | Codec<T> },
    tracer?: Tracer.Tracer,
  ): Effect.Effect<EffectProducer<T>, StreamProducerError, StreamProducerServices>
} = (
  options: StreamProducerOptions,
  tracer?: Tracer.Tracer,
): Effect.Effect<EffectProducer<unknown>, StreamProducerError, StreamProducerServices> =>
  Effect.gen(function* () {
    const decoded = decodeOptions(ProducerOptionsSchema, options, "")
    if (Result.isFailure(decoded)) return yield* decoded.failure
    const { stream, shardCount, ...producerOptions } = options
    // on Redis: the ACL user may send to the stream (and keep its layout),
    // probed before the layout is read or created and before any send
    // (docs/redis.md, "ACL"), so a missing command is named at creation
    // rather than met later as a NOPERM behind LayoutUnavailable or SendFailed
    const redis = yield* Effect.serviceOption(RedisConnection.RedisConnection)
    if (Option.isSome(redis)) yield* Acl.checkProducerPermissions(redis.value, [stream])
    yield* resolveLayout(stream, shardCount)
    const streams = yield* ShardStreams.ShardStreams
    const layouts = yield* StreamLayouts.StreamLayouts
    // the stored record on every refresh: a reshard seals the old shards, the
    // producer's next append there is refused and re-routed by the new record
    // the runtime producer's sends, its codec encoding included (src/Codec.ts)
    return yield* makeProducer<unknown>(
      streams,
      stream,
      { ...producerOptions, layout: LayoutSource.fromStreamLayouts(layouts) },
      tracer,
    )
  })

/**
 * The ports a producer of its own needs on Redis, and nothing more: the
 * command connection (`RedisConnection`: one per master of a cluster), the
 * data plane and the layouts. Validated as `start({ redis })` validates.
 */
export const producerPorts = (
  redis: RedisOptions,
): Layer.Layer<
  ShardStreams.ShardStreams | StreamLayouts.StreamLayouts | RedisConnection.RedisConnection,
  InvalidRuntimeConfig | RedisConnection.ConnectError
> =>
  Layer.unwrap(
    Effect.suspend(() => {
      const decoded = decodeRedisOptions(redis)
      if (Result.isFailure(decoded)) return Effect.fail(decoded.failure)
      const { store: _store, transport: _transport, shardStreams, ...connection } = decoded.success
      return Effect.succeed(
        Layer.mergeAll(
          RedisShardStreams.layerFromConnectionWith(shardStreams),
          RedisStreamLayouts.layerFromConnection,
        ).pipe(Layer.provideMerge(RedisConnection.layer(connection))),
      )
    }),
  )

/**
 * A producer of its own (Promise API): on Redis with `redis`, or on `ports`.
 * Rejects, having closed whatever it opened, with `InvalidRuntimeConfig`
 * before anything connects, then with a connection error, `PermissionDenied`
 * (the Redis user lacks what a producer needs, named), `UnknownStream`
 * (the stream has no layout and no `shardCount` was given),
 * `ShardCountMismatch` or `LayoutUnavailable`. `close()` flushes what was
 * sent and closes its connection; sends after it reject `RuntimeStopped`.
 *
 * @example
 * // the consumers created the stream's layout: route by it
 * const producer = await createProducer({ redis: { url: "redis://127.0.0.1:6379" }, stream: "orders" })
 * // or create it, before any consumer, with the count the consumers will use
 * const early = await createProducer({
 *   redis: { url: "redis://127.0.0.1:6379" },
 *   stream: "payments",
 *   shardCount: 16,
 *   idempotent: true,
 * })
 * // typed (docs/runtime.md, "Typed messages"): send(key, value) takes an Order
 * const orders = await createProducer<Order>({ redis, stream: "orders", codec: "json" })
 * await orders.send("customer-42", { amount: 12.5, currency: "EUR" })
 */
export const createProducer: {
  (options: Omit<CreateProducerOptions, "codec"> & { readonly codec?: "raw" }): Promise<Producer>
  <T>(
    options: Omit<CreateProducerOptions, "codec"> & { readonly codec: "json" | Codec<T> },
  ): Promise<Producer<T>>
} = async (options: CreateProducerOptions): Promise<Producer<unknown>> => {
  const decoded = decodeOptions(CreateOptionsSchema, options, "")
  if (Result.isFailure(decoded)) throw decoded.failure
  const {
    redis,
    ports,
    logger,
    logLevel,
    telemetry: telemetryOptions,
    ...producerOptions
  } = options
  if ((redis === undefined) === (ports === undefined))
    throw invalid(
      "redis",
      "give either redis (a Redis) or ports (memoryPorts()), not both nor neither",
    )
  let layer: Layer.Layer<ShardStreams.ShardStreams | StreamLayouts.StreamLayouts, unknown>
  if (redis !== undefined) {
    const checked = decodeRedisOptions(redis)
    if (Result.isFailure(checked)) throw checked.failure
    layer = producerPorts(redis)
  } else layer = ports!.layer
  const effectLogs = effectLoggerLayer(makeLevelLogger(logger, logLevel ?? "warn"))
  const managed = ManagedRuntime.make(
    Layer.mergeAll(
      (layer as Layer.Layer<ShardStreams.ShardStreams | StreamLayouts.StreamLayouts>).pipe(
        Layer.provide(effectLogs),
      ),
      effectLogs,
    ),
  )
  const scope = await managed.runPromise(Scope.make())
  const close = async () => {
    await managed.runPromise(Scope.close(scope, Exit.void))
    await managed.dispose()
  }
  let telemetry: Effect.Success<ReturnType<typeof resolveTelemetry>>
  let producer: EffectProducer<unknown>
  try {
    telemetry = await managed.runPromise(resolveTelemetry(telemetryOptions))
    producer = await managed.runPromise(
      Scope.provide(
        makeStreamProducer(
          producerOptions as StreamProducerOptions & { readonly codec: Codec<unknown> },
          telemetry?.tracer,
        ),
        scope,
      ),
    )
  } catch (error) {
    await close()
    throw error
  }
  // a call is refused from the call of close() on (checked at the call: the
  // Promise API runs each send a microtask later), and what was called
  // before is appended first
  const gate = makeProducerGate("the producer is closed")
  let closing: Promise<void> | undefined
  const sends = promiseProducer(
    options.stream,
    Promise.resolve(producer),
    (effect) => managed.runPromise(effect),
    telemetry,
    gate,
  )
  return {
    stream: options.stream,
    send: sends.send,
    sendBatch: sends.sendBatch,
    flush: () => (closing === undefined ? sends.flush() : closing),
    close: () => {
      if (closing === undefined) {
        gate.close()
        closing = gate
          .drained()
          .then(() => managed.runPromise(producer.close))
          .then(close, async (error: unknown) => {
            await close()
            throw error
          })
      }
      return closing
    },
  }
}
