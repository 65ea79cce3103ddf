/** The standalone coordinator: members with coordinator "standalone" are served by it. */
import { describe, expect, it } from "vitest"
import { consumer } from "../src/Consumer.js"
import { startCoordinator } from "../src/Coordinator.js"
import type { RuntimeEvent } from "../src/Events.js"
import { memoryPorts } from "../src/Ports.js"
import { start } from "../src/Runtime.js"
import { until } from "./support/until.js"

const group = {
  stream: "orders",
  group: "g",
  shardCount: 4,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 4_000,
  heartbeatIntervalMs: 200,
}

describe("standalone coordinator", () => {
  it("serves members whose runtimes run no coordinator", async () => {
    const ports = memoryPorts()
    const coordinator = await startCoordinator({ ports, holder: "coord-1", groups: [group] })
    expect(coordinator.serving()).toEqual([{ stream: "orders", group: "g" }])
    let handled = 0
    const runtime = await start({
      ports,
      handleSignals: false,
      coordinator: "standalone",
      memberBase: "pod-a",
      consumers: [consumer({ ...group, eachMessage: () => void handled++ })],
    })
    await runtime
      .producer("orders")
      .sendBatch(Array.from({ length: 50 }, (_, i) => ({ key: `k${i}` })))
    await until("50 handled", () => handled === 50)
    // a runtime with coordinator "standalone" never elects itself
    expect(await runtime.monitor("orders", "g")).toBeUndefined()
    await runtime.stop()
    await coordinator.stop()
  })

  it("no coordinator serves a group with a live member: one event and a metric, and its end (rule 25)", async () => {
    const ports = memoryPorts()
    const seen: Array<RuntimeEvent> = []
    const runtime = await start({
      ports,
      handleSignals: false,
      coordinator: "standalone",
      memberBase: "pod-a",
      onEvent: (e) => {
        if (e.type === "coordinatorUnavailable" || e.type === "coordinatorAvailable") seen.push(e)
      },
      consumers: [consumer({ ...group, eachMessage: () => {} })],
    })
    // the coordinator lease is 400 ms here (twice the heartbeat): said past 800 ms
    await until("one seen", () => seen.length === 1)
    const unavailable = seen[0]!
    expect(unavailable).toMatchObject({ type: "coordinatorUnavailable", memberId: "pod-a" })
    if (unavailable.type !== "coordinatorUnavailable") throw new Error("unreachable")
    expect(unavailable.forMs).toBeGreaterThanOrEqual(800)
    expect(unavailable.error).toMatch(/coordinator/i)
    const gauge = /shardline_coordinator_unavailable\{[^}]*member="pod-a"[^}]*\} (\d)/
    expect((await runtime.metrics()).match(gauge)?.[1]).toBe("1")
    expect(await runtime.metrics()).toMatch(/shardline_coordinator_unavailable_total\{[^}]*\} 1/)
    // said once per period, however long it lasts
    await new Promise((r) => setTimeout(r, 600))
    expect(seen).toHaveLength(1)
    const coordinator = await startCoordinator({ ports, holder: "coord-1", groups: [group] })
    await until("two seen", () => seen.length === 2)
    expect(seen[1]).toMatchObject({ type: "coordinatorAvailable", memberId: "pod-a" })
    expect((await runtime.metrics()).match(gauge)?.[1]).toBe("0")
    await runtime.stop()
    await coordinator.stop()
  })

  it("refuses an invalid group config, naming the problem", async () => {
    await expect(
      startCoordinator({ groups: [{ ...group, heartbeatIntervalMs: 5_000 }] }),
    ).rejects.toMatchObject({ _tag: "InvalidGroupConfig" })
  })
})
