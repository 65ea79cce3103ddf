/**
 * The coordinator's copy-on-write overlay (docs/simulator.md, Speed: its maps
 * are created on first write, its layout view once per draft).
 */
import { describe, expect, it } from "vitest"
import { initialState, type MemberEntry } from "../../src/coordinator/CoordinatorState.js"
import { Draft } from "../../src/coordinator/internal/Draft.js"
import { isEarlier } from "../../src/coordinator/internal/ShardSpace.js"
import { makeGroupConfig } from "../../src/index.js"

const config = makeGroupConfig({
  groupId: "g",
  stream: "s",
  shardCount: 4,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 5_000,
  heartbeatIntervalMs: 1_000,
})

const entry = (memberId: string): MemberEntry => ({
  memberId,
  memberEpoch: 1,
  incarnation: 1,
  joinSeq: 1,
  state: "STABLE",
  weight: 1,
  memberInfo: { consumerName: memberId, host: "h" },
})

describe("Draft (the coordinator's overlay)", () => {
  it("reads change nothing: no overlay, no records, no changes", () => {
    const state = initialState(config)
    state.members.set("m1", entry("m1"))
    state.target[0] = "m1"
    state.targetOf.set("m1", new Set([0])) // (the index replay keeps)
    const draft = new Draft(state, 5)
    expect(draft.member("m1")).toBe(state.members.get("m1"))
    expect(draft.member("m2")).toBeUndefined()
    expect(draft.targetOf(0)).toBe("m1")
    expect(draft.currentOf(0)).toBeNull()
    expect(draft.revocationOf(0)).toBeNull()
    expect(draft.heldOf(0)).toBeNull()
    expect(draft.targetedTo("m1")).toEqual([0])
    expect(draft.revokingFrom("m1")).toEqual([])
    expect(draft.drafted()).toBeUndefined()
    expect(draft.noticeList()).toEqual([])
    expect(draft.hasChanges()).toBe(false)
    expect(draft.finish()).toEqual([])
  })

  it("a write shows through every read and becomes a record", () => {
    const state = initialState(config)
    state.members.set("m1", entry("m1"))
    const draft = new Draft(state, 5)
    draft.setTarget(1, "m1")
    expect(draft.hasChanges()).toBe(true)
    expect(draft.targetOf(1)).toBe("m1")
    expect(draft.targetedTo("m1")).toEqual([1])
    draft.removeMember("m1")
    expect(draft.member("m1")).toBeUndefined()
    expect(draft.drafted()?.get("m1")).toBeNull()
    draft.notify("m2")
    expect(draft.noticeList()).toEqual([]) // not a member
    expect(draft.finish().map((r) => r._tag)).toEqual(["MemberRemoved", "TargetAssignmentChanged"])
  })

  it("the layout view follows the draft: drains after it was taken, a migration, its completion", () => {
    const state = initialState(config)
    const draft = new Draft(state, 5)
    const before = draft.layoutView()
    expect(before.layout).toBe(state.layout)
    expect(before.generations).toEqual([])
    expect(draft.layoutView()).toBe(before) // built once
    const next = { shardCount: 8, generation: 1, firstShard: 4 }
    draft.startMigration(next)
    const migrating = draft.layoutView()
    expect(migrating.layout).toEqual(next)
    expect(migrating.generations).toEqual([state.layout])
    expect(isEarlier(migrating, 2)).toBe(true)
    expect(migrating.isDrained(2)).toBe(false)
    draft.addDrained(2)
    expect(migrating.isDrained(2)).toBe(true) // a drain after the view was taken
    expect(draft.migrationCompleted).toBe(false)
    draft.completeMigration()
    expect(draft.migrationCompleted).toBe(true)
    expect(draft.layoutView().generations).toEqual([])
    expect(draft.layoutView().layout).toEqual(next)
  })
})
