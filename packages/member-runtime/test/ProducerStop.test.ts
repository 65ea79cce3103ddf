/**
 * A runtime's producer around `stop()` on the memory ports (docs/runtime.md,
 * "Producer"): sends called before `stop()` are appended, those after are
 * `RuntimeStopped` with nothing written. The same on Redis:
 * test/redis/producer.test.ts.
 */
import { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { consumer } from "../src/Consumer.js"
import * as LayoutSource from "../src/LayoutSource.js"
import { memoryPorts } from "../src/Ports.js"
import { start } from "../src/Runtime.js"
import {
  type CountEntries,
  sendsAfterStopAreRefused,
  sendsBeforeStopAreAppended,
} from "./support/producerStop.js"

const countIn =
  (ports: ReturnType<typeof memoryPorts>): CountEntries =>
  async (stream, shardCount) => {
    let n = 0
    for (let shard = 0; shard < shardCount; shard++)
      n += Effect.runSync(ports.streams.range(ShardStreams.shardKey(stream, shard))).length
    return n
  }

// a producer-only runtime stops at once; one with a group leaves it first
const runtimes = {
  "a producer-only runtime": (ports: ReturnType<typeof memoryPorts>) =>
    start({ ports, handleSignals: false }),
  "a runtime with a group": (ports: ReturnType<typeof memoryPorts>) =>
    start({
      ports,
      handleSignals: false,
      consumers: [consumer({ stream: "other", group: "g", eachMessage: () => {} })],
    }),
}

describe("a runtime's producer and stop() on the memory ports", () => {
  for (const [name, startRuntime] of Object.entries(runtimes)) {
    it(`${name}: sends called before stop() are appended, stop waits for them`, async () => {
      const ports = memoryPorts()
      await sendsBeforeStopAreAppended(await startRuntime(ports), "orders", countIn(ports))
    })
    it(`${name}: sends called after stop() are RuntimeStopped, nothing written`, async () => {
      const ports = memoryPorts()
      await sendsAfterStopAreRefused(await startRuntime(ports), "orders", countIn(ports))
    })
  }

  it("a producer still being made when stop() is called (its layout read is slow): its send is appended", async () => {
    const ports = memoryPorts()
    const runtime = await start({ ports, handleSignals: false })
    const fixed = LayoutSource.fixed({ orders: 2 })
    // the producer's first layout read takes 100 ms: it is not ready when stop() is called
    const slow: LayoutSource.LayoutSource = {
      current: (stream) => Effect.andThen(Effect.sleep(100), fixed.current(stream)),
      refresh: fixed.refresh,
    }
    const send = runtime.producer("orders", { layout: slow }).send("a", { n: "1" })
    const stopped = runtime.stop()
    expect((await send).generation).toBe(0)
    await stopped
    expect(await countIn(ports)("orders", 2)).toBe(1)
  })
})
