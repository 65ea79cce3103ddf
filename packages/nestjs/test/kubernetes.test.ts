/**
 * examples/kubernetes fits together and fits the runtime (docs/kubernetes.md):
 * the manifests are parsed, and every number or name in them that the
 * runtime or the example app also knows is checked against the runtime's
 * own (health paths, metric names, defaults, the member id's source) and
 * the example's settings (packages/nestjs/example/settings.ts).
 */
import { readFileSync } from "node:fs"
import path from "node:path"
import { DEFAULTS, HEALTH_PATHS, Metrics, memberBase } from "@shardline/member-runtime"
import { describe, expect, it } from "vitest"
import { parseAllDocuments } from "yaml"
import { ENV, ORDERS, settingsFrom } from "../example/settings.js"

const dir = path.resolve(import.meta.dirname, "../../../examples/kubernetes")

// biome-ignore lint/suspicious/noExplicitAny: parsed YAML, checked by the assertions
type Doc = any

const load = (file: string): Array<Doc> =>
  parseAllDocuments(readFileSync(path.join(dir, file), "utf8")).map((d) => {
    if (d.errors.length > 0)
      throw new Error(`${file}: ${d.errors.map((e) => e.message).join("; ")}`)
    return d.toJS()
  })

const one = (file: string, kind: string): Doc => {
  const docs = load(file).filter((d) => d?.kind === kind)
  expect(docs, `${file}: one ${kind}`).toHaveLength(1)
  return docs[0]
}

const consumer = one("consumer.yaml", "Deployment")
const pod = consumer.spec.template.spec
const container = pod.containers[0]
const env = (name: string): Doc => container.env.find((e: Doc) => e.name === name)
const value = (name: string): string => {
  const e = env(name)
  expect(e?.value, `env ${name} has a value`).toBeTypeOf("string")
  return e.value
}
/** The example app's settings as the pod's environment makes them. */
const settings = settingsFrom(
  Object.fromEntries(
    container.env.map((e: Doc) => [e.name, e.value ?? "from-a-reference"]),
  ) as Record<string, string>,
)

describe("examples/kubernetes/consumer.yaml", () => {
  it("sets only variables the example app reads, and every one it needs", () => {
    const names = container.env.map((e: Doc) => e.name).sort()
    expect(names).toEqual(["POD_IP", ...Object.values(ENV)].sort())
    expect(env("REDIS_URL").valueFrom.secretKeyRef).toBeDefined()
  })

  it("takes the member id from the pod's IP (downward API), as member-runtime reads it", () => {
    expect(env("POD_IP").valueFrom.fieldRef.fieldPath).toBe("status.podIP")
    expect(
      memberBase({ POD_IP: "10.1.2.3", HOSTNAME: "billing-7", KUBERNETES_SERVICE_HOST: "x" }),
    ).toBe("10.1.2.3")
  })

  it("gives the graceful stop more than shutdownTimeoutMs before SIGKILL", () => {
    const grace = pod.terminationGracePeriodSeconds * 1_000
    expect(settings.shutdownTimeoutMs).toBe(Number(value("SHUTDOWN_TIMEOUT_MS")))
    // some seconds more than the drain: Nest's own shutdown, the process exit
    expect(grace - settings.shutdownTimeoutMs).toBeGreaterThanOrEqual(5_000)
  })

  it("probes /livez and /readyz on the health endpoint's port, and Prometheus scrapes /metrics there", () => {
    const port = container.ports.find((p: Doc) => p.name === container.livenessProbe.httpGet.port)
    expect(port.containerPort).toBe(settings.httpPort)
    expect(container.livenessProbe.httpGet.path).toBe(HEALTH_PATHS.live)
    expect(container.readinessProbe.httpGet.path).toBe(HEALTH_PATHS.ready)
    expect(container.readinessProbe.httpGet.port).toBe(port.name)
    const annotations = consumer.spec.template.metadata.annotations
    expect(annotations["prometheus.io/path"]).toBe(HEALTH_PATHS.metrics)
    expect(Number(annotations["prometheus.io/port"])).toBe(settings.httpPort)
  })

  it("a liveness probe does not restart a pod before the runtime itself would call it not live", () => {
    const probe = container.livenessProbe
    // the runtime's liveness bound with the defaults is the session timeout (30 s); the probe
    // adds its own failures on top, so a pod is restarted at most a few periods after that
    expect(probe.periodSeconds * probe.failureThreshold).toBeGreaterThanOrEqual(
      (2 * (DEFAULTS.heartbeatIntervalMs + DEFAULTS.heartbeatTimeoutMs)) / 1_000,
    )
  })
})

describe("examples/kubernetes/scaledobject.yaml", () => {
  const scaled = one("scaledobject.yaml", "ScaledObject")
  const trigger = scaled.spec.triggers[0]

  it("scales the consumer Deployment on the lag metric member-runtime exports, for its group", () => {
    expect(scaled.spec.scaleTargetRef.name).toBe(consumer.metadata.name)
    expect(trigger.type).toBe("prometheus")
    const query: string = trigger.metadata.query
    const metric = /^sum\((\w+)\{(.*)\}\)$/.exec(query)
    expect(metric, query).not.toBeNull()
    expect(metric![1]).toBe(Metrics.lag.id)
    expect(metric![2]).toBe(`stream="${ORDERS.stream}",group="${ORDERS.group}"`)
  })

  it("never scales past one member per shard (more would sit idle)", () => {
    expect(scaled.spec.maxReplicaCount * ORDERS.concurrency).toBeLessThanOrEqual(
      DEFAULTS.shardCount,
    )
    expect(scaled.spec.minReplicaCount).toBeGreaterThanOrEqual(1)
  })
})

describe("examples/kubernetes/coordinator.yaml", () => {
  const coordinator = one("coordinator.yaml", "Deployment")
  const args: Array<string> = coordinator.spec.template.spec.containers[0].args
  const arg = (flag: string) => args[args.indexOf(flag) + 1]

  it("coordinates the example's group with the settings its members declare (the defaults)", () => {
    expect(arg("--stream")).toBe(ORDERS.stream)
    expect(arg("--group")).toBe(ORDERS.group)
    expect(Number(arg("--shards"))).toBe(DEFAULTS.shardCount)
    expect(Number(arg("--session-timeout"))).toBe(DEFAULTS.sessionTimeoutMs)
    expect(Number(arg("--heartbeat-interval"))).toBe(DEFAULTS.heartbeatIntervalMs)
    expect(Number(arg("--rebalance-timeout"))).toBe(DEFAULTS.rebalanceTimeoutMs)
  })

  it("runs a standby beside the leader, and the consumers can be told to use it", () => {
    expect(coordinator.spec.replicas).toBeGreaterThanOrEqual(2)
    expect(settingsFrom({ [ENV.coordinator]: "standalone" }).coordinator).toBe("standalone")
    expect(settings.coordinator).toBe(value("COORDINATOR"))
  })
})
