/**
 * The handler slots of one logical member's polling adapter (docs/runtime.md,
 * "The polling adapter"): `runtimeMaxConcurrency` slots, handed out first
 * come, first served. A turn holds one while it runs anything but a wait
 * on the storage for its read (user code: handlers, hooks, and the acks,
 * commits and seeks between them), so at most that many handler executions
 * run at once however many turns are in flight; the reads of the other
 * turns wait on Redis meanwhile (and leave together, docs/redis.md,
 * "Several shards in one transaction").
 *
 * FIFO: a freed slot goes to the longest waiter, so a turn whose read came
 * back is handled before any turn that asked later (no starvation).
 */
import { Deferred, Effect } from "effect"

export interface HandlerSlots {
  /** Wait for a slot (first come, first served); an interrupted wait takes none. */
  readonly acquire: Effect.Effect<void>
  /** Give a slot back: to the longest waiter, or to the free ones. */
  readonly release: () => void
  /** Slots free now (tests). */
  readonly free: () => number
}

export const makeHandlerSlots = (size: number): HandlerSlots => {
  let free = size
  const waiters: Array<Deferred.Deferred<void>> = []
  const release = (): void => {
    const next = waiters.shift()
    if (next === undefined) free++
    else Deferred.doneUnsafe(next, Effect.void)
  }
  const acquire: Effect.Effect<void> = Effect.suspend(() => {
    // waiters first: a slot freed while others wait is theirs
    if (free > 0 && waiters.length === 0) {
      free--
      return Effect.void
    }
    const handed = Deferred.makeUnsafe<void>()
    waiters.push(handed)
    return Effect.onInterrupt(Deferred.await(handed), () =>
      Effect.sync(() => {
        const at = waiters.indexOf(handed)
        if (at >= 0) waiters.splice(at, 1)
        // handed over just as the wait was interrupted: pass it on
        else release()
      }),
    )
  })
  return { acquire, release, free: () => free }
}
