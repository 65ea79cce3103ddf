/**
 * ShardStreams on Redis: the data plane (docs/redis.md, "ShardStreams").
 *
 * Each fenced operation (read, ack, nack, claimPending, deadLetter) and
 * setOwnerToken is ONE Lua script over keys of the shard's hash slot:
 * `{<stream>:<shard>}`, `{<stream>:<shard>}:owner:<group>`,
 * `{<stream>:<shard>}:dlq`. The script checks the group's owner token and
 * the keys' types before its first write, so a refused call changes nothing.
 *
 * `append` is a script too: it refuses a shard sealed by a reshard
 * (`{<stream>:<shard>}:sealed`, written by `seal`) with `ShardSealed`.
 * `drainState` reads seal, lag and pending in one script; `retireShard`
 * deletes the shard stream and the named groups' owner tokens, keeping the
 * seal marker (late producers are still refused) and the dead-letter stream.
 *
 * Native commands where the server has them (probed once by
 * RedisConnection): XACKDEL (Redis >= 8.2) for `xackdel`, XREADGROUP ...
 * CLAIM (Redis >= 8.4) for the takeover read; Lua XACK+XDEL and XAUTOCLAIM
 * otherwise. Redis refuses BLOCK inside Lua, so an idle shard waits with
 * `waitForEntries`: a blocking XREAD on a dedicated connection.
 */
import {
  type BackendUnavailable,
  type DataPlaneError,
  ForeignValue,
  InvalidArgument,
  InvalidEntryId,
  OwnerTokenRegression,
  ShardSealed,
  ShardStreams,
  StaleOwner,
} from "@shardline/core"
import { Effect, Layer } from "effect"
import {
  Code,
  evalScript,
  fieldsOf,
  keyCommand,
  pairsOf,
  refineWrongType,
} from "./internal/reply.js"
import * as StreamId from "./internal/streamId.js"
import { deadLetterKey, ownerTokenKey, sealedKey, shardKey } from "./keys.js"
import * as RedisConnection from "./RedisConnection.js"
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

const messagesOf = (raw: unknown): Array<StreamMessage> =>
  (Array.isArray(raw) ? raw : []).map((m: ReadonlyArray<unknown>) => ({
    id: String(m[0]),
    fields: fieldsOf(m[1]),
    deliveryCount: Number(m[2]),
  }))

