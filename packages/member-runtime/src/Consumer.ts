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
import type { CommonOptions, LostHookInfo, ShardHookInfo } from "./Config.js"
import type { EachBatch, EachBatchEffect, EachMessage, EachMessageEffect } from "./Message.js"

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

/** `consumer` options: one explicit member with Promise (or synchronous) handlers. */
export type ConsumerOptions = MemberOptions<void | Promise<void>> &
  OneHandler<EachMessage, EachBatch>

/** `effectConsumer` options: the same with Effect handlers and hooks. */
export type EffectConsumerOptions = MemberOptions<Effect.Effect<void, unknown>> &
  OneHandler<EachMessageEffect, EachBatchEffect>

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

/** One explicit member with Promise (or synchronous) handlers. */
export const consumer = (options: ConsumerOptions): ConsumerDefinition => ({
  _tag: "ConsumerDefinition",
  kind: "member",
  label: "",
  style: "promise",
  options,
})

/** One explicit member with Effect handlers and hooks. */
export const effectConsumer = (options: EffectConsumerOptions): ConsumerDefinition => ({
  _tag: "ConsumerDefinition",
  kind: "member",
  label: "",
  style: "effect",
  options,
})
