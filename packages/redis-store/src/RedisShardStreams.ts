/**
 * ShardStreams on Redis: the data plane (docs/redis.md, "ShardStreams").
 *
 * Each fenced operation (read, ack, nack, claimPending, deadLetter) and
 * setOwnerToken is ONE Lua script over keys of the shard's hash slot:
 * `<prefix>{<stream>:<shard>}`, `...:owner:<group>`, `...:dlq`
 * (src/keys.ts: every key is in the connection's namespace). The script checks the group's owner token and
 * the keys' types before its first write, so a refused call changes nothing.
 *
 * `append` is a script too: it refuses a shard sealed by a reshard
 * (`<prefix>{<stream>:<shard>}:sealed`, written by `seal`) with `ShardSealed`.
 * `drainState` reads seal, lag and pending in one script; `retireShard`
 * deletes the shard stream, the named groups' owner tokens and their
 * relayed (empty) transaction outboxes, keeping the seal marker (late
 * producers are still refused) and the dead-letter stream.
 *
 * Native commands where the server has them (probed once by
 * RedisConnection): XACKDEL ... ACKED (Redis >= 8.2) for `xackdel`,
 * XREADGROUP ... CLAIM (Redis >= 8.4) for the takeover read; Lua XACK + XDEL
 * of what every group acknowledged, and XAUTOCLAIM, otherwise. No ack mode
 * deletes an entry another group of the stream has not acknowledged
 * (docs/runtime.md, "Ack policies and other groups"); `setOwnerToken`
 * creates the group on the shard, so that holds from its first grant. Redis refuses BLOCK inside Lua, so an idle shard waits with
 * `waitForEntries`: a blocking XREAD on a dedicated connection.
 */
import {
  type DataLost,
  type DataPlaneError,
  ForeignValue,
  InvalidArgument,
  InvalidEntryId,
  OwnerTokenMissing,
  OwnerTokenRegression,
  ShardSealed,
  ShardStreams,
  StaleOwner,
} from "@shardline/core"
import { Clock, Effect, Layer } from "effect"
import type { Redis } from "ioredis"
import { ackCommand, ackedCount, burst, type FencedRead } from "./internal/burst.js"
import { clusterRoute } from "./internal/clusterGatedRead.js"
import { makeGatedReader } from "./internal/gatedRead.js"
import { makeIdleWaits } from "./internal/idleWaits.js"
import {
  Code,
  evalScript,
  execFailure,
  fenceFailure,
  fieldsOf,
  keyCommand,
  messageOf,
  pairsOf,
  type Reply,
  refineNoReplicas,
  refineWrongType,
  xreadMessages,
} from "./internal/reply.js"
import * as StreamId from "./internal/streamId.js"
import * as RedisConnection from "./RedisConnection.js"
import { makeTransactions } from "./RedisTransactions.js"
import { Scripts } from "./scripts.js"

type FencedAddress = ShardStreams.FencedAddress
type GroupInfo = ShardStreams.GroupInfo
type PendingEntry = ShardStreams.PendingEntry
type StreamMessage = ShardStreams.StreamMessage
type RedisStoreError = DataPlaneError

const { DeadLetterFields } = ShardStreams

const PENDING_PAGE = 1_000

const invalid = (message: string) => Effect.fail(new InvalidArgument({ message }))

const checkNonNegative = (name: string, value: number) =>
  Number.isSafeInteger(value) && value >= 0
    ? Effect.void
    : invalid(`${name} must be a non-negative integer, got ${value}`)

const checkToken = (token: number) => checkNonNegative("owner token", token)

const checkPositive = (name: string, value: number) =>
  Number.isSafeInteger(value) && value >= 1
    ? Effect.void
    : invalid(`${name} must be a positive integer, got ${value}`)

const checkIds = (ids: ReadonlyArray<string>) => {
  for (const id of ids) if (!StreamId.isValid(id)) return Effect.fail(new InvalidEntryId({ id }))
  return Effect.void
}

/** Script entries `{id, fields[, deliveryCount]}` (no count: a first delivery). */
const messagesOf = (raw: unknown, keyField?: string): Array<StreamMessage> =>
  (Array.isArray(raw) ? raw : []).map((m: ReadonlyArray<unknown>) =>
    messageOf(m[0], m[1], m[2] === undefined ? 1 : Number(m[2]), keyField),
  )

const parseToken = (key: string, raw: string | null) => {
  if (raw === null) return Effect.succeed(0)
  return /^\d{1,15}$/.test(raw)
    ? Effect.succeed(Number(raw))
    : Effect.fail(
        new ForeignValue({
          key,
          message: `owner token is not a non-negative integer: ${raw.slice(0, 40)}`,
        }),
      )
}

