/**
 * Transactions of the data plane (docs/exactly-once.md): a handler's Redis
 * writes and sends to Shardline streams, committed together with its
 * message's acknowledgement in ONE fenced, atomic step, so that effects that
 * live in Redis happen exactly once.
 *
 * This module is the contract every implementation shares:
 * - the allow-list (`COMMANDS`): which Redis commands a transaction may run,
 *   where their keys are, what their arguments must look like, and which
 *   counters the storage checks before it writes anything;
 * - `validateWrite`: a write checked against it (the runtime's transaction
 *   handle refuses bad use at the call, before anything commits);
 * - the commit's options and outcome, and `TransactionsShape`, the optional
 *   `ShardStreams.transactions` operations (memory: core's port; Redis:
 *   redis-store's).
 *
 * What a commit guarantees (every implementation; docs/exactly-once.md has
 * the argument):
 * 1. the group's owner token for the shard is checked first: a stale owner's
 *    commit writes nothing and acknowledges nothing (`StaleOwner`);
 * 2. it commits only if EVERY message it covers (`ids`) is still pending in
 *    the group: a commit whose reply was lost and that is sent again, or a
 *    handler retried after its commit ran, finds its messages acknowledged
 *    and writes nothing (`AlreadyCommitted`); some pending and some not
 *    (`NotPending`): nothing written, nothing acknowledged;
 * 3. the writes are checked against the keys' current values before the
 *    first one runs (types, counters): a write the storage would refuse
 *    refuses the whole commit (`TransactionRefused`), so no commit is ever
 *    half applied;
 * 4. sends land only at commit: directly in the target shard (memory, one
 *    Redis node; a sealed target refuses the commit with `ShardSealed`), or
 *    in the shard's outbox (Redis Cluster), relayed exactly once.
 *
 * @example
 * const write = Transaction.validateWrite("HINCRBY", ["{orders:3}:data:totals", "eur", "12"])
 * // -> { command: "HINCRBY", args: [...] }, or a TransactionRefused
 */
import { Effect } from "effect"
import {
  type DataLost,
  type DataPlaneError,
  InvalidArgument,
  type InvalidEntryId,
  type OwnerTokenMissing,
  type ShardSealed,
  type StaleOwner,
  TransactionRefused,
} from "../Errors.js"
import type {
  FencedAddress,
  Fields,
  GroupAddress,
  ReadOptions,
  StreamMessage,
} from "./ShardStreams.js"

// ---------------------------------------------------------------------------
// the allow-list

/** The Redis types a transaction's writes work on. */
export type KeyType = "string" | "hash" | "set" | "zset" | "list"

/**
 * A counter the storage checks before anything is written: the current value
 * must be a number and the result in range, or the whole commit is refused.
 * - `int`: INCR / INCRBY / DECR / DECRBY on a string;
 * - `float`: INCRBYFLOAT on a string;
 * - `hashInt` / `hashFloat`: HINCRBY / HINCRBYFLOAT on a hash field;
 * - `zscore`: ZINCRBY on a sorted-set member's score.
 */
export type CounterKind = "int" | "float" | "hashInt" | "hashFloat" | "zscore"

export interface CommandSpec {
  /**
   * The type of value the command needs at its key (and leaves there);
   * `any`: works on every type (DEL, EXPIRE); `overwrite`: replaces any
   * value with a string (SET).
   */
  readonly type: KeyType | "any" | "overwrite"
  /** Its keys: the first argument, or every argument (DEL). */
  readonly keys: "first" | "all"
  /** Checks the arguments after the key: undefined when they fit, else why not. */
  readonly check: (rest: ReadonlyArray<string>) => string | undefined
  readonly counter?: CounterKind
}

/** The largest counter value a transaction works with: ±(2^53 - 1), exact in every implementation. */
export const MAX_COUNTER = Number.MAX_SAFE_INTEGER

const INT = /^-?(0|[1-9][0-9]{0,15})$/
const FLOAT = /^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?$/

/** A canonical decimal integer within ±(2^53 - 1) (what Redis' counters print). */
export const isInteger = (s: string): boolean =>
  INT.test(s) && s !== "-0" && Math.abs(Number(s)) <= MAX_COUNTER

/** A finite decimal number (no hex, no spaces, no inf / nan). */
export const isFiniteDecimal = (s: string): boolean => FLOAT.test(s) && Number.isFinite(Number(s))

/** A sorted-set score: a finite decimal, or `+inf` / `-inf`. */
const isScore = (s: string): boolean => s === "+inf" || s === "-inf" || isFiniteDecimal(s)

const TTL_MAX = 2 ** 40

