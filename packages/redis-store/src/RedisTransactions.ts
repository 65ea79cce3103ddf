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
  type ShardStreams,
  Transaction,
  TransactionRefused,
  TransactionRefusedReason,
} from "@shardline/core"
import { Effect, Schema } from "effect"
import { keySlot } from "./acl.js"
import type { CommitRead } from "./internal/gatedRead.js"
import {
  Code,
  evalScript,
  fenceFailure,
  keyCommand,
  type Reply,
  refineNoReplicas,
  scriptFailure,
} from "./internal/reply.js"
import * as StreamId from "./internal/streamId.js"
import type { KeySpace } from "./keys.js"
import { type RedisConnectionShape, unavailable } from "./RedisConnection.js"
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
  (stream: string, shard: number): Transaction.KeyRules =>
    Transaction.rememberingLast({
      key: (name) => keys.dataKey(stream, shard, name),
      check: (key) => (keys.isShardlineKey(key) ? reserved(key) : undefined),
    })

/** The key rules of a cluster: the application's keys of the shard's hash slot. */
const slotRules =
  (keys: KeySpace) =>
  (stream: string, shard: number): Transaction.KeyRules => {
    const slot = keySlot(keys.shardKey(stream, shard))
    return Transaction.rememberingLast({
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
    })
  }

/**
 * `make`'s rules, made once per shard: they are functions of the shard
 * alone, so every turn of the member and every commit of the storage share
 * them (no closures and no hash slot computed per batch; what
 * `rememberingLast` remembers lasts from one batch to the next). One small
 * entry per stream and shard this storage ever commits for.
 */
const oncePerShard = (
  make: (stream: string, shard: number) => Transaction.KeyRules,
): ((stream: string, shard: number) => Transaction.KeyRules) => {
  const made = new Map<string, Map<number, Transaction.KeyRules>>()
  return (stream, shard) => {
    let byShard = made.get(stream)
    if (byShard === undefined) {
      byShard = new Map()
      made.set(stream, byShard)
    }
    let rules = byShard.get(shard)
    if (rules === undefined) {
      rules = make(stream, shard)
      byShard.set(shard, rules)
    }
    return rules
  }
}

type ReadOptions = ShardStreams.ReadOptions

const decodeReason = Schema.decodeUnknownOption(TransactionRefusedReason)

/** The flat field list of a send as the target entry holds it: its fields, then the routing key. */
const sendFields = (fields: Transaction.Send["fields"], key: string): Array<string> => {
  const flat: Array<string> = []
  for (const name of Object.keys(fields)) flat.push(name, fields[name]!)
  flat.push(Transaction.SEND_KEY_FIELD, key)
  return flat
}

/** A group commit's script call, prepared (`prepareGroup`). */
interface PreparedGroup {
  readonly stream: string
  readonly scriptKeys: Array<string>
  readonly args: Array<string>
  /** The parts the script sees (those before a part refused here). */
  readonly parts: Array<Transaction.CommitPart>
  readonly refused: TransactionRefused | InvalidArgument | undefined
  /** The script opens the carried read's gate (ARGV[10] set). */
  readonly gated: boolean
  /**
   * The script sees the parts joined into one (core's `Transaction.joinParts`):
   * when it stops, nothing was written, and the group goes again part by part.
   */
  readonly joined: boolean
}

/**
 * Where a commit's carried read goes (internal/gatedRead.ts, `commitRead`):
 * the commit script (KEYS, ARGV) in the read's MULTI in place of its gate.
 */
export interface CommitRider {
  readonly usable: () => boolean
  readonly commitRead: (
    read: ReadOptions,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
  ) => Promise<CommitRead>
}

