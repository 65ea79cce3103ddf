/**
 * The data plane port: one Redis Stream per shard, read by consumer groups,
 * fenced by an owner token per (shard, group): several groups consume one
 * stream (fan-out), and one group's coordinator must never fence another's
 * members (docs/member.md, ShardStreams).
 *
 * Operations are Redis-shaped so the Redis implementation is one Lua script
 * per operation, every key under the shard's hash tag `{<stream>:<shard>}`
 * (stream, owner tokens and dead-letter stream in one slot):
 *
 * | operation       | Redis                                                        |
 * |-----------------|--------------------------------------------------------------|
 * | `append`        | XADD `{s:n}` [IDMP pid iid] [MAXLEN/MINID ~ n] *             |
 * | `setOwnerToken` | SET `{s:n}:owner:<group>` if greater; XGROUP CREATE at 0     |
 * | `read`          | token check [+ XACK of the previous batch] + XREADGROUP      |
 * | `ack`           | token check + XACK, or XACKDEL ACKED / XACK+XDEL (`xackdel`) |
 * | `nack`          | token check + XCLAIM to the same consumer (count +1)         |
 * | `claimPending`  | token check + XAUTOCLAIM                                     |
 * | `deadLetter`    | token check + XRANGE + XADD `{s:n}:dlq` + XACK, one script   |
 * | `setGroupPosition` | token check + XGROUP SETID (CREATE if absent)             |
 * | `pending`/`info`| XPENDING / XINFO                                             |
 *
 * A fenced operation with a token lower than its group's current token for
 * the shard fails with `StaleOwner` and changes nothing; with no token at
 * all for the (shard, group) it fails `OwnerTokenMissing` whatever its
 * token (the coordinator writes one before any grant: a missing one was
 * deleted or evicted), and where the group's consumer group or the shard's
 * stream vanished under a token it fails `DataLost`, never reading as
 * empty (docs/protocol.md rule 26).
 *
 * @example
 * const streams = yield* ShardStreams.ShardStreams
 * yield* streams.setOwnerToken({ stream: "orders", shard: 3, group: "g", token: 7 })
 * const batch = yield* streams.read({ stream: "orders", shard: 3, group: "g", consumer: "pod-1-m0", token: 7, count: 100 })
 */
import { Clock, Context, Effect, Layer } from "effect"
import {
  DataLost,
  type DataLostWhat,
  type DataPlaneError,
  InvalidArgument,
  InvalidEntryId,
  OwnerTokenMissing,
  OwnerTokenRegression,
  ShardSealed,
  StaleOwner,
} from "../Errors.js"
import * as StreamId from "../internal/streamId.js"
import { doneByEveryGroup } from "./AckPolicy.js"
import { MemoryKeyspace } from "./internal/memoryKeyspace.js"
import { memoryShardStreamsHooks } from "./internal/memoryShardStreamsHooks.js"
import * as Transaction from "./Transaction.js"

// ---------------------------------------------------------------------------
// types

export type Fields = Readonly<Record<string, string>>

export interface StreamMessage {
  /** Entry id, `<ms>-<seq>`. */
  readonly id: string
  readonly fields: Fields
  /** How many times the entry was delivered to a consumer of this group (1 on first read). */
  readonly deliveryCount: number
  /**
   * Only on a read with `ReadOptions.keyField`, then always present as an own
   * property: that field's value (undefined when the entry has none), which
   * `fields` then does not hold.
   */
  readonly key?: string | undefined
}

/**
 * Set a field on a fields object being built; a field named `__proto__`
 * stays a field (an assignment would set the object's prototype).
 */
export const setField = (fields: Record<string, string>, name: string, value: string): void => {
  if (name === "__proto__")
    Object.defineProperty(fields, name, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    })
  else fields[name] = value
}

/**
 * `message` as a read with `keyField` returns it: the key field taken out of
 * a copy of its fields into `key`.
 */
export const splitKey = (message: StreamMessage, keyField: string): StreamMessage => {
  const fields: Record<string, string> = {}
  let key: string | undefined
  for (const name of Object.keys(message.fields)) {
    const value = message.fields[name]!
    if (name === keyField) key = value
    else setField(fields, name, value)
  }
  return { id: message.id, fields, deliveryCount: message.deliveryCount, key }
}

export interface GroupAddress {
  readonly stream: string
  readonly shard: number
  readonly group: string
}

export interface FencedAddress extends GroupAddress {
  /** The owner token the coordinator granted with the shard. */
  readonly token: number
}

/** `setOwnerToken`'s options. */
export interface SetOwnerTokenOptions extends FencedAddress {
  /**
   * Create the group on the shard at `0` where it is missing: `true` for a
   * group's first grant of the shard, `false` for a later grant or a
   * coordinator's re-fence, which never re-create a group or stream that
   * vanished (members report it: docs/protocol.md rule 26). Default: only
   * at the first write of the (shard, group) token.
   */
  readonly createGroup?: boolean
  /**
   * Where a group created here starts (a new group's `startAt`,
   * docs/runtime.md "Where a new group starts"): `start` (default, every
   * entry the shard holds), `end` (only entries appended after it), or an
   * entry id (entries after it). A group that already exists on the shard
   * keeps its position.
   */
  readonly createAt?: GroupPosition
}

