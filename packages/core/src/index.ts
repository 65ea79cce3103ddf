export * from "./assignor/movementLowerBound.js"
export * from "./assignor/stickyAssign.js"
export * as CoordinatorCandidate from "./CoordinatorCandidate.js"
export * from "./CoordinatorHost.js"
export * as CandidateRole from "./coordinator/CandidateRole.js"
export type { CoordinatorResult, Election, Fence, Loaded } from "./coordinator/Coordinator.js"
export * as Coordinator from "./coordinator/Coordinator.js"
export {
  CoordinatorShell,
  type Created,
  type Step,
  type Takeover,
} from "./coordinator/CoordinatorShell.js"
export * from "./coordinator/CoordinatorState.js"
export * from "./coordinator/GroupConfig.js"
export { type GroupInspection, inspectGroup } from "./coordinator/inspectGroup.js"
export * from "./coordinator/Monitoring.js"
export * from "./coordinator/Records.js"
export * from "./coordinator/Snapshot.js"
export * from "./Errors.js"
export * as Layout from "./layout/index.js"
export * as MemberMachine from "./member/MemberMachine.js"
export * as AckPolicy from "./ports/AckPolicy.js"
export * from "./ports/index.js"
export * from "./protocol/Heartbeat.js"
export * as Time from "./time/Instant.js"
