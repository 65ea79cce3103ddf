/** The examples in examples/ run (they are type-checked with the package). */
import { describe, expect, it, vi } from "vitest"
import { main as effectApi } from "../examples/effectApi.js"
import { main as explicitMember } from "../examples/explicitMember.js"
import { main as listener } from "../examples/listener.js"
import { main as metrics } from "../examples/metrics.js"
import { main as producer } from "../examples/producer.js"

describe("examples", () => {
  vi.spyOn(console, "log").mockImplementation(() => {})

  it("listener: two logical members count every order", async () => {
    expect(await listener(100)).toBe(100)
  })

  it("explicit member: every payment handled, the poison one dead-lettered", async () => {
    expect(await explicitMember(60)).toEqual({ handled: 60, deadLettered: 1 })
  })

  it("Effect API", async () => {
    expect(await effectApi(30)).toBe(30)
  })

  it("producer: a key always routes to one shard", async () => {
    expect(await producer()).toEqual({ sent: 1_000, shardsOfUser0: 1 })
  })

  it("metrics: Prometheus text", async () => {
    expect(await metrics()).toMatch(/shardline_messages_acked_total\{[^}]*\} 20/)
  })
})
