/**
 * The xackdel rule as one pure function (docs/runtime.md, "Ack policies and
 * other groups"): the memory port's acknowledge and the simulator's fan-out
 * groups decide deletions with it.
 */
import { describe, expect, it } from "vitest"
import { AckPolicy } from "../src/index.js"

interface Group {
  readonly delivered: number
  readonly pending: ReadonlySet<number>
}
const done = (id: number) => (g: Group) => id <= g.delivered && !g.pending.has(id)

describe("AckPolicy.doneByEveryGroup", () => {
  const a: Group = { delivered: 10, pending: new Set<number>() }
  it("is true only when every group delivered the entry and holds it pending nowhere", () => {
    expect(
      AckPolicy.doneByEveryGroup([a, { delivered: 10, pending: new Set<number>() }], done(5)),
    ).toBe(true)
  })
  it("keeps an entry another group has not read yet", () => {
    expect(
      AckPolicy.doneByEveryGroup([a, { delivered: 4, pending: new Set<number>() }], done(5)),
    ).toBe(false)
  })
  it("keeps an entry another group still holds pending", () => {
    expect(AckPolicy.doneByEveryGroup([a, { delivered: 10, pending: new Set([5]) }], done(5))).toBe(
      false,
    )
  })
  it("with one group, that group's own state decides", () => {
    expect(AckPolicy.doneByEveryGroup([a], done(5))).toBe(true)
    expect(AckPolicy.doneByEveryGroup([a], done(11))).toBe(false)
  })
})