export const makeTransactions = (
  connection: RedisConnectionShape,
  options: TransactionsOptions = {},
  rider?: CommitRider,
): Transaction.TransactionsShape => {
  const { features } = connection
  const sends: "direct" | "outbox" = connection.isCluster ? "outbox" : (options.sends ?? "direct")
  const { gateKey, outboxKey, outboxRoutesKey, ownerTokenKey, relayMarkKey, sealedKey, shardKey } =
    connection.keys
  const keys = oncePerShard(
    connection.isCluster ? slotRules(connection.keys) : nodeRules(connection.keys),
  )

  /** A part's refusal by the checks the storage makes before the script (core's, the key rules). */
  const partRefusal = (
    rules: Transaction.KeyRules,
    part: Transaction.CommitPart,
  ): { checked: Transaction.CommitPart } | TransactionRefused | InvalidArgument => {
    const checked = Transaction.checkPart(part)
    if (Transaction.isRefusal(checked)) return checked
    for (const w of checked.writes)
      for (let k = 0, n = Transaction.keyCount(w); k < n; k++) {
        const refusal = rules.check(w.args[k]!)
        if (refusal !== undefined) return refusal
      }
    return { checked }
  }

  /**
   * A group commit's script call (KEYS, ARGV), or its end when no call is
   * needed (bad arguments; every part refused by the checks made here).
   * `gate`: the shard's gate key, when the commit rides the shard's next
   * read (docs/exactly-once.md, "The commit rides the read").
   */
  const prepareGroup = (
    o: Transaction.GroupCommitOptions,
    gate?: string,
    join = true,
  ): PreparedGroup | Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> => {
    if (!Number.isSafeInteger(o.token) || o.token < 0)
      return Effect.fail(new InvalidArgument({ message: `bad owner token ${o.token}` }))
    if (o.parts.length === 0)
      return Effect.fail(new InvalidArgument({ message: "a group commit has at least one part" }))
    let low: string | undefined
    let high: string | undefined
    let total = 0
    // ids as Redis writes them (no leading zeros): the script matches
    // them against XPENDING's reply (usually already so: they came from a read)
    const canonical: Array<ReadonlyArray<string>> = []
    for (const part of o.parts) {
      if (part.ids.length === 0)
        return Effect.fail(new InvalidArgument({ message: "a commit covers at least one message" }))
      // the part's own ids when every one is canonical already (the usual case)
      let ids: Array<string> | undefined
      for (let j = 0; j < part.ids.length; j++) {
        const given = part.ids[j]!
        const id = StreamId.canonicalOf(given)
        if (id === undefined) return Effect.fail(new InvalidEntryId({ id: given }))
        if (id !== given) ids ??= part.ids.slice(0, j)
        ids?.push(id)
        if (low === undefined || StreamId.compareCanonical(id, low) < 0) low = id
        if (high === undefined || StreamId.compareCanonical(id, high) > 0) high = id
      }
      canonical.push(ids ?? part.ids)
      total += part.ids.length
    }
    // the parts that pass the checks made here; the first that does not
    // stops the group there (the script never sees it nor any after it)
    const parts: Array<Transaction.CommitPart> = []
    let refused: TransactionRefused | InvalidArgument | undefined
    const rules = keys(o.stream, o.shard)
    for (const [i, given] of o.parts.entries()) {
      const ids = canonical[i]!
      const checked = partRefusal(rules, ids === given.ids ? given : { ...given, ids })
      if (!("checked" in checked)) {
        refused = checked
        break
      }
      parts.push(checked.checked)
    }
    if (parts.length === 0)
      return Effect.succeed({ committed: [], stopped: { _tag: "Refused", error: refused! } })
    // the group as one part first (docs/exactly-once.md, "The group as one
    // part"): a part refused here already stops the group part by part
    const joined = join && refused === undefined ? Transaction.joinParts(parts) : undefined
    const sent = joined === undefined ? parts : [joined]
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
      low!,
      high!,
      String(total),
      String(sent.length),
      // a part refused here stops the group: the read it carries must not run
      gate === undefined || refused !== undefined ? "0" : keyIndex(gate),
    ]
    for (const part of sent) {
      args.push(String(part.ids.length))
      for (const id of part.ids) args.push(id)
      args.push(String(part.writes.length))
      for (const w of part.writes) {
        const n = Transaction.keyCount(w)
        args.push(w.command, String(n))
        for (let k = 0; k < n; k++) args.push(keyIndex(w.args[k]!))
        args.push(String(w.args.length - n))
        for (let i = n; i < w.args.length; i++) args.push(w.args[i]!)
      }
      args.push(String(part.sends.length))
      for (const s of part.sends) {
        if (sends === "direct")
          args.push(keyIndex(shardKey(s.stream, s.shard)), keyIndex(sealedKey(s.stream, s.shard)))
        else args.push("0", "0")
        const flat = Object.entries(s.fields).flat()
        args.push(s.stream, String(s.shard), s.key, String(flat.length), ...flat)
      }
    }
    return {
      stream,
      scriptKeys,
      args,
      parts,
      refused,
      gated: args[9] !== "0",
      joined: joined !== undefined,
    }
  }

  /** The outcome of a group commit's script reply (before any replication wait). */
  const outcomeOfReply = (
    o: Transaction.GroupCommitOptions,
    prepared: PreparedGroup,
    reply: ReadonlyArray<unknown>,
  ): Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> => {
    const { parts, refused } = prepared
    if (reply[0] !== Code.Ok) {
      // refused by the fence, or the group / stream vanished (docs/protocol.md rule 26)
      const failure = fenceFailure(o, reply as Reply)
      return Effect.fail(
        failure ??
          new InvalidArgument({
            message: `commit: unexpected reply ${JSON.stringify(reply)}`,
          }),
      )
    }
    const flags = Array.isArray(reply[1]) ? (reply[1] as Array<unknown>) : []
    const committed = flags.map((f) =>
      Number(f) === 1 ? ("Committed" as const) : ("AlreadyCommitted" as const),
    )
    const at = parts[committed.length]
    const stopped = ((): Transaction.GroupStop | undefined => {
      switch (Number(reply[2])) {
        case 0:
          // every part the script saw passed; a part refused here stops after them
          return refused === undefined ? undefined : { _tag: "Refused", error: refused }
        case Code.NotPending:
          return { _tag: "NotPending", ids: reply.slice(3).map(String) }
        case Code.Sealed: {
          const send = at!.sends[Number(reply[3])]!
          return {
            _tag: "Sealed",
            error: new ShardSealed({ stream: send.stream, shard: send.shard }),
          }
        }
        default: {
          const i = Number(reply[3])
          const reason = decodeReason(reply[4])
          const command = at?.writes[i]?.command ?? "?"
          return {
            _tag: "Refused",
            error: new TransactionRefused({
              reason: reason._tag === "Some" ? reason.value : "InvalidArguments",
              message: `${command} ${String(reply[5])}: ${String(reply[6])}`,
              command,
              key: String(reply[5]),
              index: i,
            }),
          }
        }
      }
    })()
    return Effect.succeed(stopped === undefined ? { committed } : { committed, stopped })
  }

  /** With `durability`: confirmed once the replicas have it (a retry finds it AlreadyCommitted and waits again). */
  const confirmed = (
    stream: string,
    outcome: Transaction.GroupCommitOutcome,
  ): Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> =>
    outcome.committed.length > 0
      ? Effect.as(connection.confirmReplicated("commit", stream), outcome)
      : Effect.succeed(outcome)

  /**
   * A joined group's outcome (`PreparedGroup.joined`): every part committed,
   * or every part already had; undefined when the script stopped (it wrote
   * nothing: the group goes again part by part for the exact stop).
   */
  const joinedOutcome = (
    prepared: PreparedGroup,
    reply: ReadonlyArray<unknown>,
  ): Transaction.GroupCommitOutcome | undefined => {
    if (Number(reply[2]) !== 0 || !Array.isArray(reply[1]) || reply[1].length !== 1)
      return undefined
    const each = Number(reply[1][0]) === 1 ? ("Committed" as const) : ("AlreadyCommitted" as const)
    return { committed: prepared.parts.map(() => each) }
  }

  /** A prepared group commit's script call on the ordinary connection, confirmed (`durability`). */
  const commitPrepared = (
    o: Transaction.GroupCommitOptions,
    prepared: PreparedGroup,
  ): Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> =>
    evalScript(connection, "commit", Scripts.commit, prepared.scriptKeys, prepared.args).pipe(
      refineNoReplicas("commit", prepared.stream),
      Effect.flatMap((reply) => {
        if (!prepared.joined || reply[0] !== Code.Ok)
          return Effect.flatMap(outcomeOfReply(o, prepared, reply), (outcome) =>
            confirmed(prepared.stream, outcome),
          )
        const whole = joinedOutcome(prepared, reply)
        return whole === undefined ? partByPart(o) : confirmed(prepared.stream, whole)
      }),
    )

  /** The group commit, its parts joined first (`PreparedGroup.joined`) unless `join` is false. */
  const commitGroupWith = (
    o: Transaction.GroupCommitOptions,
    join: boolean,
  ): Effect.Effect<Transaction.GroupCommitOutcome, Transaction.CommitError> =>
    Effect.suspend(() => {
      const prepared = prepareGroup(o, undefined, join)
      return Effect.isEffect(prepared) ? prepared : commitPrepared(o, prepared)
    })

  const commitGroup = (o: Transaction.GroupCommitOptions) => commitGroupWith(o, true)
  /** After a joined group stopped: its parts one by one, for the exact stop. */
  const partByPart = (o: Transaction.GroupCommitOptions) => commitGroupWith(o, false)

  /**
   * The group commit carrying the shard's next read (docs/exactly-once.md,
   * "The commit rides the read"): the commit script opens the read's gate
   * once every part committed, in the read's MULTI on the gated reader's
   * wire (internal/gatedRead.ts). Without a usable rider (no gated reader,
   * refused transactions, `durability`: its WAIT counts one connection's
   * writes), or with a part refused before the script, it commits alone.
   */
  const commitGroupThenRead = (
    o: Transaction.GroupCommitOptions,
    next: ReadOptions,
  ): Effect.Effect<Transaction.GroupCommitThenRead, Transaction.CommitError> =>
    Effect.suspend(() => {
      if (rider === undefined || !rider.usable() || connection.durability !== undefined)
        return Effect.map(commitGroup(o), (outcome) => ({ outcome }))
      const prepared = prepareGroup(o, gateKey(o.stream, o.shard))
      if (Effect.isEffect(prepared)) return Effect.map(prepared, (outcome) => ({ outcome }))
      // a part refused before the script: the group stops there, no read with it
      if (!prepared.gated)
        return Effect.map(commitPrepared(o, prepared), (outcome) => ({ outcome }))
      return Effect.tryPromise({
        try: () => rider.commitRead(next, prepared.scriptKeys, prepared.args),
        catch: (cause) => unavailable("commit (with its read)", cause),
      }).pipe(
        Effect.flatMap(
          (done): Effect.Effect<Transaction.GroupCommitThenRead, Transaction.CommitError> => {
            if (done._tag === "Alone") return Effect.map(commitGroup(o), (outcome) => ({ outcome }))
            const failure = scriptFailure("commit", done.reply)
            if (failure !== undefined) return Effect.fail(failure)
            const reply = done.reply as ReadonlyArray<unknown>
            if (prepared.joined && reply[0] === Code.Ok) {
              const whole = joinedOutcome(prepared, reply)
              // stopped: nothing written, the gate stayed shut (the read read nothing)
              if (whole === undefined) return Effect.map(partByPart(o), (outcome) => ({ outcome }))
              return Effect.succeed(
                done.entries === undefined
                  ? { outcome: whole }
                  : { outcome: whole, entries: done.entries },
              )
            }
            return Effect.map(
              outcomeOfReply(o, prepared, done.reply as ReadonlyArray<unknown>),
              (outcome) =>
                outcome.stopped === undefined && done.entries !== undefined
                  ? { outcome, entries: done.entries }
                  : { outcome },
            )
          },
        ),
        refineNoReplicas("commit", prepared.stream),
      )
    })

  const commit = (
    o: Transaction.CommitOptions,
  ): Effect.Effect<Transaction.CommitOutcome, Transaction.CommitError> =>
    Effect.suspend(() => {
      // the single commit's own argument checks first, as before the group commit
      if (!Number.isSafeInteger(o.token) || o.token < 0)
        return Effect.fail(new InvalidArgument({ message: `bad owner token ${o.token}` }))
      if (o.ids.length === 0)
        return Effect.fail(new InvalidArgument({ message: "a commit covers at least one message" }))
      return Transaction.commitAsGroup(commitGroup, o)
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
    commitGroup,
    commitGroupThenRead,
    read,
    ...(sends === "outbox" ? { outbox } : {}),
  }
}
