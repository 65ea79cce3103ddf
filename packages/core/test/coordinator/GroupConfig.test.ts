import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { decodeGroupConfig, InvalidGroupConfig, makeGroupConfig } from "../../src/index.js"

const good = {
  groupId: "g",
  stream: "orders",
  shardCount: 16,
  sessionTimeoutMs: 30_000,
  rebalanceTimeoutMs: 60_000,
  heartbeatIntervalMs: 3_000,
}

describe("GroupConfig", () => {
  it("accepts startAt earliest, latest and entry ids", () => {
    for (const startAt of ["earliest", "latest", "1733300000000-0", "1733300000000"])
      expect(makeGroupConfig({ ...good, startAt }).startAt).toBe(startAt)
  })

  it("accepts a valid config with member weights", () => {
    expect(makeGroupConfig({ ...good, memberWeights: { a: 2 } }).memberWeights).toEqual({ a: 2 })
  })

  it.each([
    ["heartbeat not below session timeout", { heartbeatIntervalMs: 30_000 }],
    ["zero shards", { shardCount: 0 }],
    ["fractional timeout", { sessionTimeoutMs: 1.5 }],
    ["negative revoke timeout", { rebalanceTimeoutMs: -1 }],
    ["empty group id", { groupId: "" }],
    ["non-positive weight", { memberWeights: { a: 0 } }],
    ["a startAt that is no position", { startAt: "yesterday" }],
    ["a startAt id with an empty sequence", { startAt: "12-" }],
  ])("bad config is a typed InvalidGroupConfig: %s", (_, patch) => {
    expect(() => makeGroupConfig({ ...good, ...patch })).toThrow(InvalidGroupConfig)
    const err = Effect.runSync(Effect.flip(decodeGroupConfig({ ...good, ...patch })))
    expect(err._tag).toBe("InvalidGroupConfig")
  })
})
