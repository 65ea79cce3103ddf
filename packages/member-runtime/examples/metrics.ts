/**
 * Example: exposing the runtime's metrics to Prometheus with node:http.
 *
 * Run: pnpm --filter @shardline/member-runtime example metrics
 */
import { createServer } from "node:http"
import { pathToFileURL } from "node:url"
import { consumer, start } from "@shardline/member-runtime"

export const main = async (serve = false) => {
  const runtime = await start({
    handleSignals: false,
    consumers: [
      consumer({
        stream: "orders",
        group: "metrics-demo",
        heartbeatIntervalMs: 200,
        sessionTimeoutMs: 3_000,
        eachMessage: () => {},
      }),
    ],
  })
  await runtime
    .producer("orders")
    .sendBatch(Array.from({ length: 20 }, (_, i) => ({ key: `k${i}` })))
  while (!(await runtime.metrics()).includes("shardline_messages_acked_total"))
    await new Promise((resolve) => setTimeout(resolve, 10))
  const server = createServer(async (_request, response) => {
    response.setHeader("content-type", "text/plain; version=0.0.4")
    response.end(await runtime.metrics())
  })
  if (serve) {
    server.listen(9464)
    console.log("metrics on http://localhost:9464/metrics (Ctrl-C to stop)")
    await new Promise((resolve) => process.once("SIGINT", resolve))
    server.close()
  }
  const text = await runtime.metrics()
  await runtime.stop()
  return text
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) console.log(await main(true))