const none = (rest: ReadonlyArray<string>) =>
  rest.length === 0 ? undefined : "takes no argument after the key"
const oneInt = (rest: ReadonlyArray<string>) =>
  rest.length === 1 && isInteger(rest[0]!)
    ? undefined
    : "takes one integer (a canonical decimal within ±(2^53 - 1))"
const oneFloat = (rest: ReadonlyArray<string>) =>
  rest.length === 1 && isFiniteDecimal(rest[0]!) ? undefined : "takes one finite decimal number"
const ttl = (rest: ReadonlyArray<string>) =>
  rest.length === 1 && INT.test(rest[0]!) && Number(rest[0]) >= 1 && Number(rest[0]) <= TTL_MAX
    ? undefined
    : `takes one positive integer ttl (at most ${TTL_MAX})`
const some = (what: string) => (rest: ReadonlyArray<string>) =>
  rest.length >= 1 ? undefined : `takes at least one ${what}`
const pairs =
  (what: string, first?: (s: string) => boolean, firstWhat?: string) =>
  (rest: ReadonlyArray<string>) => {
    if (rest.length === 0 || rest.length % 2 !== 0) return `takes ${what} pairs`
    if (first !== undefined)
      for (let i = 0; i < rest.length; i += 2)
        if (!first(rest[i]!)) return `${firstWhat}: ${JSON.stringify(rest[i]!.slice(0, 40))}`
    return undefined
  }

/**
 * Every command a transaction may run (docs/exactly-once.md, "What a
 * transaction may write"). Plain forms only: no flags that change what the
 * command returns or whether it writes (no `SET ... NX / GET`, no `ZADD ...
 * XX / GT`), so that every write's outcome is known before it runs.
 */
export const COMMANDS: Readonly<Record<string, CommandSpec>> = {
  // strings and counters
  SET: {
    type: "overwrite",
    keys: "first",
    check: (rest) =>
      rest.length === 1 ||
      (rest.length === 3 && (rest[1] === "EX" || rest[1] === "PX") && ttl([rest[2]!]) === undefined)
        ? undefined
        : "takes a value, optionally EX <seconds> or PX <ms>",
  },
  INCR: { type: "string", keys: "first", check: none, counter: "int" },
  DECR: { type: "string", keys: "first", check: none, counter: "int" },
  INCRBY: { type: "string", keys: "first", check: oneInt, counter: "int" },
  DECRBY: { type: "string", keys: "first", check: oneInt, counter: "int" },
  INCRBYFLOAT: { type: "string", keys: "first", check: oneFloat, counter: "float" },
  // any type
  DEL: { type: "any", keys: "all", check: () => undefined },
  EXPIRE: { type: "any", keys: "first", check: ttl },
  PEXPIRE: { type: "any", keys: "first", check: ttl },
  // hashes
  HSET: { type: "hash", keys: "first", check: pairs("field value") },
  HDEL: { type: "hash", keys: "first", check: some("field") },
  HINCRBY: {
    type: "hash",
    keys: "first",
    check: (rest) => (rest.length === 2 ? oneInt([rest[1]!]) : "takes a field and an integer"),
    counter: "hashInt",
  },
  HINCRBYFLOAT: {
    type: "hash",
    keys: "first",
    check: (rest) => (rest.length === 2 ? oneFloat([rest[1]!]) : "takes a field and a number"),
    counter: "hashFloat",
  },
  // sets
  SADD: { type: "set", keys: "first", check: some("member") },
  SREM: { type: "set", keys: "first", check: some("member") },
  // sorted sets
  ZADD: {
    type: "zset",
    keys: "first",
    check: pairs("score member", isScore, "a score is a finite number, +inf or -inf, got"),
  },
  ZINCRBY: {
    type: "zset",
    keys: "first",
    check: (rest) => (rest.length === 2 ? oneFloat([rest[0]!]) : "takes an increment and a member"),
    counter: "zscore",
  },
  ZREM: { type: "zset", keys: "first", check: some("member") },
  // lists
  LPUSH: { type: "list", keys: "first", check: some("value") },
  RPUSH: { type: "list", keys: "first", check: some("value") },
}

// ---------------------------------------------------------------------------
// writes and sends

/** One write: an allow-listed command (upper case) and its arguments, keys included. */
export interface Write {
  readonly command: string
  readonly args: ReadonlyArray<string>
}

/**
 * The keys of a write (its spec says where they are). Not `args.slice(0, 1)`:
 * a validated write's arguments are frozen, and V8 slices a frozen array on
 * its slow path (about 20x the cost of a new one-element array).
 */
export const keysOf = (write: Write): ReadonlyArray<string> =>
  COMMANDS[write.command]?.keys === "all" ? write.args : [write.args[0]!]

