/**
 * Several shards' gated reads in one transaction (docs/redis.md, "The gated
 * fence", "Several shards in one transaction"; docs/runtime.md, "Where the
 * time goes"). The read loops of a `ShardStreams` stay one per shard; their
 * gated reads are queued, and what is queued leaves as ONE MULTI ... EXEC
 * holding each read's own single-shard commands one after the other:
 *
 *     MULTI
 *     EVALSHA gate-fast {a} {a}:owner:<g> {a}:gate <token a>  XACK {a}:gate ...  XREADGROUP ... {a}:gate >  RENAMENX {a}:gate {a}
 *     EVALSHA gate-fast {b} {b}:owner:<g> {b}:gate <token b>  XACK {b}:gate ...  XREADGROUP ... {b}:gate >  RENAMENX {b}:gate {b}
 *     ...
 *     EXEC
 *
 * Each read's commands are exactly its single-shard transaction's
 * (gatedRead.ts), so the fail-safe argument holds shard by shard: a shard's
 * ack and read address only its own gate key, which its own gate opened
 * after its own fence held, and its own RENAMENX closes before the next
 * shard's commands run (so even one shard twice, for two groups, is two
 * gates opened and closed in turn). A stale token on shard a shuts a's gate
 * only; Redis runs every other queued command of the MULTI regardless.
 *
 * Why: one MULTI/EXEC, one write, one reply parse and one round trip for N
 * shards instead of N. Redis CPU per message on an idle server, 4 shards
 * per transaction, batches of 32 (docs/runtime.md, "Where the time goes"):
 * 1.66-2.03 µs against 2.01-2.66 for 4 separate transactions and 2.04-3.00
 * for raw XREADGROUP + XACK. (A multi-key gate script fencing all N shards
 * first, then every ack and read, then every rename, cost 1.83-2.29: the
 * shards' streams leave the cache between their commands.)
 *
 * The queue sends at most `MAX_IN_FLIGHT` transactions at a time; what is
 * queued meanwhile leaves together when one returns (no timer: a read waits
 * for at most the transactions ahead of it).
 */
import type { ShardStreams } from "@shardline/core"
import type { Command, FencedRead } from "./burst.js"
import { Code, xreadMessages } from "./reply.js"

/**
 * Transactions of one queue in flight at once: two keep Redis busy with one
 * while Node handles the batches of the other. With one, Redis CPU per
 * message measured 1.24x / 1.38x of raw loops (Redis 7.0 / 8.6) against
 * 1.15x / 1.27x with two (docs/runtime.md, "Where the time goes").
 */
export const MAX_IN_FLIGHT = 2

/**
 * Reads in one transaction at most. Half of the bench's 16 lanes, so that
 * two transactions alternate: Redis runs one while Node handles the other's
 * batches. With room for all 16, one transaction took every ready read and
 * the second slot stood empty. Runtime over 4 raw loops, eachMessage
 * (docs/runtime.md, "Where the time goes"): 0.88-1.01x at 8, 0.66-0.87x
 * at 16, 0.75-0.79x at 4, 0.90-0.92x at 6. At 32 lanes (64 shards, 8
 * workers) 16 measured within the spread of 8 (docs/runtime.md, "A bigger
 * member").
 */
export const MAX_READS = 8

const isError = (x: unknown, prefix: string): x is Error =>
  x instanceof Error && x.message.startsWith(prefix)

/**
 * One transaction of several reads' single-shard transactions (each
 * `[MULTI, ...commands, EXEC]`): their commands in order inside one MULTI,
 * and how many replies of EXEC's array each read owns.
 */
export const mergeTransactions = (
  transactions: ReadonlyArray<ReadonlyArray<Command>>,
): { readonly commands: Array<Command>; readonly sizes: Array<number> } => {
  const commands: Array<Command> = [["MULTI"]]
  const sizes: Array<number> = []
  for (const t of transactions) {
    if (t[0]?.[0] !== "MULTI" || t[t.length - 1]?.[0] !== "EXEC")
      throw new Error("gated burst: a read's commands are not a MULTI ... EXEC")
    commands.push(...t.slice(1, -1))
    sizes.push(t.length - 2)
  }
  commands.push(["EXEC"])
  return { commands, sizes }
}

/**
 * The replies of a merged transaction (`res`: MULTI's, QUEUED..., EXEC's)
 * cut into each read's own EXEC replies; "Refused" when the server refused
 * a command when queued (EXECABORT: nothing ran), with whether it is an
 * ACL or rename-command refusal (permanent).
 */
export const splitReplies = (
  res: ReadonlyArray<unknown>,
  sizes: ReadonlyArray<number>,
):
  | { readonly _tag: "Refused"; readonly permanent: boolean }
  | { readonly _tag: "Replies"; readonly replies: Array<Array<unknown>> } => {
  const exec = res[res.length - 1]
  if (exec instanceof Error) {
    const queued = res.find((reply) => reply instanceof Error && reply !== exec)
    const permanent =
      queued instanceof Error && /^(NOPERM|ERR unknown command)/.test(queued.message)
    if (exec.message.startsWith("EXECABORT")) return { _tag: "Refused", permanent }
    throw exec
  }
  // null only when a WATCH failed, and this connection holds none
  if (!Array.isArray(exec)) throw new Error(`gated read: EXEC replied ${String(exec)}`)
  const total = sizes.reduce((a, b) => a + b, 0)
  if (exec.length !== total)
    throw new Error(`gated read: EXEC replied ${exec.length} replies for ${total} commands`)
  const replies: Array<Array<unknown>> = []
  let at = 0
  for (const size of sizes) {
    replies.push(exec.slice(at, at + size))
    at += size
  }
  return { _tag: "Replies", replies }
}