export interface ReadOptions extends FencedAddress {
  readonly consumer: string
  readonly count: number
  /** `new` (default): entries never delivered to the group (XREADGROUP `>`).
   * `pending`: this consumer's own pending entries (XREADGROUP `0`), for retries. */
  readonly from?: "new" | "pending"
  /**
   * Takeover read (with `from: "new"`): first re-deliver pending entries of
   * any consumer idle at least this long (delivery count +1), then new ones.
   * XREADGROUP ... CLAIM on Redis >= 8.4, XAUTOCLAIM + XREADGROUP otherwise.
   */
  readonly claimIdleMs?: number
  /**
   * Acknowledge these entries first, in the same fenced step and with
   * `ack`'s semantics (`mode` as there): a read loop acks its previous batch
   * with its next read, one round trip instead of two. A refused read
   * (`StaleOwner`, `InvalidEntryId`) acknowledges nothing.
   *
   * @example
   * const next = yield* streams.read({ ...address, consumer, count: 100, ack: { ids: handled, mode: "ack" } })
   */
  readonly ack?: AckFirst
  /**
   * This read follows an acknowledgement the caller made outside it (a
   * transaction's commit acknowledged the previous batch, docs/exactly-once.md
   * "Cost"): the shard is busy, so a gated read opens its gate as a read that
   * carries an ack does, without first checking whether the group has
   * anything unread (docs/redis.md, "The gated fence"). A cost hint only:
   * what the read returns or refuses is the same; the fence is checked all
   * the same. Ignored with `ack` (that read takes the lean gate already) and
   * by fences without a gate.
   *
   * @example
   * const next = yield* streams.read({ ...address, consumer, count: 32, afterAck: true })
   */
  readonly afterAck?: boolean
  /**
   * Take this field out of each message's `fields` into its `key`, while
   * decoding the reply: a consumer that splits a routing key (the member
   * runtime's `shardline-key`) then builds no second copy of the fields.
   */
  readonly keyField?: string
}

/** What `read` acknowledges before it reads (`ReadOptions.ack`). */
export interface AckFirst {
  readonly ids: ReadonlyArray<string>
  readonly mode: "ack" | "xackdel"
}

export interface WaitOptions extends GroupAddress {
  /** Wait at most this long. */
  readonly timeoutMs: number
  /** Wait for entries after this id; default: the group's last-delivered id. */
  readonly afterId?: string
}

/** Where a group stands on a shard (for resharding: docs/resharding.md). */
export interface DrainState {
  /** The shard belongs to an earlier layout generation: appends are refused. */
  readonly sealed: boolean
  /** Entries appended after the group's last-delivered id (never delivered to it). */
  readonly undelivered: number
  /** Entries delivered to the group and not yet acknowledged. */
  readonly pending: number
  /**
   * The group's outbox on the shard holds a committed send not yet relayed
   * (Redis Cluster transactions, docs/exactly-once.md); absent: nothing to relay.
   */
  readonly relaying?: boolean
  /**
   * Sealed, everything delivered and acknowledged, every committed send
   * relayed: the group is done with the shard.
   */
  readonly drained: boolean
}

/**
 * Trimming on append (XADD MAXLEN / MINID): keep at most `maxLen` entries, or
 * drop entries with ids below `minId`. `approximate` (`~`) lets Redis trim
 * lazily (it never keeps fewer entries than asked); memory trims exactly.
 * Trimming may drop entries that are still pending: a later claim reports
 * them as `deleted`.
 */
export type TrimOptions =
  | { readonly maxLen: number; readonly approximate?: boolean }
  | { readonly minId: string; readonly approximate?: boolean }

/**
 * Idempotent production: an append whose (`producerId`, `messageId`) pair was
 * seen within the shard's window adds nothing and returns the id of the entry
 * it added the first time. The window is per shard and producer
 * (`IDEMPOTENCY_WINDOW`: 100 s, 100 ids, as Redis 8.6's XADD IDMP defaults);
 * the memory implementation and redis-store (a hash beside the shard,
 * checked by its append script) keep the same window.
 */
export interface IdempotencyKey {
  readonly producerId: string
  readonly messageId: string
}

export interface AppendOptions {
  readonly trim?: TrimOptions
  readonly idempotency?: IdempotencyKey
}

/** The dedupe window of idempotent appends, per shard and producer (Redis' IDMP defaults). */
export const IDEMPOTENCY_WINDOW = { durationMs: 100_000, maxSize: 100 } as const

/** Where `setGroupPosition` moves a group: a stream id, the start (`0-0`) or the end (`$`). */
export type GroupPosition = "start" | "end" | (string & {})

export interface SetPositionOptions extends FencedAddress {
  /**
   * The group's new last-delivered id: later `read`s deliver entries after it.
   * Entries already pending stay pending (XGROUP SETID keeps the PEL).
   */
  readonly position: GroupPosition
}

export interface AckOptions extends FencedAddress {
  readonly ids: ReadonlyArray<string>
  /**
   * `ack`: XACK, the entry stays in the stream; `xackdel`: acked, and deleted
   * from the stream once every group of the stream has acknowledged it
   * (XACKDEL ... ACKED): an entry another group has not read yet, or holds
   * pending, stays for it (docs/runtime.md, "Ack policies and other groups").
   */
  readonly mode: "ack" | "xackdel"
}

export interface NackOptions extends FencedAddress {
  readonly id: string
}

export interface ClaimOptions extends FencedAddress {
  /** The new owner's consumer name. */
  readonly consumer: string
  /** Only entries idle at least this long (XAUTOCLAIM min-idle-time). */
  readonly minIdleMs: number
  readonly count: number
  /** Scan cursor (default `0-0`); continue with `next` until it is `0-0`. */
  readonly start?: string
}

