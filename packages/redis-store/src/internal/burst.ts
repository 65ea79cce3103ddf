import type { ShardStreams } from "@shardline/core"
import type { Redis } from "ioredis"

/** One command: its name, then its arguments. */
export type Command = readonly [name: string, ...args: ReadonlyArray<string | number>]

/**
 * The MULTI-queued acknowledgement of `ack.ids` on `key` (XACKDEL needs
 * Redis >= 8.2): the optimistic fence's on the stream, the gated fence's on
 * the gate key. `xackdel` is XACKDEL ... ACKED: an entry is deleted only
 * once every group of the stream has acknowledged it, never under another
 * group that has not (docs/runtime.md, "Ack policies and other groups";
 * KEEPREF, XACKDEL's default, would delete it).
 */
export const ackCommand = (key: string, group: string, ack: ShardStreams.AckFirst): Command =>
  ack.mode === "ack"
    ? ["XACK", key, group, ...ack.ids]
    : ["XACKDEL", key, group, "ACKED", "IDS", ack.ids.length, ...ack.ids]

/**
 * How many entries an ack's reply says were acknowledged: XACK's count, or
 * XACKDEL's per-id codes (1 acked and deleted, 2 acked and kept for another
 * group, -1 not pending).
 */
export const ackedCount = (reply: unknown): number =>
  Array.isArray(reply)
    ? reply.filter((x) => Number(x) === 1 || Number(x) === 2).length
    : Number(reply)

/** What a read of the gated or the optimistic fence decided. */
export type FencedRead =
  | { readonly _tag: "Read"; readonly messages: Array<ShardStreams.StreamMessage> }
  | { readonly _tag: "Stale"; readonly current: number }
  /** No owner token for the (shard, group): every token is refused (docs/protocol.md rule 26). */
  | { readonly _tag: "TokenMissing" }
  | { readonly _tag: "Foreign"; readonly key: string; readonly message: string }
  /** No stream or group (the read script decides what that means), or the fence stepped aside. */
  | { readonly _tag: "Fallback" }

/** A command's outcome, as an ioredis pipeline reports it: [error, null] or [null, reply]. */
export type Outcome = readonly [error: Error | null, reply: unknown]

/**
 * Sends `commands` in order on a DEDICATED connection in one synchronous
 * burst and settles each one, without an ioredis `Pipeline`: a Pipeline per
 * call costs about 1.2 µs of client CPU per entry read at batch 100
 * (docs/redis.md, "The optimistic fence"), as much as the whole read of raw
 * XREADGROUP.
 *
 * Safe only on a connection no other caller writes to (a MULTI would queue
 * their commands), with auto-pipelining off (it defers the commands it
 * pipelines and sends the others at once, which reorders a burst), and that
 * never reconnects or resends (a resent tail would run outside its MULTI,
 * without its WATCH); RedisConnection's dedicated connections of a single
 * node are such connections. Replies
 * inside an EXEC array stay as the parser gives them (a failed command is an
 * Error element).
 */
export const burst = (c: Redis, commands: ReadonlyArray<Command>): Promise<Array<Outcome>> => {
  // corked, the burst leaves in one write: Redis reads it in one go (one
  // write per command made Redis read each apart: 2x its CPU per call)
  const socket = c.status === "ready" ? c.stream : undefined
  socket?.cork()
  try {
    return Promise.all(
      commands.map(([name, ...args]) =>
        c.call(name, ...args).then(
          (reply): Outcome => [null, reply],
          (error: Error): Outcome => [error, null],
        ),
      ),
    )
  } finally {
    socket?.uncork()
  }
}
