/** Event listeners never block the emitter (members emit from their fibers). */
import { describe, expect, it } from "vitest"
import { makeEventHub, type RuntimeEvent } from "../src/Events.js"

const event = (shard: number): RuntimeEvent => ({
  type: "staleOwner",
  stream: "s",
  group: "g",
  memberId: "m",
  at: 0,
  shard,
})

const settle = () => new Promise((resolve) => setImmediate(resolve))

describe("event hub", () => {
  it("emit returns at once whatever a listener does: never resolves, throws, rejects", async () => {
    const hub = makeEventHub()
    const seen: Array<number> = []
    hub.on(() => new Promise<void>(() => {}))
    hub.on(() => {
      throw new Error("listener bug")
    })
    hub.on(() => Promise.reject(new Error("async listener bug")))
    hub.on((e) => {
      if (e.type === "staleOwner") seen.push(e.shard)
    })
    for (let i = 0; i < 100; i++) hub.emit(event(i))
    for (let i = 0; i < 200 && seen.length < 100; i++) await settle()
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => i))
    expect(hub.stats().listenerErrors).toBeGreaterThanOrEqual(100)
  })

  it("a listener gets events in order, one at a time (its promise is awaited first)", async () => {
    const hub = makeEventHub()
    const order: Array<string> = []
    let active = 0
    let maxActive = 0
    hub.on(async (e) => {
      active++
      maxActive = Math.max(maxActive, active)
      if (e.type === "staleOwner") order.push(`start ${e.shard}`)
      await settle()
      if (e.type === "staleOwner") order.push(`end ${e.shard}`)
      active--
    })
    hub.emit(event(1))
    hub.emit(event(2))
    for (let i = 0; i < 20; i++) await settle()
    expect(order).toEqual(["start 1", "end 1", "start 2", "end 2"])
    expect(maxActive).toBe(1)
  })

  it("a stuck listener's buffer keeps the newest events and counts the dropped ones", async () => {
    const hub = makeEventHub({ capacity: 10 })
    hub.on(() => new Promise<void>(() => {}))
    for (let i = 0; i < 1_000; i++) hub.emit(event(i))
    await settle()
    expect(hub.stats().dropped).toBeGreaterThanOrEqual(989)
  })

  it("unsubscribing stops delivery", async () => {
    const hub = makeEventHub()
    const seen: Array<RuntimeEvent> = []
    const off = hub.on((e) => {
      seen.push(e)
    })
    hub.emit(event(1))
    await settle()
    off()
    hub.emit(event(2))
    await settle()
    expect(seen).toHaveLength(1)
  })
})