/**
 * How many of a write's leading arguments are keys (`keysOf` without an
 * array: the checks a commit runs per write read `args[0 .. keyCount)`).
 */
export const keyCount = (write: Write): number =>
  COMMANDS[write.command]?.keys === "all" ? write.args.length : 1

/**
 * A send routed to a shard of its target stream (by the stream's layout when
 * the handle committed): it lands at commit, never before.
 */
export interface Send {
  readonly stream: string
  readonly shard: number
  /** The routing key (stored in the entry's key field, `shardline-key`). */
  readonly key: string
  readonly fields: Fields
}

const refused = (
  reason: TransactionRefused["reason"],
  message: string,
  extra: { readonly command?: string; readonly key?: string } = {},
) => new TransactionRefused({ reason, message, ...extra })

/** The arguments of a write that is a key alone (INCR, DEL n), as its check takes them. */
const NO_ARGS: ReadonlyArray<string> = Object.freeze([])

/**
 * The writes `validateWrite` made (frozen, so they stay as checked): a
 * commit's checks take them as they are instead of checking them again
 * (`checkPart`). A write built otherwise, or copied, is checked again. The
 * private field is the mark: only this constructor gives it (`#checked in w`
 * cannot be forged with `Object.create`), and it costs nothing to collect,
 * where a WeakSet of every write made the collector walk its table.
 */
class ValidatedWrite implements Write {
  readonly #checked = true
  constructor(
    readonly command: string,
    readonly args: ReadonlyArray<string>,
  ) {
    Object.freeze(this)
  }
  static is(w: Write): boolean {
    return typeof w === "object" && w !== null && #checked in w
  }
}

const asText = (a: unknown): string => (typeof a === "string" ? a : String(a))

/** `args` (strings and finite numbers, checked) as strings, in place. */
const textsInPlace = (args: Array<unknown>): Array<string> => {
  for (let i = 0; i < args.length; i++) if (typeof args[i] !== "string") args[i] = String(args[i])
  return args as Array<string>
}

/**
 * Check a write against the allow-list: the write (command upper-cased,
 * arguments as strings; frozen), or why not. Numbers may be given as
 * numbers (finite; integers for integer arguments).
 */
export const validateWrite = (
  command: string,
  args: ReadonlyArray<unknown>,
): Write | TransactionRefused => validated(command, args, false)

/**
 * `validateWrite` of an array made for this call alone, which the caller
 * never reads or changes again (a rest parameter's): the write keeps it as
 * its arguments, numbers turned to strings in place, instead of a copy (one
 * array less per write of a handler's transaction).
 *
 * @example
 * // in a method `command(name: string, ...args: Array<string | number>)`
 * const write = Transaction.validateOwnWrite(name, args)
 */
export const validateOwnWrite = (
  command: string,
  args: Array<unknown>,
): Write | TransactionRefused => validated(command, args, true)

const validated = (
  command: string,
  args: ReadonlyArray<unknown>,
  own: boolean,
): Write | TransactionRefused => {
  // the handle's methods give upper case already: no new string then
  const name =
    typeof command !== "string"
      ? ""
      : Object.hasOwn(COMMANDS, command)
        ? command
        : command.toUpperCase()
  const spec = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined
  if (spec === undefined)
    return refused(
      "CommandNotAllowed",
      `${String(command)} is not a transaction command (allowed: ${Object.keys(COMMANDS).join(", ")})`,
      { command: String(command) },
    )
  // a write built by hand (a port's caller) may carry anything as its arguments
  if (!Array.isArray(args))
    return refused("InvalidArguments", `${name}: the arguments are an array`, { command: name })
  for (const a of args)
    if (typeof a !== "string" && !(typeof a === "number" && Number.isFinite(a)))
      return refused(
        "InvalidArguments",
        `${name}: arguments are strings or finite numbers, got ${typeof a}`,
        {
          command: name,
        },
      )
  // `map` makes the array at its size (pushing into [] reserves room for 17)
  const texts = own ? textsInPlace(args as Array<unknown>) : args.map(asText)
  if (texts.length === 0)
    return refused("InvalidArguments", `${name} needs a key`, { command: name })
  const all = spec.keys === "all"
  if (all ? texts.includes("") : texts[0] === "")
    return refused("InvalidArguments", `${name}: a key is a non-empty string`, { command: name })
  const why = spec.check(all || texts.length === 1 ? NO_ARGS : texts.slice(1))
  if (why !== undefined)
    return refused("InvalidArguments", `${name} ${why}`, { command: name, key: texts[0]! })
  return new ValidatedWrite(name, Object.freeze(texts))
}

