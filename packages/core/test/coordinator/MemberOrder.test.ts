import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { initialState, type MemberEntry } from "../../src/coordinator/CoordinatorState.js"
import { Draft } from "../../src/coordinator/internal/Draft.js"
import { assignorMembers, sortedIds } from "../../src/coordinator/internal/MemberOrder.js"
import { makeGroupConfig } from "../../src/index.js"
import { numRuns } from "../assignor/arbitraries.js"

const runs = { numRuns: numRuns() }
const byId = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

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

const config = makeGroupConfig({
  groupId: "g",
  stream: "s",
  shardCount: 4,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 5_000,
  heartbeatIntervalMs: 1_000,
})

// few distinct ids, so deletes, re-adds and re-sets of existing ids are common
const anId = fc.stringMatching(/^[a-e]{1,2}$/)
const anEntry = fc.record({
  id: anId,
  leaving: fc.boolean(),
  weight: fc.constantFrom(1, 2, 0.5),
})
const op = fc.oneof(
  fc.record({ kind: fc.constant("set" as const), e: anEntry }),
  fc.record({ kind: fc.constant("delete" as const), id: anId }),
  fc.record({ kind: fc.constant("check" as const) }),
)
const toEntry = (e: { id: string; leaving: boolean; weight: number }) =>
  entry(e.id, e.leaving ? "LEAVING" : "STABLE", e.weight)

/** What the assignor was given before MemberOrder: filter, then sort. */
const naive = (draft: Draft) => {
  const all = new Map(draft.state.members)
  for (const [id, m] of draft.members) {
    if (m === null) all.delete(id)
    else all.set(id, m)
  }
  const live = [...all.values()]
    .filter((m) => m.state !== "LEAVING")
    .sort((a, b) => byId(a.memberId, b.memberId))
  return { ids: live.map((m) => m.memberId), weights: live.map((m) => m.weight) }
}

describe("MemberOrder (the assignor's member order, kept up to date)", () => {
  it("sortedIds equals a fresh sort after any sequence of sets, deletes and re-adds", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const members = new Map<string, MemberEntry>()
        for (const o of ops) {
          if (o.kind === "set") members.set(o.e.id, toEntry(o.e))
          else if (o.kind === "delete") members.delete(o.id)
          else expect(sortedIds(members)).toEqual([...members.keys()].sort(byId))
        }
        expect(sortedIds(members)).toEqual([...members.keys()].sort(byId))
      }),
      runs,
    )
  })

  it("assignorMembers equals filter-then-sort for any registry history and draft overlay", () => {
    const overlayOp = fc.oneof(
      fc.record({ kind: fc.constant("put" as const), e: anEntry }),
      fc.record({ kind: fc.constant("remove" as const), id: anId }),
    )
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 60 }),
        fc.array(fc.array(overlayOp, { maxLength: 4 }), { minLength: 1, maxLength: 4 }),
        (ops, drafts) => {
          const state = initialState(config)
          for (const o of ops) {
            if (o.kind === "set") state.members.set(o.e.id, toEntry(o.e))
            else if (o.kind === "delete") state.members.delete(o.id)
            else assignorMembers(new Draft(state, 0))
          }
          for (const changes of drafts) {
            const draft = new Draft(state, 0)
            for (const c of changes) {
              if (c.kind === "put") draft.putMember(toEntry(c.e))
              else draft.removeMember(c.id)
            }
            expect(assignorMembers(draft)).toEqual(naive(draft))
          }
        },
      ),
      runs,
    )
  })

  it("a delete and a re-add of the same id between two calls keeps one entry, with its new weight", () => {
    const members = new Map([
      ["b", entry("b")],
      ["a", entry("a")],
      ["c", entry("c")],
    ])
    expect(sortedIds(members)).toEqual(["a", "b", "c"])
    members.delete("a")
    members.set("a", entry("a", "STABLE", 3))
    members.set("d", entry("d"))
    members.delete("c")
    expect(sortedIds(members)).toEqual(["a", "b", "d"])
    const state = initialState(config)
    for (const [id, m] of members) state.members.set(id, m)
    expect(assignorMembers(new Draft(state, 0))).toEqual({
      ids: ["a", "b", "d"],
      weights: [3, 1, 1],
    })
  })

  it("a registered entry replaced in place (same key) is read again: new weight, leaving, back", () => {
    // the order caches each entry's weight and leaving state until its entry object changes
    const state = initialState(config)
    for (const id of ["b", "a", "c"]) state.members.set(id, entry(id))
    const members = () => assignorMembers(new Draft(state, 0))
    expect(members()).toEqual({ ids: ["a", "b", "c"], weights: [1, 1, 1] })
    state.members.set("b", entry("b", "STABLE", 2))
    expect(members()).toEqual({ ids: ["a", "b", "c"], weights: [1, 2, 1] })
    state.members.set("a", entry("a", "LEAVING"))
    expect(members()).toEqual({ ids: ["b", "c"], weights: [2, 1] })
    state.members.delete("c")
    state.members.set("a", entry("a", "STABLE", 0.5))
    expect(members()).toEqual({ ids: ["a", "b"], weights: [0.5, 2] })
  })

  it("assignorMembers: registered and draft members, not leaving, the draft's changes applied, by id", () => {
    const state = initialState(config)
    for (const id of ["m3", "m1", "m5", "m2"]) state.members.set(id, entry(id))
    state.members.set("m4", entry("m4", "LEAVING"))
    const draft = new Draft(state, 0)
    draft.removeMember("m2")
    draft.putMember(entry("m0"))
    draft.putMember(entry("m6"))
    draft.putMember(entry("m5", "LEAVING"))
    draft.putMember(entry("m3", "STABLE", 2))
    draft.putMember(entry("m4"))
    expect(assignorMembers(draft)).toEqual({
      ids: ["m0", "m1", "m3", "m4", "m6"],
      weights: [1, 1, 2, 1, 1],
    })
  })
})