/** The script cache was flushed: the read's gate stayed shut and nothing happened (send it again with EVAL). */
export const noScript = (replies: ReadonlyArray<unknown>): boolean =>
  isError(replies[0], "NOSCRIPT")

/**
 * What one read's EXEC replies (gate, [ack,] read, rename) mean. Throws what
 * the caller reports as `BackendUnavailable`.
 */
export const outcomeOf = (
  replies: ReadonlyArray<unknown>,
  stream: string,
  keyField: string | undefined,
): FencedRead => {
  const [gated, acked, xread, renamed] =
    replies.length === 4 ? replies : [replies[0], undefined, replies[1], replies[2]]
  if (gated instanceof Error) throw gated
  // the gate script's reply, coded as every script's (src/lua/prelude.lua)
  const [code, detail, message] = Array.isArray(gated) ? gated : [Number.NaN]
  if (code === Code.Stale) return { _tag: "Stale", current: Number(detail) }
  if (code === Code.TokenMissing) return { _tag: "TokenMissing" }
  // an ack made in the gate found its group gone: the read script says so (VANISHED)
  if (code === Code.Vanished) return { _tag: "Fallback" }
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

/** A gated read: its options and the previous batch's ack riding in it (non-empty), if any. */
export interface GatedRead {
  readonly o: ShardStreams.ReadOptions
  readonly ack: ShardStreams.AckFirst | undefined
  /**
   * The group commit this read carries (docs/exactly-once.md, "The commit
   * rides the read"): the commit script's KEYS and ARGV (its gate key among
   * them), in place of the gate script; its outcome is a `CommitRead`.
   */
  readonly commit?: { readonly keys: ReadonlyArray<string>; readonly args: ReadonlyArray<string> }
}

/**
 * What a read that carried a commit did: the commit script's reply (the
 * caller judges it), and the read's entries when the script opened the gate;
 * `Alone`: the transaction was refused when queued (nothing ran), commit alone.
 */
export type CommitRead =
  | {
      readonly _tag: "Committed"
      readonly reply: unknown
      readonly entries: Array<ShardStreams.StreamMessage> | undefined
    }
  | { readonly _tag: "Alone" }

/**
 * What a commit-carrying read's EXEC replies (commit, read, rename) mean.
 * The gate opened only when the script's reply says so (`{0, done, 0, 1}`: no
 * stop, gate 1);
 * then the stream must have moved back. Throws what the caller reports as
 * `BackendUnavailable`.
 */
export const commitReadOf = (
  replies: ReadonlyArray<unknown>,
  keyField: string | undefined,
): CommitRead => {
  const [reply, xread, renamed] = replies
  if (reply instanceof Error) throw reply
  // reply[3] is the gate only when nothing stopped (reply[2] 0): after a
  // stop it is the stop's detail (a write's or a send's index, an id)
  const opened =
    Array.isArray(reply) && reply[0] === Code.Ok && Number(reply[2]) === 0 && Number(reply[3]) === 1
  if (!opened) return { _tag: "Committed", reply, entries: undefined }
  if (Number(renamed) !== 1)
    throw new Error(`gated read: the stream did not move back (RENAMENX: ${String(renamed)})`)
  // the commit's outcome stands; a read that failed delivered nothing
  if (xread instanceof Error) return { _tag: "Committed", reply, entries: undefined }
  return { _tag: "Committed", reply, entries: xreadMessages(xread, keyField) }
}

interface Queued extends GatedRead {
  readonly resolve: (read: FencedRead | CommitRead) => void
  readonly reject: (error: unknown) => void
}

/**
 * The queue of one gated reader's reads. `send` sends its reads as one
 * transaction and gives each its outcome (a `FencedRead`, or the `Error` that
 * read fails with); it rejects when the whole transaction failed.
 */
export const makeBurstQueue = (options: {
  readonly send: (
    reads: ReadonlyArray<GatedRead>,
  ) => Promise<Array<FencedRead | CommitRead | Error>>
  readonly maxInFlight?: number
}) => {
  const maxInFlight = options.maxInFlight ?? MAX_IN_FLIGHT
  const queue: Array<Queued> = []
  let inFlight = 0
  let scheduled = false

  const send = (taken: ReadonlyArray<Queued>) => {
    inFlight++
    options
      .send(taken)
      .then(
        (outcomes) =>
          taken.forEach((q, i) => {
            const outcome = outcomes[i]
            if (outcome === undefined) q.reject(new Error("gated read: no outcome"))
            else if (outcome instanceof Error) q.reject(outcome)
            else q.resolve(outcome)
          }),
        (error) => {
          for (const q of taken) q.reject(error)
        },
      )
      .finally(() => {
        inFlight--
        pump()
      })
  }

  const pump = () => {
    while (inFlight < maxInFlight && queue.length > 0) send(queue.splice(0, MAX_READS))
  }

  return {
    /** Queue a read; it leaves with whatever else is queued when a transaction may. */
    read: (read: GatedRead): Promise<FencedRead | CommitRead> =>
      new Promise<FencedRead | CommitRead>((resolve, reject) => {
        // one shape for every queued read: a spread of `read` plus two
        // properties made V8 build a new map per read (`node --log-maps`),
        // CPU spent per read (docs/runtime.md, "Throughput: Node's young generation")
        queue.push({ o: read.o, ack: read.ack, commit: read.commit, resolve, reject })
        // reads queued in the same run of microtasks (loops woken by one reply) leave together
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
