/**
 * The ports a CoordinatorHost test gives its host (memory Store, lease and
 * fence), and the heartbeat of a member that applied an answer: shared by
 * test/CoordinatorHost.test.ts and test/HostTiming.test.ts.
 */
import { Effect, Layer } from "effect"
import { CoordinatorLease, type HeartbeatResponse, OwnerFence } from "../../src/index.js"
import { Store } from "../../src/testing.js"
import { request } from "../coordinator/harness.js"

export const makeLease = () => Effect.runSync(CoordinatorLease.makeMemory)

export const hostPorts = (
  store: Store.StoreShape,
  lease: CoordinatorLease.CoordinatorLeaseShape = makeLease(),
  fence: OwnerFence.OwnerFenceShape = OwnerFence.noop,
) =>
  Layer.mergeAll(
    Layer.succeed(Store.Store, store),
    Layer.succeed(CoordinatorLease.CoordinatorLease, lease),
    Layer.succeed(OwnerFence.OwnerFence, fence),
  )

/** The steady heartbeat of a member that applied `last`: same epochs, owns what it was granted. */
export const steadyOf = (memberId: string, last: HeartbeatResponse) =>
  request({
    memberId,
    memberEpoch: last.memberEpoch,
    assignmentEpoch: last.assignmentEpoch,
    ownedShards: last.assigned.map((g) => g.shard),
  })
