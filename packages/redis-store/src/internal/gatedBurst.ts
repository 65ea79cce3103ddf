/**
 * Several shards' gated reads in one transaction (docs/redis.md, "The gated
 * fence", "Several shards in one transaction"; docs/runtime.md, "Where the
 * time goes"). The read loops of a `ShardStreams` stay one per shard; a read
 * whose previous batch's ack is queued natively (every read of a busy shard)
 * is handed to this queue, which sends what is queued as ONE transaction:
 *
 *     MULTI
 *     EVALSHA gate-burst 3N  {a} {a}:owner {a}:gate  {b} ...  <token a> <token b> ...
 *         -- each shard fenced on its own, then RENAMENX {x} -> {x}:gate where it held
 *     XACK {a}:gate <group a> <ids of a's previous batch>   XREADGROUP ... STREAMS {a}:gate >
 *     XACK {b}:gate ...                                     XREADGROUP ... STREAMS {b}:gate >
 *     RENAMENX {a}:gate {a}    RENAMENX {b}:gate {b} ...
 *     EXEC
 *
 * and gives each read its own shard's replies. Why: a transaction, a Lua
 * call and a round trip cost the same for 1 shard as for N; sharing them
 * takes Redis' fixed cost per batch (~11 µs) and the round trips down N
 * times. The fail-safe argument is the single read's, shard by shard: a
 * shard's ack and read address only its own gate key, which exists only
 * when ITS fence held; a stale token on shard a leaves a's gate absent and
 * b's reads as they were. What the queue guarantees on top:
 *
 * - a shard (a gate key) is never twice in one transaction: a second read
 *   of the same gate key (another group of the same shard) waits for the
 *   next one (two reads through one open gate would deliver entries the
 *   second read reports as a fallback);
 * - at most `MAX_IN_FLIGHT` transactions are in flight: what is queued
 *   meanwhile leaves together when one returns (no timer: a read waits for
 *   at most the transactions ahead of it);
 * - one read alone takes the single-shard transaction (gatedRead.ts).
 */
import { createHash } from "node:crypto"
import type { ShardStreams } from "@shardline/core"
import type { KeySpace } from "../keys.js"
import { Scripts } from "../scripts.js"
import { ackCommand, type Command, type FencedRead } from "./burst.js"
import { Code, xreadMessages } from "./reply.js"

const GATE_BURST_SHA = createHash("sha1").update(Scripts.gateBurst.lua).digest("hex")

/**
 * Transactions of this queue in flight at once. One keeps Redis busy with
 * one transaction while Node handles the batches of the last; measured
 * against 2 in docs/runtime.md, "Where the time goes".
 */
export const MAX_IN_FLIGHT = 1

/** Shards in one transaction at most (its size; a member rarely has more ready at once). */
export const MAX_SHARDS = 16

const isError = (x: unknown, prefix: string): x is Error =>
  x instanceof Error && x.message.startsWith(prefix)

/**
 * What one shard's gate, ack, read and rename replies mean (the same for a
 * single-shard and a multi-shard transaction). Throws what the caller
 * reports as `BackendUnavailable`.
 */
export const outcomeOf = (
  gated: unknown,
  acked: unknown,
  xread: unknown,
  renamed: unknown,
  stream: string,
  keyField: string | undefined,
): FencedRead => {
  if (gated instanceof Error) throw gated
  // the gate script's reply, coded as every script's (src/lua/prelude.lua)
  const [code, detail, message] = Array.isArray(gated) ? gated : [Number.NaN]
  if (code === Code.Stale) return { _tag: "Stale", current: Number(detail) }
  if (code === Code.Foreign)
    return { _tag: "Foreign", key: String(detail), message: String(message) }
  if (code !== Code.Ok) throw new Error(`gate script: ${String(detail)}`)
  // the group has read everything: nothing was renamed, nothing read
  if (Number(detail) === 2) return { _tag: "Read", messages: [] }
  const moved = Number(detail) === 1
  if (moved && Number(renamed) !== 1)
    throw new Error(`gated read: the stream did not move back (RENAMENX: ${String(renamed)})`)
  if (!moved || isError(xread, "NOGROUP")) return { _tag: "Fallback" }
  for (const reply of [acked, xread])
    if (isError(reply, "WRONGTYPE")) return { _tag: "Foreign", key: stream, message: reply.message }
  if (acked instanceof Error) throw acked
  if (xread instanceof Error) throw xread
  return { _tag: "Read", messages: xreadMessages(xread, keyField) }
}