export interface ClaimResult {
  /** Cursor for the next call; `0-0` when the scan is complete. */
  readonly next: string
  readonly messages: ReadonlyArray<StreamMessage>
  /** Pending ids whose entries no longer exist in the stream; removed from the PEL. */
  readonly deleted: ReadonlyArray<string>
}

export interface DeadLetterOptions extends FencedAddress {
  readonly id: string
  readonly reason: string
}

export interface PendingEntry {
  readonly id: string
  readonly consumer: string
  readonly deliveryCount: number
  readonly idleMs: number
}

export interface GroupInfo {
  readonly name: string
  readonly lastDeliveredId: string
  readonly pending: number
  readonly consumers: ReadonlyArray<string>
  /** The group's owner token for this shard (0 if never fenced). */
  readonly ownerToken: number
  /**
   * Entries delivered to the group so far (XINFO GROUPS `entries-read`), when
   * the backend knows it: with `pending`, what monitoring derives a handling
   * rate from (docs/observability.md, "The dashboard").
   */
  readonly entriesRead?: number | undefined
}

export interface ShardInfo {
  readonly length: number
  readonly lastId: string
  readonly groups: ReadonlyArray<GroupInfo>
}

/** Fields added to a dead-lettered entry, beside its original fields. */
export const DeadLetterFields = {
  originalId: "shardline-dlq-id",
  reason: "shardline-dlq-reason",
  group: "shardline-dlq-group",
  deliveryCount: "shardline-dlq-deliveries",
} as const

/**
 * Fields a dead letter replayed to one group carries (docs/redis.md, "Dead
 * letters and groups"): the group it is for (every other group's members
 * acknowledge it without handling it), the shard and id of the message as
 * first produced, and how many times it was replayed.
 */
export const ReplayFields = {
  group: "shardline-replay-group",
  originalShard: "shardline-replay-shard",
  originalId: "shardline-replay-id",
  count: "shardline-replay-count",
} as const

/** The Redis key of a shard stream: its own hash tag, so shards spread over a cluster. */
export const shardKey = (stream: string, shard: number): string => `{${stream}:${shard}}`

/** The dead-letter stream of a shard: `<shard stream>:dlq`, same hash slot as the shard. */
export const deadLetterKey = (stream: string, shard: number): string =>
  `${shardKey(stream, shard)}:dlq`

/**
 * The owner-token key of a (shard, group): `{<stream>:<shard>}:owner:<group>`,
 * same hash slot as the shard, one per group so groups never fence each other.
 */
export const ownerTokenKey = (stream: string, shard: number, group: string): string =>
  `${shardKey(stream, shard)}:owner:${group}`

// ---------------------------------------------------------------------------
// the port

/**
 * What a fenced operation (read, ack, nack, claim, dead-letter) may fail
 * with: a refused token (`StaleOwner`, `OwnerTokenMissing`), vanished data
 * (`DataLost`), an entry id that is no id, or a `DataPlaneError`.
 */
export type FencedError =
  | StaleOwner
  | OwnerTokenMissing
  | DataLost
  | InvalidEntryId
  | DataPlaneError

/**
 * Every operation may also fail with a `DataPlaneError` (backend unreachable,
 * a foreign value under our keys, an argument the backend cannot hold); the
 * memory implementation never does.
 */
