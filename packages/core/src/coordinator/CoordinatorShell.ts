/**
 * The coordinator shell: the one place that turns the pure coordinator's
 * results into state. It holds one group's `CoordinatorState` and its armed
 * deadlines, and nothing else: no clock, no store, no I/O. Runtimes drive it
 * with their own I/O and time, which is how `CoordinatorHost` (Effect, async
 * store), the simulator (a synchronous discrete-event loop whose commits land
 * later in virtual time), the test harness and the benchmark all apply
 * results the same way (Kafka's `CoordinatorRuntime` plays this part there).
 *
 * A step is a `CoordinatorResult`: computing one (`heartbeat`, `dueTimer`)
 * never touches the state. The runtime then, in this order:
 * 1. commits `step.records` (if any) with a compare-and-set on `revision`;
 * 2. `apply(step, committedRevision)`: replay the records, apply the volatile
 *    updates, arm the timers (a step without records: `apply(step)`);
 * 3. writes `step.fences`, then sends `step.response`, then publishes
 *    `step.notices`;
 * 4. calls `dueTimer(now)` until it returns undefined whenever
 *    `nextTimer()` has passed.
 * A failed commit means the shell is stale: drop it and `load` again.
 *
 * @example
 * const { shell, step } = CoordinatorShell.create(config, now, { holder, leaseToken })
 * shell.apply(step, yield* store.commit(key, 0, step.records))
 * const hb = shell.heartbeat(request, now)
 * shell.apply(hb, hb.records.length > 0 ? yield* store.commit(key, shell.revision, hb.records) : undefined)
 * yield* fence.write(key, hb.fences) // then answer hb.response, publish hb.notices
 */
import type { HeartbeatRequest, HeartbeatResponse, ShardLayout } from "../protocol/Heartbeat.js"
import * as Coordinator from "./Coordinator.js"
import {
  applyVolatile,
  type CoordinatorState,
  initialState,
  replayAll,
  toSnapshot,
} from "./CoordinatorState.js"
import type { GroupConfig } from "./GroupConfig.js"
import { type Instant, monoOf } from "./internal/Draft.js"
import { TimerHeap } from "./internal/TimerHeap.js"
import type { CoordinatorEpoch, CoordinatorRecord } from "./Records.js"
import type { Snapshot } from "./Snapshot.js"

/** What one handler call wants done; nothing happens until the runtime does it and `apply`s. */
export type Step<A> = Coordinator.CoordinatorResult<A>

/** A new group: commit `step.records` with expected revision 0, then `shell.apply(step, revision)`. */
export interface Created {
  readonly shell: CoordinatorShell
  readonly step: Step<void>
}

/**
 * A takeover of a stored group.
 * - `Elected`: commit the election's `step.records` (CAS on `shell.revision`;
 *   none when this very lease is already recorded) and `apply` it, then write
 *   `fences` (every accepted owner's token, re-asserted), all BEFORE serving.
 * - `Refused`: a newer lease is recorded; the candidate must not serve.
 */
export type Takeover =
  | {
      readonly _tag: "Elected"
      readonly shell: CoordinatorShell
      readonly step: Step<void>
      readonly fences: ReadonlyArray<Coordinator.Fence>
    }
  | Extract<Coordinator.Election, { readonly _tag: "Refused" }>

/** A step that only commits records (creation, election): nothing volatile, nothing to send. */
const recordsOnly = (records: ReadonlyArray<CoordinatorRecord>): Step<void> => ({
  records,
  response: undefined,
  timers: [],
  notices: [],
  fences: [],
  shardDeadlines: [],
})

export class CoordinatorShell {
  private readonly timers = new TimerHeap()

  private constructor(
    /** The live state: read it, never write it (only `apply` does). */
    readonly state: CoordinatorState,
  ) {}

  /**
   * Create a group (with the creator's election when `elected` is given), on
   * `layout` (the stream's oldest live generation; default generation 0).
   */
  static create(
    config: GroupConfig,
    now: Instant,
    elected?: CoordinatorEpoch,
    layout?: ShardLayout,
  ): Created {
    return {
      shell: new CoordinatorShell(initialState(config)),
      step: recordsOnly(Coordinator.createGroup(config, now, elected, layout)),
    }
  }

