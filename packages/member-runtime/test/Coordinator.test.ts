/** The standalone coordinator: members with coordinator "standalone" are served by it. */
import { describe, expect, it } from "vitest"
import { consumer } from "../src/Consumer.js"
import { startCoordinator } from "../src/Coordinator.js"
import { memoryPorts } from "../src/Ports.js"
import { start } from "../src/Runtime.js"

const group = {
  stream: "orders",
  group: "g",
  shardCount: 4,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 4_000,
  heartbeatIntervalMs: 200,
}

const until = async (done: () => boolean) => {
  for (let i = 0; i < 1_000 && !done(); i++) await new Promise((r) => setTimeout(r, 10))
  if (!done()) throw new Error("not reached")
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
    await until(() => handled === 50)
    // a runtime with coordinator "standalone" never elects itself
    expect(await runtime.monitor("orders", "g")).toBeUndefined()
    await runtime.stop()
    await coordinator.stop()
  })

  it("refuses an invalid group config, naming the problem", async () => {
    await expect(
      startCoordinator({ groups: [{ ...group, heartbeatIntervalMs: 5_000 }] }),
    ).rejects.toMatchObject({ _tag: "InvalidGroupConfig" })
  })
})
