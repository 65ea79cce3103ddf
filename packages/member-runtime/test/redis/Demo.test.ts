/**
 * `pnpm demo --redis <url>`: the demo's group (src/demo/run.ts) on a real
 * redis-server, with the same verified summary as in memory, and nothing of
 * the run left on the server afterwards.
 */
import { describe, expect, it } from "vitest"
import { renderSummary, runDemo } from "../../src/demo/run.js"
import { useRedisCluster, useRedisServer } from "../support/redis.js"

describe("the demo on a real Redis", () => {
  const server = useRedisServer("redis7")

  it("every message once, per-key order, moves equal the lower bound; its keys are deleted", async () => {
    const phases: Array<string> = []
    const summary = await runDemo({
      messages: 3_000,
      keys: 60,
      shards: 8,
      redis: { url: server().url },
      onPhase: (p) => phases.push(p),
    })
    const text = renderSummary(summary)
    expect(summary.stream, text).toMatch(/^orders-/)
    expect(summary.missing, text).toBe(0)
    expect(summary.duplicates, text).toBe(0)
    expect(summary.orderViolations, text).toBe(0)
    expect(summary.changes).toHaveLength(2)
    for (const c of summary.changes) expect(c.moved, text).toBe(c.lowerBound)
    expect(summary.ok, text).toBe(true)
    expect(phases).toHaveLength(3)
    expect(text).toContain("All checks passed.")
    // the run wrote shard streams, owner tokens and group records, then deleted them all
    expect(summary.keysDeleted).toBeGreaterThan(8)
    expect(server().cli("DBSIZE").trim()).toBe("0")
  })
})

describe("the demo on a 3-node Redis Cluster (--redis-cluster)", () => {
  const cluster = useRedisCluster("redis7")

  it("the same checks pass; its keys are deleted from every node", async () => {
    const summary = await runDemo({
      messages: 2_000,
      keys: 50,
      shards: 8,
      redis: { nodes: cluster().nodes.map((n) => `${n.host}:${n.port}`) },
    })
    const text = renderSummary(summary)
    expect(summary.ok, text).toBe(true)
    expect(summary.missing, text).toBe(0)
    expect(summary.duplicates, text).toBe(0)
    expect(summary.orderViolations, text).toBe(0)
    expect(summary.keysDeleted).toBeGreaterThan(8)
    for (const server of cluster().servers) expect(server.cli("DBSIZE").trim()).toBe("0")
  })
})
