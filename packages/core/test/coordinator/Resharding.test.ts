/**
 * The group's side of a layout migration (docs/resharding.md), driven through
 * the pure coordinator: following the stream to newer generations, drained
 * reports, shards held back until the earlier shards overlapping them are
 * drained, completion, rollback, and the per-key order invariant under any
 * order of drains.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  Coordinator,
  type CoordinatorResult,
  Layout,
  MemberMachine,
  monitor,
  type ShardLayout,
} from "../../src/index.js"
import { numRuns } from "../assignor/arbitraries.js"
import { config, Harness, SimMember, shards } from "./harness.js"

const gen0: ShardLayout = { generation: 0, firstShard: 0, shardCount: 4 }
const split = Layout.next(gen0, 8) // shards 4..11
const back = Layout.next(split, 4) // rollback: shards 12..15

const settle = (h: Harness, ...members: Array<SimMember>) => {
  for (let i = 0; i < 4; i++) for (const m of members) m.onResponse(h.hb(m.request()).response)
}

const changed = (r: Coordinator.Reconfiguration): CoordinatorResult<void> => {
  if (r._tag !== "Changed") throw new Error(`expected Changed, got ${JSON.stringify(r)}`)
  return r.result
}

/** Two members settled on 4 shards, then the group follows the stream to `layouts`. */
const migrating = (...layouts: Array<ShardLayout>) => {
  const h = new Harness(config({ shardCount: 4 }))
  const a = new SimMember("a")
  const b = new SimMember("b")
  settle(h, a, b)
  const g = h.state.groupEpoch
  const result = h.apply(changed(Coordinator.followLayout(h.state, [gen0, ...layouts], 0)))
  return { h, a, b, g, result }
}

/** Every current owner of a shard holds it only after every earlier shard overlapping it drained. */
const expectOrderHeld = (h: Harness) => {
  const gens = [
    ...(h.state.resharding._tag === "Migrating" ? h.state.resharding.generations : []),
    h.state.layout,
  ]
  for (let s = 0; s < h.state.current.length; s++) {
    if (h.state.current[s] == null) continue
    const own = gens.find((g) => Layout.contains(g, s))
    if (own === undefined) continue
    for (const earlier of gens.filter((g) => g.generation < own.generation))
      for (const e of Layout.overlapping(earlier, own, s))
        expect(h.state.drained.has(e), `shard ${s} held before earlier shard ${e} drained`).toBe(
          true,
        )
  }
}

