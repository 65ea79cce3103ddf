import { describe, expect, it } from "vitest"
import { timerId } from "../../src/coordinator/CoordinatorState.js"

describe("timerId (interned timer ids)", () => {
  it("is `<tag>:<memberId>`, the same string for the same key", () => {
    const a = timerId({ _tag: "Session", memberId: "m1" })
    expect(a).toBe("Session:m1")
    expect(timerId({ _tag: "Session", memberId: "m1" })).toBe(a)
    expect(timerId({ _tag: "Rebalance", memberId: "m1" })).toBe("Rebalance:m1")
  })

  it("the last key remembered: the same object again, then other keys, each gets its own id", () => {
    // timerId remembers the last key object it was asked about (the shell asks twice per timer)
    const session = { _tag: "Session", memberId: "m7" } as const
    expect(timerId(session)).toBe("Session:m7")
    expect(timerId(session)).toBe("Session:m7")
    expect(timerId({ _tag: "Rebalance", memberId: "m7" })).toBe("Rebalance:m7")
    expect(timerId({ _tag: "Session", memberId: "m8" })).toBe("Session:m8")
    expect(timerId(session)).toBe("Session:m7")
    expect(timerId({ _tag: "Release", memberId: "" })).toBe("Release:")
    expect(timerId({ _tag: "Session", memberId: "" })).toBe("Session:")
  })

  it("stays correct past the cache bound (the cache starts over)", () => {
    let wrong = 0
    for (let i = 0; i < 70_000; i++)
      if (timerId({ _tag: "Session", memberId: `x${i}` }) !== `Session:x${i}`) wrong++
    expect(wrong).toBe(0)
    expect(timerId({ _tag: "Session", memberId: "x3" })).toBe("Session:x3")
  })
})
