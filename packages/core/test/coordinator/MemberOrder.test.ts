import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { initialState, type MemberEntry } from "../../src/coordinator/CoordinatorState.js"
import { Draft } from "../../src/coordinator/internal/Draft.js"
import { assignorMembers, sortedIds } from "../../src/coordinator/internal/MemberOrder.js"
import { makeGroupConfig } from "../../src/index.js"
import { numRuns } from "../assignor/arbitraries.js"

const runs = { numRuns: numRuns() }
const fresh = (ids: Iterable<string>): Array<string> => [...ids].sort((a, b) => (a < b ? -1 : 1))

const entry = (memberId: string, state: MemberEntry["state"] = "STABLE", weight = 1) =>
  ({
    memberId,
    memberEpoch: 1,
    incarnation: 1,
    joinSeq: 1,
    state,
    weight,
    memberInfo: { consumerName: memberId, host: "h" },
  }) satisfies MemberEntry

const op = fc.record({
  kind: fc.constantFrom("set", "delete", "check"),
  // few distinct ids, so deletes, re-adds and re-sets of existing ids are common
  id: fc.stringMatching(/^[a-e]{1,2}$/),
})

describe("MemberOrder (the assignor's member order, kept up to date)", () => {
  it("sortedIds equals a fresh sort after any sequence of sets, deletes and re-adds", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const members = new Map<string, number>()
        for (const o of ops) {
          if (o.kind === "set") members.set(o.id, 1)
          else if (o.kind === "delete") members.delete(o.id)
          else expect(sortedIds(members)).toEqual(fresh(members.keys()))
        }
        expect(sortedIds(members)).toEqual(fresh(members.keys()))
      }),
      runs,
    )
  })

  it("a delete and a re-add of the same id between two calls keeps one entry", () => {
    const members = new Map([
      ["b", 1],
      ["a", 1],
      ["c", 1],
    ])
    expect(sortedIds(members)).toEqual(["a", "b", "c"])
    members.delete("a")
    members.set("a", 1)
    members.set("d", 1)
    members.delete("c")
    expect(sortedIds(members)).toEqual(["a", "b", "d"])
  })

  it("assignorMembers: registered and draft members, not leaving, the draft's changes applied, by id", () => {
    const state = initialState(
      makeGroupConfig({
        groupId: "g",
        stream: "s",
        shardCount: 4,
        sessionTimeoutMs: 10_000,
        rebalanceTimeoutMs: 5_000,
        heartbeatIntervalMs: 1_000,
      }),
    )
    for (const id of ["m3", "m1", "m5", "m2"]) state.members.set(id, entry(id))
    state.members.set("m4", entry("m4", "LEAVING"))
    const draft = new Draft(state, 0)
    draft.removeMember("m2")
    draft.putMember(entry("m0"))
    draft.putMember(entry("m6"))
    draft.putMember(entry("m5", "LEAVING"))
    draft.putMember(entry("m3", "STABLE", 2))
    draft.putMember(entry("m4"))
    expect(assignorMembers(draft)).toEqual([
      { id: "m0", weight: 1 },
      { id: "m1", weight: 1 },
      { id: "m3", weight: 2 },
      { id: "m4", weight: 1 },
      { id: "m6", weight: 1 },
    ])
  })
})
