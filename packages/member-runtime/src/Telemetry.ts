/**
 * OpenTelemetry traces and metrics (docs/observability.md). Nothing to call:
 * a runtime traces and measures when it starts with an OpenTelemetry SDK
 * registered (or an Effect tracer in context, for the Effect API), and does
 * nothing otherwise. `@opentelemetry/api` is an optional peer dependency.
 *
 * @example
 * // register the SDK first, then start the runtime
 * import { NodeSDK } from "@opentelemetry/sdk-node"
 * new NodeSDK({ traceExporter, metricReader }).start()
 * const runtime = await start({ listeners: [new Billing()] })
 *
 * @example
 * // explicit providers instead of the global ones, or none at all
 * await start({ listeners, telemetry: { tracerProvider, meterProvider } })
 * await start({ listeners, telemetry: false })
 */
export { TRACEPARENT_FIELD, TRACESTATE_FIELD } from "./internal/telemetry/propagation.js"

/**
 * Where the runtime's spans and instruments go, instead of the globally
 * registered providers. Typed structurally so that this package's types do
 * not need `@opentelemetry/api`: pass an SDK's `TracerProvider` /
 * `MeterProvider`.
 */
export interface TelemetryOptions {
  /** An OpenTelemetry `TracerProvider` (default: the global one, if an SDK registered it). */
  readonly tracerProvider?: { readonly getTracer: (name: string, version?: string) => unknown }
  /** An OpenTelemetry `MeterProvider` (default: the global one, if an SDK registered it). */
  readonly meterProvider?: { readonly getMeter: (name: string, version?: string) => unknown }
}