// every code unit below 0x80 (written as the complement: no control characters in the pattern)
const ASCII = /^[^\u0080-\uffff]*$/

/**
 * The bytes of `s` in UTF-8, as it is sent to Redis (what Node's
 * `Buffer.byteLength(s)` says, without Node: a lone surrogate counts as
 * U+FFFD, 3 bytes).
 */
export const utf8Bytes = (s: string): number => {
  // ASCII, the usual key and value: its length (one test, where a loop of
  // charCodeAt over a concatenated key costs a few ns per character)
  if (ASCII.test(s)) return s.length
  let n = 0
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c < 0x80) n += 1
    else if (c < 0x800) n += 2
    else if (c >= 0xd800 && c <= 0xdbff && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      // a surrogate pair: one code point of 4 bytes
      n += 4
      i++
    } else n += 3
  }
  return n
}

/** The size a write or send counts for against a transaction's byte limit: UTF-8 bytes. */
export const sizeOf = (parts: ReadonlyArray<string>): number => {
  let n = 0
  for (let i = 0; i < parts.length; i++) n += utf8Bytes(parts[i]!)
  return n
}

/**
 * The reserved forms of a key that opens with a shard's hash tag
 * `{<stream>:<n>}` (its stream holds no brace). Tested, never matched: a
 * commit checks each write's keys several times, and a match allocates.
 */
const RESERVED_TAGGED =
  /^\{[^{}]*:\d+\}(?:$|:dlq$|:sealed$|:gate$|:owner:|:idmp:|:outbox|:relayed:)/

/**
 * Shardline's own keys, which no transaction may write (docs/redis.md,
 * "Keys"): everything under `{shardline:...}`, a shard stream `{<stream>:<n>}`
 * and its owner tokens, dead-letter stream, seal marker, idempotency windows,
 * gate, outbox and relay marks. `{<stream>:<n>}:data:<name>` (the handle's
 * `key(name)`) and every other key are the application's.
 */
export const isReservedKey = (key: string): boolean =>
  key.startsWith("{shardline:") || RESERVED_TAGGED.test(key)

/** A data key at `lastIndex` (sticky: no slice of the key to test from an offset). */
const DATA_KEY_AT = /\{[^{}]*:\d+\}:data:/y

/**
 * Whether `key` holds a data key (`dataKey`: `{<stream>:<n>}:data:<name>`)
 * from `from` on (a storage's key prefix before it).
 */
export const isDataKey = (key: string, from = 0): boolean => {
  DATA_KEY_AT.lastIndex = from
  return DATA_KEY_AT.test(key)
}

/** A key in the shard's hash slot for a transaction's writes: `{<stream>:<shard>}:data:<name>`. */
export const dataKey = (stream: string, shard: number, name: string): string =>
  `{${stream}:${shard}}:data:${name}`

// ---------------------------------------------------------------------------
// the commit

export interface CommitOptions extends FencedAddress {
  /**
   * The messages the transaction covers: acknowledged by the commit, which
   * happens only if every one of them is still pending in the group.
   */
  readonly ids: ReadonlyArray<string>
  /** How they are acknowledged (as `AckOptions.mode`). */
  readonly mode: "ack" | "xackdel"
  readonly writes: ReadonlyArray<Write>
  readonly sends: ReadonlyArray<Send>
}

/**
 * - `Committed`: the writes, the sends and the acknowledgement happened, together.
 * - `AlreadyCommitted`: none of `ids` is pending any more (a commit of them
 *   already ran: its reply was lost, or it was sent twice): nothing written.
 * - `NotPending`: some of `ids` are pending and these are not: nothing
 *   written, nothing acknowledged (the pending ones are handled again).
 */
export type CommitOutcome =
  | { readonly _tag: "Committed" }
  | { readonly _tag: "AlreadyCommitted" }
  | { readonly _tag: "NotPending"; readonly ids: ReadonlyArray<string> }

export type CommitError =
  | StaleOwner
  | OwnerTokenMissing
  | DataLost
  | InvalidEntryId
  | ShardSealed
  | TransactionRefused
  | DataPlaneError

/**
 * One message's share of a group commit (`TransactionsShape.commitGroup`):
 * the ids it acknowledges (its message; or messages handled without a
 * transaction), and its writes and sends.
 */
export interface CommitPart {
  readonly ids: ReadonlyArray<string>
  readonly writes: ReadonlyArray<Write>
  readonly sends: ReadonlyArray<Send>
}

/**
 * A group commit (docs/exactly-once.md, "Group commit"): the parts of one
 * shard's batch, in stream order, committed in ONE fenced, atomic step.
 */
