/**
 * `ProcTable` (docs/simulator.md, Speed): the per-process fields most events
 * look at first, in typed arrays by process id. Runs past 1,024 processes
 * grow it; nothing of an earlier process may be lost on the way.
 *
 * @module
 */
import { describe, expect, it } from "vitest"
import { ProcTable } from "../src/members.js"

describe("ProcTable", () => {
  it("a new process starts alive, unpaused, with nothing in flight and no timer", () => {
    const t = new ProcTable()
    t.add(0)
    expect(t.alive(0)).toBe(true)
    expect(t.paused(0)).toBe(false)
    expect(t.inFlight[0]).toBe(0)
    expect(t.timerAt[0]).toBe(Number.POSITIVE_INFINITY)
  })

  it("keeps every earlier process's fields when it grows past its capacity (twice)", () => {
    const t = new ProcTable()
    const n = 5_000
    for (let pid = 0; pid < n; pid++) {
      t.add(pid)
      // set something distinct per process right away, before later adds grow the arrays
      if (pid % 3 === 0) t.flags[pid] = 0 // stopped
      if (pid % 5 === 0) t.flags[pid]! |= 2 // paused
      t.inFlight[pid] = pid + 7
      t.timerAt[pid] = pid * 1.5
    }
    expect(t.flags.length).toBeGreaterThanOrEqual(n)
    for (let pid = 0; pid < n; pid++) {
      expect(t.alive(pid)).toBe(pid % 3 !== 0)
      expect(t.paused(pid)).toBe(pid % 5 === 0)
      expect(t.inFlight[pid]).toBe(pid + 7)
      expect(t.timerAt[pid]).toBe(pid * 1.5)
    }
  })

  it("a process id far past the capacity grows it at once", () => {
    const t = new ProcTable()
    t.add(0)
    t.inFlight[0] = 3
    t.add(100_000)
    expect(t.alive(100_000)).toBe(true)
    expect(t.inFlight[0]).toBe(3)
    expect(t.alive(0)).toBe(true)
  })
})
