import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { HOUR_ARGS, marginalRate, steadyArgs } from "../src/simulator.bench.js"

describe("the simulator benchmark's commands", () => {
  it("runs the hour exactly as docs/simulator.md gives it", () => {
    const docs = readFileSync(new URL("../../../docs/simulator.md", import.meta.url), "utf8")
    const command = `node ${HOUR_ARGS.join(" ")}`
    expect(command).toBe(
      "node packages/simulator/dist/cli.js swarm --seed 1 --members 5000 --shards 1024 --workers 2 --duration 1h --json",
    )
    expect(docs).toContain(command)
  })

  it("runs the same-mix runs without faults or messages", () => {
    expect(steadyArgs(200, 512, 20).join(" ")).toBe(
      "packages/simulator/dist/cli.js swarm --seed 1 --members 200 --shards 512 --workers 2 --duration 20m --faults none --rate 0 --json",
    )
  })
})

describe("the simulator benchmark's marginal rate", () => {
  const run = (events: number, wallMs: number, cpuMs: number) => ({
    events,
    wallMs,
    cpuMs,
    eventsPerSec: 0,
    eventsPerCpuSec: 0,
  })

  it("is the long run's extra events over its extra time", () => {
    const m = marginalRate(run(1_000, 1_000, 1_200), run(4_000, 2_500, 3_200))
    expect(m.eventsPerSec).toBe(2_000)
    expect(m.eventsPerCpuSec).toBe(1_500)
  })

  it("refuses a long run that took no longer than the short one (a stalled short run)", () => {
    expect(() => marginalRate(run(1_000, 3_000, 3_000), run(4_000, 2_500, 3_200))).toThrow(
      /must have more events and take longer/,
    )
    expect(() => marginalRate(run(4_000, 1_000, 1_000), run(4_000, 2_500, 3_200))).toThrow(
      /must have more events/,
    )
  })
})
