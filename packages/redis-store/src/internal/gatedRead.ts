/**
 * The gated fence (docs/redis.md, "The gated fence"): a fenced read of new
 * entries in one MULTI whose entries never pass through Lua.
 *
 *     MULTI
 *     EVALSHA gate {s:n} {s:n}:owner:<group> {s:n}:gate <token> <group> ""
 *         -- the fence, then RENAMENX {s:n} -> gate
 *     XACK {s:n}:gate <group> <ids of the previous batch>    (XACKDEL ... ACKED on Redis >= 8.2)
 *     XREADGROUP GROUP <group> <consumer> COUNT <n> STREAMS {s:n}:gate >
 *     RENAMENX {s:n}:gate {s:n}
 *     EXEC
 *
 * The ack and the read address the gate key, which exists only when the
 * gate script found the caller's token current and moved the stream there.
 * Anything else (a stale token, a foreign value, a script error, a flushed
 * script cache) leaves the gate absent: the ack and the read touch nothing
 * and RENAMENX fails with "no such key". Fail-safe by construction, not by
 * the script's cooperation; and MULTI makes the move invisible to every
 * other client. The RENAMENX is a plain command, so the stream always goes
 * back. An `xackdel` ack before Redis 8.2 (no XACKDEL: XACK, then XDEL of
 * what every group of the stream acknowledged) is made by the gate
 * script after its fence (`<ack mode> <ids>` instead of "").
 *
 * A read whose ack is queued natively (every read of a busy shard) sends
 * the lean gate instead (src/lua/gate-fast.lua: the same fence, RENAMENX
 * and replies without the shared prelude, half the gate's cost in Redis;
 * docs/redis.md, "The gated fence").
 *
 * A read that acknowledges nothing asks the gate to open only if the group
 * has entries it has not read (`if-unread`): an empty read of an idle shard
 * renames nothing, so it does not modify the shard's key (another client's
 * WATCH on it survives; docs/redis.md, "Idle shards"). The fence is checked
 * first all the same, and a shut gate reads nothing by construction.
 *
 * On a single node, reads of several loops that are ready together leave in
 * ONE MULTI, each read's commands above in turn (internal/gatedBurst.ts;
 * docs/redis.md, "Several shards in one transaction"). In a cluster each
 * read is its own MULTI on the wire of its slot's node (a MULTI over several
 * slots is refused: CROSSSLOT), and the reads of one node that are ready
 * together leave as their transactions in one write
 * (internal/clusterGatedRead.ts; docs/redis.md, "The gated fence in a
 * cluster").
 */
import { createHash } from "node:crypto"
import type { ShardStreams } from "@shardline/core"
import type { Redis } from "ioredis"
import type { RedisConnectionShape } from "../RedisConnection.js"
import { Scripts } from "../scripts.js"
import { ackCommand, type Command, type FencedRead } from "./burst.js"
import {
  type CommitRead,
  commitReadOf,
  type GatedRead,
  makeBurstQueue,
  mergeTransactions,
  noScript,
  outcomeOf,
  splitReplies,
} from "./gatedBurst.js"
import { adopt, type Wire } from "./wire.js"

const sha1 = (lua: string) => createHash("sha1").update(lua).digest("hex")
const GATE_SHA = sha1(Scripts.gate.lua)
const GATE_FAST_SHA = sha1(Scripts.gateFast.lua)
const COMMIT_SHA = sha1(Scripts.commit.lua)

export type { CommitRead }

/** Resolves once `c` is ready; rejects if it ends first. */
export const ready = (c: Redis): Promise<void> =>
  c.status === "ready"
    ? Promise.resolve()
    : new Promise((resolve, reject) => {
        const onReady = () => {
          c.off("end", onEnd)
          resolve()
        }
        const onEnd = () => {
          c.off("ready", onReady)
          reject(new Error("gated read: the connection closed before it was ready"))
        }
        c.once("ready", onReady)
        c.once("end", onEnd)
        // a lazyConnect client (an ioredis option a user may pass) waits for a first command
        if (c.status === "wait") c.connect().catch(() => {})
      })

/**
 * Where a read's transaction goes when not to the single node's one
 * connection: in a cluster, the wire of the node that owns the shard's slot
 * (internal/clusterGatedRead.ts).
 */