export interface GroupCommitOptions extends FencedAddress {
  /** How the parts' ids are acknowledged (as `AckOptions.mode`). */
  readonly mode: "ack" | "xackdel"
  /** In stream order; at least one. */
  readonly parts: ReadonlyArray<CommitPart>
}

/**
 * Why part `committed.length` of a group commit did not commit; no part
 * after it did either (a later message never commits when an earlier one
 * failed):
 * - `NotPending`: some of its ids are pending and these are not;
 * - `Refused`: a write the stored values cannot take, or a part that does
 *   not pass `checkCommit` / the port's key rules;
 * - `Sealed`: a direct send's target shard is sealed (route it again).
 */
export type GroupStop =
  | { readonly _tag: "NotPending"; readonly ids: ReadonlyArray<string> }
  | { readonly _tag: "Refused"; readonly error: TransactionRefused | InvalidArgument }
  | { readonly _tag: "Sealed"; readonly error: ShardSealed }

/**
 * The end of a group commit: its leading parts that committed, in order
 * (`Committed` now, or `AlreadyCommitted`: none of the part's ids was
 * pending any more), and, when not every part did, why the next did not.
 */
export interface GroupCommitOutcome {
  readonly committed: ReadonlyArray<"Committed" | "AlreadyCommitted">
  readonly stopped?: GroupStop
}

/**
 * A group commit that carried the shard's next read
 * (`TransactionsShape.commitGroupThenRead`): the commit's outcome, and what
 * the read delivered when it ran (only when every part committed).
 */
export interface GroupCommitThenRead {
  readonly outcome: GroupCommitOutcome
  /** The read's entries; undefined when it did not run or its outcome is unknown (read again). */
  readonly entries?: ReadonlyArray<StreamMessage>
}

/** A key's value as `read` returns it (tests and tools). */
export type KeyValue =
  | { readonly type: "string"; readonly value: string }
  | { readonly type: "hash"; readonly value: Readonly<Record<string, string>> }
  | { readonly type: "set"; readonly value: ReadonlyArray<string> }
  | { readonly type: "zset"; readonly value: ReadonlyArray<readonly [string, number]> }
  | { readonly type: "list"; readonly value: ReadonlyArray<string> }

/** Where a shard's transactions may write directly. */
export interface KeyRules {
  /** A key in the shard's hash slot: `{<stream>:<shard>}:data:<name>`. */
  readonly key: (name: string) => string
  /** Why a write may not touch `key` (reserved, or outside the shard's slot in a cluster), or undefined. */
  readonly check: (key: string) => TransactionRefused | undefined
}

/** An entry of a shard's outbox (Redis Cluster): a send waiting to be relayed. */
export interface OutboxEntry {
  /** Its id in the outbox stream: increasing in commit order. */
  readonly id: string
  readonly stream: string
  /** The target shard it is routed to (at commit, or re-routed after a seal). */
  readonly shard: number
  readonly key: string
  readonly fields: Fields
}

/**
 * Relaying a shard's outbox (docs/exactly-once.md, "The outbox"): entries
 * are delivered in outbox order, each to its routed shard, by an append
 * that is exactly-once per (outbox, target shard) (a high-water mark of
 * delivered outbox ids in the target's slot, checked before the seal); a
 * sealed target's entry is re-routed once, recorded in the source's slot,
 * so that two relayers never deliver it to two shards.
 */
export interface OutboxShape {
  /** The oldest entries waiting (at most `count`). */
  readonly read: (
    source: GroupAddress,
    count: number,
  ) => Effect.Effect<ReadonlyArray<OutboxEntry>, DataPlaneError>
  /** Deliver one entry to its routed shard: appended now, or it already was. */
  readonly deliver: (
    source: GroupAddress,
    entry: OutboxEntry,
  ) => Effect.Effect<"appended" | "duplicate", ShardSealed | DataPlaneError>
  /**
   * Move an entry whose routed shard `from` is sealed (and did not get it)
   * to `to`, unless another relayer moved it first: the shard it is routed
   * to now, or `"gone"` when the entry is no longer in the outbox (another
   * relayer delivered and removed it: nothing is left to deliver).
   */
  readonly reroute: (
    source: GroupAddress,
    id: string,
    from: number,
    to: number,
  ) => Effect.Effect<number | "gone", DataPlaneError>
  /** Forget delivered entries. */
  readonly remove: (
    source: GroupAddress,
    ids: ReadonlyArray<string>,
  ) => Effect.Effect<void, DataPlaneError>
  /** How many entries wait (a shard is not drained while its outbox holds any). */
  readonly size: (source: GroupAddress) => Effect.Effect<number, DataPlaneError>
}

