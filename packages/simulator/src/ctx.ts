/**
 * The wiring between subsystems: each one gets the context and reaches the
 * others through it. Built once per run by `Simulation`.
 *
 * @module
 */
import type {
  AnswerChecker,
  CollateralChecker,
  ConvergenceChecker,
  DeadlineChecker,
  DrainChecker,
  ExactnessChecker,
  FanOutChecker,
  FenceWaitChecker,
  HandoverChecker,
  IntentChecker,
  KeyOrderChecker,
  LeaseChecker,
  LeaseConfigChecker,
  LivenessChecker,
  MessageChecker,
  OutboxChecker,
  OwnershipChecker,
  RequestChecker,
  RevisionChecker,
  RuntimeChecker,
  StarvationChecker,
  TokenChecker,
  TransactionChecker,
} from "./checkers/index.js"
import type { CommittedView } from "./checkers/view.js"
import type { CoordinatorHost } from "./coordinator.js"
import type { DataPlane } from "./dataplane.js"
import type { FanOut } from "./fanout.js"
import type { Faults } from "./faults.js"
import type { StreamLayouts } from "./layouts.js"
import type { Lease } from "./lease.js"
import type { Members } from "./members.js"
import type { Network } from "./network.js"
import type { FaultMix, SimOptions } from "./options.js"
import type { Outbox } from "./outbox.js"
import type { Sampler } from "./sampler.js"
import type { Store } from "./store.js"
import type { Workload } from "./workload.js"
import type { World } from "./world.js"

/** Every checker of a run, plus the committed view several of them read. */
export interface Checks {
  readonly view: CommittedView
  readonly ownership: OwnershipChecker
  readonly intent: IntentChecker
  readonly drain: DrainChecker
  readonly lease: LeaseChecker
  readonly deadlines: DeadlineChecker
  readonly requests: RequestChecker
  readonly runtime: RuntimeChecker
  /** Answers the member machine applied: within their lease, lease from the send time. */
  readonly answers: AnswerChecker
  readonly messages: MessageChecker
  readonly starvation: StarvationChecker
  readonly revisions: RevisionChecker
  readonly tokens: TokenChecker
  /** Fan-out groups (`groups` > 1; judged only then). */
  fanout: FanOutChecker
  readonly leaseConfig: LeaseConfigChecker
  /** Runs whose faults touch no member (see `isCollateralFree`). */
  readonly collateral: CollateralChecker | undefined
  readonly convergence: ConvergenceChecker
  /** No coordinator stall while live members send, Redis is up and a candidate runs. */
  readonly liveness: LivenessChecker
  readonly exactness: ExactnessChecker | undefined
  /** Reshard scenarios only: per-key order across layout generations. */
  readonly keyOrder: KeyOrderChecker | undefined
  /** Transactional handlers only (`--tx`): every effect exactly once. */
  readonly transactions: TransactionChecker | undefined
  /** The `coord-stop` fault only: a graceful stop hands over at once (rule 20). */
  readonly handover: HandoverChecker | undefined
  /** The `fence-hang` fault only: nothing waits for a hung node past `fenceWaitMs` (rules 27, 31). */
  readonly fenceWait: FenceWaitChecker | undefined
  /** The `outbox-relay` fault with `--tx` only: sends exactly once by relay. */
  outbox: OutboxChecker | undefined
}

export interface Ctx {
  readonly w: World
  readonly options: SimOptions
  readonly mix: FaultMix
  readonly checks: Checks
  readonly net: Network
  readonly store: Store
  readonly lease: Lease
  readonly coord: CoordinatorHost
  readonly members: Members
  readonly data: DataPlane
  readonly fanout: FanOut
  readonly workload: Workload
  readonly layouts: StreamLayouts
  readonly faults: Faults
  readonly sampler: Sampler
  /** The cluster outbox relay (`outbox-relay` with `--tx`), if on. */
  readonly outbox: Outbox | undefined
}
