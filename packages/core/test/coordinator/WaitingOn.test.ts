/**
 * docs/protocol.md rule 29 (issue 33, item 9): an answer whose `pending`
 * shards wait for another member says who holds them, why, and when the
 * holder's session ends if it sends nothing more: a process restarted with
 * a new member id waits for its old self's session (or, with the same id,
 * for the replaced process's), and its member can say so instead of
 * waiting in silence. Display only: nothing in the protocol acts on it.
 */
import { describe, expect, it } from "vitest"
import { Harness, SimMember, shards } from "./harness.js"

describe("rule 29: who pending shards wait for", () => {
  it("a crashed member (a): the joiner (b) is told its target shards wait for a's revocation, and when a's session ends", () => {
    const h = new Harness() // session 30 s, heartbeat 3 s, 4 shards
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response)
    a.onResponse(h.hb(a.request()).response)
    expect([...a.owned.keys()].sort()).toEqual([0, 1, 2, 3])
    // a crashes now (t = 0: its session ends at 30 s); b joins 5 s later
    h.advance(5_000)
    const b = new SimMember("b")
    const joined = h.hb(b.request()).response
    b.onResponse(joined)
    expect(shards(joined)).toEqual([])
    expect(joined.pending).toEqual([2, 3])
    expect(joined.waitingOn).toEqual([
      { memberId: "a", reason: "revoking", shards: [2, 3], sessionEndsInMs: 25_000 },
    ])
    // its next heartbeat: 3 s closer
    h.advance(3_000)
    const next = h.hb(b.request()).response
    b.onResponse(next)
    expect(next.waitingOn).toEqual([
      { memberId: "a", reason: "revoking", shards: [2, 3], sessionEndsInMs: 22_000 },
    ])
    // a's session ends: every shard is b's, and nothing waits
    h.advance(22_000)
    const after = h.hb(b.request()).response
    b.onResponse(after)
    expect(shards(after)).toEqual([0, 1, 2, 3])
    expect(after.pending).toEqual([])
    expect(after.waitingOn).toBeUndefined()
  })

  it("a restart with the same member id: its shards are held for the replaced process until its session ends, and the answer says so", () => {
    const h = new Harness()
    const old = new SimMember("a", undefined, 1)
    old.onResponse(h.hb(old.request()).response)
    old.onResponse(h.hb(old.request()).response)
    h.advance(2_000) // the old process crashed at 0
    const restarted = new SimMember("a", undefined, 2)
    const joined = h.hb(restarted.request()).response
    restarted.onResponse(joined)
    expect(joined.pending).toEqual([0, 1, 2, 3])
    expect(joined.waitingOn).toEqual([
      { memberId: "a", reason: "replaced", shards: [0, 1, 2, 3], sessionEndsInMs: 28_000 },
    ])
  })

  it("a live member that drains at once: the joiner's answer names it, then nothing once it confirmed", () => {
    const h = new Harness()
    const a = new SimMember("a")
    a.onResponse(h.hb(a.request()).response)
    a.onResponse(h.hb(a.request()).response)
    const b = new SimMember("b")
    const joined = h.hb(b.request()).response
    b.onResponse(joined)
    expect(joined.waitingOn?.map((w) => [w.memberId, w.reason, w.shards])).toEqual([
      ["a", "revoking", [2, 3]],
    ])
    a.onResponse(h.hb(a.request()).response) // told to revoke 2, 3
    a.onResponse(h.hb(a.request()).response) // REVOKED
    const granted = h.hb(b.request()).response
    expect(shards(granted)).toEqual([2, 3])
    expect(granted.waitingOn).toBeUndefined()
  })

  it("a steady group's answers carry no waitingOn field", () => {
    const h = new Harness()
    const a = new SimMember("a")
    for (let i = 0; i < 3; i++) {
      const r = h.hb(a.request()).response
      a.onResponse(r)
      expect("waitingOn" in r).toBe(false)
    }
  })
})
