/**
 * Transactions on Redis (docs/exactly-once.md): `ShardStreams.transactions`
 * of the Redis `ShardStreams`.
 *
 * - `commit` is ONE Lua script (src/lua/commit.lua) over the shard's
 *   stream, its owner token, the group's outbox and every key the
 *   transaction writes: the owner token first, then every message still
 *   pending in the group, then every write checked against the keys as the
 *   writes before it leave them, and only then the writes, the sends and the
 *   ack. A refused commit changed nothing.
 * - One node: any key the application owns; sends land in their target
 *   shard inside the script (`direct`; a sealed target refuses the commit).
 * - Redis Cluster: a script runs on one node, on keys of one slot. Writes
 *   must be in the shard's slot (`keys(stream, shard).key(name)` builds such
 *   keys; anything else is refused with `KeyOutsideSlot` at the call); sends
 *   go to the shard's outbox `{<stream>:<shard>}:outbox:<group>` in the same
 *   script and are relayed by the runtime (`outbox`: read, deliver with a
 *   per-(outbox, target shard) mark checked before the seal, re-route once
 *   after a seal, remove), so each lands exactly once.
 */
import {
  type DataPlaneError,
  ForeignValue,
  InvalidArgument,
  InvalidEntryId,
  ShardSealed,
  Transaction,
  TransactionRefused,
  TransactionRefusedReason,
} from "@shardline/core"
import { Effect, Schema } from "effect"
import { keySlot } from "./acl.js"
import { Code, evalScript, fenceFailure, keyCommand } from "./internal/reply.js"
import * as StreamId from "./internal/streamId.js"
import type { KeySpace } from "./keys.js"
import type { RedisConnectionShape } from "./RedisConnection.js"
import { Scripts } from "./scripts.js"

export interface TransactionsOptions {
  /**
   * Where sends land: `direct` (default on one node: in the target shard,
   * inside the commit) or `outbox` (always in a cluster: the shard's outbox,
   * relayed). `outbox` on one node is for tests of the relay.
   */
  readonly sends?: "direct" | "outbox"
}

const reserved = (key: string) =>
  new TransactionRefused({
    reason: "ReservedKey",
    message: `${key} is one of Shardline's own keys`,
    key,
  })

/** The key rules of one node: any key but Shardline's own (those of the namespace but its data keys). */
const nodeRules =
  (keys: KeySpace) =>
  (stream: string, shard: number): Transaction.KeyRules => ({
    key: (name) => keys.dataKey(stream, shard, name),
    check: (key) => (keys.isShardlineKey(key) ? reserved(key) : undefined),
  })

/** The key rules of a cluster: the application's keys of the shard's hash slot. */
const slotRules =
  (keys: KeySpace) =>
  (stream: string, shard: number): Transaction.KeyRules => {
    const slot = keySlot(keys.shardKey(stream, shard))
    return {
      key: (name) => keys.dataKey(stream, shard, name),
      check: (key) => {
        if (keys.isShardlineKey(key)) return reserved(key)
        const at = keySlot(key)
        return at === slot
          ? undefined
          : new TransactionRefused({
              reason: "KeyOutsideSlot",
              message: `${key} is in hash slot ${at}, not in slot ${slot} of shard ${shard} of ${stream}: in a Redis Cluster a transaction writes only its shard's slot (build the key with the transaction's key(name), or put {${stream}:${shard}} in it as its hash tag)`,
              key,
            })
      },
    }
  }

const decodeReason = Schema.decodeUnknownOption(TransactionRefusedReason)

/** The flat field list of a send as the target entry holds it: its fields, then the routing key. */
const sendFields = (fields: Transaction.Send["fields"], key: string): Array<string> => {
  const flat: Array<string> = []
  for (const name of Object.keys(fields)) flat.push(name, fields[name]!)
  flat.push(Transaction.SEND_KEY_FIELD, key)
  return flat
}

