/**
 * Metrics through effect's `Metric` (docs/runtime.md, "Metrics";
 * docs/observability.md, "Metrics"), labelled by `stream` and `group`
 * (gauges also by `member`, `shardline_shard_lag` by `shard`). The
 * Promise API keeps one registry per runtime (`runtime.metrics()`); with the
 * Effect API the metrics land in the `Metric.MetricRegistry` in context (the
 * process-wide default unless you provide one), and `prometheusText` renders
 * them.
 *
 * @example
 * // Prometheus scrape endpoint with node:http
 * createServer(async (_req, res) => {
 *   res.setHeader("content-type", "text/plain; version=0.0.4")
 *   res.end(await runtime.metrics())
 * }).listen(9464)
 */
import { Context, Effect, Metric } from "effect"

export const messagesHandled = Metric.counter("shardline_messages_handled_total", {
  description: "Messages whose handler succeeded",
  incremental: true,
})
export const messagesAcked = Metric.counter("shardline_messages_acked_total", {
  description: "Messages acknowledged (ack or xackdel)",
  incremental: true,
})
export const handlerErrors = Metric.counter("shardline_handler_errors_total", {
  description: "Handler calls that threw, rejected, failed or timed out",
  incremental: true,
})
export const deadLettered = Metric.counter("shardline_dead_lettered_total", {
  description:
    "Messages moved to a shard's dead-letter stream: after maxDeliveries, or at once when non-retryable, undecodable or invalid",
  incremental: true,
})
export const messagesRejected = Metric.counter("shardline_messages_rejected_total", {
  description:
    "Messages dead-lettered without a handler call, by reason: undecodable (the codec could not decode it) or invalid (the schema refused it)",
  incremental: true,
})
export const batches = Metric.counter("shardline_batches_total", {
  description: "Batches read and handled",
  incremental: true,
})
export const batchDuration = Metric.histogram("shardline_batch_duration_ms", {
  description: "Time to handle and acknowledge one batch",
  boundaries: [1, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000],
})
export const heartbeats = Metric.counter("shardline_heartbeats_total", {
  description: "Heartbeats sent",
  incremental: true,
})
export const heartbeatDuration = Metric.histogram("shardline_heartbeat_duration_ms", {
  description: "Heartbeat round trip, request sent to answer received (or failed)",
  boundaries: [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000],
})
export const heartbeatFailures = Metric.counter("shardline_heartbeat_failures_total", {
  description: "Heartbeats that failed (transport error or timeout)",
  incremental: true,
})
export const rebalances = Metric.counter("shardline_rebalances_total", {
  description: "Assignment epochs applied by members",
  incremental: true,
})
export const fences = Metric.counter("shardline_fences_total", {
  description: "Times a member dropped all ownership at once (fenced, lease lost, superseded)",
  incremental: true,
})
export const staleOwner = Metric.counter("shardline_stale_owner_total", {
  description: "Reads or acks refused by the storage's owner fence",
  incremental: true,
})
export const dataLost = Metric.counter("shardline_data_lost_total", {
  description:
    "Times a member found something Shardline stored for its group gone from a shard (label what: token, stream, group; docs/protocol.md rule 26)",
  incremental: true,
})
export const handlersStuck = Metric.counter("shardline_handlers_stuck_total", {
  description:
    "Stopped loops whose handler still ran past the drain budget (their shard waits for it)",
  incremental: true,
})
export const leaseLost = Metric.counter("shardline_lease_lost_total", {
  description: "Times a member's lease ran out without an answer (it paused its reads)",
  incremental: true,
})
export const coordinatorUnavailable = Metric.gauge("shardline_coordinator_unavailable", {
  description:
    "1 while no coordinator has answered this member for longer than twice the coordinator lease (docs/protocol.md rule 25), else 0",
})
export const coordinatorUnavailablePeriods = Metric.counter(
  "shardline_coordinator_unavailable_total",
  {
    description:
      "Periods in which no coordinator answered a member past twice the coordinator lease",
    incremental: true,
  },
)
export const ownedShards = Metric.gauge("shardline_owned_shards", {
  description: "Shards owned by this process's logical members",
})
export const lag = Metric.gauge("shardline_lag", {
  description: "Entries not yet delivered to the group, summed over the shards this process owns",
})

export const shardLag = Metric.gauge("shardline_shard_lag", {
  description:
    "Entries of a shard this process owns not yet delivered to the group (0 once it is owned elsewhere)",
})

/** The metric with this group's labels. */
export const forGroup = <I, S>(
  metric: Metric.Metric<I, S>,
  key: { readonly stream: string; readonly group: string },
): Metric.Metric<I, S> => Metric.withAttributes(metric, { stream: key.stream, group: key.group })

/**
 * The Prometheus text exposition of every metric in the registry in context
 * (effect's `PrometheusMetrics.format`, loaded on first use).
 */
export const prometheusText: Effect.Effect<string> = Effect.flatMap(
  Effect.context<never>(),
  (context) =>
    Effect.promise(() => import("effect/observability/PrometheusMetrics")).pipe(
      Effect.map((m) => m.formatUnsafe(context)),
    ),
)

/** `prometheusText` for a given registry (the Promise API's per-runtime registry). */
export const prometheusTextOf = (registry: Metric.MetricRegistry): Promise<string> =>
  Effect.runPromise(
    prometheusText.pipe(Effect.provideContext(Context.make(Metric.MetricRegistry, registry))),
  )
