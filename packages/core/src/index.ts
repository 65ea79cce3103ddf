export * from "./assignor/movementLowerBound.js"
export * from "./assignor/stickyAssign.js"
export * from "./CoordinatorHost.js"
export {
  CoordinatorLease,
  type CoordinatorLeaseShape,
  type LeaseGrant,
} from "./CoordinatorLease.js"
export * as CoordinatorTransport from "./CoordinatorTransport.js"
export type { CoordinatorResult, Election, Fence, Loaded } from "./coordinator/Coordinator.js"
export * as Coordinator from "./coordinator/Coordinator.js"
export * from "./coordinator/CoordinatorState.js"
export * from "./coordinator/GroupConfig.js"
export * from "./coordinator/Monitoring.js"
export * from "./coordinator/Records.js"
export * from "./coordinator/Snapshot.js"
export * from "./Errors.js"
export * as Layout from "./layout/index.js"
export * as MemberMachine from "./member/MemberMachine.js"
export * from "./protocol/Heartbeat.js"
export * as ShardStreams from "./ShardStreams.js"
export { type MemoryStore, Store, type StoreError, type StoreShape } from "./Store.js"
