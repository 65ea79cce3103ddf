/**
 * Monitoring projection: a derived, read-only view of the coordinator state.
 */
import type { ShardLayout } from "../protocol/Heartbeat.js"
import type { CoordinatorState } from "./CoordinatorState.js"
import { activeShards, blocked, type LayoutView } from "./internal/ShardSpace.js"
import type { MemberState } from "./Records.js"

export interface GroupMonitor {
  readonly groupId: string
  readonly groupEpoch: number
  readonly assignmentEpoch: number
  readonly storeRevision: number
  /** Shards the group works with: the current layout's and earlier generations' undrained ones. */
  readonly shardCount: number
  readonly memberCount: number
  /** Accepted current shard count per member (every member listed, 0 included). */
  readonly shardsPerMember: Readonly<Record<string, number>>
  /** max - min of `shardsPerMember` over members (0 with no members). */
  readonly imbalance: number
  /** max - min of target shard counts per member. */
  readonly targetImbalance: number
  readonly pendingRevokes: number
  readonly unownedShards: number
  /**
   * Of `unownedShards`: held for a previous holder whose lease has not
   * provably ended (docs/protocol.md rule 19).
   */
  readonly heldShards: number
  /** A revocation is pending, a grant is unconfirmed, or current differs from target. */
  readonly rebalanceInProgress: boolean
  readonly membersByState: Readonly<Record<MemberState, number>>
  /** Sum of `pending` entries over the latest progress reports (volatile, best effort). */
  readonly reportedPending: number
  /** The group's side of a layout migration (docs/resharding.md). */
  readonly resharding: ReshardingProgress
}

export interface ReshardingProgress {
  readonly phase: "idle" | "migrating"
  /** The current layout generation. */
  readonly layout: ShardLayout
  /** Earlier generations still being drained, oldest first. */
  readonly draining: ReadonlyArray<ShardLayout>
  /** Shards of earlier generations drained / in all. */
  readonly shardsDrained: number
  readonly shardsToDrain: number
  /** Shards of later generations waiting for earlier ones to drain. */
  readonly blockedShards: number
  /** Entries left in earlier generations' shards (latest progress reports: pending + lag). */
  readonly backlogLeft: number
}

const spread = (values: ReadonlyArray<number>): number =>
  values.length === 0 ? 0 : Math.max(...values) - Math.min(...values)

export const monitor = (state: CoordinatorState): GroupMonitor => {
  const shardsPerMember: Record<string, number> = {}
  const targetCounts: Array<number> = []
  const membersByState: Record<MemberState, number> = {
    STABLE: 0,
    UNREVOKED_SHARDS: 0,
    UNRELEASED_SHARDS: 0,
    LEAVING: 0,
  }
  for (const m of state.members.values()) {
    shardsPerMember[m.memberId] = state.ownedBy.get(m.memberId)?.size ?? 0
    targetCounts.push(state.targetOf.get(m.memberId)?.size ?? 0)
    membersByState[m.state] += 1
  }
  let pendingRevokes = 0
  let unownedShards = 0
  let heldShards = 0
  let inProgress = false
  const view: LayoutView = {
    layout: state.layout,
    generations: state.resharding._tag === "Migrating" ? state.resharding.generations : [],
    isDrained: (shard) => state.drained.has(shard),
  }
  const active = activeShards(view)
  for (const s of active) {
    const cur = state.current[s] ?? null
    if (state.revocations[s] != null) pendingRevokes += 1
    if (cur === null) unownedShards += 1
    if (state.held[s] != null) heldShards += 1
    if (cur?.memberId !== (state.target[s] ?? undefined) || (cur !== null && !cur.confirmed))
      inProgress = true
  }
  let reportedPending = 0
  let backlogLeft = 0
  const earlier = (shard: number) =>
    view.generations.some((g) => shard >= g.firstShard && shard < g.firstShard + g.shardCount)
  for (const p of state.progress.values())
    for (const s of p) {
      reportedPending += s.pending
      if (earlier(s.shard) && !state.drained.has(s.shard)) backlogLeft += s.pending + (s.lag ?? 0)
    }
  const shardsToDrain = view.generations.reduce((n, g) => n + g.shardCount, 0)
  return {
    groupId: state.config.groupId,
    groupEpoch: state.groupEpoch,
    assignmentEpoch: state.assignmentEpoch,
    storeRevision: state.storeRevision,
    shardCount: active.length,
    memberCount: state.members.size,
    shardsPerMember,
    imbalance: spread(Object.values(shardsPerMember)),
    targetImbalance: spread(targetCounts),
    pendingRevokes,
    unownedShards,
    heldShards,
    rebalanceInProgress: inProgress || pendingRevokes > 0,
    membersByState,
    reportedPending,
    resharding: {
      phase: view.generations.length > 0 ? "migrating" : "idle",
      layout: state.layout,
      draining: view.generations,
      shardsDrained: state.drained.size,
      shardsToDrain,
      blockedShards: active.filter((s) => state.current[s] == null && blocked(view, s)).length,
      backlogLeft,
    },
  }
}
