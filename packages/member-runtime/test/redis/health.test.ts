/**
 * Health on Redis (docs/runtime.md, "Health"): a runtime whose members join
 * a standalone coordinator is ready; stop the coordinator and `/readyz`
 * turns 503 (no coordinator answers) while `/livez` stays 200 (its
 * heartbeats still end, unanswered); start one again and it is ready again.
 * Bounds are generous: twice the coordinator lease is 2 s here.
 */
import { expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import { type StandaloneCoordinator, startCoordinator } from "../../src/Coordinator.js"
import type { Health } from "../../src/Health.js"
import { redisPorts } from "../../src/Redis.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

// a 6 s session: the member's lease (4.8 s) outlasts twice the coordinator lease (2 s)
const timing = {
  shardCount: 4,
  sessionTimeoutMs: 6_000,
  heartbeatIntervalMs: 200,
  rebalanceTimeoutMs: 6_000,
}

it("a stopped coordinator makes the runtime not ready (live still); a new one makes it ready again", async () => {
  const group = { stream: "health", group: "g", ...timing }
  const coordinate = () =>
    startCoordinator({ ports: redisPorts({ url: server().url }), groups: [group] })
  let coordinator: StandaloneCoordinator | undefined = await coordinate()
  const runtime = await start({
    redis: { url: server().url },
    handleSignals: false,
    coordinator: "standalone",
    memberBase: "pod",
    logLevel: "silent",
    consumers: [consumer({ ...group, eachMessage: () => {} })],
    http: { port: 0, host: "127.0.0.1" },
  })
  const url = runtime.http!.url
  const probe = async (path: string) => {
    const res = await fetch(`${url}${path}`)
    return { status: res.status, body: (await res.json()) as Health }
  }
  try {
    await eventually("ready", async () => (await probe("/readyz")).status === 200, 30_000)
    await coordinator.stop()
    coordinator = undefined
    const stoppedAt = Date.now()
    // 503 may first say only "not joined: suspended" (at load 18 the member's
    // lease ran out before its mark of twice the coordinator lease): asked
    // until the reason shows
    let reasons = ""
    await eventually(
      "not ready, and the reason says no coordinator answers",
      async () => {
        const notReady = await probe("/readyz")
        reasons = notReady.body.details[0]?.reasons.join("; ") ?? ""
        return notReady.status === 503 && /no coordinator has answered it for \d+ ms/.test(reasons)
      },
      30_000,
    )
    expect(reasons).toMatch(/no coordinator has answered it for \d+ ms/)
    // about twice the coordinator lease after the last answer; generous bound
    expect(Date.now() - stoppedAt).toBeLessThan(15_000)
    const live = await probe("/livez")
    expect(live.status).toBe(200)
    expect(live.body.live).toBe(true)
    coordinator = await coordinate()
    await eventually("ready again", async () => (await probe("/readyz")).status === 200, 30_000)
  } finally {
    await runtime.stop()
    await coordinator?.stop()
  }
})
