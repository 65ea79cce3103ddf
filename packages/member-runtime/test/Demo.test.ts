/** `pnpm demo`: argument parsing and a small run whose summary verifies itself. */
import { describe, expect, it } from "vitest"
import { DEMO_DEFAULTS, parseDemoArgs } from "../src/demo/args.js"
import { renderSummary, runDemo } from "../src/demo/run.js"

describe("demo arguments", () => {
  it("defaults, counts, --redis and --help", () => {
    expect(parseDemoArgs([])).toEqual({
      _tag: "Args",
      args: { ...DEMO_DEFAULTS, redis: undefined, keep: false, help: false },
    })
    expect(parseDemoArgs(["--", "--messages", "10", "--keys", "3", "--shards", "4"])).toMatchObject(
      {
        args: { messages: 10, keys: 3, shards: 4 },
      },
    )
    expect(parseDemoArgs(["--redis", "redis://localhost:6379", "--keep"])).toMatchObject({
      args: { redis: { url: "redis://localhost:6379" }, keep: true },
    })
    expect(parseDemoArgs(["--redis-cluster", "a:7000,b:7001"])).toMatchObject({
      args: { redis: { nodes: ["a:7000", "b:7001"] } },
    })
    expect(parseDemoArgs(["--help"])).toMatchObject({ args: { help: true } })
  })

  it("refuses unknown flags, missing values and bad counts", () => {
    for (const argv of [
      ["--nope"],
      ["--messages"],
      ["--messages", "0"],
      ["--keys", "2.5"],
      ["--shards", "5000"],
      ["--redis"],
      ["--redis", "localhost:6379"],
      ["--redis", "http://localhost:6379"],
      ["--redis-cluster", "a"],
      ["--redis-cluster", ","],
      ["--redis", "redis://a:1", "--redis-cluster", "b:2"],
    ])
      expect(parseDemoArgs(argv)._tag).toBe("UsageError")
  })
})

describe("demo run", () => {
  it("a small run: every message once, per-key order, moves equal the lower bound", async () => {
    const phases: Array<string> = []
    const summary = await runDemo({
      messages: 600,
      keys: 40,
      shards: 8,
      onPhase: (p) => phases.push(p),
    })
    expect(summary.missing).toBe(0)
    expect(summary.duplicates).toBe(0)
    expect(summary.orderViolations).toBe(0)
    expect(summary.changes).toHaveLength(2)
    for (const c of summary.changes) expect(c.moved).toBe(c.lowerBound)
    expect(summary.ok).toBe(true)
    expect(phases).toHaveLength(3)
    expect(renderSummary(summary)).toContain("All checks passed.")
  })
})
