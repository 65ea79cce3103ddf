/**
 * The health endpoint (docs/runtime.md, "Health"): an opt-in `node:http`
 * server for Kubernetes probes and Prometheus scrapes.
 *
 * - `GET /livez`: 200 when the runtime is live, else 503; the body is the
 *   health as JSON (`runtime.health()`).
 * - `GET /readyz`: 200 when it is ready, else 503; the same body.
 * - `GET /metrics`: the Prometheus text exposition (`runtime.metrics()`).
 *
 * `HEAD` is answered too; any other method is 405, any other path 404.
 * Start it with `start({ http: { port } })` (closed when the runtime stops)
 * or `runtime.serveHealth({ port })`. The host defaults to every interface,
 * as a probe reaches the pod's IP.
 *
 * @example
 * const runtime = await start({ redis: { url }, listeners: [new Billing()], http: { port: 9464 } })
 * // curl -i http://localhost:9464/readyz  -> 200 {"live":true,"ready":true,...}
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { HealthServerFailed, InvalidRuntimeConfig } from "./Errors.js"
import type { Health } from "./Health.js"

/** The endpoint's paths, for probes and scrape configs (examples/kubernetes uses them). */
export const HEALTH_PATHS = { live: "/livez", ready: "/readyz", metrics: "/metrics" } as const

/** The content type of `/metrics`: Prometheus text format 0.0.4. */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

/** Where the health endpoint listens. */
export interface HttpOptions {
  /** TCP port (0: any free port; read the chosen one from `HealthServer.port`). */
  readonly port: number
  /** Interface to bind (default: every interface). */
  readonly host?: string
}

/** What the endpoint serves: a runtime (`ShardlineRuntime` is one). */
export interface HealthSource {
  readonly health: () => Health
  readonly metrics: () => Promise<string>
}

/** A listening health endpoint. */
export interface HealthServer {
  /** The port it listens on (the chosen one for port 0). */
  readonly port: number
  /** `http://<host>:<port>`, with `localhost` for every interface. */
  readonly url: string
  /** Stop listening and close open connections. Idempotent. */
  readonly close: () => Promise<void>
}

/** Check `http` options; `field` prefixes the named field (`http`). */
export const validateHttpOptions = (
  options: unknown,
  field = "http",
): InvalidRuntimeConfig | undefined => {
  if (typeof options !== "object" || options === null)
    return new InvalidRuntimeConfig({ field, message: "must be an object: { port, host? }" })
  const { port, host } = options as { port?: unknown; host?: unknown }
  if (typeof port !== "number" || !Number.isInteger(port) || port < 0 || port > 65_535)
    return new InvalidRuntimeConfig({
      field: `${field}.port`,
      message: `must be an integer from 0 to 65535 (0: any free port), got ${JSON.stringify(port)}`,
    })
  if (host !== undefined && (typeof host !== "string" || host.trim() === ""))
    return new InvalidRuntimeConfig({
      field: `${field}.host`,
      message: `must be a non-empty string, got ${JSON.stringify(host)}`,
    })
  return undefined
}

const send = (
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string,
) => {
  res.statusCode = status
  res.setHeader("content-type", contentType)
  res.setHeader("cache-control", "no-store")
  res.setHeader("content-length", Buffer.byteLength(body))
  res.end(req.method === "HEAD" ? undefined : body)
}

const json = "application/json; charset=utf-8"

const handle = async (source: HealthSource, req: IncomingMessage, res: ServerResponse) => {
  const path = (req.url ?? "/").split("?")[0]
  const known =
    path === HEALTH_PATHS.live || path === HEALTH_PATHS.ready || path === HEALTH_PATHS.metrics
  if (!known) return send(req, res, 404, json, JSON.stringify({ error: `no such path: ${path}` }))
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.setHeader("allow", "GET, HEAD")
    return send(req, res, 405, json, JSON.stringify({ error: "only GET and HEAD" }))
  }
  if (path === HEALTH_PATHS.metrics) {
    // the text exposition renders the metric registry; a failure is a 500, never a crash
    try {
      return send(req, res, 200, PROMETHEUS_CONTENT_TYPE, await source.metrics())
    } catch (error) {
      return send(req, res, 500, json, JSON.stringify({ error: String(error) }))
    }
  }
  const health = source.health()
  const ok = path === HEALTH_PATHS.live ? health.live : health.ready
  return send(req, res, ok ? 200 : 503, json, JSON.stringify(health))
}

/**
 * Serve `/livez`, `/readyz` and `/metrics` for `source` (see the module
 * doc). Rejects with `InvalidRuntimeConfig` for bad options and
 * `HealthServerFailed` when it cannot listen.
 */
export const serveHealth = async (
  source: HealthSource,
  options: HttpOptions,
): Promise<HealthServer> => {
  const invalid = validateHttpOptions(options)
  if (invalid !== undefined) throw invalid
  const server = createServer((req, res) => {
    void handle(source, req, res)
  })
  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error) =>
      reject(
        new HealthServerFailed({
          port: options.port,
          ...(options.host !== undefined ? { host: options.host } : {}),
          message: `the health endpoint cannot listen on ${options.host ?? "every interface"}, port ${options.port}: ${error.message}`,
          cause: error,
        }),
      )
    server.once("error", onError)
    server.listen(options.port, options.host, () => {
      server.off("error", onError)
      resolve()
    })
  })
  const port = (server.address() as AddressInfo).port
  const host = options.host ?? "localhost"
  let closing: Promise<void> | undefined
  return {
    port,
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve())
        // probes keep their connections alive: close them, or close waits for them
        server.closeAllConnections()
      })
      return closing
    },
  }
}
