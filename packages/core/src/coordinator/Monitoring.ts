/**
 * Monitoring projection: a derived, read-only view of the coordinator state.
 */
import type { CoordinatorState } from "./CoordinatorState.js"
import type { MemberState } from "./Records.js"

export interface GroupMonitor {
  readonly groupId: string
  readonly groupEpoch: number
  readonly assignmentEpoch: number
  readonly storeRevision: number
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
  /** A revocation is pending, a grant is unconfirmed, or current differs from target. */
  readonly rebalanceInProgress: boolean
  readonly membersByState: Readonly<Record<MemberState, number>>
  /** Sum of `pending` entries over the latest progress reports (volatile, best effort). */
  readonly reportedPending: number
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
  let inProgress = false
  for (let s = 0; s < state.layout.shardCount; s++) {
    const cur = state.current[s] ?? null
    if (state.revocations[s] != null) pendingRevokes += 1
    if (cur === null) unownedShards += 1
    if (cur?.memberId !== (state.target[s] ?? undefined) || (cur !== null && !cur.confirmed))
      inProgress = true
  }
  let reportedPending = 0
  for (const p of state.progress.values()) for (const s of p) reportedPending += s.pending
  return {
    groupId: state.config.groupId,
    groupEpoch: state.groupEpoch,
    assignmentEpoch: state.assignmentEpoch,
    storeRevision: state.storeRevision,
    shardCount: state.layout.shardCount,
    memberCount: state.members.size,
    shardsPerMember,
    imbalance: spread(Object.values(shardsPerMember)),
    targetImbalance: spread(targetCounts),
    pendingRevokes,
    unownedShards,
    rebalanceInProgress: inProgress || pendingRevokes > 0,
    membersByState,
    reportedPending,
  }
}
