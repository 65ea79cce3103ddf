/**
 * Read-only inspection of a stored group, without a coordinator and without
 * the lease: the decoded snapshot and its monitoring projection (what a
 * `shardline inspect` command prints). Nothing is written, so it is safe
 * against a live group; progress reports are volatile and not stored, so
 * `reportedPending` is 0.
 *
 * @example
 * const found = yield* inspectGroup({ stream: "orders", group: "workers" })
 * if (Option.isSome(found)) console.log(found.value.monitor.shardsPerMember)
 */
import { Effect, Option } from "effect"
import type { CorruptSnapshot, StoreUnavailable } from "../Errors.js"
import type { GroupKey } from "../ports/GroupKey.js"
import { Store } from "../ports/Store.js"
import { fromSnapshot } from "./CoordinatorState.js"
import { type GroupMonitor, monitor } from "./Monitoring.js"
import type { Snapshot } from "./Snapshot.js"

export interface GroupInspection {
  readonly snapshot: Snapshot
  readonly monitor: GroupMonitor
}

/** The group's stored snapshot and monitoring view; none when the group does not exist. */
export const inspectGroup = (
  key: GroupKey,
): Effect.Effect<Option.Option<GroupInspection>, CorruptSnapshot | StoreUnavailable, Store> =>
  Store.use((store) =>
    Effect.map(
      store.load(key),
      Option.map((snapshot) => ({ snapshot, monitor: monitor(fromSnapshot(snapshot)) })),
    ),
  )
