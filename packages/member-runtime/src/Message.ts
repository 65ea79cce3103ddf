/**
 * What handlers receive. A message is one stream entry of a shard, with the
 * producer's routing key split out of its fields.
 */
import { ShardStreams } from "@shardline/core"
import type { Effect } from "effect"
import type { Transaction } from "./Transaction.js"

/** The field a `Producer` stores the routing key in (docs/runtime.md, "Producer"). */
export const KEY_FIELD = "shardline-key"

export interface Message {
  readonly stream: string
  readonly group: string
  readonly shard: number
  /** Stream entry id, `<ms>-<seq>`; increasing within a shard. */
  readonly id: string
  /** The routing key the producer sent it with (undefined for entries written otherwise). */
  readonly key: string | undefined
  /** The entry's fields without the key field (may be empty). */
  readonly fields: Readonly<Record<string, string>>
  /** Deliveries of this entry to the group, this one included (1 on first delivery). */
  readonly deliveryCount: number
}

export interface MessageContext {
  readonly stream: string
  readonly group: string
  readonly shard: number
  /** The logical member handling it (`<base>-m<i>` or the explicit member id). */
  readonly memberId: string
  /**
   * Fires when the handler must give up: the shard was revoked and its drain
   * deadline passed, the member was fenced or stopped, or `handlerTimeoutMs`
   * passed. The message is then not acknowledged (it is delivered again).
   */
  readonly signal: AbortSignal
  /**
   * The message's transaction (docs/exactly-once.md): Redis writes and sends
   * to Shardline streams recorded while the handler runs, committed with the
   * message's ack in one fenced, atomic step when it succeeds; nothing of it
   * is written when it fails. A batch handler gets one for the whole batch.
   */
  readonly transaction: Transaction
}

export interface Batch {
  readonly stream: string
  readonly group: string
  readonly shard: number
  /** In stream order, at most `batchSize`. */
  readonly messages: ReadonlyArray<Message>
}

export interface BatchContext extends MessageContext {
  /**
   * Mark `message` and every message before it in the batch as handled (like
   * KafkaJS `resolveOffset`): they are acknowledged even if the handler then
   * throws. With `autoResolve` (default) a handler that returns resolves all.
   * A batch whose handler used its `transaction` commits it with the messages
   * resolved when the handler returns, in one step; a batch handler that
   * fails commits nothing and acknowledges nothing, `resolve` or not
   * (docs/exactly-once.md, "Batches").
   */
  readonly resolve: (message: Message | string) => void
}

/** A per-message handler: resolve to acknowledge, throw or reject to retry (then dead-letter). */
export type EachMessage = (message: Message, context: MessageContext) => void | Promise<void>

/** A batch handler, for throughput: one call per batch of a shard. */
export type EachBatch = (batch: Batch, context: BatchContext) => void | Promise<void>

/** The Effect form of `EachMessage`: fail (or die) to retry. Interrupted when `signal` fires. */
export type EachMessageEffect = (
  message: Message,
  context: MessageContext,
) => Effect.Effect<void, unknown>

/** The Effect form of `EachBatch`. */
export type EachBatchEffect = (batch: Batch, context: BatchContext) => Effect.Effect<void, unknown>

/**
 * Build a `Message` from a stream entry. An entry read with `keyField:
 * KEY_FIELD` (`ShardStreams.ReadOptions.keyField`; it has `key` as an own
 * property) already holds its fields without the key: they are used as they
 * are, no second copy per message. Any other entry (a takeover claim, a
 * store that ignores the option) is split here, as a keyed read would.
 */
export const toMessage = (
  address: { readonly stream: string; readonly group: string; readonly shard: number },
  entry: ShardStreams.StreamMessage,
): Message => {
  const split = Object.hasOwn(entry, "key") ? entry : ShardStreams.splitKey(entry, KEY_FIELD)
  return {
    stream: address.stream,
    group: address.group,
    shard: address.shard,
    id: split.id,
    key: split.key,
    fields: split.fields,
    deliveryCount: split.deliveryCount,
  }
}
