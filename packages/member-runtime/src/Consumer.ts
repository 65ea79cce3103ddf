/**
 * Declaring a consumer without decorators: one explicit logical member whose
 * `runtimeMaxConcurrency` is its local worker count (docs/requirements.md,
 * "Logical member and worker capacity"). It never creates more members and
 * never caps how many shards the member owns: with more shards than workers,
 * the workers rotate over them.
 *
 * @example
 * const orders = consumer({
 *   stream: "orders",
 *   group: "billing",
 *   runtimeMaxConcurrency: 4,
 *   eachMessage: async (message, { signal }) => {
 *     await bill(message.key, message.fields, { signal })
 *   },
 * })
 * const runtime = await start({ consumers: [orders] })
 *
 * // Effect users: the same with Effect handlers
 * const ordersFx = effectConsumer({
 *   stream: "orders",
 *   group: "billing",
 *   eachMessage: (message) => Effect.log(message.id),
 * })
 */
import type { Effect } from "effect"
import type { Codec, Fields, StandardSchemaV1 } from "./Codec.js"
import type { CommonOptions, LostHookInfo, ShardHookInfo } from "./Config.js"
import type { EachBatch, EachBatchEffect, EachMessage, EachMessageEffect } from "./Message.js"

/**
 * How a consumer decodes its messages (docs/runtime.md, "Typed messages"):
 * the handlers get `Message<T>`. `codec`: `raw` (default: the value is the
 * fields), `json`, or a `Codec<T>`; `schema`: any Standard Schema (zod,
 * valibot, effect `Schema.toStandardSchemaV1`), whose output type is `T`. A
 * message that cannot be decoded, or that the schema refuses, is
 * dead-lettered with the reason and never retried.
 */
export interface CodecOptions<T> {
  readonly codec?: "raw" | "json" | Codec<T>
  readonly schema?: StandardSchemaV1<unknown, T>
}

/** A typed consumer's codec: `json` or a codec object (a raw consumer's `T` is its fields, or its schema's output). */
export interface TypedCodec<T> {
  readonly codec: "json" | Codec<T>
}

/** A raw consumer (the default): `codec` absent or `raw`. */
export interface RawCodec {
  readonly codec?: "raw"
}

/** What `consumer` and `effectConsumer` share besides the handler. */
interface MemberOptions<Hook> extends CommonOptions {
  /** The member id (default: the process's base id, from POD_IP / HOSTNAME / an interface address). */
  readonly memberId?: string
  /** Local workers: handler executions this one member runs in parallel, one per shard (default 1). */
  readonly runtimeMaxConcurrency?: number
  /** A batch handler that returns resolves every message (default true). */
  readonly autoResolve?: boolean
  /** Before the first read of a shard this member was given (awaited, bounded by the drain timeout). */
  readonly onAssigned?: (info: ShardHookInfo) => Hook
  /** After a revoked shard drained, before it is released: flush per-shard state here. */
  readonly onRevoked?: (info: ShardHookInfo) => Hook
  /** After ownership was dropped at once (fence, lease lost, superseded); not awaited. */
  readonly onLost?: (info: LostHookInfo) => Hook
}

/**
 * Exactly one of `eachMessage` and `eachBatch`, as a type rule (the runtime
 * checks it again at start for untyped callers).
 */
export type OneHandler<Message, Batch> =
  | { readonly eachMessage: Message; readonly eachBatch?: never }
  | { readonly eachBatch: Batch; readonly eachMessage?: never }

/** `consumer` options: one explicit member with Promise (or synchronous) handlers of `Message<T>`. */
export type ConsumerOptions<T = Fields> = MemberOptions<void | Promise<void>> &
  CodecOptions<T> &
  OneHandler<EachMessage<T>, EachBatch<T>>

/** `effectConsumer` options: the same with Effect handlers and hooks. */
export type EffectConsumerOptions<T = Fields> = MemberOptions<Effect.Effect<void, unknown>> &
  CodecOptions<T> &
  OneHandler<EachMessageEffect<T>, EachBatchEffect<T>>

/**
 * A consumer declaration, validated when the runtime starts. Made by
 * `consumer`, `effectConsumer` or `@StreamListener` (`listenersOf`).
 */
export interface ConsumerDefinition {
  readonly _tag: "ConsumerDefinition"
  /** `member`: one explicit member; `listener`: `concurrency` logical members. */
  readonly kind: "member" | "listener"
  /** How errors name it: `consumers[0]`, `OrderHandlers.handle`, ... */
  readonly label: string
  /** Promise (or sync) handlers and hooks, or Effect ones. */
  readonly style: "promise" | "effect"
  /** The raw options, validated at start. */
  readonly options: unknown
  /** A listener's method, bound to its instance. */
  readonly method?: (...args: ReadonlyArray<never>) => unknown
}

export const isConsumerDefinition = (u: unknown): u is ConsumerDefinition =>
  typeof u === "object" && u !== null && (u as { _tag?: unknown })._tag === "ConsumerDefinition"

/**
 * One explicit member with Promise (or synchronous) handlers. With `codec:
 * "json"` (or a codec object) its messages are `Message<T>`: `T` from the
 * schema, the handler's annotation or the type argument, else `unknown`.
 */
export function consumer<T>(options: ConsumerOptions<T> & TypedCodec<T>): ConsumerDefinition
/** A raw consumer: `Message` (fields), or the schema's output type with a `schema`. */
export function consumer<T = Fields>(options: ConsumerOptions<T> & RawCodec): ConsumerDefinition
/** Options whose codec is known only at run time. */
export function consumer<T = Fields>(options: ConsumerOptions<T>): ConsumerDefinition
// biome-ignore lint/suspicious/noExplicitAny: the implementation of the typed overloads
export function consumer(options: ConsumerOptions<any>): ConsumerDefinition {
  return { _tag: "ConsumerDefinition", kind: "member", label: "", style: "promise", options }
}

/** One explicit member with Effect handlers and hooks (typed as `consumer`). */
export function effectConsumer<T>(
  options: EffectConsumerOptions<T> & TypedCodec<T>,
): ConsumerDefinition
export function effectConsumer<T = Fields>(
  options: EffectConsumerOptions<T> & RawCodec,
): ConsumerDefinition
export function effectConsumer<T = Fields>(options: EffectConsumerOptions<T>): ConsumerDefinition
// biome-ignore lint/suspicious/noExplicitAny: the implementation of the typed overloads
export function effectConsumer(options: EffectConsumerOptions<any>): ConsumerDefinition {
  return { _tag: "ConsumerDefinition", kind: "member", label: "", style: "effect", options }
}