export interface GatedRoute {
  /** The wire for `o`'s shard; undefined when no node is known for it (the read takes the script). */
  readonly open: (o: ShardStreams.ReadOptions) => Promise<Wire> | undefined
  /** The wire failed (a connection error, a reply out of step): close it, the next read opens another. */
  readonly drop: (failed: Promise<Wire>) => void
  /** A cluster redirection refused the transaction (nothing ran): the slot map is stale. */
  readonly redirected: (error: Error) => void
}

/**
 * A cluster's refusal of a transaction, when a command is queued or at
 * EXEC: the node does not own the slot (MOVED), the slot is migrating (ASK,
 * TRYAGAIN) or the cluster is down. Redis then discards the whole
 * transaction (EXECABORT, or the error as EXEC's reply): nothing ran.
 */
export const REDIRECTION = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /

/**
 * Gated reads over one dedicated connection of a single node, shared by
 * every read loop and spoken to directly once ready (internal/wire.ts): the
 * reads queued together are one burst (MULTI ... EXEC) in one write, so
 * bursts never interleave; the connection never reconnects or resends (a
 * resent tail would run outside its MULTI). A closed connection is replaced
 * at the next read.
 */
/** A queued read's outcome: a read's, or a commit-carrying read's. */
type Outcome = FencedRead | CommitRead
const FALLBACK: FencedRead = { _tag: "Fallback" }
const ALONE: CommitRead = { _tag: "Alone" }

