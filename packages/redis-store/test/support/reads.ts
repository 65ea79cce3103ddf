/** Read loops the tests share. */
import type { ShardStreams } from "@shardline/core"
import { Effect } from "effect"

/**
 * Reads new entries until a read comes back empty, each batch acknowledged by
 * the next read (`ReadOptions.ack`), as the member runtime reads; every
 * entry read, in order.
 */
export const readAllAckingWithNext = (
  s: ShardStreams.ShardStreamsShape,
  read: Omit<ShardStreams.ReadOptions, "ack" | "from" | "claimIdleMs">,
): Effect.Effect<
  Array<ShardStreams.StreamMessage>,
  Effect.Error<ReturnType<ShardStreams.ShardStreamsShape["read"]>>
> =>
  Effect.gen(function* () {
    const all: Array<ShardStreams.StreamMessage> = []
    let ack: Array<string> = []
    for (;;) {
      const batch = yield* s.read({
        ...read,
        ...(ack.length > 0 ? { ack: { ids: ack, mode: "ack" as const } } : {}),
      })
      if (batch.length === 0) return all
      all.push(...batch)
      ack = batch.map((m) => m.id)
    }
  })