/** A read whose previous batch's ack (non-empty, native: XACK, or XACKDEL on Redis >= 8.2) rides in the MULTI. */
export interface AckedRead {
  readonly o: ShardStreams.ReadOptions
  readonly ack: ShardStreams.AckFirst
}

type ShardKeys = Pick<KeySpace, "gateKey" | "ownerTokenKey" | "shardKey">

/** The transaction of several shards' reads (distinct gate keys); `evalBody` after a NOSCRIPT. */
export const burstCommands = (
  reads: ReadonlyArray<AckedRead>,
  keys: ShardKeys,
  evalBody: boolean,
): Array<Command> => {
  const gateKeys: Array<string> = []
  const tokens: Array<string> = []
  const perShard: Array<Command> = []
  const renames: Array<Command> = []
  for (const { o, ack } of reads) {
    const stream = keys.shardKey(o.stream, o.shard)
    const gate = keys.gateKey(o.stream, o.shard)
    gateKeys.push(stream, keys.ownerTokenKey(o.stream, o.shard, o.group), gate)
    tokens.push(String(o.token))
    // on this shard's gate key: it acks and reads only when THIS shard's gate opened
    perShard.push(ackCommand(gate, o.group, ack), [
      "XREADGROUP",
      "GROUP",
      o.group,
      o.consumer,
      "COUNT",
      o.count,
      "STREAMS",
      gate,
      ">",
    ])
    renames.push(["RENAMENX", gate, stream])
  }
  if (new Set(gateKeys.filter((_, i) => i % 3 === 2)).size !== reads.length)
    throw new Error("gated burst: the same shard twice in one transaction")
  return [
    ["MULTI"],
    evalBody
      ? ["EVAL", Scripts.gateBurst.lua, gateKeys.length, ...gateKeys, ...tokens]
      : ["EVALSHA", GATE_BURST_SHA, gateKeys.length, ...gateKeys, ...tokens],
    ...perShard,
    // plain commands, last: no script error can skip them (every stream goes back)
    ...renames,
    ["EXEC"],
  ]
}

/**
 * What a burst's replies (`res`: MULTI's, QUEUED..., EXEC's) mean for each
 * read, in order: a `FencedRead`, or the `Error` that read fails with.
 * "NOSCRIPT" when the script cache was flushed (no gate opened; send again
 * with EVAL); "Refused" when the server refused a command when queued
 * (EXECABORT: nothing ran).
 */
