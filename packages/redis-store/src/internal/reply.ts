/** Decoding script replies and ioredis errors into typed errors. */

import {
  type BackendUnavailable,
  DataLost,
  ForeignValue,
  NotEnoughReplicas,
  OwnerTokenMissing,
  ShardStreams,
  StaleOwner,
} from "@shardline/core"
import { Effect } from "effect"
import type { Client, RedisConnectionShape } from "../RedisConnection.js"
import { unavailable } from "../RedisConnection.js"
import { runScript, type Script } from "../scripts.js"

export type Reply = ReadonlyArray<unknown>

/** ok; the other codes are listed in src/lua/prelude.lua. */
export const Code = {
  Ok: 0,
  Stale: 1,
  Foreign: 2,
  Regression: 3,
  Held: 4,
  Lost: 5,
  Unavailable: 6,
  Replaced: 7,
  Sealed: 8,
  Unexpected: 9,
  NotPending: 10,
  Refused: 11,
  /** No owner token for the (shard, group): every token is refused (docs/protocol.md rule 26). */
  TokenMissing: 12,
  /** Under a token that holds, the group's consumer group or the shard's stream is gone. */
  Vanished: 13,
} as const

/**
 * Runs a script and fails with ForeignValue (code 2) or BackendUnavailable
 * (code 9, or a reply that is not a coded table); other codes are the caller's.
 */
export const evalScript = (
  connection: RedisConnectionShape,
  operation: string,
  script: Script,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
): Effect.Effect<Reply, BackendUnavailable | ForeignValue> =>
  Effect.flatMap(
    connection.command(operation, (c) => runScript(c, script, keys, args)),
    (raw): Effect.Effect<Reply, BackendUnavailable | ForeignValue> => {
      const failure = scriptFailure(operation, raw)
      return failure === undefined ? Effect.succeed(raw as Reply) : Effect.fail(failure)
    },
  )

/** What evalScript fails with for a script's raw reply; undefined when the caller judges the code. */
export const scriptFailure = (
  operation: string,
  raw: unknown,
): BackendUnavailable | ForeignValue | undefined => {
  if (!Array.isArray(raw) || typeof raw[0] !== "number")
    return unavailable(operation, new Error(`unexpected reply: ${JSON.stringify(raw)}`))
  if (raw[0] === Code.Foreign)
    return new ForeignValue({ key: String(raw[1]), message: String(raw[2]) })
  if (raw[0] === Code.Unexpected) return unavailable(operation, new Error(String(raw[1])))
  return undefined
}

/** A WRONGTYPE reply on `key` is a ForeignValue; anything else stays BackendUnavailable. */
export const refineWrongType =
  (key: string) =>
  <A, R>(
    effect: Effect.Effect<A, BackendUnavailable, R>,
  ): Effect.Effect<A, BackendUnavailable | ForeignValue, R> =>
    Effect.catchTag(
      effect,
      "BackendUnavailable",
      (error): Effect.Effect<never, BackendUnavailable | ForeignValue> =>
        error.message.startsWith("WRONGTYPE")
          ? Effect.fail(new ForeignValue({ key, message: error.message }))
          : Effect.fail(error),
    )

/**
 * A write the master refused with NOREPLICAS (`min-replicas-to-write`: too
 * few replicas connected; docs/redis.md, "`min-replicas-to-write`") as
 * `NotEnoughReplicas`; undefined for any other failure. `error` is a
 * `BackendUnavailable` or a raw ioredis error (a MULTI's refused command, a
 * script's `redis.call`).
 */
export const noReplicasOf = (
  operation: string,
  key: string,
  error: unknown,
): NotEnoughReplicas | undefined => {
  const message =
    typeof error === "object" && error !== null && "message" in error
      ? String((error as { message: unknown }).message)
      : ""
  return message.includes("NOREPLICAS")
    ? new NotEnoughReplicas({
        operation,
        key,
        message: `${operation} on ${key} refused: the master has fewer replicas than its min-replicas-to-write (NOREPLICAS); nothing was written, retry once its replicas are back (docs/redis.md, "min-replicas-to-write"): ${message}`,
      })
    : undefined
}

/**
 * A write the master refused with NOREPLICAS is `NotEnoughReplicas`:
 * nothing was written, unlike `NotReplicated` (written on the master, not
 * confirmed by its replicas). A script's first write is the one refused,
 * and every check comes before it, so the refused call changed nothing; a
 * MULTI with a refused command is discarded whole (EXECABORT). Anything
 * else stays as it was.
 */
