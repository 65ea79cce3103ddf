/**
 * The health endpoint over real HTTP (docs/runtime.md, "Health"): `/livez`
 * and `/readyz` answer 200 or 503 with the health as JSON, `/metrics` the
 * Prometheus text; bad options are refused before anything starts, a taken
 * port is `HealthServerFailed`, and the endpoint closes with the runtime.
 */
import { createServer } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { consumer } from "../src/Consumer.js"
import type { Health } from "../src/Health.js"
import { HEALTH_PATHS, PROMETHEUS_CONTENT_TYPE } from "../src/HealthServer.js"
import { memoryPorts } from "../src/Ports.js"
import { type ShardlineRuntime, type StartOptions, start } from "../src/Runtime.js"
import { until } from "./support/until.js"

const fast = { sessionTimeoutMs: 3_000, heartbeatIntervalMs: 100, rebalanceTimeoutMs: 3_000 }

const running: Array<ShardlineRuntime> = []
afterEach(async () => {
  await Promise.all(running.splice(0).map((r) => r.stop()))
})

const startRuntime = async (options: StartOptions) => {
  const runtime = await start({ ports: memoryPorts(), handleSignals: false, ...options })
  running.push(runtime)
  return runtime
}

const orders = consumer({
  stream: "orders",
  group: "g",
  shardCount: 4,
  ...fast,
  eachMessage: () => {},
})

describe("the health endpoint", () => {
  it("serves /livez, /readyz and /metrics; 404 and 405 otherwise; closes on stop", async () => {
    const runtime = await startRuntime({
      memberBase: "pod",
      consumers: [orders],
      http: { port: 0, host: "127.0.0.1" },
    })
    const server = runtime.http!
    expect(server.url).toBe(`http://127.0.0.1:${server.port}`)
    const get = (path: string, init?: RequestInit) => fetch(`${server.url}${path}`, init)
    await until("ready", async () => (await get(HEALTH_PATHS.ready)).status === 200)
    const ready = await get(HEALTH_PATHS.ready)
    expect(ready.headers.get("content-type")).toBe("application/json; charset=utf-8")
    const body = (await ready.json()) as Health
    expect(body).toMatchObject({ live: true, ready: true, state: "running" })
    expect(body.details.map((d) => d.memberId)).toEqual(["pod"])
    const live = await get(HEALTH_PATHS.live)
    expect(live.status).toBe(200)
    expect(((await live.json()) as Health).live).toBe(true)

    const metrics = await get(HEALTH_PATHS.metrics)
    expect(metrics.status).toBe(200)
    expect(metrics.headers.get("content-type")).toBe(PROMETHEUS_CONTENT_TYPE)
    const text = await metrics.text()
    // runtime.metrics()'s text (counters move, and gauges may appear, between two reads)
    const names = (t: string) => t.match(/^# TYPE \S+/gm) ?? []
    expect(names(text).length).toBeGreaterThan(5)
    expect(names(await runtime.metrics())).toEqual(expect.arrayContaining(names(text)))
    expect(text).toMatch(/^shardline_heartbeats_total\{.*group="g".*\} \d+/m)

    const head = await get(HEALTH_PATHS.ready, { method: "HEAD" })
    expect(head.status).toBe(200)
    expect(await head.text()).toBe("")
    expect((await get("/healthz")).status).toBe(404)
    const post = await get(HEALTH_PATHS.live, { method: "POST" })
    expect(post.status).toBe(405)
    expect(post.headers.get("allow")).toBe("GET, HEAD")

    await runtime.stop()
    await expect(get(HEALTH_PATHS.live)).rejects.toThrow()
  })

  it("503 on /readyz while a member has not joined (no coordinator serves it), /livez 200", async () => {
    const runtime = await startRuntime({
      memberBase: "pod",
      coordinator: "standalone",
      logLevel: "silent",
      consumers: [orders],
    })
    const server = await runtime.serveHealth({ port: 0 })
    expect(server.url).toBe(`http://localhost:${server.port}`)
    const ready = await fetch(`${server.url}/readyz`)
    expect(ready.status).toBe(503)
    const body = (await ready.json()) as Health
    expect(body.ready).toBe(false)
    expect(body.details[0]!.reasons).toContain("not joined: joining")
    expect((await fetch(`${server.url}/livez`)).status).toBe(200)
    await runtime.stop()
    await expect(fetch(`${server.url}/livez`)).rejects.toThrow()
    await expect(runtime.serveHealth({ port: 0 })).rejects.toMatchObject({ _tag: "RuntimeStopped" })
  })

  it("bad http options are refused before anything starts, naming the field", async () => {
    for (const [http, field] of [
      [{ port: -1 }, "http.port"],
      [{ port: 70_000 }, "http.port"],
      [{ port: 1.5 }, "http.port"],
      [{ port: "9464" }, "http.port"],
      [{ port: 0, host: "" }, "http.host"],
      [null, "http"],
    ] as const)
      await expect(
        start({
          ports: memoryPorts(),
          handleSignals: false,
          consumers: [orders],
          http: http as never,
        }),
      ).rejects.toMatchObject({ _tag: "InvalidRuntimeConfig", field })
  })

  it("a taken port is HealthServerFailed, and the runtime is stopped again", async () => {
    const blocker = createServer()
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve))
    const port = (blocker.address() as { port: number }).port
    const events: Array<string> = []
    try {
      await expect(
        start({
          ports: memoryPorts(),
          handleSignals: false,
          memberBase: "pod",
          consumers: [orders],
          onEvent: (e) => {
            events.push(e.type)
          },
          http: { port, host: "127.0.0.1" },
        }),
      ).rejects.toMatchObject({ _tag: "HealthServerFailed", port, host: "127.0.0.1" })
      // its member left (or never joined and stopped): nothing keeps running
      await until("left", async () => events.includes("left"))
    } finally {
      blocker.close()
    }
  })
})
