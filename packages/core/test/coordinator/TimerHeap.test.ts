/**
 * The coordinator shell's armed deadlines (docs/simulator.md, Speed: `next`
 * remembers the live top until the heap or an armed deadline changes).
 */
import { describe, expect, it } from "vitest"
import type { Timer } from "../../src/coordinator/CoordinatorState.js"
import { TimerHeap } from "../../src/coordinator/internal/TimerHeap.js"

const session = (memberId: string, at: number): Timer => ({
  key: { _tag: "Session", memberId },
  at,
})

describe("TimerHeap", () => {
  it("next follows arming, re-arming earlier, later (a no-op) and taking", () => {
    const heap = new TimerHeap()
    expect(heap.next()).toBeUndefined()
    heap.arm([session("a", 100), session("b", 200)])
    expect(heap.next()).toBe(100)
    expect(heap.next()).toBe(100) // the remembered top
    heap.arm([session("b", 50)]) // earlier: a new top
    expect(heap.next()).toBe(50)
    heap.arm([session("a", 300)]) // later than armed: no-op, the earlier one fires first
    expect(heap.next()).toBe(50)
    expect(heap.takeDue(49)).toBeUndefined()
    expect(heap.takeDue(60)).toEqual(session("b", 50))
    // b's replaced entry (200) is stale: skipped
    expect(heap.next()).toBe(100)
    expect(heap.takeDue(1_000)).toEqual(session("a", 100))
    expect(heap.next()).toBeUndefined()
    expect(heap.takeDue(1_000)).toBeUndefined()
  })

  it("a deadline armed again at once after it was taken is live again", () => {
    const heap = new TimerHeap()
    heap.arm([session("a", 100)])
    expect(heap.next()).toBe(100)
    const taken = heap.takeDue(100)!
    expect(heap.next()).toBeUndefined()
    heap.arm([taken]) // the same timer object, re-armed by its handler
    expect(heap.next()).toBe(100)
    expect(heap.takeDue(100)).toBe(taken)
  })
})
