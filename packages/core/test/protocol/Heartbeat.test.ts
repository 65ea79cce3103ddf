import { Schema } from "effect"
import { describe, expect, it } from "vitest"
import { HeartbeatRequest } from "../../src/index.js"

const decode = Schema.decodeUnknownSync(HeartbeatRequest)

describe("HeartbeatRequest schema", () => {
  const valid = {
    group: "workers",
    stream: "orders",
    memberId: "pod-1-m0",
    incarnation: 1,
    seq: 1,
    memberEpoch: 0,
    assignmentEpoch: 0,
    metadataVersion: 0,
    ownedShards: [],
    revokingShards: [],
    memberInfo: { consumerName: "pod-1-m0", host: "10.0.0.1" },
  }

  it("accepts a join request", () => {
    expect(decode(valid).memberId).toBe("pod-1-m0")
  })

  it("rejects epochs below -1, negative shards and unknown revoke states", () => {
    expect(() => decode({ ...valid, memberEpoch: -2 })).toThrow()
    expect(() => decode({ ...valid, ownedShards: [-1] })).toThrow()
    expect(() => decode({ ...valid, ownedShards: [1.5] })).toThrow()
    expect(() => decode({ ...valid, revokingShards: [{ shard: 1, state: "DONE" }] })).toThrow()
    expect(() => decode({ ...valid, memberId: "" })).toThrow()
    expect(() =>
      decode({ ...valid, memberInfo: { consumerName: "c", host: "h", weight: 0 } }),
    ).toThrow()
  })
})