export const refineNoReplicas =
  (operation: string, key: string) =>
  <A, E, R>(
    effect: Effect.Effect<A, E | BackendUnavailable, R>,
  ): Effect.Effect<A, E | BackendUnavailable | NotEnoughReplicas, R> =>
    Effect.catchIf(
      effect,
      (e): e is BackendUnavailable =>
        typeof e === "object" &&
        e !== null &&
        (e as { _tag?: unknown })._tag === "BackendUnavailable" &&
        noReplicasOf(operation, key, e) !== undefined,
      (e) => Effect.fail(noReplicasOf(operation, key, e)!),
    )

/**
 * The error a refused MULTI stands for: EXEC's EXECABORT says only that a
 * queued command was refused, so the first refused command's own error
 * (NOREPLICAS, OOM, NOPERM, ...) is the one to report; any other EXEC error
 * as it is. `res` holds the `[error, reply]` pairs of a pipeline.
 */
export const execFailure = (
  res: ReadonlyArray<readonly [Error | null, unknown]>,
  execError: Error,
): Error => {
  if (!execError.message.startsWith("EXECABORT")) return execError
  const queued = res.find(([e]) => e !== null && e !== execError)?.[0]
  return queued ?? execError
}

/** A command on the command connection, WRONGTYPE on `key` refined to ForeignValue. */
export const keyCommand = <A>(
  connection: RedisConnectionShape,
  operation: string,
  key: string,
  run: (client: Client) => Promise<A>,
): Effect.Effect<A, BackendUnavailable | ForeignValue> =>
  refineWrongType(key)(connection.command(operation, run))

/** Flat `[field, value, ...]` to a record (a later duplicate field wins). */
export const fieldsOf = (flat: unknown): Record<string, string> => {
  const out: Record<string, string> = {}
  if (Array.isArray(flat))
    for (let i = 0; i + 1 < flat.length; i += 2)
      ShardStreams.setField(out, String(flat[i]), String(flat[i + 1]))
  return out
}

/** Flat `[name, value, ...]` (XINFO) to a map. */
export const pairsOf = (flat: unknown): Map<string, unknown> => {
  const out = new Map<string, unknown>()
  if (!Array.isArray(flat)) return out
  for (let i = 0; i + 1 < flat.length; i += 2) out.set(String(flat[i]), flat[i + 1])
  return out
}

/**
 * One message from its id and flat `[name, value, ...]` fields, in one pass;
 * with `keyField` (`ReadOptions.keyField`) that field goes to `key` instead
 * of `fields`.
 */
export const messageOf = (
  id: unknown,
  flat: unknown,
  deliveryCount: number,
  keyField: string | undefined,
): ShardStreams.StreamMessage => {
  if (keyField === undefined) return { id: String(id), fields: fieldsOf(flat), deliveryCount }
  const fields: Record<string, string> = {}
  let key: string | undefined
  if (Array.isArray(flat))
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const name = String(flat[i])
      if (name === keyField) key = String(flat[i + 1])
      else ShardStreams.setField(fields, name, String(flat[i + 1]))
    }
  return { id: String(id), fields, deliveryCount, key }
}

/** XREADGROUP's reply (`[[key, [[id, [field, value, ...]], ...]]]` or null) as messages, each delivered once. */
export const xreadMessages = (
  reply: unknown,
  keyField?: string,
): Array<ShardStreams.StreamMessage> => {
  const entries = Array.isArray(reply) && Array.isArray(reply[0]) ? reply[0][1] : []
  return (Array.isArray(entries) ? entries : []).map((e: [string, Array<string>]) =>
    messageOf(e[0], e[1], 1, keyField),
  )
}

/**
 * A fenced script's refusal: STALE (`StaleOwner`), TOKEN MISSING
 * (`OwnerTokenMissing`) or VANISHED (`DataLost`); undefined otherwise
 * (docs/protocol.md rule 26).
 */
export const fenceFailure = (
  address: ShardStreams.FencedAddress,
  reply: ReadonlyArray<unknown>,
): StaleOwner | OwnerTokenMissing | DataLost | undefined => {
  const { stream, shard, group, token } = address
  if (reply[0] === Code.Stale)
    return new StaleOwner({ stream, shard, group, token, currentToken: Number(reply[1]) })
  if (reply[0] === Code.TokenMissing) return new OwnerTokenMissing({ stream, shard, group, token })
  if (reply[0] === Code.Vanished)
    return new DataLost({ stream, shard, group, what: reply[1] === "stream" ? "stream" : "group" })
  return undefined
}
