import { Effect, Option, Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  Coordinator,
  type CoordinatorState,
  fromSnapshot,
  initialState,
  replayAll,
  SnapshotJson,
  toSnapshot,
} from "../../src/index.js"
import { config, Harness, SimMember } from "./harness.js"

/** A settled group of two members (a: [0, 1], b: [2, 3]) committed to the harness store. */
const settled = () => {
  const h = new Harness()
  const a = new SimMember("a")
  const b = new SimMember("b")
  for (let i = 0; i < 4; i++) {
    a.onResponse(h.hb(a.request()).response)
    b.onResponse(h.hb(b.request()).response)
  }
  expect(h.state.target).toEqual(["a", "a", "b", "b"])
  return h
}

/** What a new leader does: load the stored snapshot, elect itself, commit, replay. */
const takeOver = (h: Harness, holder: string, leaseToken: number, now = h.now) => {
  const loaded = Coordinator.load(h.stored(), now)
  const election = Coordinator.elect(loaded.state, { holder, leaseToken }, now)
  if (election._tag === "Refused") return { loaded, election, revision: undefined }
  const revision =
    election.records.length === 0
      ? loaded.state.storeRevision
      : Effect.runSync(h.store.commit("g", loaded.state.storeRevision, election.records))
  replayAll(loaded.state, election.records)
  loaded.state.storeRevision = revision
  return { loaded, election, revision }
}

/** Every persisted field except the coordinator epoch and the revision. */
const groupView = (s: CoordinatorState) => {
  const { coordinator: _c, storeRevision: _r, ...rest } = toSnapshot(s)
  return rest
}

describe("coordinator election (CoordinatorElected)", () => {
  it("replay stores the elected holder and lease token as the coordinator epoch", () => {
    const state = initialState(config())
    expect(state.coordinator).toBeNull()
    replayAll(state, [{ _tag: "CoordinatorElected", holder: "c1", leaseToken: 7 }])
    expect(state.coordinator).toEqual({ holder: "c1", leaseToken: 7 })
    expect(toSnapshot(state).coordinator).toEqual({ holder: "c1", leaseToken: 7 })
  })

  it("the election commit bumps storeRevision by exactly 1 and changes no epoch, member or shard", () => {
    const h = settled()
    const before = h.stored()
    const { election, loaded, revision } = takeOver(h, "c2", 1)
    expect(election._tag).toBe("Elected")
    if (election._tag !== "Elected") return
    expect(election.records.map((r) => r._tag)).toEqual(["CoordinatorElected", "Audit"])
    expect(revision).toBe(before.storeRevision + 1)
    expect(h.store.revision("g")).toBe(before.storeRevision + 1)
    const after = h.stored()
    expect(after.coordinator).toEqual({ holder: "c2", leaseToken: 1 })
    expect(groupView(loaded.state)).toEqual(groupView(fromSnapshot(before)))
    expect(groupView(fromSnapshot(after))).toEqual(groupView(fromSnapshot(before)))
    expect(after.groupEpoch).toBe(before.groupEpoch)
    expect(after.assignmentEpoch).toBe(before.assignmentEpoch)
    expect(after.maxMemberEpoch).toBe(before.maxMemberEpoch)
    expect(after.tokens).toEqual(before.tokens)
    const audit = h.store.auditLog("g").at(-1)
    expect(audit?.kind).toBe("CoordinatorElected")
    expect(audit?.before).toEqual(audit?.after)
  })

  it("after the election commit, the ex-leader's commit from its older state fails the CAS", () => {
    const h = settled()
    const rev = h.state.storeRevision
    takeOver(h, "c2", 1)
    // the ex-leader (the harness state, still at `rev`) expires a member
    const expiry = Coordinator.onTimer(h.state, { _tag: "Session", memberId: "a" }, 1e9)
    expect(expiry.records.length).toBeGreaterThan(0)
    const stale = Effect.runSync(Effect.flip(h.store.commit("g", rev, expiry.records)))
    expect(stale._tag).toBe("StaleRevision")
  })

  it("an election with a lease token not above the stored one is refused; a higher one wins", () => {
    const h = settled()
    takeOver(h, "c2", 5)
    const rev = h.store.revision("g")
    for (const [holder, token] of [
      ["c1", 4],
      ["c1", 5],
      ["c3", 1],
    ] as const) {
      const { election } = takeOver(h, holder, token)
      expect(election._tag).toBe("Refused")
      if (election._tag === "Refused")
        expect(election.current).toEqual({ holder: "c2", leaseToken: 5 })
    }
    expect(h.store.revision("g")).toBe(rev)
    const { election } = takeOver(h, "c1", 6)
    expect(election._tag).toBe("Elected")
    expect(h.stored().coordinator).toEqual({ holder: "c1", leaseToken: 6 })
  })

  it("the leader that won a lease re-loading with the same lease has nothing to commit", () => {
    const h = settled()
    takeOver(h, "c2", 3)
    const rev = h.store.revision("g")
    const { election } = takeOver(h, "c2", 3)
    expect(election).toEqual({ _tag: "Elected", records: [] })
    expect(h.store.revision("g")).toBe(rev)
  })

  it("createGroup with an election elects the creator in the first commit", () => {
    const cfg = config()
    const records = Coordinator.createGroup(cfg, 0, { holder: "c1", leaseToken: 1 })
    const state = initialState(cfg)
    replayAll(state, records)
    expect(state.coordinator).toEqual({ holder: "c1", leaseToken: 1 })
    expect(state.groupEpoch).toBe(0)
    expect(Coordinator.elect(state, { holder: "c0", leaseToken: 1 }, 0)._tag).toBe("Refused")
  })

  it("snapshot round trip: the coordinator epoch survives encode/decode; an older snapshot without it decodes", () => {
    const h = settled()
    takeOver(h, "c2", 9)
    const stored = h.stored()
    const json = Schema.encodeSync(SnapshotJson)(stored)
    const decoded = Schema.decodeUnknownSync(SnapshotJson)(json)
    expect(decoded).toEqual(stored)
    expect(fromSnapshot(decoded).coordinator).toEqual({ holder: "c2", leaseToken: 9 })
    const { coordinator: _c, ...older } = stored
    const legacy = Schema.decodeUnknownSync(SnapshotJson)(Schema.encodeSync(SnapshotJson)(older))
    expect(legacy.coordinator).toBeUndefined()
    expect(fromSnapshot(legacy).coordinator).toBeNull()
    // the store's compaction path replays it too
    expect(Option.isSome(Effect.runSync(h.store.load("g")))).toBe(true)
  })
})