export const makeGatedReader = (connection: RedisConnectionShape, route?: GatedRoute) => {
  const { features } = connection
  let lease: ReturnType<RedisConnectionShape["lease"]> | undefined
  let wire: Promise<Wire> | undefined
  /**
   * Off once the server refused the transaction's commands themselves: an
   * ACL user without +rename / +renamenx or the gate key (rules of an earlier
   * version), or RENAME / RENAMENX disabled by rename-command. Reads then
   * take the script, which needs neither.
   */
  let refused = false

  /** The wire `wire` resolved to (to see it closed without awaiting). */
  let live: Wire | undefined
  // the namespace's keys (a connection never has ioredis' own keyPrefix: RedisConnection refuses it)
  const { gateKey, ownerTokenKey, shardKey } = connection.keys

  const drop = (failed: Promise<Wire>) => {
    if (wire !== failed) return
    live?.close()
    wire = undefined
    live = undefined
    lease?.release(false)
    lease = undefined
  }

  /** The shared wire; a new connection when the last one closed (one for concurrent callers). */
  const open = (): Promise<Wire> => {
    if (wire !== undefined && live?.closed() === true) drop(wire)
    if (wire === undefined) {
      const taken = connection.lease()
      const c = taken.client as Redis
      const made = ready(c).then(() => {
        const w = adopt(c)
        if (wire === made) live = w
        else w.close()
        return w
      })
      lease = taken
      wire = made
    }
    return wire
  }

  /** The burst of one gated read. */
  const commandsOf = ({ o, ack, commit }: GatedRead, evalBody: boolean): Array<Command> => {
    const stream = shardKey(o.stream, o.shard)
    const gate = gateKey(o.stream, o.shard)
    if (commit !== undefined) {
      // the commit in the gate's place: it opens the gate once every part
      // committed (src/lua/commit.lua, ARGV[10]); nothing to ack, it acked
      const { keys, args } = commit
      return [
        ["MULTI"],
        evalBody
          ? ["EVAL", Scripts.commit.lua, keys.length, ...keys, ...args]
          : ["EVALSHA", COMMIT_SHA, keys.length, ...keys, ...args],
        ["XREADGROUP", "GROUP", o.group, o.consumer, "COUNT", o.count, "STREAMS", gate, ">"],
        ["RENAMENX", gate, stream],
        ["EXEC"],
      ]
    }
    const owner = ownerTokenKey(o.stream, o.shard, o.group)
    // XACK (XACKDEL ... ACKED on Redis >= 8.2) queued natively on the gate key costs Redis
    // less than acking in the script; an xackdel ack before 8.2 (XACK, then
    // XDEL of what every group acknowledged) needs the script's acknowledge
    const native = ack !== undefined && (ack.mode === "ack" || features.xackdel)
    // the lean gate also for a read that follows a commit's ack (`afterAck`):
    // the same fence as the full gate; the unread check it skips only spares
    // an idle shard's key the renames, and a shard whose batch just committed
    // is busy (docs/redis.md, "The gated fence")
    const lean = native || (ack === undefined && o.afterAck === true)
    const args = [
      stream,
      owner,
      gate,
      o.token,
      o.group,
      // nothing to acknowledge: open only if there is something to read
      ...(ack === undefined ? ["if-unread"] : native ? [""] : [ack.mode, "0", ...ack.ids]),
    ]
    // the common read (its ack queued natively below): the lean gate, the same
    // fence and replies without the prelude (src/lua/gate-fast.lua)
    const gateScript: Command = lean
      ? evalBody
        ? ["EVAL", Scripts.gateFast.lua, 3, stream, owner, gate, o.token]
        : ["EVALSHA", GATE_FAST_SHA, 3, stream, owner, gate, o.token]
      : evalBody
        ? ["EVAL", Scripts.gate.lua, 3, ...args]
        : ["EVALSHA", GATE_SHA, 3, ...args]
    const commands: Array<Command> = [
      ["MULTI"],
      gateScript,
      // on the gate key: it acks only when the gate opened
      ...(native ? [ackCommand(gate, o.group, ack)] : []),
      ["XREADGROUP", "GROUP", o.group, o.consumer, "COUNT", o.count, "STREAMS", gate, ">"],
      ["RENAMENX", gate, stream],
      ["EXEC"],
    ]
    return commands
  }

  /**
   * Several reads in one transaction, each read's own commands in turn
   * (internal/gatedBurst.ts); each gets its outcome or its error. Throws on
   * a connection error.
   */
  const send = async (reads: ReadonlyArray<GatedRead>): Promise<Array<Outcome | Error>> => {
    const opened = open()
    try {
      const w = await opened
      const outcomes: Array<Outcome | Error | undefined> = reads.map(() => undefined)
      let todo = reads.map((_, i) => i)
      for (let attempt = 0; todo.length > 0; attempt++) {
        const { commands, sizes } = mergeTransactions(
          todo.map((i) => commandsOf(reads[i]!, attempt > 0)),
        )
        const split = splitReplies(await w.send(commands), sizes)
        if (split._tag === "Refused") {
          // EXECABORT: a command was refused when queued, so nothing ran
          if (split.permanent) refused = true
          for (const i of todo) outcomes[i] = reads[i]!.commit ? ALONE : FALLBACK
          break
        }
        const again: Array<number> = []
        for (const [k, i] of todo.entries()) {
          const replies = split.replies[k]!
          // the script cache was flushed: that gate stayed shut, nothing happened;
          // again with the script's body (EVAL caches it)
          if (noScript(replies) && attempt === 0) {
            again.push(i)
            continue
          }
          const { o, commit } = reads[i]!
          try {
            outcomes[i] =
              commit !== undefined
                ? commitReadOf(replies, o.keyField)
                : outcomeOf(replies, shardKey(o.stream, o.shard), o.keyField)
          } catch (error) {
            outcomes[i] = error instanceof Error ? error : new Error(String(error))
          }
        }
        todo = again
      }
      // an error of one read replaces the connection, as it did when each read was alone
      if (outcomes.some((x) => x instanceof Error)) drop(opened)
      return outcomes.map((x) => x ?? new Error("gated read: no outcome"))
    } catch (error) {
      drop(opened)
      throw error
    }
  }

  // every loop's reads share transactions: one MULTI, one write, one round
  // trip for the reads that are ready together (internal/gatedBurst.ts)
  const bursts = makeBurstQueue({ send })

  /**
   * What one routed read's own transaction (`res`: MULTI's, QUEUED..., EXEC's
   * replies) did: its outcome, or `again` (the script cache was flushed: its
   * gate stayed shut, nothing happened; again with the script's body, which
   * EVAL caches). A redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) refused
   * the transaction, so nothing ran: the read takes the script, which
   * follows it. Throws what fails the read (`BackendUnavailable`).
   */
  const routedOutcome = (
    route: GatedRoute,
    { o, commit }: GatedRead,
    res: ReadonlyArray<unknown>,
    attempt: number,
  ): Outcome | "again" => {
    const nothingRan = commit !== undefined ? ALONE : FALLBACK
    const exec = res[res.length - 1]
    if (exec instanceof Error) {
      // EXECABORT: a command was refused when queued, so nothing ran
      const queued = res.find((reply) => reply instanceof Error && reply !== exec)
      if (queued instanceof Error && /^(NOPERM|ERR unknown command)/.test(queued.message))
        refused = true
      const redirection = [queued, exec].find(
        (e): e is Error => e instanceof Error && REDIRECTION.test(e.message),
      )
      if (redirection !== undefined) {
        route.redirected(redirection)
        return nothingRan
      }
      if (exec.message.startsWith("EXECABORT")) return nothingRan
      throw exec
    }
    // null only when a WATCH failed, and this connection holds none
    if (!Array.isArray(exec)) throw new Error(`gated read: EXEC replied ${String(exec)}`)
    if (noScript(exec) && attempt === 0) return "again"
    return commit !== undefined
      ? commitReadOf(exec, o.keyField)
      : outcomeOf(exec, shardKey(o.stream, o.shard), o.keyField)
  }

  /**
   * The routed reads queued together for one node's wire: each read's own
   * single-slot transaction (a cluster refuses a MULTI whose keys span
   * slots: CROSSSLOT), one after the other in ONE write, and each judged on
   * its own replies (docs/redis.md, "The gated fence in a cluster"). A
   * wire that closed before they were written takes none of them: they
   * take the script (nothing was sent).
   */
  const sendRouted = async (
    route: GatedRoute,
    opened: Promise<Wire>,
    reads: ReadonlyArray<GatedRead>,
  ): Promise<Array<Outcome | Error>> => {
    try {
      const w = await opened
      // retired and closed once its earlier reads were answered (a refresh of
      // the slot map dropped its node), or failed: nothing of these was sent
      if (w.closed()) return reads.map((read) => (read.commit ? ALONE : FALLBACK))
      const outcomes: Array<Outcome | Error | undefined> = reads.map(() => undefined)
      let todo = reads.map((_, i) => i)
      for (let attempt = 0; todo.length > 0; attempt++) {
        const transactions = todo.map((i) => commandsOf(reads[i]!, attempt > 0))
        const res = await w.send(transactions.flat())
        const again: Array<number> = []
        let at = 0
        for (const [k, i] of todo.entries()) {
          const size = transactions[k]!.length
          const own = res.slice(at, at + size)
          at += size
          try {
            const outcome = routedOutcome(route, reads[i]!, own, attempt)
            if (outcome === "again") again.push(i)
            else outcomes[i] = outcome
          } catch (error) {
            outcomes[i] = error instanceof Error ? error : new Error(String(error))
          }
        }
        todo = again
      }
      // an error of one read replaces the wire, as it did when each read was alone
      if (outcomes.some((x) => x instanceof Error)) route.drop(opened)
      return outcomes.map((x) => x ?? new Error("gated read: no outcome"))
    } catch (error) {
      route.drop(opened)
      throw error
    }
  }

  /** A burst queue per node wire (a new wire, a new queue). */
  const nodeBursts = new WeakMap<Promise<Wire>, ReturnType<typeof makeBurstQueue>>()

  /**
   * A gated read on the wire of the node of its shard's slot (a cluster:
   * internal/clusterGatedRead.ts). Shards on different nodes cannot share a
   * write, nor shards of different slots a MULTI: the reads of one node that
   * are ready together leave as their transactions in one write (at most
   * MAX_IN_FLIGHT writes per node in flight, as on a single node).
   */
  const readRouted = (route: GatedRoute, read: GatedRead): Promise<Outcome> => {
    const opened = route.open(read.o)
    if (opened === undefined) return Promise.resolve(read.commit ? ALONE : FALLBACK)
    let queue = nodeBursts.get(opened)
    if (queue === undefined) {
      queue = makeBurstQueue({
        send: (reads) => sendRouted(route, opened, reads),
      })
      nodeBursts.set(opened, queue)
    }
    return queue.read(read)
  }

  const queued = (read: GatedRead): Promise<Outcome> =>
    route === undefined ? bursts.read(read) : readRouted(route, read)

  /** One gated read; `ack` (non-empty) rides in its MULTI. Throws on a connection error. */
  const read = (
    o: ShardStreams.ReadOptions,
    ack: ShardStreams.AckFirst | undefined,
  ): Promise<FencedRead> => queued({ o, ack }) as Promise<FencedRead>

  /**
   * A group commit carrying the shard's next read of new entries
   * (docs/exactly-once.md, "The commit rides the read"): the commit script
   * (KEYS, ARGV; its gate key among them) in the read's MULTI in place of
   * the gate, in the same burst as other shards' reads. Throws on a
   * connection error (the commit's outcome is then unknown).
   */
  const commitRead = (
    o: ShardStreams.ReadOptions,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
  ): Promise<CommitRead> =>
    queued({
      o: { ...o, ack: undefined },
      ack: undefined,
      commit: { keys, args },
    }) as Promise<CommitRead>

  return {
    read,
    commitRead,
    /** False once the server refused the transaction (see `refused`): use the script. */
    usable: () => !refused,
  }
}