export interface ShardStreamsShape {
  /**
   * Producer: append an entry to a shard; returns its id. A shard sealed by a
   * reshard refuses it (`ShardSealed`): refresh the layout and route again.
   * The idempotency window is checked first: an idempotent append already
   * in the shard's window returns the first id, sealed or not, so a retry
   * of an append that landed before the seal is never re-routed and stored
   * twice.
   */
  readonly append: (
    stream: string,
    shard: number,
    fields: Fields,
    options?: AppendOptions,
  ) => Effect.Effect<string, ShardSealed | DataPlaneError>
  /**
   * Coordinator's fence: raise the group's owner token for the shard (equal is
   * a no-op, lower is refused). Other groups' tokens are untouched. The
   * group's first grant of the shard (`createGroup`; by default the first
   * write of the token) also creates the group on the shard at `0` (where a
   * first read would start), so that from its first grant on no other
   * group's `xackdel` deletes an entry it has not acknowledged; not on a
   * sealed shard that has no stream. Otherwise a vanished group or stream
   * is left as it is, for the fenced reads to report (`DataLost`;
   * docs/protocol.md rule 26).
   */
  readonly setOwnerToken: (
    options: SetOwnerTokenOptions,
  ) => Effect.Effect<void, OwnerTokenRegression | DataPlaneError>
  /** The group's owner token for the shard (0 if never fenced). */
  readonly ownerToken: (address: GroupAddress) => Effect.Effect<number, DataPlaneError>
  /**
   * Fenced consumer-group read: a batch in stream order, after acknowledging
   * `options.ack` if given. The group's consumer group exists from its
   * token's first write (`setOwnerToken`); where it or the shard's stream
   * vanished since, `DataLost` (a shard sealed without a stream reads empty).
   */
  readonly read: (options: ReadOptions) => Effect.Effect<ReadonlyArray<StreamMessage>, FencedError>
  /** Fenced ack; returns how many entries were pending and are now acknowledged. */
  readonly ack: (options: AckOptions) => Effect.Effect<number, FencedError>
  /** Fenced negative ack: the entry stays pending, its delivery count grows, its idle time resets. */
  readonly nack: (options: NackOptions) => Effect.Effect<boolean, FencedError>
  /** Fenced takeover of pending entries idle long enough (XAUTOCLAIM); delivery count +1. */
  readonly claimPending: (options: ClaimOptions) => Effect.Effect<ClaimResult, FencedError>
  /**
   * Fenced, atomic: copy the pending entry to the shard's dead-letter stream
   * and ack it. Returns the dead-letter entry id, or undefined when the entry
   * was not pending (nothing changed: never both, never lost).
   */
  readonly deadLetter: (
    options: DeadLetterOptions,
  ) => Effect.Effect<string | undefined, FencedError>
  /**
   * Fenced seek (XGROUP SETID): move the group's last-delivered id on the shard
   * to an id, the start or the end; creates the group there if absent. Wakes
   * `waitForEntries` callers, since a backward move makes entries readable.
   * Optional in the port (memory and redis-store have it): without it a
   * member runtime's seek fails instead of moving anything.
   */
  readonly setGroupPosition?: (
    options: SetPositionOptions,
  ) => Effect.Effect<void, StaleOwner | OwnerTokenMissing | InvalidEntryId | DataPlaneError>
  /** XPENDING: the group's pending entries in id order, optionally for one consumer. */
  readonly pending: (
    options: GroupAddress & { readonly consumer?: string },
  ) => Effect.Effect<ReadonlyArray<PendingEntry>, DataPlaneError>
  /** XINFO STREAM / GROUPS. */
  readonly info: (stream: string, shard: number) => Effect.Effect<ShardInfo, DataPlaneError>
  /** XRANGE of any key (shard or dead-letter stream), for tests and tools. */
  readonly range: (
    key: string,
  ) => Effect.Effect<ReadonlyArray<{ id: string; fields: Fields }>, DataPlaneError>
  /**
   * The idle shard's wake-up: true as soon as the shard has entries after the
   * group's last-delivered id (or `afterId`), false after `timeoutMs`; then do
   * the fenced `read`. Never a busy loop, never a long sleep.
   */
  readonly waitForEntries: (options: WaitOptions) => Effect.Effect<boolean, DataPlaneError>
  /** Seal a shard of an earlier layout generation: every later append is refused. Idempotent. */
  readonly seal: (stream: string, shard: number) => Effect.Effect<void, DataPlaneError>
  /** Where the group stands on the shard: sealed, undelivered, pending, drained. */
  readonly drainState: (address: GroupAddress) => Effect.Effect<DrainState, DataPlaneError>
  /**
   * Delete a retired shard's stream (every group has drained it) and the
   * named groups' owner tokens; its dead-letter stream is kept. Idempotent.
   */
  readonly retireShard: (
    stream: string,
    shard: number,
    groups: ReadonlyArray<string>,
  ) => Effect.Effect<void, DataPlaneError>
  /**
   * Transactions (docs/exactly-once.md): a handler's writes and sends
   * committed with its message's ack in one fenced, atomic step. Optional in
   * the port (memory and redis-store have it): without it a member runtime
   * refuses a handler's transaction.
   */
  readonly transactions?: Transaction.TransactionsShape
}

export class ShardStreams extends Context.Service<ShardStreams, ShardStreamsShape>()(
  "@shardline/core/ShardStreams",
) {}

// ---------------------------------------------------------------------------
// memory implementation

interface Entry {
  readonly id: StreamId.StreamId
  readonly text: string
  readonly fields: Fields
}

interface PelEntry {
  consumer: string
  deliveryCount: number
  deliveredAt: number
}

interface Group {
  lastDelivered: StreamId.StreamId
  /** id text -> pending entry */
  readonly pel: Map<string, PelEntry>
  readonly consumers: Set<string>
}

interface StreamState {
  /** In id order (append-only ids; deletions remove). */
  entries: Array<Entry>
  last: StreamId.StreamId
  readonly groups: Map<string, Group>
}

/**
 * An in-memory ShardStreams, faithful to Redis Streams consumer-group
 * semantics: monotonic `ms-seq` ids from effect's Clock, a PEL per group with
 * consumer, delivery count and last delivery time. Each operation runs in one
 * synchronous step, which is what a Lua script gives on Redis.
 */
const withKeyField = (
  messages: Array<StreamMessage>,
  keyField: string | undefined,
): Array<StreamMessage> =>
  keyField === undefined ? messages : messages.map((m) => splitKey(m, keyField))

