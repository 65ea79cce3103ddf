/**
 * What handlers receive. A message is one stream entry of a shard, with the
 * producer's routing key split out of its fields and its value decoded by
 * the consumer's codec (docs/runtime.md, "Typed messages").
 */
import { ShardStreams } from "@shardline/core"
import type { Effect } from "effect"
import type { Fields } from "./Codec.js"
import type { Transaction } from "./Transaction.js"

/** The field a `Producer` stores the routing key in (docs/runtime.md, "Producer"). */
export const KEY_FIELD = "shardline-key"

/**
 * The fields `shardline dlq replay --group <g>` adds to a replayed dead
 * letter (docs/redis.md, "Dead letters and groups"): the one group that
 * receives it (every other group's members acknowledge it unseen), the
 * original entry's shard and id, and how many times it was replayed.
 */
export const REPLAY_FIELDS = ShardStreams.ReplayFields

/** A replayed dead letter's marker (`Message.replay`). */
export interface ReplayInfo {
  /** The group it was replayed to: no other group's handler sees it. */
  readonly group: string
  /** The shard and entry id of the message as it was first produced. */
  readonly originalShard: number
  readonly originalId: string
  /** Times it was replayed from the dead letters: 1 the first time. */
  readonly count: number
}

/**
 * One message. `T` is what the consumer's codec decodes (docs/runtime.md,
 * "Typed messages"): the fields themselves with the default `raw` codec.
 */
export interface Message<T = Fields> {
  readonly stream: string
  readonly group: string
  readonly shard: number
  /** Stream entry id, `<ms>-<seq>`; increasing within a shard. */
  readonly id: string
  /** The routing key the producer sent it with (undefined for entries written otherwise). */
  readonly key: string | undefined
  /** The entry's fields without the key field (may be empty): the wire form of `value`. */
  readonly fields: Fields
  /** The decoded (and, with a `schema`, validated) value; `fields` with the raw codec. */
  readonly value: T
  /** Deliveries of this entry to the group, this one included (1 on first delivery). */
  readonly deliveryCount: number
  /** Set on a dead letter replayed by `shardline dlq replay`: where it came from, how often replayed. */
  readonly replay: ReplayInfo | undefined
}

/** What a handler is given beside its message: where it came from, its member, an abort signal and its transaction. */
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

/** The messages of one read of one shard, given to an `eachBatch` handler. */
export interface Batch<T = Fields> {
  readonly stream: string
  readonly group: string
  readonly shard: number
  /** In stream order, at most `batchSize`. */
  readonly messages: ReadonlyArray<Message<T>>
}

/** What an `eachBatch` handler is given beside its batch: a message's context, and `resolve` to acknowledge part of the batch. */
export interface BatchContext<T = Fields> extends MessageContext {
  /**
   * Mark `message` and every message before it in the batch as handled (like
   * KafkaJS `resolveOffset`): they are acknowledged even if the handler then
   * throws. With `autoResolve` (default) a handler that returns resolves all.
   * A batch whose handler used its `transaction` commits it with the messages
   * resolved when the handler returns, in one step; a batch handler that
   * fails commits nothing and acknowledges nothing, `resolve` or not
   * (docs/exactly-once.md, "Batches").
   */
  readonly resolve: (message: Message<T> | string) => void
}

/** A per-message handler: resolve to acknowledge, throw or reject to retry (then dead-letter). */
export type EachMessage<T = Fields> = (
  message: Message<T>,
  context: MessageContext,
) => void | Promise<void>

/** A batch handler, for throughput: one call per batch of a shard. */
export type EachBatch<T = Fields> = (
  batch: Batch<T>,
  context: BatchContext<T>,
) => void | Promise<void>

/** The Effect form of `EachMessage`: fail (or die) to retry. Interrupted when `signal` fires. */
export type EachMessageEffect<T = Fields> = (
  message: Message<T>,
  context: MessageContext,
) => Effect.Effect<void, unknown>

/** The Effect form of `EachBatch`. */
export type EachBatchEffect<T = Fields> = (
  batch: Batch<T>,
  context: BatchContext<T>,
) => Effect.Effect<void, unknown>

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
  // a replayed dead letter (rare): its marker leaves the fields for `replay`
  if (split.fields[REPLAY_FIELDS.group] !== undefined) return replayedMessage(address, split)
  return {
    stream: address.stream,
    group: address.group,
    shard: address.shard,
    id: split.id,
    key: split.key,
    fields: split.fields,
    value: split.fields,
    deliveryCount: split.deliveryCount,
    replay: undefined,
  }
}

const REPLAY_NAMES = new Set<string>(Object.values(REPLAY_FIELDS))

/** A replayed dead letter: the fields without the replay marker, which becomes `replay`. */
const replayedMessage = (
  address: { readonly stream: string; readonly group: string; readonly shard: number },
  split: ShardStreams.StreamMessage,
): Message => {
  const fields: Record<string, string> = {}
  for (const name of Object.keys(split.fields))
    if (!REPLAY_NAMES.has(name)) ShardStreams.setField(fields, name, split.fields[name]!)
  const count = Number(split.fields[REPLAY_FIELDS.count])
  const originalShard = Number(split.fields[REPLAY_FIELDS.originalShard])
  return {
    stream: address.stream,
    group: address.group,
    shard: address.shard,
    id: split.id,
    key: split.key,
    fields,
    value: fields,
    deliveryCount: split.deliveryCount,
    replay: {
      group: split.fields[REPLAY_FIELDS.group]!,
      originalShard: Number.isSafeInteger(originalShard) ? originalShard : address.shard,
      originalId: split.fields[REPLAY_FIELDS.originalId] ?? split.id,
      count: Number.isSafeInteger(count) && count > 0 ? count : 1,
    },
  }
}
