/**
 * Armed coordinator deadlines: a min-heap by `at` with lazy re-arming. One
 * live entry per timer id; arming an id that is already armed earlier (or at
 * the same time) is a no-op, because the earlier entry fires first, the
 * handler sees the moved deadline and returns a timer for it. Replaced
 * entries stay in the heap and are skipped when they surface.
 */
import { type Timer, timerId } from "../CoordinatorState.js"

export class TimerHeap {
  private readonly heap: Array<Timer> = []
  /** timer id -> the `at` of its live entry */
  private readonly armed = new Map<string, number>()
  /**
   * The heap's top as `next` last found it live: while it is still the top,
   * it still is (its id's armed deadline changes only when an earlier entry
   * is pushed above it, or when it is taken; both also forget it here, belt
   * and braces). The runtime asks for `next` after every step, and the top
   * rarely changes (docs/simulator.md, Speed).
   */
  private liveTop: Timer | undefined

  arm(timers: ReadonlyArray<Timer>): void {
    for (const t of timers) {
      const id = timerId(t.key)
      const cur = this.armed.get(id)
      if (cur !== undefined && cur <= t.at) continue
      this.armed.set(id, t.at)
      this.liveTop = undefined
      this.push(t)
    }
  }

  /** The earliest live deadline. */
  next(): number | undefined {
    for (;;) {
      const top = this.heap[0]
      if (top === undefined) return undefined
      if (top === this.liveTop) return top.at
      if (this.armed.get(timerId(top.key)) === top.at) {
        this.liveTop = top
        return top.at
      }
      this.pop()
    }
  }

  /** Remove and return the earliest live timer due at `now`, if any. */
  takeDue(now: number): Timer | undefined {
    for (;;) {
      const top = this.heap[0]
      if (top === undefined || top.at > now) return undefined
      this.liveTop = undefined
      this.pop()
      const id = timerId(top.key)
      if (this.armed.get(id) !== top.at) continue
      this.armed.delete(id)
      return top
    }
  }

  private push(t: Timer): void {
    const h = this.heap
    let i = h.length
    h.push(t)
    while (i > 0) {
      const p = (i - 1) >> 1
      if (h[p]!.at <= t.at) break
      h[i] = h[p]!
      i = p
    }
    h[i] = t
  }

  private pop(): void {
    const h = this.heap
    const last = h.pop()!
    if (h.length === 0) return
    let i = 0
    for (;;) {
      const l = 2 * i + 1
      if (l >= h.length) break
      const r = l + 1
      const c = r < h.length && h[r]!.at < h[l]!.at ? r : l
      if (h[c]!.at >= last.at) break
      h[i] = h[c]!
      i = c
    }
    h[i] = last
  }
}
