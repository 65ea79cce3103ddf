/**
 * Coordinator benchmarks (benny): steady heartbeats/s and the cost of one
 * rebalance step for a large group, through CoordinatorHost with the memory
 * Store, against the bare pure handler measured in the same run.
 *
 * Rebalance cases (members > shards, equal weights; the settled group has
 * `pod-i` owning shard i for i < shards and every later member owning nothing):
 * - join: a new member joins. The sticky assignor keeps every owner's shard,
 *   so a joiner gets nothing and no shard moves, whatever its id: this is the
 *   cost of a membership change (assignor pass + records) without movement.
 * - owner leaves then rejoins: the leaver's shard moves (target change, one
 *   shard) to the lowest-id member without a shard; the rejoiner gets nothing.
 *   Leavers cycle over the first `shards + 1` members, each of which owns a
 *   shard when its turn comes (the one without a shard is always the previous
 *   leaver), so every leave moves exactly one shard. The bare cases count the
 *   moved shards from their records; the host case from the audit log.
 */
import {
  Coordinator,
  CoordinatorLease,
  type CoordinatorRecord,
  CoordinatorShell,
  type HeartbeatRequest,
  makeCoordinatorHostAsync,
  makeGroupConfig,
  type Snapshot,
  stickyAssign,
} from "@shardline/core"
import { Store } from "@shardline/core/testing"
import b from "benny"
import { Effect, Layer, Option } from "effect"

export interface CoordinatorBenchOptions {
  readonly members: number
  readonly shards: number
  readonly maxTimeSeconds: number
}

export interface CaseResult {
  readonly name: string
  readonly opsPerSec: number
  readonly marginPct: number
  readonly samples: number
}

export interface CoordinatorBenchResults {
  readonly members: number
  readonly shards: number
  readonly steady: ReadonlyArray<CaseResult>
  readonly rebalance: ReadonlyArray<CaseResult>
  /** Target shards moved per measured operation, by rebalance case name. */
  readonly movedPerOp: Readonly<Record<string, number>>
  /** Store commits observed during the steady-heartbeat cases (must be 0). */
  readonly steadyCommits: number
}

/** Rebalance case names (also the keys of `movedPerOp`). */
export const rebalanceCases = {
  join: "bare pure handler: join (result not applied)",
  joinPair: "bare pure handler + replay: join then leave",
  joinHost: "CoordinatorHost (memory Store): join then leave",
  leave: "bare pure handler: owner leaves (result not applied)",
  leavePair: "bare pure handler + replay: owner leaves then rejoins",
  leaveHost: "CoordinatorHost (memory Store): owner leaves then rejoins",
} as const

/** The tiny group of the size-independence check. */
export const SMALL_GROUP = { members: 20, shards: 16 } as const
export const steadySmallCase = `bare pure handler, ${SMALL_GROUP.members} members x ${SMALL_GROUP.shards} shards`

const memberId = (i: number) => `pod-${String(i).padStart(5, "0")}-m0`

const key = { stream: "orders", group: "bench" }

/** A leader's shell over the stored snapshot (its election applied as if committed). */
const leaderShell = (snapshot: Snapshot, now: number): CoordinatorShell => {
  const takeover = CoordinatorShell.load(snapshot, now, { holder: "bench-bare", leaseToken: 1e9 })
  if (takeover._tag === "Refused") throw new Error(takeover.reason)
  takeover.shell.apply(takeover.step, takeover.shell.revision + 1)
  return takeover.shell
}

/** A settled group: every member joined, target == current, all grants confirmed. */
const steadyGroup = (members: number, shards: number) => {
  const config = makeGroupConfig({
    groupId: "bench",
    stream: "orders",
    shardCount: shards,
    sessionTimeoutMs: 3_600_000,
    rebalanceTimeoutMs: 3_600_000,
    heartbeatIntervalMs: 3_000,
  })
  const ids = Array.from({ length: members }, (_, i) => memberId(i))
  const target = stickyAssign({ shardCount: shards, members: ids.map((id) => ({ id })) })
  const records: Array<CoordinatorRecord> = ids.map((id, i) => ({
    _tag: "MemberUpserted",
    member: {
      memberId: id,
      memberEpoch: i + 1,
      incarnation: 1,
      joinSeq: 1,
      state: "STABLE",
      weight: 1,
      memberInfo: { consumerName: id, host: "10.0.0.1" },
    },
  }))
  records.push({ _tag: "GroupEpochBumped", groupEpoch: members })
  records.push({
    _tag: "TargetAssignmentChanged",
    assignmentEpoch: 1,
    shards: target.map((m, shard) => ({ shard, memberId: m })),
  })
  records.push({
    _tag: "ShardOwnersChanged",
    shards: target.map((m, shard) => ({
      shard,
      owner:
        m === null
          ? null
          : { memberId: m, memberEpoch: ids.indexOf(m) + 1, token: 1, confirmed: true },
    })),
  })
  const owned = new Map<string, Array<number>>()
  target.forEach((m, s) => {
    if (m !== null) owned.set(m, [...(owned.get(m) ?? []), s])
  })
  const requests: Array<HeartbeatRequest> = ids.map((id, i) => ({
    group: "bench",
    stream: "orders",
    memberId: id,
    incarnation: 1,
    seq: 1,
    memberEpoch: i + 1,
    assignmentEpoch: 1,
    metadataVersion: 0,
    ownedShards: owned.get(id) ?? [],
    revokingShards: [],
  }))
  return { config, records, requests }
}

