import { describe, expect, it } from "vitest"
import type { HeartbeatRequest } from "../../src/index.js"
import { Harness, info, SimMember } from "./harness.js"

const settled = () => {
  const h = new Harness()
  const a = new SimMember("a")
  for (let i = 0; i < 3; i++) a.onResponse(h.hb(a.request()).response)
  return { h, a }
}

describe("malformed or out-of-range heartbeats -> INVALID_REQUEST, nothing changes", () => {
  const cases: ReadonlyArray<[string, (a: SimMember) => Partial<HeartbeatRequest>]> = [
    ["owned shard >= shardCount", () => ({ ownedShards: [0, 4] })],
    ["duplicate owned shard", () => ({ ownedShards: [0, 0] })],
    [
      "duplicate revoking shard",
      () => ({
        revokingShards: [
          { shard: 1, state: "REVOKED", token: 1 },
          { shard: 1, state: "REVOKED", token: 1 },
        ],
      }),
    ],
    [
      "shard both owned and revoking",
      () => ({ ownedShards: [1], revokingShards: [{ shard: 1, state: "REVOKING", token: 1 }] }),
    ],
    [
      "revoking shard >= shardCount",
      () => ({ revokingShards: [{ shard: 9, state: "REVOKED", token: 1 }] }),
    ],
    ["progress shard >= shardCount", () => ({ progress: [{ shard: 4, acked: 1, pending: 0 }] })],
    ["wrong group", () => ({ group: "other" })],
    ["same group name on another stream", () => ({ stream: "payments" })],
    [
      "a joining member that says it is leaving",
      () => ({
        memberEpoch: 0,
        ownedShards: [],
        revokingShards: [],
        memberInfo: info("a"),
        leaving: true,
      }),
    ],
    ["metadataVersion from the future", () => ({ metadataVersion: 3 })],
    [
      "memberEpoch 0 without memberInfo",
      () => ({ memberEpoch: 0, ownedShards: [], revokingShards: [], memberInfo: undefined }),
    ],
    ["memberEpoch 0 with owned shards", () => ({ memberEpoch: 0, ownedShards: [0] })],
  ]
  it.each(cases)("%s", (_, patch) => {
    const { h, a } = settled()
    const before = h.snapshot()
    const revision = h.state.storeRevision
    const r = h.hb({ ...a.request(), ...patch(a) })
    expect(r.response.errorCode).toBe("INVALID_REQUEST")
    expect(r.response.errorMessage).toBeTruthy()
    expect(r.records).toEqual([])
    expect(r.fences).toEqual([])
    expect(h.snapshot()).toEqual(before)
    expect(h.state.storeRevision).toBe(revision)
    // the member is not fenced by a malformed request: its next good heartbeat is fine
    expect(h.hb(a.request()).response.errorCode).toBe("NONE")
  })
})

describe("an assignmentEpoch from the future (docs/protocol.md rule 23)", () => {
  it("means the group's metadata was rewound: the member is fenced (shards held), not told INVALID_REQUEST forever", () => {
    const { h, a } = settled()
    const owned = [...a.owned.keys()]
    const r = h.hb({ ...a.request(), assignmentEpoch: 99 })
    expect(r.response.errorCode).toBe("FENCED_MEMBER_EPOCH")
    expect(r.response.errorMessage).toContain("rewound")
    expect(h.state.members.has("a")).toBe(false)
    expect(h.state.held.flatMap((x, s) => (x?.memberId === "a" ? [s] : []))).toEqual(owned)
    // its rejoin proves it stopped: released and granted again
    a.reset()
    const rejoin = h.hb(a.request())
    expect(rejoin.response.errorCode).toBe("NONE")
    expect(rejoin.response.assigned.map((g) => g.shard)).toEqual(owned)
  })
})