  /**
   * Take over a stored group at `snapshot.storeRevision`: fresh session
   * deadlines for every member (armed now), re-fenced owners, and the
   * candidate's election (see `Takeover`).
   */
  static load(snapshot: Snapshot, now: Instant, candidate: CoordinatorEpoch): Takeover {
    const loaded = Coordinator.load(snapshot, now)
    const shell = new CoordinatorShell(loaded.state)
    shell.timers.arm(loaded.timers)
    const election = Coordinator.elect(loaded.state, candidate, now)
    if (election._tag === "Refused") return election
    return {
      _tag: "Elected",
      shell,
      step: recordsOnly(election.records),
      fences: loaded.fences,
    }
  }

  /** The store revision the state is at (the expected revision of the next commit). */
  get revision(): number {
    return this.state.storeRevision
  }

  /** Handle one decoded heartbeat at `now`; the state is untouched until `apply`. */
  heartbeat(request: HeartbeatRequest, now: Instant): Step<HeartbeatResponse> {
    return Coordinator.heartbeat(this.state, request, now)
  }

  /**
   * Run the earliest deadline due at `now`, if any; call until undefined. The
   * timer is disarmed; a deadline that moved meanwhile comes back re-armed in
   * the step's timers.
   */
  dueTimer(now: Instant): Step<void> | undefined {
    const due = this.timers.takeDue(monoOf(now))
    return due === undefined ? undefined : Coordinator.onTimer(this.state, due.key, now)
  }

  /**
   * Change the stored config to `config` (docs/protocol.md rule 12): a step
   * (with `refused` when part of it, a different shard count, was refused
   * and only audited), undefined when nothing differs, or the refusal.
   */
  configure(
    config: GroupConfig,
    now: Instant,
  ): (Step<void> & { readonly refused?: string }) | undefined | string {
    const r = Coordinator.configure(this.state, config, now)
    if (r._tag === "Changed")
      return r.refused !== undefined ? { ...r.result, refused: r.refused } : r.result
    return r._tag === "Refused" ? r.reason : undefined
  }

  /**
   * After a takeover: compare the owner tokens storage holds (`stored`) with
   * the state's (docs/protocol.md rule 23). A step when storage is ahead
   * (the metadata was rewound), else undefined.
   */
  rewound(
    stored: ReadonlyArray<{ readonly shard: number; readonly token: number }>,
    now: Instant,
  ): Step<void> | undefined {
    return Coordinator.rewound(this.state, stored, now)
  }

  /**
   * Follow the stream's live layout generations (docs/resharding.md): a step,
   * undefined when the group is already on the newest, or the refusal.
   */
  followLayout(layouts: ReadonlyArray<ShardLayout>, now: Instant): Step<void> | undefined | string {
    const r = Coordinator.followLayout(this.state, layouts, now)
    return r._tag === "Changed" ? r.result : r._tag === "Refused" ? r.reason : undefined
  }

  /**
   * Grants of `shards` whose member cannot be told yet (their fence is not
   * written, docs/protocol.md rule 31): their confirmation deadline counts
   * from `now` again. A volatile step to `apply`.
   */
  deferGrantDeadlines(shards: Iterable<number>, now: Instant): Step<void> {
    return Coordinator.deferGrantDeadlines(this.state, shards, now)
  }

  /** The earliest armed deadline (the runtime's one sleeping timer waits for it). */
  nextTimer(): number | undefined {
    return this.timers.next()
  }

  /**
   * Apply a step once done: replay its records (committed at
   * `committedRevision`), apply its volatile updates, arm its timers. A step
   * with records and no revision is a runtime bug and throws.
   */
  apply(step: Step<unknown>, committedRevision?: number): void {
    if (step.records.length > 0) {
      if (committedRevision === undefined)
        throw new Error("CoordinatorShell.apply: a step with records needs its committed revision")
      replayAll(this.state, step.records)
      this.state.storeRevision = committedRevision
    }
    applyVolatile(this.state, step)
    this.timers.arm(step.timers)
  }

  /** The persisted view of the state (what a takeover loads). */
  snapshot(): Snapshot {
    return toSnapshot(this.state)
  }
}