const toCase = (r: { name: string; ops: number; margin: number; samples: number }): CaseResult => ({
  name: r.name,
  opsPerSec: Math.round(r.ops),
  marginPct: r.margin,
  samples: r.samples,
})

export const runCoordinatorBench = async (
  options: CoordinatorBenchOptions,
): Promise<CoordinatorBenchResults> => {
  const { members, shards } = options
  const { config, records, requests } = steadyGroup(members, shards)
  const store = Store.makeMemoryUnsafe()
  Effect.runSync(store.commit(key, 0, Coordinator.createGroup(config, 0)))
  Effect.runSync(store.commit(key, 1, records))
  const snapshot: Snapshot = Option.getOrThrow(Effect.runSync(store.load(key)))
  const host = await makeCoordinatorHostAsync({
    config,
    holder: "bench",
    layer: Layer.merge(Layer.succeed(Store.Store, store), CoordinatorLease.layerMemory),
  })
  const bare = leaderShell(snapshot, 0)
  const check = await host.heartbeat(requests[0])
  if (check.errorCode !== "NONE") throw new Error(`host refused: ${check.errorMessage}`)
  const caseOptions = { maxTime: options.maxTimeSeconds, minSamples: 5 }

  // The same handler on a tiny group, in the same run: a steady heartbeat must
  // cost the same whatever the group size (no O(members) or O(shards) work).
  const small = steadyGroup(SMALL_GROUP.members, SMALL_GROUP.shards)
  const smallStore = Store.makeMemoryUnsafe()
  Effect.runSync(smallStore.commit(key, 0, Coordinator.createGroup(small.config, 0)))
  Effect.runSync(smallStore.commit(key, 1, small.records))
  const smallBare = leaderShell(Option.getOrThrow(Effect.runSync(smallStore.load(key))), 0)

  let i = 0
  let j = 0
  let s = 0
  const revisionBefore = store.revision(key)
  const steady = await b.suite(
    `coordinator steady heartbeat (${members} members x ${shards} shards)`,
    b.add(
      "bare pure handler: Coordinator.heartbeat",
      () => {
        const r = bare.heartbeat(requests[i++ % members]!, 1_000)
        if (r.records.length !== 0) throw new Error("steady heartbeat produced records")
        bare.apply(r)
      },
      caseOptions,
    ),
    b.add(
      steadySmallCase,
      () => {
        const r = smallBare.heartbeat(small.requests[s++ % SMALL_GROUP.members]!, 1_000)
        if (r.records.length !== 0) throw new Error("steady heartbeat produced records")
        smallBare.apply(r)
      },
      caseOptions,
    ),
    b.add(
      "CoordinatorHost (memory Store, async API)",
      async () => {
        const r = await host.heartbeat(requests[j++ % members])
        if (r.errorCode !== "NONE") throw new Error(r.errorCode)
      },
      caseOptions,
    ),
    b.cycle(),
  )
  const steadyCommits = store.revision(key) - revisionBefore

  // One rebalance step: a join into the steady group (then a leave, so the group stays the same size).
  const bareApplied = leaderShell(snapshot, 0)
  let k = 0
  let m = 0
  const joinReq = (id: string): HeartbeatRequest => ({
    group: "bench",
    stream: "orders",
    memberId: id,
    incarnation: 1,
    seq: 1,
    memberEpoch: 0,
    assignmentEpoch: 0,
    metadataVersion: 0,
    ownedShards: [],
    revokingShards: [],
    memberInfo: { consumerName: id, host: "10.0.0.2" },
  })
  const leaveReq = (id: string): HeartbeatRequest => ({
    ...joinReq(id),
    memberEpoch: -1,
    memberInfo: undefined,
  })
  const applied = (req: HeartbeatRequest): number => {
    const r = bareApplied.heartbeat(req, 0)
    if (r.response.errorCode !== "NONE") throw new Error(r.response.errorCode)
    bareApplied.apply(r, r.records.length > 0 ? bareApplied.revision + 1 : undefined)
    return movedIn(r.records)
  }
  /** Target shards moved by the records of one result. */
  const movedIn = (recs: ReadonlyArray<CoordinatorRecord>): number =>
    recs.reduce((n, r) => n + (r._tag === "TargetAssignmentChanged" ? r.shards.length : 0), 0)
  /** Target shards moved according to the host's audit log, for the events whose reason matches. */
  const auditMoved = (reason: RegExp): number =>
    store
      .auditLog(key)
      .reduce(
        (n, e) =>
          n +
          (e.kind === "TargetAssignmentChanged" && reason.test(e.reason)
            ? (e.shards?.length ?? 0)
            : 0),
        0,
      )
  if (members <= shards)
    throw new Error("the rebalance cases assume members > shards (see the module comment)")
  // Leavers cycle over the first shards + 1 ids (pod-0 owns shard 0 in the settled group).
  const leaver = (n: number) => memberId(n % (shards + 1))
  const moved = { join: 0, joinOps: 0, joinLeave: 0, joinLeaveOps: 0 }
  const movedLeave = { bare: 0, bareOps: 0, applied: 0, appliedOps: 0 }
  let p = 0
  let q = 0
  const rebalance = await b.suite(
    `coordinator rebalance step: join / owner leave in ${members} members x ${shards} shards`,
    b.add(
      rebalanceCases.join,
      () => {
        moved.join += movedIn(bare.heartbeat(joinReq("zz-joiner"), 0).records)
        moved.joinOps++
      },
      caseOptions,
    ),
    b.add(
      rebalanceCases.joinPair,
      () => {
        const id = `zz-joiner-${k++}`
        moved.joinLeave += applied(joinReq(id)) + applied(leaveReq(id))
        moved.joinLeaveOps++
      },
      caseOptions,
    ),
    b.add(
      rebalanceCases.joinHost,
      async () => {
        const id = `zz-joiner-${m++}`
        const r1 = await host.heartbeat(joinReq(id))
        const r2 = await host.heartbeat(leaveReq(id))
        if (r1.errorCode !== "NONE" || r2.errorCode !== "NONE") throw new Error("rebalance failed")
      },
      caseOptions,
    ),
    b.add(
      rebalanceCases.leave,
      () => {
        const r = bare.heartbeat(leaveReq(memberId(0)), 0)
        movedLeave.bare += movedIn(r.records)
        movedLeave.bareOps++
      },
      caseOptions,
    ),
    b.add(
      rebalanceCases.leavePair,
      () => {
        const id = leaver(p++)
        movedLeave.applied += applied(leaveReq(id)) + applied(joinReq(id))
        movedLeave.appliedOps++
      },
      caseOptions,
    ),
    b.add(
      rebalanceCases.leaveHost,
      async () => {
        const id = leaver(q++)
        const r1 = await host.heartbeat(leaveReq(id))
        const r2 = await host.heartbeat(joinReq(id))
        if (r1.errorCode !== "NONE" || r2.errorCode !== "NONE") throw new Error("rebalance failed")
      },
      caseOptions,
    ),
    b.cycle(),
  )
  await host.close()
  const perOp = (n: number, ops: number) => (ops === 0 ? Number.NaN : n / ops)
  const movedPerOp: Record<string, number> = {
    [rebalanceCases.join]: perOp(moved.join, moved.joinOps),
    [rebalanceCases.joinPair]: perOp(moved.joinLeave, moved.joinLeaveOps),
    [rebalanceCases.joinHost]: perOp(auditMoved(/^(join|MemberLeft) zz-joiner-/), m),
    [rebalanceCases.leave]: perOp(movedLeave.bare, movedLeave.bareOps),
    [rebalanceCases.leavePair]: perOp(movedLeave.applied, movedLeave.appliedOps),
    [rebalanceCases.leaveHost]: perOp(auditMoved(/^(join|MemberLeft) pod-/), q),
  }
  return {
    members,
    shards,
    steady: steady.results.map(toCase),
    rebalance: rebalance.results.map(toCase),
    movedPerOp,
    steadyCommits,
  }
}
