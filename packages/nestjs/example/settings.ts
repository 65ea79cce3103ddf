/**
 * What the example reads from its environment, and its listener's group
 * (docs/nestjs.md; examples/kubernetes sets the same variables, and its
 * test checks the manifests against these).
 */

/** The example's listener: `Billing.onOrder` (billing.ts). */
export const ORDERS = { stream: "orders", group: "billing", concurrency: 2 } as const

/** The environment variables the example reads (the member id's `POD_IP` is member-runtime's). */
export const ENV = {
  redisUrl: "REDIS_URL",
  httpPort: "HTTP_PORT",
  shutdownTimeoutMs: "SHUTDOWN_TIMEOUT_MS",
  coordinator: "COORDINATOR",
} as const

export const settingsFrom = (env: Readonly<Record<string, string | undefined>>) => ({
  redisUrl: env[ENV.redisUrl] ?? "redis://localhost:6379",
  httpPort: Number(env[ENV.httpPort] ?? 9464),
  shutdownTimeoutMs: Number(env[ENV.shutdownTimeoutMs] ?? 30_000),
  // "standalone" when a coordinator Deployment runs the group (examples/kubernetes/coordinator.yaml)
  coordinator:
    env[ENV.coordinator] === "standalone" ? ("standalone" as const) : ("embedded" as const),
})

export type Settings = ReturnType<typeof settingsFrom>