/** The transaction operations of a `ShardStreams` implementation (`ShardStreams.transactions`). */
export interface TransactionsShape {
  /** `direct`: sends land in their target shard at commit; `outbox`: in the shard's outbox, relayed. */
  readonly sends: "direct" | "outbox"
  /** Where a transaction of this shard may write. */
  readonly keys: (stream: string, shard: number) => KeyRules
  /** The fenced, atomic commit (see the module comment). */
  readonly commit: (options: CommitOptions) => Effect.Effect<CommitOutcome, CommitError>
  /**
   * The group commit (docs/exactly-once.md, "Group commit"): the owner
   * token once (a stale owner's group writes nothing), then each part in
   * order as `commit` would take it, the values each part's writes see
   * being those the parts before it leave; the leading parts that pass
   * commit together, with their acks, in one atomic step, and the first
   * that does not stops the group (`GroupStop`).
   *
   * @example
   * const done = yield* tx.commitGroup({ ...address, mode: "ack", parts: [
   *   { ids: [id1], writes: [{ command: "INCR", args: [key] }], sends: [] },
   *   { ids: [id2], writes: [{ command: "INCR", args: [key] }], sends: [] },
   * ] })
   * // done.committed.length === 2, or the part that stopped in done.stopped
   */
  readonly commitGroup: (
    options: GroupCommitOptions,
  ) => Effect.Effect<GroupCommitOutcome, CommitError>
  /**
   * The group commit, then the shard's next read of new entries
   * (`ShardStreams.read`, `read.ack` unset) in the same step
   * (docs/exactly-once.md, "The commit rides the read"): the read runs only
   * when every part committed, so a group that stops reads nothing. Saves
   * the read's own round trip and fence. Optional: without it the runtime
   * commits, then reads.
   *
   * @example
   * const { outcome, entries } = yield* tx.commitGroupThenRead!(
   *   { ...address, mode: "ack", parts },
   *   { ...address, consumer: "c1", count: 32 },
   * )
   * // entries: the next batch, when outcome.stopped is undefined
   */
  readonly commitGroupThenRead?: (
    commit: GroupCommitOptions,
    read: ReadOptions,
  ) => Effect.Effect<GroupCommitThenRead, CommitError>
  /** A key's value, or undefined when absent (tests and tools; not fenced). */
  readonly read: (key: string) => Effect.Effect<KeyValue | undefined, DataPlaneError>
  /** The outbox (with `sends: "outbox"`). */
  readonly outbox?: OutboxShape
}

/** The KeyRules of an implementation without hash slots (memory, one Redis node). */
export const anyKey = (stream: string, shard: number): KeyRules =>
  rememberingLast({
    key: (name) => dataKey(stream, shard, name),
    check: (key) =>
      isReservedKey(key)
        ? refused("ReservedKey", `${key} is one of Shardline's own keys`, { key })
        : undefined,
  })

const NO_NAME = Symbol("no name")

/**
 * `rules` remembering its last key built and its last key that passed (both
 * are functions of their argument alone). A handler that writes one key per
 * message gets the same string back from `key` for each message, measured
 * once, and its check runs once per batch instead of once per write: a new
 * concatenated key is flattened by the first pattern that reads it, a copy
 * per write, and the checks (a cluster's hash slot among them) run twice
 * per write, at the call and in the storage (docs/exactly-once.md, "Where
 * the time goes").
 */
export const rememberingLast = (rules: KeyRules): KeyRules => {
  // no name yet (not undefined: a caller's undefined is a name as any other)
  let lastName: unknown = NO_NAME
  let lastKey = ""
  let passed: string | undefined
  return {
    key: (name) => {
      if (name !== lastName) {
        lastKey = rules.key(name)
        lastName = name
      }
      return lastKey
    },
    check: (key) => {
      if (key === passed) return undefined
      const refusal = rules.check(key)
      if (refusal === undefined) passed = key
      return refusal
    },
  }
}

/** The field a send's routing key is stored in (the member runtime's `KEY_FIELD`). */
export const SEND_KEY_FIELD = "shardline-key"

/**
 * A commit's writes and sends checked as the storage checks them (the
 * runtime's handle has checked them already; a caller of the port may not
 * have): allow-listed commands, no reserved key, sends with a key and
 * string fields. The options with their writes normalized (command names
 * upper-cased, numbers as strings), or why not.
 */
export const isRefusal = (u: unknown): u is TransactionRefused | InvalidArgument =>
  u instanceof TransactionRefused || u instanceof InvalidArgument

