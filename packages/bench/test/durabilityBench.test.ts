/**
 * The durability benchmark (src/durability.bench.ts) in miniature: one
 * primary and its replica, two rounds of 30 sends and 10 commits, so the
 * command docs/redis.md names keeps working; the figures themselves come
 * from the full run (results/durability-redis.md).
 */
import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { durabilityMarkdown, runDurabilityBench } from "../src/durability.bench.js"

describe("the durability benchmark", () => {
  it("measures plain and durable sends and commits in paired rounds, as ratios", async () => {
    const options = { rounds: 2, sends: 30, commits: 10 }
    const summary = await runDurabilityBench(options)
    expect(summary.rounds).toHaveLength(2)
    for (const r of summary.rounds) {
      for (const run of [r.plain, r.durable]) {
        expect(run.sendsPerSec).toBeGreaterThan(0)
        expect(run.commitsPerSec).toBeGreaterThan(0)
      }
      expect(r.sendRatio).toBeCloseTo(r.durable.sendsPerSec / r.plain.sendsPerSec)
    }
    expect(Number.isFinite(summary.median.sendRatio)).toBe(true)
    expect(Number.isFinite(summary.median.commitRatio)).toBe(true)
    const page = durabilityMarkdown(summary, options, "test")
    expect(page).toContain("| median |")
  }, 120_000)

  it("refuses more commits than sends (each acknowledges a sent message)", async () => {
    await expect(runDurabilityBench({ rounds: 1, sends: 5, commits: 6 })).rejects.toThrow(
      "commits (6) must not exceed sends (5)",
    )
  })

  it("is the command docs/redis.md gives", () => {
    const docs = readFileSync(new URL("../../../docs/redis.md", import.meta.url), "utf8")
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"))
    expect(pkg.scripts["bench:durability-redis"]).toBe(
      "pnpm run build && node dist/durabilityRedis.js",
    )
    expect(docs).toContain("pnpm --filter @shardline/bench run bench:durability-redis")
  })
})
