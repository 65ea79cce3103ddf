import { describe, expect, it } from "vitest"
import { timerId } from "../../src/coordinator/CoordinatorState.js"

describe("timerId (interned timer ids)", () => {
  it("is `<tag>:<memberId>`, the same string for the same key", () => {
    const a = timerId({ _tag: "Session", memberId: "m1" })
    expect(a).toBe("Session:m1")
    expect(timerId({ _tag: "Session", memberId: "m1" })).toBe(a)
    expect(timerId({ _tag: "Rebalance", memberId: "m1" })).toBe("Rebalance:m1")
  })

  it("stays correct past the cache bound (the cache starts over)", () => {
    let wrong = 0
    for (let i = 0; i < 70_000; i++)
      if (timerId({ _tag: "Session", memberId: `x${i}` }) !== `Session:x${i}`) wrong++
    expect(wrong).toBe(0)
    expect(timerId({ _tag: "Session", memberId: "x3" })).toBe("Session:x3")
  })
})