const compareIds = (a: string, b: string): number => {
  const [am, as] = a.split("-").map(BigInt) as [bigint, bigint]
  const [bm, bs] = b.split("-").map(BigInt) as [bigint, bigint]
  return am !== bm ? (am < bm ? -1 : 1) : as === bs ? 0 : as < bs ? -1 : 1
}

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
export const makeWith = (
  connection: RedisConnection.RedisConnectionShape,
): ShardStreams.ShardStreamsShape => {
  const { features } = connection

  /** Runs a fenced script; StaleOwner on code 1. */
  const fenced = (
    operation: string,
    address: FencedAddress,
    script: (typeof Scripts)[keyof typeof Scripts],
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
  ) =>
    Effect.flatMap(
      evalScript(connection, operation, script, keys, [String(address.token), ...args]),
      (reply) =>
        reply[0] === Code.Stale
          ? Effect.fail(
              new StaleOwner({
                stream: address.stream,
                shard: address.shard,
                group: address.group,
                token: address.token,
                currentToken: Number(reply[1]),
              }),
            )
          : Effect.succeed(reply),
    )

  const ownerKey = (a: { stream: string; shard: number; group: string }) =>
    ownerTokenKey(a.stream, a.shard, a.group)

  const service: ShardStreams.ShardStreamsShape = {
    append: (stream, shard, fields) =>
      Effect.suspend((): Effect.Effect<string, ShardSealed | RedisStoreError> => {
        const flat = Object.entries(fields).flat()
        if (flat.length === 0) return invalid("an entry needs at least one field (XADD)")
        return evalScript(
          connection,
          "append",
          Scripts.append,
          [shardKey(stream, shard), sealedKey(stream, shard)],
          flat,
        ).pipe(
          Effect.flatMap((reply) =>
            reply[0] === Code.Sealed
              ? Effect.fail(new ShardSealed({ stream, shard }))
              : Effect.succeed(String(reply[1])),
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
          [ownerKey(o)],
          [String(o.token)],
        )
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
      Effect.gen(function* () {
        yield* checkToken(o.token)
        yield* checkPositive("count", o.count)
        const claim = o.claimIdleMs !== undefined && o.from !== "pending"
        if (claim) yield* checkNonNegative("claimIdleMs", o.claimIdleMs!)
        const mode = o.from === "pending" ? "pending" : claim ? "claim" : "new"
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
          ],
        )
        return messagesOf(reply[1])
      }),

    ack: (o) =>
      Effect.gen(function* () {
        yield* checkToken(o.token)
        yield* checkIds(o.ids)
        const reply = yield* fenced(
          "ack",
          o,
          Scripts.ack,
          [shardKey(o.stream, o.shard), ownerKey(o)],
          [o.group, o.mode, features.xackdel ? "1" : "0", ...o.ids],
        )
        return Number(reply[1])
      }),

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
        )
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
          })
        }
        return {
          length: Number(streamInfo.get("length")),
          lastId: String(streamInfo.get("last-generated-id")),
          groups,
        }
      }),

    range: (key) =>
      keyCommand(connection, "range (XRANGE)", key, (c) => c.xrange(key, "-", "+")).pipe(
        Effect.map((entries) => entries.map(([id, flat]) => ({ id, fields: fieldsOf(flat) }))),
      ),

    waitForEntries: (o) =>
      Effect.gen(function* () {
        const key = shardKey(o.stream, o.shard)
        let after = o.afterId
        if (after !== undefined && !StreamId.isValid(after))
          return yield* invalid(`afterId is not a stream id: ${after}`)
        if (after === undefined) {
          // entries after the group's last-delivered id already there: no wait
          const reply = yield* evalScript(
            connection,
            "waitForEntries",
            Scripts.lastDelivered,
            [key],
            [o.group],
          )
          const lastDelivered = String(reply[1])
          if (compareIds(String(reply[2]), lastDelivered) > 0) return true
          after = lastDelivered
        }
        const from = after
        const block = Math.max(1, Math.ceil(o.timeoutMs))
        // an entry appended after the check has an id above `from`: XREAD sees it
        const reply = yield* refineWrongType(key)(
          connection.blocking("waitForEntries (XREAD BLOCK)", (c) =>
            c.xread("COUNT", 1, "BLOCK", block, "STREAMS", key, from),
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
          [shardKey(o.stream, o.shard), sealedKey(o.stream, o.shard)],
          [o.group],
        ),
        (reply): ShardStreams.DrainState => {
          const sealed = Number(reply[1]) === 1
          const undelivered = Number(reply[2])
          const pending = Number(reply[3])
          return {
            sealed,
            undelivered,
            pending,
            drained: sealed && undelivered === 0 && pending === 0,
          }
        },
      ),

    retireShard: (stream, shard, groups) =>
      Effect.asVoid(
        evalScript(
          connection,
          "retireShard",
          Scripts.retireShard,
          [shardKey(stream, shard), ...groups.map((g) => ownerTokenKey(stream, shard, g))],
          [],
        ),
      ),
  }
  return service
}

/** ShardStreams on the `RedisConnection` in context. */
export const make: Effect.Effect<
  ShardStreams.ShardStreamsShape,
  never,
  RedisConnection.RedisConnection
> = RedisConnection.RedisConnection.useSync(makeWith)

/** `ShardStreams` on the `RedisConnection` in context. */
export const layerFromConnection: Layer.Layer<
  ShardStreams.ShardStreams,
  never,
  RedisConnection.RedisConnection
> = Layer.effect(ShardStreams.ShardStreams, make)

/** `ShardStreams` on a connection of its own (closed with the layer). */
export const layer = (
  options: RedisConnection.RedisConnectionOptions,
): Layer.Layer<ShardStreams.ShardStreams, BackendUnavailable> =>
  layerFromConnection.pipe(Layer.provide(RedisConnection.layer(options)))