export const burstOutcomes = (
  reads: ReadonlyArray<AckedRead>,
  res: ReadonlyArray<unknown>,
  keys: ShardKeys,
):
  | { readonly _tag: "NOSCRIPT" }
  | { readonly _tag: "Refused"; readonly permanent: boolean }
  | { readonly _tag: "Done"; readonly outcomes: Array<FencedRead | Error> } => {
  const exec = res[res.length - 1]
  if (exec instanceof Error) {
    const queued = res.find((reply) => reply instanceof Error && reply !== exec)
    const permanent =
      queued instanceof Error && /^(NOPERM|ERR unknown command)/.test(queued.message)
    if (exec.message.startsWith("EXECABORT")) return { _tag: "Refused", permanent }
    throw exec
  }
  // null only when a WATCH failed, and this connection holds none
  if (!Array.isArray(exec)) throw new Error(`gated burst: EXEC replied ${String(exec)}`)
  const n = reads.length
  if (exec.length !== 1 + 3 * n)
    throw new Error(`gated burst: EXEC replied ${exec.length} replies for ${n} shards`)
  const gates: unknown = exec[0]
  if (isError(gates, "NOSCRIPT")) return { _tag: "NOSCRIPT" }
  // the script failed as a whole (every shard fails; a shard it opened before
  // failing was read under its own fence and moved back by its RENAMENX)
  if (gates instanceof Error || !Array.isArray(gates) || gates.length !== n) {
    const error = gates instanceof Error ? gates : new Error(`gate-burst replied ${String(gates)}`)
    return { _tag: "Done", outcomes: reads.map(() => error) }
  }
  return {
    _tag: "Done",
    outcomes: reads.map(({ o }, i) => {
      try {
        return outcomeOf(
          gates[i],
          exec[1 + 2 * i],
          exec[2 + 2 * i],
          exec[1 + 2 * n + i],
          keys.shardKey(o.stream, o.shard),
          o.keyField,
        )
      } catch (error) {
        return error instanceof Error ? error : new Error(String(error))
      }
    }),
  }
}

interface Queued extends AckedRead {
  readonly gate: string
  readonly resolve: (read: FencedRead) => void
  readonly reject: (error: unknown) => void
}

/**
 * The queue of acked reads of one gated reader. `single` sends one read alone
 * (the single-shard transaction); `several` sends a multi-shard one and
 * settles each read.
 */
export const makeBurstQueue = (options: {
  readonly keys: ShardKeys
  readonly single: (read: AckedRead) => Promise<FencedRead>
  readonly several: (reads: ReadonlyArray<AckedRead>) => Promise<Array<FencedRead | Error>>
  readonly maxInFlight?: number
}) => {
  const maxInFlight = options.maxInFlight ?? MAX_IN_FLIGHT
  const queue: Array<Queued> = []
  let inFlight = 0
  let scheduled = false

  /** The next transaction's reads: queued order, one per gate key, at most MAX_SHARDS. */
  const take = (): Array<Queued> => {
    const taken: Array<Queued> = []
    const gates = new Set<string>()
    for (let i = 0; i < queue.length && taken.length < MAX_SHARDS; ) {
      const q = queue[i]!
      if (gates.has(q.gate)) {
        i++
        continue
      }
      gates.add(q.gate)
      taken.push(q)
      queue.splice(i, 1)
    }
    return taken
  }

  const send = (taken: ReadonlyArray<Queued>) => {
    inFlight++
    const done = () => {
      inFlight--
      pump()
    }
    if (taken.length === 1) {
      const q = taken[0]!
      options.single(q).then(q.resolve, q.reject).finally(done)
      return
    }
    options
      .several(taken)
      .then(
        (outcomes) =>
          taken.forEach((q, i) => {
            const outcome = outcomes[i]!
            if (outcome instanceof Error) q.reject(outcome)
            else q.resolve(outcome)
          }),
        (error) => {
          for (const q of taken) q.reject(error)
        },
      )
      .finally(done)
  }

  const pump = () => {
    while (inFlight < maxInFlight && queue.length > 0) send(take())
  }

  return {
    /** Queue an acked read; sent with whatever else is queued when a transaction may leave. */
    read: (read: AckedRead): Promise<FencedRead> =>
      new Promise<FencedRead>((resolve, reject) => {
        queue.push({
          ...read,
          gate: options.keys.gateKey(read.o.stream, read.o.shard),
          resolve,
          reject,
        })
        // reads queued in the same microtask run (loops woken by one reply) leave together
        if (!scheduled) {
          scheduled = true
          queueMicrotask(() => {
            scheduled = false
            pump()
          })
        }
      }),
    /** Reads waiting for a transaction (tests). */
    queued: () => queue.length,
  }
}
