/**
 * The checkers of the real-process tests (test/support/groupChecks.ts) on
 * made-up logs: each catches the bug it is there for, and lets the
 * legitimate patterns (re-delivery after a crash, a fenced process finishing
 * a batch it read before the fence) through.
 */
import { describe, expect, it } from "vitest"
import {
  handledOutsideOwnership,
  overlappingOwners,
  ownershipIntervals,
  perKeyOrderViolations,
  unhandled,
} from "./support/groupChecks.js"
import type { Line } from "./support/processes.js"

const line = (proc: string, t: number, ev: string, rest: Record<string, unknown> = {}): Line => ({
  proc,
  memberId: proc,
  t,
  ev,
  ...rest,
})
const begin = (proc: string, t: number, n: number, dc = 1) =>
  line(proc, t, "begin", { shard: 0, key: "k", n, id: `${n}-0`, dc })
const assigned = (proc: string, at: number) => line(proc, at, "assigned", { shard: 0, at })
const revoked = (proc: string, at: number) => line(proc, at, "revoked", { shard: 0, at })
const produced = new Map([["k", [1, 2, 3, 4]]])

describe("per-key order", () => {
  it("in order, and a rewind after a crash, pass", () => {
    expect(
      perKeyOrderViolations([begin("a", 1, 1), begin("a", 2, 2), begin("a", 3, 3)], produced),
    ).toEqual([])
    // a dies after starting 2; b re-delivers 2, then goes on
    const lines = [
      assigned("a", 0),
      begin("a", 1, 1),
      begin("a", 2, 2),
      assigned("b", 10),
      begin("b", 11, 2, 2),
      begin("b", 12, 3),
    ]
    expect(perKeyOrderViolations(lines, produced)).toEqual([])
  })

  it("a skipped message is a violation (new entries read before the previous owner's pending ones)", () => {
    const lines = [
      assigned("a", 0),
      begin("a", 1, 1),
      begin("a", 2, 2),
      assigned("b", 10),
      begin("b", 11, 3),
      begin("b", 12, 2, 2),
      begin("b", 13, 4),
    ]
    // 3 follows the 2 a started; the rewind to 2 then makes 4 a skip of 3
    expect(perKeyOrderViolations(lines, produced)).toEqual([
      "k: b started n=4 (#3) after #1 (n=2): skipped 1",
    ])
  })

  it("a fenced process finishing its old batch after the takeover is left out", () => {
    const lines = [
      assigned("a", 0),
      begin("a", 1, 1),
      assigned("b", 10),
      begin("b", 11, 2),
      begin("a", 12, 2), // a, stopped and resumed, goes on with its batch
      begin("b", 13, 3),
    ]
    expect(perKeyOrderViolations(lines, produced)).toEqual([])
    // ... and what it finishes then does not count as handled
    const done = (proc: string, t: number, n: number) =>
      line(proc, t, "done", { shard: 0, n, id: `${n}-0` })
    expect(unhandled([...lines, done("a", 2, 1), done("a", 14, 2)], 3)).toEqual([0, 2])
  })
})

describe("ownership intervals", () => {
  it("revoke before assign passes; an overlap and a start outside ownership are caught", () => {
    const good = [
      assigned("a", 0),
      begin("a", 1, 1),
      revoked("a", 5),
      assigned("b", 6),
      begin("b", 7, 2),
    ]
    const intervals = ownershipIntervals(good)
    expect(intervals).toHaveLength(2)
    expect(overlappingOwners(intervals)).toEqual([])
    expect(handledOutsideOwnership(good, intervals)).toEqual([])

    const bad = [assigned("a", 0), assigned("b", 3), revoked("a", 5), begin("a", 8, 1)]
    const badIntervals = ownershipIntervals(bad)
    expect(overlappingOwners(badIntervals)).toHaveLength(1)
    expect(handledOutsideOwnership(bad, badIntervals)).toHaveLength(1)
  })
})