export const checkCommit = (
  o: CommitOptions,
): CommitOptions | TransactionRefused | InvalidArgument => {
  const part = checkPart(o)
  if (isRefusal(part)) return part
  return part.writes === o.writes ? o : { ...o, writes: part.writes }
}

/**
 * `checkCommit` of one part of a group commit: the part, its writes as
 * `validateWrite` makes them (the part itself when they already are), or
 * why not.
 */
export const checkPart = <P extends CommitPart>(
  part: P,
): P | TransactionRefused | InvalidArgument => {
  let writes: Array<Write> | undefined
  // the key that passed last: a run of writes to one key is tested once
  let passed: string | undefined
  for (let i = 0; i < part.writes.length; i++) {
    const w = part.writes[i]!
    let checked: Write
    if (ValidatedWrite.is(w)) checked = w
    else {
      const made = validateWrite(w.command, w.args)
      if (made instanceof TransactionRefused) return made
      checked = made
      writes ??= part.writes.slice(0, i)
    }
    for (let k = 0, n = keyCount(checked); k < n; k++) {
      const key = checked.args[k]!
      if (key === passed) continue
      if (isReservedKey(key))
        return new TransactionRefused({
          reason: "ReservedKey",
          message: `${key} is one of Shardline's own keys`,
          command: checked.command,
          key,
        })
      passed = key
    }
    writes?.push(checked)
  }
  for (const send of part.sends) {
    if (
      typeof send.stream !== "string" ||
      send.stream === "" ||
      typeof send.key !== "string" ||
      !Number.isSafeInteger(send.shard) ||
      send.shard < 0
    )
      return new InvalidArgument({
        message: "a send needs a stream, a string key and a shard number",
      })
    for (const name of Object.keys(send.fields))
      if (name === SEND_KEY_FIELD || typeof send.fields[name] !== "string")
        return new InvalidArgument({
          message: `a send's field ${name} is ${name === SEND_KEY_FIELD ? "reserved for the key" : "not a string"}`,
        })
  }
  return writes === undefined ? part : { ...part, writes }
}

/**
 * `commit` as a group commit of one part (each implementation has one
 * commit path): its outcome, or its stop's error.
 *
 * @example
 * const commit = (o: CommitOptions) => Transaction.commitAsGroup(commitGroup, o)
 */
export const commitAsGroup = (
  commitGroup: TransactionsShape["commitGroup"],
  o: CommitOptions,
): Effect.Effect<CommitOutcome, CommitError> =>
  Effect.flatMap(
    commitGroup({
      stream: o.stream,
      shard: o.shard,
      group: o.group,
      token: o.token,
      mode: o.mode,
      parts: [{ ids: o.ids, writes: o.writes, sends: o.sends }],
    }),
    (done): Effect.Effect<CommitOutcome, CommitError> => {
      const first = done.committed[0]
      if (first !== undefined)
        return Effect.succeed(first === "Committed" ? COMMITTED : ALREADY_COMMITTED)
      const stop = done.stopped
      if (stop === undefined)
        return Effect.fail(new InvalidArgument({ message: "a group commit reported no part" }))
      if (stop._tag === "NotPending") return Effect.succeed({ _tag: "NotPending", ids: stop.ids })
      return Effect.fail(stop.error)
    },
  )

/**
 * `commitGroupThenRead` of a port that runs the two one after the other
 * (tests; a port without a cheaper way): the read only when every part
 * committed; a read that fails after the commit gives no entries (the
 * runtime's next read finds out).
 */
export const commitThenReadOf =
  (
    commitGroup: TransactionsShape["commitGroup"],
    read: (o: ReadOptions) => Effect.Effect<ReadonlyArray<StreamMessage>, unknown>,
  ): NonNullable<TransactionsShape["commitGroupThenRead"]> =>
  (commit, next) =>
    Effect.flatMap(commitGroup(commit), (outcome) =>
      outcome.stopped !== undefined
        ? Effect.succeed({ outcome })
        : Effect.match(read({ ...next, ack: undefined }), {
            onFailure: () => ({ outcome }),
            onSuccess: (entries) => ({ outcome, entries }),
          }),
    )

// ---------------------------------------------------------------------------
// the group as one part (docs/exactly-once.md, "The group as one part")

/**
 * How much an integer counter write adds, or undefined for any other write.
 * Its key is its first argument, and HINCRBY's field its second: asked
 * apart, so a batch's writes pass without an object each.
 */
const counterBy = (w: Write): number | undefined => {
  switch (w.command) {
    case "INCR":
      return 1
    case "DECR":
      return -1
    case "INCRBY":
      return Number(w.args[1])
    case "DECRBY":
      return -Number(w.args[1])
    case "HINCRBY":
      return Number(w.args[2])
    default:
      return undefined
  }
}