export const makeTransactions = (
  connection: RedisConnectionShape,
  options: TransactionsOptions = {},
): Transaction.TransactionsShape => {
  const { features } = connection
  const sends: "direct" | "outbox" = connection.isCluster ? "outbox" : (options.sends ?? "direct")
  const { outboxKey, outboxRoutesKey, ownerTokenKey, relayMarkKey, sealedKey, shardKey } =
    connection.keys
  const keys = connection.isCluster ? slotRules(connection.keys) : nodeRules(connection.keys)

  const commit = (
    o: Transaction.CommitOptions,
  ): Effect.Effect<Transaction.CommitOutcome, Transaction.CommitError> =>
    Effect.suspend(() => {
      if (!Number.isSafeInteger(o.token) || o.token < 0)
        return Effect.fail(new InvalidArgument({ message: `bad owner token ${o.token}` }))
      if (o.ids.length === 0)
        return Effect.fail(new InvalidArgument({ message: "a commit covers at least one message" }))
      for (const id of o.ids)
        if (!StreamId.isValid(id)) return Effect.fail(new InvalidEntryId({ id }))
      const checked = Transaction.checkCommit(o)
      if (Transaction.isRefusal(checked)) return Effect.fail(checked)
      const rules = keys(o.stream, o.shard)
      const stream = shardKey(o.stream, o.shard)
      const scriptKeys = [
        stream,
        ownerTokenKey(o.stream, o.shard, o.group),
        outboxKey(o.stream, o.shard, o.group),
      ]
      const index = new Map<string, number>(scriptKeys.map((k, i) => [k, i + 1]))
      const keyIndex = (key: string): string => {
        let at = index.get(key)
        if (at === undefined) {
          scriptKeys.push(key)
          at = scriptKeys.length
          index.set(key, at)
        }
        return String(at)
      }
      const args: Array<string> = [
        String(o.token),
        o.group,
        o.mode,
        features.xackdel ? "1" : "0",
        sends,
        String(o.ids.length),
        ...o.ids,
        String(checked.writes.length),
      ]
      for (const w of checked.writes) {
        const writeKeys = Transaction.keysOf(w)
        for (const key of writeKeys) {
          const refusal = rules.check(key)
          if (refusal !== undefined) return Effect.fail(refusal)
        }
        args.push(w.command, String(writeKeys.length))
        for (const key of writeKeys) args.push(keyIndex(key))
        const rest = w.args.slice(writeKeys.length)
        args.push(String(rest.length), ...rest)
      }
      args.push(String(checked.sends.length))
      for (const s of checked.sends) {
        if (sends === "direct")
          args.push(keyIndex(shardKey(s.stream, s.shard)), keyIndex(sealedKey(s.stream, s.shard)))
        else args.push("0", "0")
        const flat = Object.entries(s.fields).flat()
        args.push(s.stream, String(s.shard), s.key, String(flat.length), ...flat)
      }
      return Effect.flatMap(
        evalScript(connection, "commit", Scripts.commit, scriptKeys, args),
        (reply): Effect.Effect<Transaction.CommitOutcome, Transaction.CommitError> => {
          switch (reply[0]) {
            case Code.Ok:
              // with `durability`: confirmed once the replicas have it (a retry
              // finds it AlreadyCommitted and waits for them again)
              return Effect.as(
                connection.confirmReplicated("commit", stream),
                Number(reply[1]) === 1
                  ? ({ _tag: "Committed" } as const)
                  : ({ _tag: "AlreadyCommitted" } as const),
              )
            case Code.NotPending:
              return Effect.succeed({ _tag: "NotPending", ids: reply.slice(1).map(String) })
            case Code.Stale:
            case Code.TokenMissing:
            case Code.Vanished:
              // refused by the fence, or the group / stream vanished (docs/protocol.md rule 26)
              return Effect.fail(fenceFailure(o, reply)!)
            case Code.Sealed: {
              const send = checked.sends[Number(reply[1])]!
              return Effect.fail(new ShardSealed({ stream: send.stream, shard: send.shard }))
            }
            case Code.Refused: {
              const at = Number(reply[1])
              const reason = decodeReason(reply[2])
              return Effect.fail(
                new TransactionRefused({
                  reason: reason._tag === "Some" ? reason.value : "InvalidArguments",
                  message: `${checked.writes[at]?.command ?? "?"} ${String(reply[3])}: ${String(reply[4])}`,
                  command: checked.writes[at]?.command ?? "?",
                  key: String(reply[3]),
                  index: at,
                }),
              )
            }
            default:
              return Effect.fail(
                new InvalidArgument({
                  message: `commit: unexpected reply ${JSON.stringify(reply)}`,
                }),
              )
          }
        },
      )
    })

  const read = (key: string): Effect.Effect<Transaction.KeyValue | undefined, DataPlaneError> =>
    Effect.gen(function* () {
      const type = yield* keyCommand(connection, "read (TYPE)", key, (c) => c.type(key))
      switch (type) {
        case "none":
          return undefined
        case "string": {
          const value = yield* keyCommand(connection, "read (GET)", key, (c) => c.get(key))
          return value === null ? undefined : { type: "string", value }
        }
        case "hash":
          return {
            type: "hash",
            value: yield* keyCommand(connection, "read (HGETALL)", key, (c) => c.hgetall(key)),
          }
        case "set":
          return {
            type: "set",
            value: [
              ...(yield* keyCommand(connection, "read (SMEMBERS)", key, (c) => c.smembers(key))),
            ].sort(),
          }
        case "zset": {
          const flat = yield* keyCommand(connection, "read (ZRANGE)", key, (c) =>
            c.zrange(key, 0, -1, "WITHSCORES"),
          )
          const value: Array<readonly [string, number]> = []
          for (let i = 0; i + 1 < flat.length; i += 2) value.push([flat[i]!, Number(flat[i + 1])])
          return { type: "zset", value }
        }
        case "list":
          return {
            type: "list",
            value: yield* keyCommand(connection, "read (LRANGE)", key, (c) => c.lrange(key, 0, -1)),
          }
        default:
          return yield* new ForeignValue({
            key,
            message: `holds a ${type}, not a value a transaction writes`,
          })
      }
    })

  const outbox: Transaction.OutboxShape = {
    read: (source, count) =>
      Effect.map(
        evalScript(
          connection,
          "outbox (read)",
          Scripts.outboxRead,
          [
            outboxKey(source.stream, source.shard, source.group),
            outboxRoutesKey(source.stream, source.shard, source.group),
          ],
          [String(Math.max(1, Math.floor(count)))],
        ),
        (reply) =>
          (Array.isArray(reply[1]) ? reply[1] : []).map(
            (e: [string, Array<string>, string]): Transaction.OutboxEntry => {
              const [id, flat, route] = e
              const fields: Record<string, string> = {}
              for (let i = 6; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!
              return {
                id: String(id),
                stream: String(flat[1]),
                shard: Number(route),
                key: String(flat[5]),
                fields,
              }
            },
          ),
      ),
    deliver: (source, entry) =>
      Effect.flatMap(
        evalScript(
          connection,
          "outbox (deliver)",
          Scripts.outboxDeliver,
          [
            shardKey(entry.stream, entry.shard),
            sealedKey(entry.stream, entry.shard),
            relayMarkKey(entry.stream, entry.shard, source),
          ],
          [entry.id, ...sendFields(entry.fields, entry.key)],
        ),
        (reply): Effect.Effect<"appended" | "duplicate", ShardSealed | DataPlaneError> =>
          reply[0] === Code.Sealed
            ? Effect.fail(new ShardSealed({ stream: entry.stream, shard: entry.shard }))
            : // with `durability`: delivered once the target's replicas have it, as a send
              // is; the relay removes the outbox entry only then, so a target master lost
              // before it replicated the delivery cannot take the send with it (a
              // NotReplicated delivery is delivered again; its relay mark dedupes)
              Effect.as(
                connection.confirmReplicated(
                  "outbox (deliver)",
                  shardKey(entry.stream, entry.shard),
                ),
                Number(reply[1]) === 1 ? ("appended" as const) : ("duplicate" as const),
              ),
      ),
    reroute: (source, id, from, to) =>
      Effect.map(
        evalScript(
          connection,
          "outbox (reroute)",
          Scripts.outboxReroute,
          [
            outboxKey(source.stream, source.shard, source.group),
            outboxRoutesKey(source.stream, source.shard, source.group),
          ],
          [id, String(from), String(to)],
        ),
        // -1: the entry is gone (outbox-reroute.lua), never a shard
        (reply) => (Number(reply[1]) < 0 ? "gone" : Number(reply[1])),
      ),
    remove: (source, ids) =>
      ids.length === 0
        ? Effect.void
        : Effect.asVoid(
            evalScript(
              connection,
              "outbox (remove)",
              Scripts.outboxRemove,
              [
                outboxKey(source.stream, source.shard, source.group),
                outboxRoutesKey(source.stream, source.shard, source.group),
              ],
              [...ids],
            ),
          ),
    size: (source) => {
      const key = outboxKey(source.stream, source.shard, source.group)
      return keyCommand(connection, "outbox (XLEN)", key, (c) => c.xlen(key))
    },
  }

  return {
    sends,
    keys,
    commit,
    read,
    ...(sends === "outbox" ? { outbox } : {}),
  }
}