describe("following the stream to a new layout generation", () => {
  it("records the migration, bumps groupEpoch, keeps the old owners and holds new shards back", () => {
    const { h, a, b, g, result } = migrating(split)
    expect(result.records[0]).toEqual({ _tag: "MigrationStarted", layout: split })
    expect(h.state.groupEpoch).toBe(g + 1)
    expect(h.state.layout).toEqual(split)
    expect(h.state.resharding).toEqual({ _tag: "Migrating", generations: [gen0], drained: [] })
    expect(h.state.target).toHaveLength(12)
    // old shards keep their owners; every new shard has a target
    expect(h.state.target.slice(0, 4)).toEqual(["a", "a", "b", "b"])
    for (let s = 4; s < 12; s++) expect(h.state.target[s]).not.toBeNull()
    const ra = h.hb(a.request())
    expect(shards(ra.response)).toEqual([0, 1])
    expect(ra.response.pending.length).toBeGreaterThan(0)
    expect(ra.fences).toEqual([])
    expect(ra.response.layout).toEqual(split) // a still knows generation 0
    void b
  })

  it("a drained old shard leaves the target, and the new shards it fed are granted", () => {
    const { h, a, b } = migrating(split)
    expect(Layout.overlapping(split, gen0, 0)).toEqual([4, 5])
    a.exhausted.add(0)
    const r = h.hb(a.request())
    expect(r.response.errorCode).toBe("NONE")
    expect(h.state.drained.has(0)).toBe(true)
    expect(h.state.target[0]).toBeNull()
    expect(h.state.revocations[0]?.memberId).toBe("a")
    expect(r.records.some((x) => x._tag === "ShardsDrained")).toBe(true)
    expectOrderHeld(h)
    a.onResponse(r.response)
    settle(h, a, b)
    const owners = [4, 5].map((s) => h.owner(s))
    expect(owners.every((o) => o !== null)).toBe(true)
    // shards fed by undrained old shards are still held back
    for (const s of [6, 7, 8, 9, 10, 11]) expect(h.owner(s)).toBeNull()
    expectOrderHeld(h)
    expect(monitor(h.state).resharding).toMatchObject({
      phase: "migrating",
      shardsDrained: 1,
      shardsToDrain: 4,
      blockedShards: 6,
    })
  })

  it("when every old shard is drained the migration completes: one layout, rebalanced", () => {
    const { h, a, b, g } = migrating(split)
    for (const s of [0, 1]) a.exhausted.add(s)
    for (const s of [2, 3]) b.exhausted.add(s)
    settle(h, a, b)
    settle(h, a, b)
    expect(h.state.resharding).toEqual({ _tag: "Idle" })
    expect(h.state.groupEpoch).toBe(g + 2) // started, completed
    expect(h.store.auditLog("g").map((e) => e.kind)).toContain("ReshardCompleted")
    for (let s = 0; s < 4; s++) expect(h.owner(s)).toBeNull()
    const counts = [a, b].map((m) => [...m.owned.keys()].filter((s) => s >= 4).length)
    expect(counts).toEqual([4, 4])
    expect(monitor(h.state).resharding.phase).toBe("idle")
    // the store replays to the same state
    expect(h.stored()).toEqual(h.snapshot())
  })

  it("every old shard drained but the last: the migration does not complete and the new shards the last one feeds are not delivered", () => {
    const { h, a, b, g } = migrating(split)
    expect(h.owner(3)).toBe("b")
    expect(Layout.overlapping(split, gen0, 3)).toEqual([10, 11])
    for (const s of [0, 1]) a.exhausted.add(s)
    b.exhausted.add(2) // 3, the last old shard, still has messages
    settle(h, a, b)
    settle(h, a, b)
    expect(h.state.resharding).toEqual({
      _tag: "Migrating",
      generations: [gen0],
      drained: [0, 1, 2],
    })
    expect(h.state.drained.has(3)).toBe(false)
    expect(h.state.layout).toEqual(split)
    expect(h.state.groupEpoch).toBe(g + 1) // started, not completed
    expect(h.store.auditLog("g").map((e) => e.kind)).not.toContain("ReshardCompleted")
    expect(monitor(h.state).resharding).toMatchObject({
      phase: "migrating",
      shardsDrained: 3,
      shardsToDrain: 4,
      blockedShards: 2,
    })
    // the last old shard is still read by its owner; what it feeds waits for it
    expect(h.owner(3)).toBe("b")
    expect(b.owned.has(3)).toBe(true)
    for (const s of [10, 11]) {
      expect(h.owner(s), `shard ${s}`).toBeNull()
      for (const m of [a, b]) expect(m.owned.has(s), `${m.id} reads shard ${s}`).toBe(false)
    }
    for (let s = 4; s < 10; s++) expect(h.owner(s), `shard ${s}`).not.toBeNull()
    expectOrderHeld(h)
    // and it completes once the last one drains too
    b.exhausted.add(3)
    settle(h, a, b)
    settle(h, a, b)
    expect(h.state.resharding).toEqual({ _tag: "Idle" })
    for (const s of [10, 11]) expect(h.owner(s), `shard ${s}`).not.toBeNull()
  })

  it("a drained report for a shard of the current layout is ignored; one for an older grant is stale; one out of range is a violation", () => {
    const { h, a } = migrating(split)
    const stale = h.hb({ ...a.request(), drainedShards: [{ shard: 0, token: 99 }] })
    expect(stale.response.errorCode).toBe("NONE")
    expect(h.state.drained.size).toBe(0)
    const current = h.hb({ ...a.request(), drainedShards: [{ shard: 5, token: 1 }] })
    expect(current.response.errorCode).toBe("NONE")
    expect(h.state.drained.size).toBe(0)
    const outOfRange = h.hb({ ...a.request(), drainedShards: [{ shard: 12, token: 1 }] })
    expect(outOfRange.response.errorCode).toBe("INVALID_REQUEST")
    expect(outOfRange.response.errorMessage).toContain("out of range")
  })

  it("finding F4: an owner that finds its shard sealed and drained before the leader adopted the reshard is not fenced; its report counts once adopted", () => {
    const h = new Harness(config({ shardCount: 4 }))
    const a = new SimMember("a")
    settle(h, a)
    const epoch = a.epoch
    // the reshard sealed shard 0; a's read loop found it drained; the leader still has gen0 only
    a.exhausted.add(0)
    const early = h.hb(a.request())
    expect(early.response.errorCode).toBe("NONE")
    a.onResponse(early.response)
    expect(a.epoch).toBe(epoch)
    expect(h.owner(0)).toBe("a")
    expect(h.state.drained.size).toBe(0)
    // the leader adopts the new generation: the same report now counts
    h.apply(changed(Coordinator.followLayout(h.state, [gen0, split], 0)))
    settle(h, a)
    expect(h.state.drained.has(0)).toBe(true)
    expect(h.store.auditLog("g").map((e) => e.kind)).toContain("ShardsDrained")
  })

  it("a rollback is one more generation: the newest waits for both earlier ones", () => {
    const { h, a, b } = migrating(split, back)
    expect(h.state.layout).toEqual(back)
    expect(h.state.resharding).toMatchObject({ generations: [gen0, split] })
    // drain all of generation 0: generation 1 shards may be read, generation 2 not yet
    for (const s of [0, 1]) a.exhausted.add(s)
    for (const s of [2, 3]) b.exhausted.add(s)
    settle(h, a, b)
    expectOrderHeld(h)
    for (let s = 12; s < 16; s++) expect(h.owner(s)).toBeNull()
    const gen1Owned = [...a.owned.keys(), ...b.owned.keys()].filter((s) => s >= 4 && s < 12)
    expect(gen1Owned.length).toBeGreaterThan(0)
    // drain generation 1: the migration completes on generation 2
    for (const m of [a, b]) for (const s of m.owned.keys()) if (s >= 4 && s < 12) m.exhausted.add(s)
    for (let i = 0; i < 6; i++) {
      settle(h, a, b)
      for (const m of [a, b])
        for (const s of m.owned.keys()) if (s >= 4 && s < 12) m.exhausted.add(s)
    }
    expectOrderHeld(h)
    expect(h.state.resharding).toEqual({ _tag: "Idle" })
    expect([...a.owned.keys(), ...b.owned.keys()].sort((x, y) => x - y)).toEqual([12, 13, 14, 15])
  })

  it("a layout that does not follow the group's is refused with both generations named", () => {
    const h = new Harness(config({ shardCount: 4 }))
    const r = Coordinator.followLayout(
      h.state,
      [{ generation: 1, firstShard: 2, shardCount: 8 }],
      0,
    )
    expect(r._tag).toBe("Refused")
    expect(r._tag === "Refused" && r.reason).toContain("does not follow generation 0")
    expect(Coordinator.followLayout(h.state, [gen0], 0)._tag).toBe("Unchanged")
  })

  it("per-key order holds for any order of drains, joins and leaves (property)", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(1, 2, 3, 5, 8),
        fc.array(fc.oneof(fc.nat(40), fc.constant(-1), fc.constant(-2)), { maxLength: 60 }),
        (count, steps) => {
          const h = new Harness(config({ shardCount: 4 }))
          const members = [new SimMember("a"), new SimMember("b"), new SimMember("c")]
          const live = [true, true, false]
          settle(h, members[0]!, members[1]!)
          const to = Layout.next(gen0, count)
          h.apply(changed(Coordinator.followLayout(h.state, [gen0, to], 0)))
          for (const step of steps) {
            if (step === -1) {
              // c joins or leaves
              const c = members[2]!
              if (live[2]) {
                h.hb(c.leaveRequest())
                c.reset()
              }
              live[2] = !live[2]
            } else if (step === -2) {
              for (const m of members) for (const s of m.owned.keys()) if (s < 4) m.exhausted.add(s)
            } else {
              const i = step % 3
              if (!live[i]) continue
              const m = members[i]!
              // drain some old shard it owns
              const old = [...m.owned.keys()].filter((s) => s < 4)
              if (old.length > 0 && step % 2 === 0) m.exhausted.add(old[step % old.length]!)
              m.onResponse(h.hb(m.request()).response)
            }
            expectOrderHeld(h)
          }
          // every member drains everything old: the migration completes
          for (let round = 0; round < 8; round++)
            members.forEach((m, i) => {
              if (!live[i]) return
              for (const s of m.owned.keys()) if (s < 4) m.exhausted.add(s)
              m.onResponse(h.hb(m.request()).response)
              expectOrderHeld(h)
            })
          expect(h.state.resharding).toEqual({ _tag: "Idle" })
          for (let s = to.firstShard; s < to.firstShard + count; s++)
            expect(h.owner(s)).not.toBeNull()
          expect(h.stored()).toEqual(h.snapshot())
        },
      ),
      { numRuns: numRuns(200) },
    )
  })
})

