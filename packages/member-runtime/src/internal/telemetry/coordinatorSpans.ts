/**
 * The coordinator's spans (docs/observability.md, "Coordinator spans"): every
 * commit that carries audit events (a rebalance, a fence or expiry, an
 * election, grants and revocations) is one span around the `Store.commit`,
 * named after its main event, with the reason as an attribute and each
 * audit event as a span event. The coordinator itself is not touched: its
 * `Store` is wrapped. Steady heartbeats commit nothing and cost nothing.
 */
import type { AuditEvent, CoordinatorRecord, GroupKey, Store } from "@shardline/core"
import { type Clock, Context, Effect, Option, type Tracer } from "effect"
import { ATTR, SYSTEM } from "./Telemetry.js"

/** Which audit event names the commit's span, most telling first. */
const PRIMARY: ReadonlyArray<readonly [AuditEvent["kind"], string]> = [
  ["TargetAssignmentChanged", "shardline.coordinator.rebalance"],
  ["MemberFenced", "shardline.coordinator.fence"],
  ["MemberExpired", "shardline.coordinator.fence"],
  ["MemberReplaced", "shardline.coordinator.fence"],
  ["CoordinatorElected", "shardline.coordinator.elected"],
  ["ReshardStarted", "shardline.coordinator.reshard"],
  ["ReshardCompleted", "shardline.coordinator.reshard"],
]

const nameOf = (events: ReadonlyArray<AuditEvent>): { name: string; main: AuditEvent } => {
  for (const [kind, name] of PRIMARY) {
    const main = events.find((e) => e.kind === kind)
    if (main !== undefined) return { name, main }
  }
  return { name: "shardline.coordinator.reconcile", main: events[0]! }
}

const eventAttributes = (e: AuditEvent): Record<string, unknown> => ({
  "shardline.audit.reason": e.reason,
  ...(e.memberId !== undefined ? { [ATTR.clientId]: e.memberId } : {}),
  ...(e.shards !== undefined ? { "shardline.shards": [...e.shards] } : {}),
  "shardline.group_epoch": e.after.groupEpoch,
  "shardline.assignment_epoch": e.after.assignmentEpoch,
  ...(e.after.memberEpoch !== undefined ? { "shardline.member_epoch": e.after.memberEpoch } : {}),
})

/** `store` with a span per commit that carries audit events. */
export const tracedStore = (
  store: Store.StoreShape,
  tracer: Tracer.Tracer,
  clock: Clock.Clock,
): Store.StoreShape => ({
  load: store.load,
  commit: (
    key: GroupKey,
    expectedRevision: number,
    records: ReadonlyArray<CoordinatorRecord>,
    fence?: Store.CommitFence,
  ) => {
    const audits: Array<AuditEvent> = []
    for (const r of records) if (r._tag === "Audit") audits.push(r.event)
    if (audits.length === 0) return store.commit(key, expectedRevision, records, fence)
    return Effect.suspend(() => {
      const { name, main } = nameOf(audits)
      const span = tracer.span({
        name,
        parent: Option.none(),
        annotations: Context.empty(),
        links: [],
        startTime: clock.currentTimeNanosUnsafe(),
        kind: "internal",
        root: true,
        sampled: true,
      })
      span.attribute(ATTR.system, SYSTEM)
      span.attribute(ATTR.destination, key.stream)
      span.attribute(ATTR.consumerGroup, key.group)
      span.attribute("shardline.coordinator.event", main.kind)
      span.attribute("shardline.store_revision", expectedRevision + 1)
      const attributes = eventAttributes(main)
      for (const k of Object.keys(attributes)) span.attribute(k, attributes[k])
      if (main.kind === "TargetAssignmentChanged")
        span.attribute("shardline.rebalance.reason", main.reason)
      for (const e of audits)
        span.event(e.kind, BigInt(Math.round(e.at * 1000)) * 1000n, eventAttributes(e))
      return store
        .commit(key, expectedRevision, records, fence)
        .pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => span.end(clock.currentTimeNanosUnsafe(), exit)),
          ),
        )
    })
  },
})