export const makeMemory: Effect.Effect<ShardStreamsShape> = Effect.sync(() => {
  const streams = new Map<string, StreamState>()
  const tokens = new Map<string, number>()
  const sealed = new Set<string>()
  /** shard key -> wake-ups of `waitForEntries` calls waiting on it */
  const waiters = new Map<string, Set<() => void>>()
  /** shard key + producer -> messageId -> the entry it added and when (insertion order = age) */
  const idempotency = new Map<string, Map<string, { readonly id: string; readonly at: number }>>()
  /** What transactions write (docs/exactly-once.md). */
  const keyspace = new MemoryKeyspace()

  const wake = (key: string) => {
    const set = waiters.get(key)
    if (set === undefined) return
    waiters.delete(key)
    for (const resume of set) resume()
  }

  const streamOf = (key: string): StreamState => {
    let state = streams.get(key)
    if (state === undefined) {
      state = { entries: [], last: StreamId.ZERO, groups: new Map() }
      streams.set(key, state)
    }
    return state
  }

  const groupOf = (state: StreamState, name: string): Group => {
    let group = state.groups.get(name)
    if (group === undefined) {
      group = { lastDelivered: StreamId.ZERO, pel: new Map(), consumers: new Set() }
      state.groups.set(name, group)
    }
    return group
  }

  /** Index of the first entry whose id is above `id` (binary search: entries are in id order). */
  const firstAfter = (state: StreamState, id: StreamId.StreamId): number => {
    let lo = 0
    let hi = state.entries.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (StreamId.compare(state.entries[mid]!.id, id) <= 0) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  /** Index of the entry with id `text`, or -1. */
  const indexOf = (state: StreamState, text: string): number => {
    const id = StreamId.parse(text)
    if (id === undefined) return -1
    const after = firstAfter(state, id)
    const entry = state.entries[after - 1]
    return entry !== undefined && StreamId.compare(entry.id, id) === 0 ? after - 1 : -1
  }

  const findEntry = (state: StreamState, text: string): Entry | undefined => {
    const index = indexOf(state, text)
    return index < 0 ? undefined : state.entries[index]
  }

  const tokenOf = (a: GroupAddress): number =>
    tokens.get(ownerTokenKey(a.stream, a.shard, a.group)) ?? 0

  /**
   * The fence: `StaleOwner` below the stored token, `OwnerTokenMissing` when
   * none is stored, whatever the caller's token (docs/protocol.md rule 26).
   */
  const staleOwner = (a: FencedAddress): StaleOwner | OwnerTokenMissing | undefined => {
    const current = tokens.get(ownerTokenKey(a.stream, a.shard, a.group))
    if (current === undefined)
      return new OwnerTokenMissing({
        stream: a.stream,
        shard: a.shard,
        group: a.group,
        token: a.token,
      })
    return a.token < current
      ? new StaleOwner({
          stream: a.stream,
          shard: a.shard,
          group: a.group,
          token: a.token,
          currentToken: current,
        })
      : undefined
  }

  const lost = (a: GroupAddress, what: DataLostWhat) =>
    new DataLost({ stream: a.stream, shard: a.shard, group: a.group, what })

  /**
   * Under a token that holds, the group's consumer group on the shard (the
   * token's first write created it), or what vanished (`DataLost`), as the
   * Redis scripts' `vanished` decides.
   */
  const groupUnder = (a: GroupAddress): { state: StreamState; group: Group } | DataLost => {
    const state = streams.get(shardKey(a.stream, a.shard))
    if (state === undefined) return lost(a, "stream")
    const group = state.groups.get(a.group)
    return group === undefined ? lost(a, "group") : { state, group }
  }

  /** A shard sealed by a reshard without a stream: nothing to read there, nothing vanished. */
  const sealedWithoutStream = (a: GroupAddress): boolean => {
    const key = shardKey(a.stream, a.shard)
    return !streams.has(key) && sealed.has(key)
  }

  const invalidId = (ids: ReadonlyArray<string>): InvalidEntryId | undefined => {
    for (const id of ids) if (StreamId.parse(id) === undefined) return new InvalidEntryId({ id })
    return undefined
  }

  /**
   * A fenced operation: the token check, the id check and the change happen in
   * one synchronous step (no fiber can interleave), as in one Lua script.
   */
  const fenced = <A>(
    address: FencedAddress,
    ids: ReadonlyArray<string>,
    body: (now: number) => A | DataLost,
  ): Effect.Effect<A, StaleOwner | OwnerTokenMissing | DataLost | InvalidEntryId> =>
    Effect.flatMap(
      Clock.currentTimeMillis,
      (now): Effect.Effect<A, StaleOwner | OwnerTokenMissing | DataLost | InvalidEntryId> => {
        const error = staleOwner(address) ?? invalidId(ids)
        if (error !== undefined) return Effect.fail(error)
        const result = body(now)
        return result instanceof DataLost ? Effect.fail(result) : Effect.succeed(result)
      },
    )

  /**
   * Every group of the stream is done with entry `text`: delivered to it (at
   * or before its last-delivered id) and not pending in it. XACKDEL ACKED's
   * rule: a group created later at an earlier id, or moved back by a seek,
   * has not delivered what follows its position.
   */
  const ackedByAll = (state: StreamState, text: string): boolean => {
    const id = StreamId.parse(text)!
    return doneByEveryGroup(
      state.groups.values(),
      (group) => StreamId.compare(id, group.lastDelivered) <= 0 && !group.pel.has(text),
    )
  }

  /**
   * XACK (or XACKDEL ... ACKED) of `ids` in `group`: how many were pending
   * and are now acknowledged. `xackdel` deletes an entry this call
   * acknowledged only once every group of the stream has acknowledged it
   * (docs/runtime.md, "Ack policies and other groups"): never under another
   * group that has not read it or still holds it pending.
   */
  const acknowledge = (state: StreamState, groupName: string, o: AckFirst): number => {
    const group = state.groups.get(groupName)
    let acked = 0
    for (const id of o.ids) {
      // only an entry this call acknowledged can be deleted
      if (!group?.pel.delete(id)) continue
      acked++
      if (o.mode === "xackdel" && ackedByAll(state, id)) removeEntry(state, id)
    }
    return acked
  }

  const append = (key: string, fields: Fields, now: number): string => {
    const state = streamOf(key)
    const id = StreamId.next(state.last, now)
    state.last = id
    const text = StreamId.format(id)
    state.entries.push({ id, text, fields: { ...fields } })
    wake(key)
    return text
  }

  const trim = (key: string, options: TrimOptions) => {
    const state = streamOf(key)
    if ("maxLen" in options) {
      const excess = state.entries.length - Math.max(0, options.maxLen)
      if (excess > 0) state.entries.splice(0, excess)
      return
    }
    const min = StreamId.parse(options.minId) ?? StreamId.ZERO
    let drop = 0
    while (drop < state.entries.length && StreamId.compare(state.entries[drop]!.id, min) < 0) drop++
    if (drop > 0) state.entries.splice(0, drop)
  }

  /** The id an idempotent append of `idem` added to `key` within the window, if any. */
  const remembered = (key: string, idem: IdempotencyKey, now: number): string | undefined => {
    const seen = idempotency.get(JSON.stringify([key, idem.producerId]))?.get(idem.messageId)
    return seen !== undefined && now - seen.at < IDEMPOTENCY_WINDOW.durationMs ? seen.id : undefined
  }

  /** XADD with IDMP and trimming, in one synchronous step (`remembered` was checked). */
  const appendWith = (key: string, fields: Fields, options: AppendOptions, now: number): string => {
    const idem = options.idempotency
    let window: Map<string, { readonly id: string; readonly at: number }> | undefined
    if (idem !== undefined) {
      const windowKey = JSON.stringify([key, idem.producerId])
      window = idempotency.get(windowKey)
      if (window === undefined) {
        window = new Map()
        idempotency.set(windowKey, window)
      }
      for (const [messageId, seen] of window) {
        if (now - seen.at < IDEMPOTENCY_WINDOW.durationMs) break
        window.delete(messageId)
      }
    }
    const id = append(key, fields, now)
    if (idem !== undefined && window !== undefined) {
      window.set(idem.messageId, { id, at: now })
      for (const messageId of window.keys()) {
        if (window.size <= IDEMPOTENCY_WINDOW.maxSize) break
        window.delete(messageId)
      }
    }
    if (options.trim !== undefined) trim(key, options.trim)
    return id
  }

  /** Entries of the shard after `after` (or after the group's last-delivered id)? */
  const hasEntriesAfter = (o: WaitOptions): boolean => {
    const state = streams.get(shardKey(o.stream, o.shard))
    if (state === undefined) return false
    const after =
      o.afterId !== undefined
        ? StreamId.parse(o.afterId)
        : (state.groups.get(o.group)?.lastDelivered ?? StreamId.ZERO)
    const last = state.entries[state.entries.length - 1]
    return after !== undefined && last !== undefined && StreamId.compare(last.id, after) > 0
  }

  const removeEntry = (state: StreamState, text: string) => {
    const index = indexOf(state, text)
    if (index >= 0) state.entries.splice(index, 1)
  }

  /**
   * The group commit (docs/exactly-once.md, "Group commit"), in one
   * synchronous step: the fence, then each part in order, committed until
   * the first that does not pass (the writes of each see what the parts
   * before it left, and keys they emptied keep their type, as the Redis
   * script's single pass sees them).
   */
  const commitGroup = (
    o: Transaction.GroupCommitOptions,
  ): Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> =>
    Effect.flatMap(
      Clock.currentTimeMillis,
      (now): Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> => {
        const stale = staleOwner(o)
        if (stale !== undefined) return Effect.fail(stale)
        if (o.parts.length === 0)
          return Effect.fail(
            new InvalidArgument({ message: "a group commit has at least one part" }),
          )
        for (const part of o.parts) {
          if (part.ids.length === 0)
            return Effect.fail(
              new InvalidArgument({ message: "a commit covers at least one message" }),
            )
          const badId = invalidId(part.ids)
          if (badId !== undefined) return Effect.fail(badId)
        }
        const key = shardKey(o.stream, o.shard)
        const under = groupUnder(o)
        if (under instanceof DataLost) return Effect.fail(under)
        const pel = under.group.pel
        const committed: Array<"Committed" | "AlreadyCommitted"> = []
        const ghosts = new Map()
        const stop = (stopped: Transaction.GroupStop) => Effect.succeed({ committed, stopped })
        for (const part of o.parts) {
          const checked = Transaction.checkCommit({ ...o, ...part })
          if (Transaction.isRefusal(checked)) return stop({ _tag: "Refused", error: checked })
          // only if every message is still pending: a part that already committed writes nothing
          const notPending = part.ids.filter((id) => !pel.has(id))
          if (notPending.length === part.ids.length) {
            committed.push("AlreadyCommitted")
            continue
          }
          if (notPending.length > 0) return stop({ _tag: "NotPending", ids: notPending })
          for (const send of part.sends)
            if (sealed.has(shardKey(send.stream, send.shard)))
              return stop({
                _tag: "Sealed",
                error: new ShardSealed({ stream: send.stream, shard: send.shard }),
              })
          const refused = keyspace.apply(checked.writes, now, ghosts)
          if (refused !== undefined) return stop({ _tag: "Refused", error: refused })
          for (const send of part.sends) {
            const fields: Record<string, string> = {}
            for (const name of Object.keys(send.fields)) setField(fields, name, send.fields[name]!)
            setField(fields, Transaction.SEND_KEY_FIELD, send.key)
            append(shardKey(send.stream, send.shard), fields, now)
          }
          acknowledge(streamOf(key), o.group, { ids: part.ids, mode: o.mode })
          committed.push("Committed")
        }
        return Effect.succeed({ committed })
      },
    )

  const service: ShardStreamsShape = {
    append: (stream, shard, fields, options = {}) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const key = shardKey(stream, shard)
        // the window before the seal: a retry of an append that landed
        // before a reshard sealed the shard returns its id, never ShardSealed
        // (which would send it to the next generation: stored twice)
        const seen =
          options.idempotency === undefined ? undefined : remembered(key, options.idempotency, now)
        if (seen !== undefined) return Effect.succeed(seen)
        return sealed.has(key)
          ? Effect.fail(new ShardSealed({ stream, shard }))
          : Effect.succeed(appendWith(key, fields, options, now))
      }),

    setOwnerToken: (o) =>
      Effect.suspend(() => {
        const current = tokenOf(o)
        if (o.token < current)
          return Effect.fail(
            new OwnerTokenRegression({
              stream: o.stream,
              shard: o.shard,
              group: o.group,
              token: o.token,
              currentToken: current,
            }),
          )
        const first = o.createGroup ?? !tokens.has(ownerTokenKey(o.stream, o.shard, o.group))
        tokens.set(ownerTokenKey(o.stream, o.shard, o.group), o.token)
        // the group exists on the shard from its first grant on (created at
        // 0, where a first read would start): other groups' xackdel keeps
        // what it has not acknowledged; a sealed shard without a stream gets
        // none. Past its first grant, a group or stream that is not there
        // vanished: left for the fenced reads to report (`DataLost`), never
        // re-created in silence (docs/protocol.md rule 26)
        const key = shardKey(o.stream, o.shard)
        if (first && (streams.has(key) || !sealed.has(key))) {
          const state = streamOf(key)
          const existed = state.groups.has(o.group)
          const group = groupOf(state, o.group)
          // a new group starts where it was asked to (an existing one keeps its position)
          if (!existed && o.createAt !== undefined && o.createAt !== "start")
            group.lastDelivered =
              o.createAt === "end" ? state.last : (StreamId.parse(o.createAt) ?? StreamId.ZERO)
        }
        return Effect.void
      }),

    ownerToken: (address) => Effect.sync(() => tokenOf(address)),

    read: (o) =>
      fenced(o, o.ack?.ids ?? [], (now) => {
        if (o.ack !== undefined && o.ack.ids.length > 0) {
          const acking = groupUnder(o)
          if (acking instanceof DataLost) return acking
        }
        if (sealedWithoutStream(o)) return []
        const under = groupUnder(o)
        if (under instanceof DataLost) return under
        const { state, group } = under
        if (o.ack !== undefined) acknowledge(state, o.group, o.ack)
        group.consumers.add(o.consumer)
        const out: Array<StreamMessage> = []
        if (o.claimIdleMs !== undefined && o.from !== "pending") {
          // takeover: idle pending entries of any consumer first, in id order
          const idle = [...group.pel]
            .filter(([, p]) => now - p.deliveredAt >= o.claimIdleMs!)
            .sort(([a], [b]) => StreamId.compare(StreamId.parse(a)!, StreamId.parse(b)!))
          for (const [text, p] of idle) {
            if (out.length >= o.count) break
            const entry = findEntry(state, text)
            if (entry === undefined) {
              group.pel.delete(text)
              continue
            }
            p.consumer = o.consumer
            p.deliveryCount++
            p.deliveredAt = now
            out.push({ id: text, fields: entry.fields, deliveryCount: p.deliveryCount })
          }
        }
        if (o.from === "pending") {
          const mine = [...group.pel]
            .filter(([, p]) => p.consumer === o.consumer)
            .sort(([a], [b]) => StreamId.compare(StreamId.parse(a)!, StreamId.parse(b)!))
          for (const [text, p] of mine) {
            if (out.length >= o.count) break
            const entry = findEntry(state, text)
            if (entry !== undefined)
              out.push({ id: text, fields: entry.fields, deliveryCount: p.deliveryCount })
          }
          return withKeyField(out, o.keyField)
        }
        // new entries: from the group's last-delivered id on (never a scan from the start)
        for (let i = firstAfter(state, group.lastDelivered); i < state.entries.length; i++) {
          if (out.length >= o.count) break
          const entry = state.entries[i]!
          group.lastDelivered = entry.id
          group.pel.set(entry.text, { consumer: o.consumer, deliveryCount: 1, deliveredAt: now })
          out.push({ id: entry.text, fields: entry.fields, deliveryCount: 1 })
        }
        return withKeyField(out, o.keyField)
      }),

    ack: (o) =>
      fenced(o, o.ids, () => {
        if (o.ids.length === 0) return 0
        const under = groupUnder(o)
        return under instanceof DataLost ? under : acknowledge(under.state, o.group, o)
      }),

    nack: (o) =>
      fenced(o, [o.id], (now) => {
        const under = groupUnder(o)
        if (under instanceof DataLost) return under
        const pending = under.group.pel.get(o.id)
        if (pending === undefined) return false
        pending.deliveryCount++
        pending.deliveredAt = now
        return true
      }),

    claimPending: (o) =>
      fenced(o, o.start === undefined ? [] : [o.start], (now): ClaimResult | DataLost => {
        if (sealedWithoutStream(o))
          return { next: StreamId.format(StreamId.ZERO), messages: [], deleted: [] }
        const under = groupUnder(o)
        if (under instanceof DataLost) return under
        const { state, group } = under
        group.consumers.add(o.consumer)
        const start = o.start === undefined ? StreamId.ZERO : StreamId.parse(o.start)!
        const candidates = [...group.pel.keys()]
          .map((text) => ({ text, id: StreamId.parse(text)! }))
          .filter((c) => StreamId.compare(c.id, start) >= 0)
          .sort((a, b) => StreamId.compare(a.id, b.id))
        const messages: Array<StreamMessage> = []
        const deleted: Array<string> = []
        // XAUTOCLAIM scans at most count * 10 PEL entries per call.
        const scanLimit = o.count * 10
        let scanned = 0
        let next = StreamId.format(StreamId.ZERO)
        for (const candidate of candidates) {
          if (messages.length >= o.count || scanned >= scanLimit) {
            next = candidate.text
            break
          }
          scanned++
          const pending = group.pel.get(candidate.text)!
          if (now - pending.deliveredAt < o.minIdleMs) continue
          const entry = findEntry(state, candidate.text)
          if (entry === undefined) {
            group.pel.delete(candidate.text)
            deleted.push(candidate.text)
            continue
          }
          pending.consumer = o.consumer
          pending.deliveryCount++
          pending.deliveredAt = now
          messages.push({
            id: candidate.text,
            fields: entry.fields,
            deliveryCount: pending.deliveryCount,
          })
        }
        return { next, messages, deleted }
      }),

    deadLetter: (o) =>
      fenced(o, [o.id], (now) => {
        const under = groupUnder(o)
        if (under instanceof DataLost) return under
        const { state, group } = under
        const pending = group.pel.get(o.id)
        if (pending === undefined) return undefined
        const entry = findEntry(state, o.id)
        const dlqId = append(
          deadLetterKey(o.stream, o.shard),
          {
            ...entry?.fields,
            [DeadLetterFields.originalId]: o.id,
            [DeadLetterFields.reason]: o.reason,
            [DeadLetterFields.group]: o.group,
            [DeadLetterFields.deliveryCount]: String(pending.deliveryCount),
          },
          now,
        )
        group.pel.delete(o.id)
        return dlqId
      }),

    setGroupPosition: (o) => {
      const explicit = o.position !== "start" && o.position !== "end"
      // a seek creates the group (and the stream) where it is missing: never DataLost
      return Effect.catchTag(
        fenced(o, explicit ? [o.position] : [], () => {
          const key = shardKey(o.stream, o.shard)
          const state = streamOf(key)
          const group = groupOf(state, o.group)
          group.lastDelivered =
            o.position === "start"
              ? StreamId.ZERO
              : o.position === "end"
                ? state.last
                : StreamId.parse(o.position)!
          wake(key)
        }),
        "DataLost",
        Effect.die,
      )
    },

    pending: (o) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const group = streams.get(shardKey(o.stream, o.shard))?.groups.get(o.group)
        if (group === undefined) return []
        return [...group.pel]
          .filter(([, p]) => o.consumer === undefined || p.consumer === o.consumer)
          .map(([id, p]) => ({
            id,
            consumer: p.consumer,
            deliveryCount: p.deliveryCount,
            idleMs: now - p.deliveredAt,
          }))
          .sort((a, b) => StreamId.compare(StreamId.parse(a.id)!, StreamId.parse(b.id)!))
      }),

    info: (stream, shard) =>
      Effect.sync(() => {
        const state = streams.get(shardKey(stream, shard))
        return {
          length: state?.entries.length ?? 0,
          lastId: StreamId.format(state?.last ?? StreamId.ZERO),
          groups: [...(state?.groups ?? [])].map(([name, g]) => ({
            name,
            lastDeliveredId: StreamId.format(g.lastDelivered),
            pending: g.pel.size,
            consumers: [...g.consumers].sort(),
            ownerToken: tokenOf({ stream, shard, group: name }),
          })),
        }
      }),

    range: (key) =>
      Effect.sync(() =>
        (streams.get(key)?.entries ?? []).map((e) => ({ id: e.text, fields: e.fields })),
      ),

    waitForEntries: (o) =>
      Effect.suspend(() => {
        if (hasEntriesAfter(o)) return Effect.succeed(true)
        const key = shardKey(o.stream, o.shard)
        const appended = Effect.callback<boolean>((resume) => {
          let set = waiters.get(key)
          if (set === undefined) {
            set = new Set()
            waiters.set(key, set)
          }
          const wakeUp = () => resume(Effect.succeed(true))
          set.add(wakeUp)
          return Effect.sync(() => {
            waiters.get(key)?.delete(wakeUp)
          })
        })
        return Effect.raceFirst(appended, Effect.as(Effect.sleep(o.timeoutMs), false))
      }),

    seal: (stream, shard) =>
      Effect.sync(() => {
        sealed.add(shardKey(stream, shard))
      }),

    retireShard: (stream, shard, groups) =>
      Effect.sync(() => {
        streams.delete(shardKey(stream, shard))
        for (const group of groups) tokens.delete(ownerTokenKey(stream, shard, group))
      }),

    drainState: (o) =>
      Effect.sync(() => {
        const state = streams.get(shardKey(o.stream, o.shard))
        const group = state?.groups.get(o.group)
        const after = group?.lastDelivered ?? StreamId.ZERO
        const undelivered =
          state === undefined ? 0 : state.entries.length - firstAfter(state, after)
        const pending = group?.pel.size ?? 0
        const isSealed = sealed.has(shardKey(o.stream, o.shard))
        return {
          sealed: isSealed,
          undelivered,
          pending,
          drained: isSealed && undelivered === 0 && pending === 0,
        }
      }),

    transactions: {
      sends: "direct",
      keys: Transaction.anyKey,
      commit: (o) => Transaction.commitAsGroup(commitGroup, o),
      commitGroup,
      read: (key) => Effect.map(Clock.currentTimeMillis, (now) => keyspace.read(key, now)),
    },
  }
  memoryShardStreamsHooks.set(service, {
    deleteStream: (stream, shard) => {
      streams.delete(shardKey(stream, shard))
    },
    destroyGroup: (stream, shard, group) => {
      streams.get(shardKey(stream, shard))?.groups.delete(group)
    },
    deleteOwnerToken: (stream, shard, group) => {
      tokens.delete(ownerTokenKey(stream, shard, group))
    },
  })
  return service
})

/** Layer with a fresh in-memory data plane. */
export const layerMemory: Layer.Layer<ShardStreams> = Layer.effect(ShardStreams, makeMemory)