describe("the member machine reports drained shards", () => {
  const memberConfig: MemberMachine.MemberConfig = {
    group: "g",
    stream: "orders",
    memberId: "a",
    incarnation: 1,
    memberInfo: { consumerName: "a", host: "h" },
    safetyMarginMs: 2_000,
  }

  it("ShardExhausted: reported with its token until the coordinator takes the shard away", () => {
    const h = new Harness(config({ shardCount: 4 }))
    const state = MemberMachine.make(memberConfig, 0)
    const send = (now: number) => {
      const { seq, request } = MemberMachine.nextRequest(state, now)
      const r = h.hb(request)
      return {
        request,
        commands: MemberMachine.step(state, {
          _tag: "ResponseReceived",
          seq,
          response: r.response,
          now,
        }),
      }
    }
    send(0)
    for (const shard of [0, 1, 2, 3]) MemberMachine.step(state, { _tag: "ShardStarted", shard })
    send(1)
    h.apply(changed(Coordinator.followLayout(h.state, [gen0, split], 2)))
    expect(MemberMachine.step(state, { _tag: "ShardExhausted", shard: 2 })).toEqual([
      { _tag: "SendHeartbeat" },
    ])
    const { request, commands } = send(3)
    expect(request.drainedShards).toEqual([{ shard: 2, token: 1 }])
    expect(commands).toContainEqual({ _tag: "StopShard", shard: 2 })
    expect(MemberMachine.buildRequest(state).drainedShards).toBeUndefined()
    expect(h.state.drained.has(2)).toBe(true)
  })
})