/** ShardStreams over an existing connection. */
export interface ShardStreamsOptions {
  /**
   * How `read` of new entries is fenced (docs/redis.md, "The gated fence"
   * and "The optimistic fence"):
   * - `gated` (the default): one MULTI per read: a small gate
   *   script checks the owner token, acknowledges the previous batch, and
   *   only then moves the stream under the key that the transaction's
   *   XREADGROUP addresses, and a RENAMENX moves it back; entries never pass through Lua. All read
   *   loops share one dedicated connection (in a cluster, one per node, each
   *   transaction sent to the node of its shard's slot).
   * - `script`: one Lua script (token check +
   *   XREADGROUP), entries returned through Lua;
   * - `optimistic` (single node): a read loop keeps a dedicated connection
   *   whose WATCH on the owner token stays armed; each read is MULTI /
   *   XREADGROUP / EXEC (aborted if a new owner was fenced in meanwhile) +
   *   WATCH / GET, one round trip, entries never pass through Lua; acks of
   *   the same shard and group go through it too.
   * Pending and takeover reads always use the script, and so does an
   * optimistic read carrying an `xackdel` ack before Redis 8.2 (no XACKDEL).
   */
  readonly read?: "gated" | "optimistic" | "script"
  /**
   * Where a transaction's sends land (docs/exactly-once.md): `direct` (the
   * default on one node) or `outbox` (always in a cluster); `outbox` on one
   * node exercises the relay in tests.
   */
  readonly transactionSends?: "direct" | "outbox"
}

type StickyAck =
  | { readonly _tag: "Acked"; readonly count: number }
  | { readonly _tag: "Stale"; readonly current: number }
  | { readonly _tag: "TokenMissing" }
  | { readonly _tag: "Foreign"; readonly key: string; readonly message: string }

interface StickyReader {
  /** Its key in the readers map: [stream, shard, group, consumer]. */
  readonly key: string
  /** [stream, shard, group]: acks of that group on that shard may use this reader's WATCH. */
  readonly groupKey: string
  readonly lease: {
    readonly client: RedisConnection.Client
    readonly release: (healthy: boolean) => void
  }
  /** The owner token seen by the armed WATCH's GET (undefined: no WATCH armed). */
  checked: number | undefined
  busy: boolean
}

const TOKEN = /^\d{1,15}$/

/** A dedicated connection of the optimistic fence (single node only). */
const single = (c: RedisConnection.Client) => c as Redis

/** Why a WATCH + GET refuses a read or an ack. */
type Refusal = Exclude<FencedRead, { _tag: "Read" | "Fallback" }>

/** WATCH + GET of the owner token in one burst: GET's outcome. */
const watchToken = async (c: RedisConnection.Client, owner: string) =>
  (
    await burst(single(c), [
      ["WATCH", owner],
      ["GET", owner],
    ])
  )[1]!

/**
 * Judge a WATCH + GET reply for `token`: the token seen (the WATCH stays
 * armed), or why not (UNWATCHed). An error other than WRONGTYPE is thrown.
 */
const judgeWatch = async (
  c: RedisConnection.Client,
  owner: string,
  token: number,
  error: Error | null,
  raw: unknown,
): Promise<number | Refusal> => {
  if (error !== null || (raw !== null && !TOKEN.test(String(raw)))) {
    await c.unwatch()
    if (error !== null && !error.message.startsWith("WRONGTYPE")) throw error
    return {
      _tag: "Foreign",
      key: owner,
      message:
        error?.message ?? `owner token is not a non-negative integer: ${String(raw).slice(0, 40)}`,
    }
  }
  // no token at all refuses every token (docs/protocol.md rule 26)
  if (raw === null) {
    await c.unwatch()
    return { _tag: "TokenMissing" }
  }
  const current = Number(raw)
  if (token < current) {
    await c.unwatch()
    return { _tag: "Stale", current }
  }
  return current
}