/**
 * `writes` (checked: `checkCommit`) with each run of integer counter writes
 * on one key (one hash field) merged into ONE write of their sum, at the
 * run's first write: `INCR n` 32 times is `INCRBY n 32`. A run ends at any
 * other write to that key, at a step of the other sign, or where the sum
 * would leave ±(2^53 - 1). Writes to other keys between them commute with
 * them, so the merged writes leave every key as the originals do; and as
 * every value a run passes through lies between its first and its last
 * (one sign), the merged writes are refused exactly when the originals are
 * (the property test in test/Transaction.mergeCounters.property.test.ts). Float counters
 * are never merged: their sum rounds differently. `writes` itself when
 * nothing merges.
 *
 * @example
 * mergeCounters([{ command: "INCR", args: ["n"] }, { command: "INCR", args: ["n"] }])
 * // [{ command: "INCRBY", args: ["n", "2"] }]
 */
export const mergeCounters = (writes: ReadonlyArray<Write>): ReadonlyArray<Write> => {
  const out: Array<Write> = []
  // per output write, the sum of the steps merged into it (counters only)
  const sums: Array<number> = []
  const merged: Array<boolean> = []
  // the open run of each key: string counters, and per hash field (made
  // at the first run they hold: a batch of one key never needs them)
  let strings: Map<string, number> | undefined
  let fields: Map<string, Map<string, number>> | undefined
  let any = false
  // the string counter whose run is the last write out, if any: a run of
  // one key merges without a Map lookup (hashing each new key string); it
  // enters `strings` when another write follows it out
  let lastKey: string | undefined
  const closeLast = () => {
    if (lastKey === undefined) return
    strings ??= new Map()
    strings.set(lastKey, out.length - 1)
    lastKey = undefined
  }
  for (const w of writes) {
    const by = counterBy(w)
    if (by === undefined) {
      closeLast()
      out.push(w)
      for (const key of keysOf(w)) {
        strings?.delete(key)
        fields?.delete(key)
      }
      continue
    }
    const key = w.args[0]!
    const field = w.command === "HINCRBY" ? w.args[1]! : undefined
    const runs = field === undefined ? undefined : fields?.get(key)
    const at =
      field !== undefined ? runs?.get(field) : key === lastKey ? out.length - 1 : strings?.get(key)
    if (at !== undefined) {
      const sum = sums[at]! + by
      const oneSign = (sums[at]! >= 0 && by >= 0) || (sums[at]! <= 0 && by <= 0)
      if (oneSign && Number.isSafeInteger(sum)) {
        sums[at] = sum
        merged[at] = true
        any = true
        continue
      }
    }
    closeLast()
    const index = out.push(w) - 1
    sums[index] = by
    merged[index] = false
    if (field === undefined) lastKey = key
    else if (runs === undefined) {
      fields ??= new Map()
      fields.set(key, new Map([[field, index]]))
    } else runs.set(field, index)
  }
  if (!any) return writes
  return out.map((w, i) => {
    if (!merged[i]) return w
    const by = String(sums[i]!)
    return w.command === "HINCRBY"
      ? { command: "HINCRBY", args: [w.args[0]!, w.args[1]!, by] }
      : { command: "INCRBY", args: [w.args[0]!, by] }
  })
}

/**
 * A group's parts as ONE part: every id, every write in order (counter runs
 * merged: `mergeCounters`), every send in order; undefined when that saves
 * nothing (one part whose writes do not merge). A storage may commit it
 * first (docs/exactly-once.md, "The group as one part"): when it commits
 * whole, every part committed (when none of its ids was pending, every
 * part had); when it stops, it wrote nothing, and the group goes again part
 * by part for the exact stop.
 *
 * @example
 * const one = Transaction.joinParts(group.parts) // then, on a stop, group.parts
 */
export const joinParts = (parts: ReadonlyArray<CommitPart>): CommitPart | undefined => {
  if (parts.length === 1) {
    const only = parts[0]!
    const writes = mergeCounters(only.writes)
    return writes === only.writes ? undefined : { ...only, writes }
  }
  const ids: Array<string> = []
  const writes: Array<Write> = []
  const sends: Array<Send> = []
  for (const part of parts) {
    for (const id of part.ids) ids.push(id)
    for (const w of part.writes) writes.push(w)
    for (const s of part.sends) sends.push(s)
  }
  return { ids, writes: mergeCounters(writes), sends }
}

const COMMITTED: CommitOutcome = { _tag: "Committed" }
const ALREADY_COMMITTED: CommitOutcome = { _tag: "AlreadyCommitted" }
