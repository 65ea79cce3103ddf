/**
 * Coordinator benchmarks (benny): steady heartbeats/s and the cost of one
 * rebalance step for a large group, through CoordinatorHost with the memory
 * Store, against the bare pure handler measured in the same run.
 */
import {
  applyVolatile,
  Coordinator,
  CoordinatorLease,
  type CoordinatorRecord,
  type HeartbeatRequest,
  makeCoordinatorHostAsync,
  makeGroupConfig,
  replayAll,
  type Snapshot,
  Store,
  stickyAssign,
} from "@shardline/core"
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
  /** Store commits observed during the steady-heartbeat cases (must be 0). */
  readonly steadyCommits: number
}

const memberId = (i: number) => `pod-${String(i).padStart(5, "0")}-m0`

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
      previousMemberEpoch: i + 1,
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
    memberId: id,
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
  const store = Effect.runSync(Store.makeMemory)
  Effect.runSync(store.commit("bench", 0, Coordinator.createGroup(config, 0)))
  Effect.runSync(store.commit("bench", 1, records))
  const snapshot: Snapshot = Option.getOrThrow(Effect.runSync(store.load("bench")))
  const host = await makeCoordinatorHostAsync({
    config,
    holder: "bench",
    layer: Layer.merge(Store.layerWith(store), CoordinatorLease.layerMemory),
  })
  const bare = Coordinator.load(snapshot, Date.now()).state
  const check = await host.heartbeat(requests[0])
  if (check.errorCode !== "NONE") throw new Error(`host refused: ${check.errorMessage}`)
  const caseOptions = { maxTime: options.maxTimeSeconds, minSamples: 5 }

  let i = 0
  let j = 0
  const revisionBefore = store.revision("bench")
  const steady = await b.suite(
    `coordinator steady heartbeat (${members} members x ${shards} shards)`,
    b.add(
      "bare pure handler: Coordinator.heartbeat",
      () => {
        const r = Coordinator.heartbeat(bare, requests[i++ % members]!, 1_000)
        applyVolatile(bare, r)
        if (r.records.length !== 0) throw new Error("steady heartbeat produced records")
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
  const steadyCommits = store.revision("bench") - revisionBefore

  // One rebalance step: a join into the steady group (then a leave, so the group stays the same size).
  const bareApplied = Coordinator.load(snapshot, 0).state
  let k = 0
  let m = 0
  const joinReq = (id: string): HeartbeatRequest => ({
    group: "bench",
    memberId: id,
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
  const applied = (req: HeartbeatRequest) => {
    const r = Coordinator.heartbeat(bareApplied, req, 0)
    replayAll(bareApplied, r.records)
    bareApplied.storeRevision += 1
    applyVolatile(bareApplied, r)
  }
  const rebalance = await b.suite(
    `coordinator rebalance step: join into ${members} members x ${shards} shards`,
    b.add(
      "bare pure handler: join (result not applied)",
      () => {
        Coordinator.heartbeat(bare, joinReq("zz-joiner"), 0)
      },
      caseOptions,
    ),
    b.add(
      "bare pure handler + replay: join then leave",
      () => {
        const id = `zz-joiner-${k++}`
        applied(joinReq(id))
        applied(leaveReq(id))
      },
      caseOptions,
    ),
    b.add(
      "CoordinatorHost (memory Store): join then leave",
      async () => {
        const id = `zz-joiner-${m++}`
        const r1 = await host.heartbeat(joinReq(id))
        const r2 = await host.heartbeat(leaveReq(id))
        if (r1.errorCode !== "NONE" || r2.errorCode !== "NONE") throw new Error("rebalance failed")
      },
      caseOptions,
    ),
    b.cycle(),
  )
  await host.close()
  return {
    members,
    shards,
    steady: steady.results.map(toCase),
    rebalance: rebalance.results.map(toCase),
    steadyCommits,
  }
}