export const makeWith = (
  connection: RedisConnection.RedisConnectionShape,
  options: ShardStreamsOptions = {},
): ShardStreams.ShardStreamsShape => {
  const { features } = connection
  const { deadLetterKey, idempotencyKey, ownerTokenKey, sealedKey, shardKey } = connection.keys
  const optimistic = !connection.isCluster && options.read === "optimistic"
  // in a cluster each read's MULTI goes to its slot's node (internal/clusterGatedRead.ts)
  const gatedReader =
    (options.read ?? "gated") === "gated"
      ? makeGatedReader(connection, connection.isCluster ? clusterRoute(connection) : undefined)
      : undefined

  // a single node's idle waits share a few blocking connections (internal/idleWaits.ts); in
  // a cluster a multi-key XREAD needs its keys in one slot, so each waits on its own
  const idleWaits = connection.isCluster
    ? undefined
    : makeIdleWaits({
        open: () => {
          const { client, release } = connection.lease()
          return { client: client as Redis, release }
        },
        unblock: (id) => connection.client.call("CLIENT", "UNBLOCK", id),
        check: (key, from) =>
          connection.client
            .xread("COUNT", 1, "STREAMS", key, from)
            .then((reply) => reply !== null && reply.length > 0),
      })

  /**
   * Sticky readers: a read loop (stream, shard, group, consumer) keeps a
   * dedicated connection whose WATCH on the owner token stays armed between
   * calls. Each read is then ONE round trip: MULTI / XREADGROUP / EXEC
   * (aborted if the token key changed since the WATCH), then WATCH + GET for
   * the next call, in one burst. Safety is the same as a script's: an EXEC
   * runs only if the token key is unchanged since a WATCH whose GET showed a
   * token not above the caller's.
   */
  const readers = new Map<string, StickyReader>()
  /** The last reader used per (stream, shard, group), for acks. */
  const lastReader = new Map<string, StickyReader>()
  const MAX_READERS = 256

  const dropReader = (k: string, reader: StickyReader, healthy: boolean) => {
    if (readers.get(k) === reader) readers.delete(k)
    if (lastReader.get(reader.groupKey) === reader) lastReader.delete(reader.groupKey)
    if (!healthy) return reader.lease.release(false)
    reader.lease.client.unwatch().then(
      () => reader.lease.release(true),
      () => reader.lease.release(false),
    )
  }

  const stickyRead = (o: ShardStreams.ReadOptions): Effect.Effect<FencedRead, DataPlaneError> =>
    Effect.suspend(() => {
      const k = JSON.stringify([o.stream, o.shard, o.group, o.consumer])
      let reader = readers.get(k)
      if (reader?.busy) return optimisticRead(o) // a second loop on one consumer: no shared WATCH
      if (reader !== undefined && RedisConnection.isClosed(reader.lease.client)) {
        // its connection dropped, and its WATCH with it: arm a new one
        dropReader(k, reader, false)
        reader = undefined
      }
      if (reader === undefined) {
        if (readers.size >= MAX_READERS) {
          const [oldest, r] = readers.entries().next().value as [string, StickyReader]
          if (!r.busy) dropReader(oldest, r, true)
        }
        reader = {
          key: k,
          groupKey: JSON.stringify([o.stream, o.shard, o.group]),
          lease: connection.lease(),
          checked: undefined,
          busy: false,
        }
        readers.set(k, reader)
      } else {
        // most recently used last (eviction takes the oldest)
        readers.delete(k)
        readers.set(k, reader)
      }
      const r = reader
      r.busy = true
      lastReader.set(r.groupKey, r)
      return Effect.tryPromise({
        try: () => runSticky(r, o),
        catch: (cause) => RedisConnection.unavailable("read (sticky WATCH/MULTI)", cause),
      }).pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            r.busy = false
            if (exit._tag === "Failure") dropReader(k, r, false)
          }),
        ),
      )
    })

  /**
   * An ack through the armed WATCH of a read loop of the same (stream, shard,
   * group): MULTI / XACK (XACKDEL ... ACKED on Redis >= 8.2) / EXEC, then WATCH + GET
   * again, one round trip, no Lua. Undefined: no armed reader is free (the
   * script acks instead).
   */
  const stickyAck = (
    o: ShardStreams.AckOptions,
  ): Effect.Effect<StickyAck | undefined, DataPlaneError> =>
    Effect.suspend(() => {
      const r = lastReader.get(JSON.stringify([o.stream, o.shard, o.group]))
      if (
        r === undefined ||
        r.busy ||
        r.checked === undefined ||
        o.token < r.checked ||
        RedisConnection.isClosed(r.lease.client)
      )
        return Effect.succeed(undefined)
      r.busy = true
      return Effect.tryPromise({
        try: () => runStickyAck(r, o),
        catch: (cause) => RedisConnection.unavailable("ack (sticky MULTI/XACK)", cause),
      }).pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            r.busy = false
            if (exit._tag === "Failure") dropReader(r.key, r, false)
          }),
        ),
      )
    })

  const runStickyAck = async (
    r: StickyReader,
    o: ShardStreams.AckOptions,
  ): Promise<StickyAck | undefined> => {
    const c = r.lease.client
    const owner = ownerTokenKey(o.stream, o.shard, o.group)
    const stream = shardKey(o.stream, o.shard)
    const res = await burst(single(c), [
      ["MULTI"],
      ackCommand(stream, o.group, o),
      ["EXEC"],
      ["WATCH", owner],
      ["GET", owner],
    ])
    const [execError, exec] = res[2]!
    if (execError !== null) throw execFailure(res, execError)
    const [getError, raw] = res[4]!
    const verdict = await judgeReader(r, owner, o.token, getError, raw)
    if (exec === null) return verdict ?? undefined // changed since the WATCH: nothing acked
    const inner = (exec as Array<unknown>)[0]
    if (inner instanceof Error) {
      if (inner.message.startsWith("WRONGTYPE"))
        return { _tag: "Foreign", key: stream, message: inner.message }
      throw inner
    }
    return { _tag: "Acked", count: ackedCount(inner) }
  }

  /** Judge a WATCH + GET reply of a reader: undefined when armed for `token`. */
  const judgeReader = async (
    r: StickyReader,
    owner: string,
    token: number,
    error: Error | null,
    raw: unknown,
  ): Promise<Refusal | undefined> => {
    r.checked = undefined
    const judged = await judgeWatch(r.lease.client, owner, token, error, raw)
    if (typeof judged !== "number") return judged
    r.checked = judged
    return undefined
  }

  const runSticky = async (r: StickyReader, o: ShardStreams.ReadOptions): Promise<FencedRead> => {
    const c = r.lease.client
    const owner = ownerTokenKey(o.stream, o.shard, o.group)
    const stream = shardKey(o.stream, o.shard)
    /** A WATCH + GET reply pair: the token now, or why not. */
    const judge = (error: Error | null, raw: unknown): Promise<FencedRead | undefined> =>
      judgeReader(r, owner, o.token, error, raw)
    for (let attempt = 0; attempt < 3; attempt++) {
      if (r.checked === undefined || o.token < r.checked) {
        const [error, raw] = await watchToken(c, owner)
        const verdict = await judge(error, raw)
        if (verdict !== undefined) return verdict
      }
      const ack = o.ack !== undefined && o.ack.ids.length > 0 ? o.ack : undefined
      const res = await burst(single(c), [
        ["MULTI"],
        ...(ack === undefined ? [] : [ackCommand(stream, o.group, ack)]),
        ["XREADGROUP", "GROUP", o.group, o.consumer, "COUNT", o.count, "STREAMS", stream, ">"],
        ["EXEC"],
        ["WATCH", owner],
        ["GET", owner],
      ])
      const n = res.length
      const [execError, exec] = res[n - 3]!
      const [getError, raw] = res[n - 1]!
      if (execError !== null) throw execFailure(res, execError)
      if (exec === null) {
        // the token key changed since the WATCH: nothing was read; judge the new one
        const verdict = await judge(getError, raw)
        if (verdict !== undefined) return verdict
        continue
      }
      const replies = exec as Array<unknown>
      const acked = ack === undefined ? undefined : replies[0]
      const inner = replies[replies.length - 1]
      // the read ran under the WATCH; the new WATCH + GET arms (or disarms) the next one
      await judge(getError, raw).catch(() => undefined)
      if (acked instanceof Error) {
        r.checked = undefined
        await c.unwatch()
        if (acked.message.startsWith("WRONGTYPE"))
          return { _tag: "Foreign", key: stream, message: acked.message }
        throw acked
      }
      if (inner instanceof Error) {
        r.checked = undefined
        await c.unwatch()
        if (inner.message.startsWith("NOGROUP")) return { _tag: "Fallback" }
        if (inner.message.startsWith("WRONGTYPE"))
          return { _tag: "Foreign", key: stream, message: inner.message }
        throw inner
      }
      return { _tag: "Read", messages: xreadMessages(inner, o.keyField) }
    }
    return { _tag: "Fallback" }
  }

  /**
   * The optimistic fence: WATCH + GET the owner token (one round trip), then
   * MULTI / XREADGROUP / EXEC (one round trip). Between WATCH and EXEC the
   * token key is unchanged, so the check holds at EXEC as it would inside a
   * script; a change aborts EXEC and the check runs again.
   */
  const optimisticRead = (o: ShardStreams.ReadOptions) => {
    const owner = ownerTokenKey(o.stream, o.shard, o.group)
    const stream = shardKey(o.stream, o.shard)
    return connection.blocking("read (WATCH/MULTI)", async (c): Promise<FencedRead> => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const [error, raw] = await watchToken(c, owner)
        const judged = await judgeWatch(c, owner, o.token, error, raw)
        if (typeof judged !== "number") return judged
        const done = await burst(single(c), [
          ["MULTI"],
          ["XREADGROUP", "GROUP", o.group, o.consumer, "COUNT", o.count, "STREAMS", stream, ">"],
          ["EXEC"],
        ])
        const [execError, exec] = done[2]!
        if (execError !== null) throw execFailure(done, execError)
        if (exec === null) continue // a new owner was fenced in meanwhile: check again
        const read = (exec as Array<unknown>)[0]
        const [readError, reply] = read instanceof Error ? [read, null] : [null, read]
        if (readError === null) return { _tag: "Read", messages: xreadMessages(reply, o.keyField) }
        if (readError.message.startsWith("NOGROUP")) return { _tag: "Fallback" }
        if (readError.message.startsWith("WRONGTYPE"))
          return { _tag: "Foreign", key: stream, message: readError.message }
        throw readError
      }
      return { _tag: "Fallback" }
    })
  }

  /** Runs a fenced script; StaleOwner on code 1. */
  const fenced = (
    operation: string,
    address: FencedAddress,
    script: (typeof Scripts)[keyof typeof Scripts],
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
  ) =>
    Effect.flatMap(
      refineNoReplicas(
        operation,
        shardKey(address.stream, address.shard),
      )(evalScript(connection, operation, script, keys, [String(address.token), ...args])),
      (reply): Effect.Effect<Reply, StaleOwner | OwnerTokenMissing | DataLost> => {
        const refused = fenceFailure(address, reply)
        return refused === undefined ? Effect.succeed(reply) : Effect.fail(refused)
      },
    )

  const ownerKey = (a: { stream: string; shard: number; group: string }) =>
    ownerTokenKey(a.stream, a.shard, a.group)

  /**
   * A read's or a claim's VANISHED 'stream' on a shard sealed by a reshard:
   * a sealed shard that never had a stream has nothing to read, so `empty`
   * (the scripts name no seal marker: a key that may not exist makes a
   * cluster refuse the script while its slot migrates). Checked after the
   * script; the seal is never taken back, so the order is harmless.
   */
  const emptyIfSealed =
    (address: FencedAddress, empty: Reply) =>
    <E>(
      effect: Effect.Effect<Reply, E | DataLost>,
    ): Effect.Effect<Reply, E | DataLost | DataPlaneError> =>
      Effect.catchIf(
        effect,
        (e): e is DataLost =>
          typeof e === "object" &&
          e !== null &&
          (e as { _tag?: unknown })._tag === "DataLost" &&
          (e as DataLost).what === "stream",
        (lost) => {
          const sealed = sealedKey(address.stream, address.shard)
          return Effect.flatMap(
            keyCommand(connection, "read (EXISTS seal)", sealed, (c) => c.exists(sealed)),
            (n) => (n === 1 ? Effect.succeed(empty) : Effect.fail(lost)),
          )
        },
      )

  /**
   * A read's body: a generator function made once per storage, not a
   * closure (and a V8 map) per read (docs/runtime.md, "Throughput: Node's
   * young generation").
   */
  const readBody = Effect.fnUntraced(function* (o: ShardStreams.ReadOptions) {
    yield* checkToken(o.token)
    yield* checkPositive("count", o.count)
    if (o.ack !== undefined) yield* checkIds(o.ack.ids)
    const ack = o.ack !== undefined && o.ack.ids.length > 0 ? o.ack : undefined
    const claim = o.claimIdleMs !== undefined && o.from !== "pending"
    if (claim) yield* checkNonNegative("claimIdleMs", o.claimIdleMs!)
    const mode = o.from === "pending" ? "pending" : claim ? "claim" : "new"
    // the optimistic fence acks in its MULTI: natively only (XACKDEL ... ACKED on Redis >= 8.2)
    if (
      mode === "new" &&
      (gatedReader?.usable() === true ||
        (optimistic && (ack === undefined || ack.mode === "ack" || features.xackdel)))
    ) {
      const result = yield* gatedReader
        ? Effect.tryPromise({
            try: () => gatedReader.read(o, ack),
            catch: (cause) => RedisConnection.unavailable("read (gated MULTI)", cause),
          })
        : stickyRead(o)
      if (result._tag === "Read") return result.messages
      if (result._tag === "Stale")
        return yield* new StaleOwner({
          stream: o.stream,
          shard: o.shard,
          group: o.group,
          token: o.token,
          currentToken: result.current,
        })
      if (result._tag === "TokenMissing")
        return yield* new OwnerTokenMissing({
          stream: o.stream,
          shard: o.shard,
          group: o.group,
          token: o.token,
        })
      if (result._tag === "Foreign")
        return yield* new ForeignValue({ key: result.key, message: result.message })
      // "Fallback": no stream or group (the script says what that means) or the owner kept changing
    }
    const reply = yield* fenced(
      "read",
      o,
      Scripts.read,
      [shardKey(o.stream, o.shard), ownerKey(o)],
      [
        o.group,
        o.consumer,
        String(o.count),
        mode,
        String(o.claimIdleMs ?? 0),
        features.readClaim ? "1" : "0",
        ack?.mode ?? "",
        features.xackdel ? "1" : "0",
        ...(ack?.ids ?? []),
      ],
    ).pipe(ack === undefined ? emptyIfSealed(o, [] as Reply) : (e) => e)
    return messagesOf(reply[1], o.keyField)
  })

  const service: ShardStreams.ShardStreamsShape = {
    append: (stream, shard, fields, options = {}) =>
      Effect.suspend((): Effect.Effect<string, ShardSealed | RedisStoreError> => {
        const flat = Object.entries(fields).flat()
        if (flat.length === 0) return invalid("an entry needs at least one field (XADD)")
        const trim = options.trim
        if (
          trim !== undefined &&
          "maxLen" in trim &&
          !(Number.isSafeInteger(trim.maxLen) && trim.maxLen >= 0)
        )
          return invalid(`trim.maxLen must be a non-negative integer, got ${trim.maxLen}`)
        if (trim !== undefined && "minId" in trim && !StreamId.isValid(trim.minId))
          return invalid(`trim.minId is not a stream id: ${trim.minId}`)
        const idem = options.idempotency
        if (idem !== undefined && (idem.producerId === "" || idem.messageId === ""))
          return invalid("idempotency needs a non-empty producerId and messageId")
        return Clock.currentTimeMillis
          .pipe(
            Effect.flatMap((now) =>
              evalScript(
                connection,
                "append",
                Scripts.append,
                [
                  shardKey(stream, shard),
                  sealedKey(stream, shard),
                  idempotencyKey(stream, shard, idem?.producerId ?? ""),
                ],
                [
                  trim === undefined ? "" : "maxLen" in trim ? "MAXLEN" : "MINID",
                  trim?.approximate === true ? "~" : "=",
                  trim === undefined ? "" : "maxLen" in trim ? String(trim.maxLen) : trim.minId,
                  String(now),
                  idem?.messageId ?? "",
                  String(ShardStreams.IDEMPOTENCY_WINDOW.durationMs),
                  String(ShardStreams.IDEMPOTENCY_WINDOW.maxSize),
                  ...flat,
                ],
              ),
            ),
          )
          .pipe(
            refineNoReplicas("append", shardKey(stream, shard)),
            Effect.flatMap(
              (reply): Effect.Effect<string, ShardSealed | RedisStoreError> =>
                reply[0] === Code.Sealed
                  ? Effect.fail(new ShardSealed({ stream, shard }))
                  : // with `durability`: confirmed once the replicas have it
                    Effect.as(
                      connection.confirmReplicated("append", shardKey(stream, shard)),
                      String(reply[1]),
                    ),
            ),
          )
      }),

    setOwnerToken: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        const reply = yield* evalScript(
          connection,
          "setOwnerToken",
          Scripts.setOwnerToken,
          [ownerKey(o), shardKey(o.stream, o.shard), sealedKey(o.stream, o.shard)],
          [
            String(o.token),
            o.group,
            o.createGroup === undefined ? "" : o.createGroup ? "1" : "0",
            o.createAt === undefined || o.createAt === "start"
              ? "0"
              : o.createAt === "end"
                ? "$"
                : o.createAt,
          ],
        ).pipe(refineNoReplicas("setOwnerToken", shardKey(o.stream, o.shard)))
        if (reply[0] === Code.Regression)
          return yield* new OwnerTokenRegression({
            stream: o.stream,
            shard: o.shard,
            group: o.group,
            token: o.token,
            currentToken: Number(reply[1]),
          })
      }),

    ownerToken: (o) =>
      Effect.gen(function* () {
        const key = ownerKey(o)
        const raw = yield* keyCommand(connection, "ownerToken (GET)", key, (c) => c.get(key))
        return yield* parseToken(key, raw)
      }),

    read: (o) =>
      readBody(o).pipe(
        // XREADGROUP writes (the group's pending list), so a master short of
        // replicas refuses the read and its ack alike: nothing was read or acked
        refineNoReplicas("read", shardKey(o.stream, o.shard)),
      ),

    ack: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        yield* checkIds(o.ids)
        if (o.ids.length > 0 && (o.mode === "ack" || features.xackdel)) {
          const sticky = yield* stickyAck(o)
          if (sticky !== undefined) {
            // all acknowledged; fewer may mean the group vanished (XACK answers 0
            // for a group that is gone): the script acks the ids again and says
            if (sticky._tag === "Acked" && sticky.count === o.ids.length) return sticky.count
            if (sticky._tag === "Acked") {
              const again = yield* fenced(
                "ack",
                o,
                Scripts.ack,
                [shardKey(o.stream, o.shard), ownerKey(o)],
                [o.group, o.mode, features.xackdel ? "1" : "0", ...o.ids],
              )
              return sticky.count + Number(again[1])
            }
            if (sticky._tag === "TokenMissing")
              return yield* new OwnerTokenMissing({
                stream: o.stream,
                shard: o.shard,
                group: o.group,
                token: o.token,
              })
            if (sticky._tag === "Stale")
              return yield* new StaleOwner({
                stream: o.stream,
                shard: o.shard,
                group: o.group,
                token: o.token,
                currentToken: sticky.current,
              })
            if (sticky._tag === "Foreign")
              return yield* new ForeignValue({ key: sticky.key, message: sticky.message })
          }
        }
        const reply = yield* fenced(
          "ack",
          o,
          Scripts.ack,
          [shardKey(o.stream, o.shard), ownerKey(o)],
          [o.group, o.mode, features.xackdel ? "1" : "0", ...o.ids],
        )
        return Number(reply[1])
      }).pipe(refineNoReplicas("ack", shardKey(o.stream, o.shard))),

    nack: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        yield* checkIds([o.id])
        const reply = yield* fenced(
          "nack",
          o,
          Scripts.nack,
          [shardKey(o.stream, o.shard), ownerKey(o)],
          [o.group, o.id],
        )
        return reply[1] === 1
      }),

    setGroupPosition: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        const position = o.position === "start" ? "0-0" : o.position === "end" ? "$" : o.position
        if (position !== "$") yield* checkIds([position])
        // a seek creates the group (and the stream) where it is missing: never VANISHED
        yield* Effect.catchTag(
          fenced(
            "setGroupPosition",
            o,
            Scripts.setPosition,
            [shardKey(o.stream, o.shard), ownerKey(o)],
            [o.group, position],
          ),
          "DataLost",
          Effect.die,
        )
      }),

    claimPending: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        yield* checkPositive("count", o.count)
        yield* checkNonNegative("minIdleMs", o.minIdleMs)
        const start = o.start ?? "0-0"
        yield* checkIds([start])
        const reply = yield* fenced(
          "claimPending",
          o,
          Scripts.claimPending,
          [shardKey(o.stream, o.shard), ownerKey(o)],
          [o.group, o.consumer, String(o.minIdleMs), start, String(o.count)],
        ).pipe(emptyIfSealed(o, [Code.Ok, "0-0", [], []] as Reply))
        return {
          next: String(reply[1]),
          messages: messagesOf(reply[2]),
          deleted: (Array.isArray(reply[3]) ? reply[3] : []).map(String),
        }
      }),

    deadLetter: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        yield* checkIds([o.id])
        const reply = yield* fenced(
          "deadLetter",
          o,
          Scripts.deadLetter,
          [shardKey(o.stream, o.shard), ownerKey(o), deadLetterKey(o.stream, o.shard)],
          [
            o.group,
            o.id,
            o.reason,
            DeadLetterFields.originalId,
            DeadLetterFields.reason,
            DeadLetterFields.group,
            DeadLetterFields.deliveryCount,
          ],
        )
        return reply.length > 1 ? String(reply[1]) : undefined
      }),

    pending: (o) =>
      Effect.gen(function* () {
        const key = shardKey(o.stream, o.shard)
        const out: Array<PendingEntry> = []
        let start = "-"
        for (;;) {
          const args: Array<string | number> = [key, o.group, start, "+", PENDING_PAGE]
          if (o.consumer !== undefined) args.push(o.consumer)
          const page = yield* keyCommand(connection, "pending (XPENDING)", key, (c) =>
            (c.call("XPENDING", ...args) as Promise<Array<[string, string, number, number]>>).catch(
              (error: unknown) => {
                // no such key or group: nothing pending
                if (error instanceof Error && error.message.startsWith("NOGROUP")) return []
                throw error
              },
            ),
          )
          for (const [id, consumer, idleMs, deliveryCount] of page)
            out.push({ id, consumer, idleMs: Number(idleMs), deliveryCount: Number(deliveryCount) })
          if (page.length < PENDING_PAGE) return out
          start = `(${page[page.length - 1]![0]}`
        }
      }),

    info: (stream, shard) =>
      Effect.gen(function* () {
        const key = shardKey(stream, shard)
        const raw = yield* keyCommand(connection, "info (XINFO STREAM)", key, (c) =>
          c.call("XINFO", "STREAM", key).catch((error: unknown) => {
            if (error instanceof Error && /no such key/i.test(error.message)) return null
            throw error
          }),
        )
        if (raw === null) return { length: 0, lastId: "0-0", groups: [] }
        const streamInfo = pairsOf(raw)
        const groupsRaw = yield* keyCommand(connection, "info (XINFO GROUPS)", key, (c) =>
          c.call("XINFO", "GROUPS", key),
        )
        const groups: Array<GroupInfo> = []
        for (const g of Array.isArray(groupsRaw) ? groupsRaw : []) {
          const info = pairsOf(g)
          const name = String(info.get("name"))
          const consumersRaw = yield* keyCommand(connection, "info (XINFO CONSUMERS)", key, (c) =>
            c.call("XINFO", "CONSUMERS", key, name),
          )
          const owner = ownerTokenKey(stream, shard, name)
          const token = yield* keyCommand(connection, "info (GET owner)", owner, (c) =>
            c.get(owner),
          ).pipe(Effect.flatMap((t) => parseToken(owner, t)))
          groups.push({
            name,
            lastDeliveredId: String(info.get("last-delivered-id")),
            pending: Number(info.get("pending")),
            consumers: (Array.isArray(consumersRaw) ? consumersRaw : [])
              .map((c) => String(pairsOf(c).get("name")))
              .sort(),
            ownerToken: token,
            ...(typeof info.get("entries-read") === "number"
              ? { entriesRead: info.get("entries-read") as number }
              : {}),
          })
        }
        return {
          length: Number(streamInfo.get("length")),
          lastId: String(streamInfo.get("last-generated-id")),
          groups,
        }
      }),

    // a key as core's helpers name it (`ShardStreams.shardKey`, `deadLetterKey`): in the namespace
    range: (logical) => {
      const key = connection.keys.namespaced(logical)
      return keyCommand(connection, "range (XRANGE)", key, (c) => c.xrange(key, "-", "+")).pipe(
        Effect.map((entries) => entries.map(([id, flat]) => ({ id, fields: fieldsOf(flat) }))),
      )
    },

    waitForEntries: (o) =>
      Effect.gen(function* () {
        const key = shardKey(o.stream, o.shard)
        let after = o.afterId
        if (after !== undefined && !StreamId.isValid(after))
          return yield* invalid(`afterId is not a stream id: ${after}`)
        if (after === undefined) {
          // the group's last-delivered id ("0-0" without the stream or the group): one
          // XINFO GROUPS, no script (docs/redis.md, "Idle shards": an idle wait is two
          // commands, one with afterId)
          const groups = yield* keyCommand(connection, "waitForEntries (XINFO GROUPS)", key, (c) =>
            c.call("XINFO", "GROUPS", key).catch((error: unknown) => {
              if (error instanceof Error && /no such key/i.test(error.message)) return []
              throw error
            }),
          )
          after = "0-0"
          for (const g of Array.isArray(groups) ? groups : []) {
            const info = pairsOf(g)
            if (String(info.get("name")) === o.group) after = String(info.get("last-delivered-id"))
          }
        }
        const from = after
        const block = Math.max(1, Math.ceil(o.timeoutMs))
        // entries after `from` already there: XREAD returns at once; an entry
        // appended after the lookup has an id above `from`: XREAD sees it
        if (idleWaits !== undefined)
          return yield* refineWrongType(key)(
            Effect.tryPromise({
              try: (signal) => idleWaits.wait(key, from, block, signal),
              catch: (cause) => RedisConnection.unavailable("waitForEntries (XREAD BLOCK)", cause),
            }),
          )
        const reply = yield* refineWrongType(key)(
          connection.blocking(
            "waitForEntries (XREAD BLOCK)",
            (c) => c.xread("COUNT", 1, "BLOCK", block, "STREAMS", key, from),
            // in a cluster: on a connection to the node of the key's slot
            key,
          ),
        )
        return reply !== null && reply.length > 0
      }),

    seal: (stream, shard) =>
      Effect.asVoid(evalScript(connection, "seal", Scripts.seal, [sealedKey(stream, shard)], [])),

    drainState: (o) =>
      Effect.map(
        evalScript(
          connection,
          "drainState",
          Scripts.drainState,
          [
            shardKey(o.stream, o.shard),
            sealedKey(o.stream, o.shard),
            connection.keys.outboxKey(o.stream, o.shard, o.group),
          ],
          [o.group],
        ),
        (reply): ShardStreams.DrainState => {
          const sealed = Number(reply[1]) === 1
          const undelivered = Number(reply[2])
          const pending = Number(reply[3])
          const relaying = Number(reply[4]) === 1
          // `relaying` only when true: the port's answer is the memory port's otherwise
          return {
            sealed,
            undelivered,
            pending,
            ...(relaying ? { relaying } : {}),
            drained: sealed && undelivered === 0 && pending === 0 && !relaying,
          }
        },
      ),

    retireShard: (stream, shard, groups) =>
      Effect.asVoid(
        evalScript(
          connection,
          "retireShard",
          Scripts.retireShard,
          [
            shardKey(stream, shard),
            ...groups.map((g) => ownerTokenKey(stream, shard, g)),
            ...groups.flatMap((g) => [
              connection.keys.outboxKey(stream, shard, g),
              connection.keys.outboxRoutesKey(stream, shard, g),
            ]),
          ],
          [String(groups.length)],
        ),
      ),

    transactions: makeTransactions(
      connection,
      options.transactionSends === undefined ? {} : { sends: options.transactionSends },
      // a commit rides the shard's next read on the gated reader's wire
      gatedReader === undefined
        ? undefined
        : {
            usable: () => gatedReader.usable(),
            commitRead: (read, keys, args) => gatedReader.commitRead(read, keys, args),
          },
    ),
  }
  return service
}

/** ShardStreams on the `RedisConnection` in context. */
export const make: Effect.Effect<
  ShardStreams.ShardStreamsShape,
  never,
  RedisConnection.RedisConnection
> = RedisConnection.RedisConnection.useSync((connection) => makeWith(connection))

/** `ShardStreams` on the `RedisConnection` in context. */
export const layerFromConnection: Layer.Layer<
  ShardStreams.ShardStreams,
  never,
  RedisConnection.RedisConnection
> = Layer.effect(ShardStreams.ShardStreams, make)

export const layerFromConnectionWith = (
  options: ShardStreamsOptions = {},
): Layer.Layer<ShardStreams.ShardStreams, never, RedisConnection.RedisConnection> =>
  Layer.effect(
    ShardStreams.ShardStreams,
    RedisConnection.RedisConnection.useSync((connection) => makeWith(connection, options)),
  )

/** `ShardStreams` on a connection of its own (closed with the layer). */
export const layer = (
  options: RedisConnection.RedisConnectionOptions,
): Layer.Layer<ShardStreams.ShardStreams, RedisConnection.ConnectError> =>
  layerFromConnection.pipe(Layer.provide(RedisConnection.layer(options)))
