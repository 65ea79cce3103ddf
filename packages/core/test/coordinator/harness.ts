/**
 * Test context for the pure coordinator (Kafka-style): the coordinator shell
 * (the same one CoordinatorHost and the simulator use), a mock timer, an
 * in-memory record writer (the real memory Store, driven synchronously) and
 * helpers that behave like a correct member.
 */
import { Effect, Option } from "effect"
import {
  type CoordinatorRecord,
  type CoordinatorResult,
  CoordinatorShell,
  type CoordinatorState,
  type GroupConfig,
  type HeartbeatRequest,
  type HeartbeatResponse,
  makeGroupConfig,
  type Snapshot,
} from "../../src/index.js"
import { Store } from "../../src/testing.js"

export const config = (over: Partial<GroupConfig> = {}): GroupConfig =>
  makeGroupConfig({
    groupId: "g",
    stream: "orders",
    shardCount: 4,
    sessionTimeoutMs: 30_000,
    rebalanceTimeoutMs: 10_000,
    heartbeatIntervalMs: 3_000,
    ...over,
  })

export const info = (id: string, weight?: number) => ({
  consumerName: id,
  host: "10.0.0.1",
  ...(weight !== undefined ? { weight } : {}),
})

/** The memory store seen through group names (the harness's groups all live on `stream`). */
const storeOn = (memory: Store.MemoryStore, stream: string) => {
  const key = (group: string) => ({ stream, group })
  return {
    load: (group: string) => memory.load(key(group)),
    commit: (group: string, expectedRevision: number, records: ReadonlyArray<CoordinatorRecord>) =>
      memory.commit(key(group), expectedRevision, records),
    auditLog: (group: string) => memory.auditLog(key(group)),
    revision: (group: string) => memory.revision(key(group)),
  }
}

export class Harness {
  readonly store: ReturnType<typeof storeOn>
  private shell: CoordinatorShell
  /** Every committed record batch, in order. */
  readonly commits: Array<ReadonlyArray<CoordinatorRecord>> = []
  readonly notices: Array<string> = []
  /** Storage-side owner tokens (what fences wrote). */
  readonly storageTokens = new Map<number, number>()
  now = 0

  constructor(readonly cfg: GroupConfig = config()) {
    this.store = storeOn(Store.makeMemoryUnsafe(), cfg.stream)
    const created = CoordinatorShell.create(cfg, 0)
    this.shell = created.shell
    this.apply(created.step)
  }

  get state(): CoordinatorState {
    return this.shell.state
  }

  /** Commit (if it has records) and apply a result, as CoordinatorHost does. */
  apply<A>(r: CoordinatorResult<A>): CoordinatorResult<A> {
    if (r.records.length > 0) {
      const rev = Effect.runSync(
        this.store.commit(this.cfg.groupId, this.shell.revision, r.records),
      )
      this.commits.push(r.records)
      this.shell.apply(r, rev)
    } else this.shell.apply(r)
    for (const f of r.fences) {
      if ((this.storageTokens.get(f.shard) ?? 0) >= f.token)
        throw new Error(`fence token for shard ${f.shard} did not increase`)
      this.storageTokens.set(f.shard, f.token)
    }
    this.notices.push(...r.notices)
    return r
  }

  /** Run a heartbeat through the pure handler and apply its result. */
  hb(req: Partial<HeartbeatRequest> & { memberId: string }): CoordinatorResult<HeartbeatResponse> {
    return this.apply(this.shell.heartbeat(request(req), this.now))
  }

  /** Run the handler WITHOUT applying (the response is lost before commit-and-answer? no: for inspection). */
  peek(
    req: Partial<HeartbeatRequest> & { memberId: string },
  ): CoordinatorResult<HeartbeatResponse> {
    return this.shell.heartbeat(request(req), this.now)
  }

  /** Move time forward, firing due timers in deadline order (lazy re-arm included). */
  advance(ms: number): void {
    const until = this.now + ms
    for (;;) {
      const next = this.shell.nextTimer()
      if (next === undefined || next > until) break
      this.now = Math.max(this.now, next)
      const step = this.shell.dueTimer(this.now)
      if (step !== undefined) this.apply(step)
    }
    this.now = until
  }

  snapshot(): Snapshot {
    return this.shell.snapshot()
  }

  /**
   * A coordinator failover: a new leader loads the stored snapshot at
   * `this.now` (fresh deadlines, volatile state lost), commits its election
   * and serves from then on. Returns its re-asserted fences.
   */
  failover(leaseToken: number, holder = `c${leaseToken}`): ReadonlyArray<{ shard: number }> {
    const takeover = CoordinatorShell.load(this.stored(), this.now, { holder, leaseToken })
    if (takeover._tag !== "Elected") throw new Error(`election refused: ${takeover.reason}`)
    this.shell = takeover.shell
    if (takeover.step.records.length > 0) this.apply(takeover.step)
    return takeover.fences
  }

  /**
   * A failover whose new leader finds `stored` owner tokens in storage
   * (docs/protocol.md rule 23): the rewind step, applied, if storage is ahead.
   */
  failoverWith(
    leaseToken: number,
    stored: ReadonlyArray<{ readonly shard: number; readonly token: number }>,
  ) {
    this.failover(leaseToken)
    const step = this.shell.rewound(stored, this.now)
    if (step !== undefined) this.apply(step)
    return step
  }

  stored(): Snapshot {
    return Option.getOrThrow(Effect.runSync(this.store.load(this.cfg.groupId)))
  }

  owner(shard: number): string | null {
    return this.state.current[shard]?.memberId ?? null
  }
}

/** Request numbers for requests built without one: increasing, as a member's are. */
let nextSeq = 1_000_000

export const request = (
  req: Partial<HeartbeatRequest> & { memberId: string },
): HeartbeatRequest => ({
  group: "g",
  stream: "orders",
  incarnation: 1,
  seq: nextSeq++,
  memberEpoch: 0,
  assignmentEpoch: 0,
  metadataVersion: 0,
  ownedShards: [],
  revokingShards: [],
  ...(req.memberEpoch === 0 || req.memberEpoch === undefined
    ? { memberInfo: info(req.memberId) }
    : {}),
  ...req,
})

export const shards = (r: HeartbeatResponse): Array<number> => r.assigned.map((g) => g.shard)

/**
 * A correct member: applies responses, drains revoked shards (instantly, on
 * its next heartbeat), reports REVOKED, rejoins after UNKNOWN/FENCED.
 */
export class SimMember {
  epoch = 0
  assignmentEpoch = 0
  /** Request number (per incarnation), as the member machine numbers its requests. */
  seq = 0
  readonly owned = new Map<number, number>() // shard -> token
  /** shard -> state and the token of the grant being given up */
  readonly revoking = new Map<number, { state: "REVOKING" | "REVOKED"; token: number }>()
  /** Tokens of shards the member still touches (owned, or draining while REVOKING). */
  readonly tokens = new Map<number, number>()
  left = false
  /** Leaving gracefully: says `leaving`, takes no new shards, sends epoch -1 once drained. */
  leaving = false
  /** Owned shards of an earlier layout generation found drained (reported until taken away). */
  readonly exhausted = new Set<number>()

  constructor(
    readonly id: string,
    readonly weight?: number,
    /** The process start this member models (rule 9). */
    readonly incarnation = 1,
  ) {}

  request(): Partial<HeartbeatRequest> & { memberId: string } {
    for (const [s, r] of this.revoking)
      if (r.state === "REVOKING") {
        this.revoking.set(s, { state: "REVOKED", token: r.token })
        this.tokens.delete(s)
      }
    return {
      memberId: this.id,
      incarnation: this.incarnation,
      seq: ++this.seq,
      memberEpoch: this.epoch,
      assignmentEpoch: this.assignmentEpoch,
      ownedShards: [...this.owned.keys()].sort((a, b) => a - b),
      revokingShards: [...this.revoking].map(([shard, r]) => ({ shard, ...r })),
      ...(this.epoch === 0 ? { memberInfo: info(this.id, this.weight) } : {}),
      ...(this.leaving && this.epoch !== 0 ? { leaving: true } : {}),
      ...(this.exhausted.size > 0 && this.epoch !== 0
        ? {
            drainedShards: [...this.exhausted]
              .filter((s) => this.owned.has(s))
              .map((shard) => ({ shard, token: this.owned.get(shard)! })),
          }
        : {}),
    }
  }

  /** Start a graceful leave: stop reading everything (drained on the next request). */
  startLeaving(): void {
    this.leaving = true
    for (const [s, token] of this.owned) this.revoking.set(s, { state: "REVOKING", token })
    this.owned.clear()
  }

  /** Leaving and drained: the next request is the epoch -1. */
  drained(): boolean {
    return this.leaving && this.owned.size === 0 && this.revoking.size === 0
  }

  leaveRequest(): Partial<HeartbeatRequest> & { memberId: string } {
    return {
      memberId: this.id,
      incarnation: this.incarnation,
      seq: ++this.seq,
      memberEpoch: -1,
      assignmentEpoch: this.assignmentEpoch,
    }
  }

  /** Drop everything (UNKNOWN_MEMBER_ID, FENCED, self-fencing). */
  reset(): void {
    this.leaving = false
    this.exhausted.clear()
    this.epoch = 0
    this.assignmentEpoch = 0
    this.owned.clear()
    this.revoking.clear()
    this.tokens.clear()
  }

  /** Shards the member may still read or ack. */
  held(): Array<number> {
    return [...this.tokens.keys()]
  }

  onResponse(r: HeartbeatResponse): void {
    if (
      r.errorCode === "UNKNOWN_MEMBER_ID" ||
      r.errorCode === "FENCED_MEMBER_EPOCH" ||
      r.errorCode === "FENCED_INSTANCE_ID"
    ) {
      this.reset()
      return
    }
    if (r.errorCode !== "NONE") return
    if (r.memberEpoch === -1) {
      this.left = true
      this.reset()
      return
    }
    this.epoch = r.memberEpoch
    this.assignmentEpoch = r.assignmentEpoch
    // REVOKED reports were accepted (or are duplicates): forget them.
    for (const [s, rv] of [...this.revoking]) if (rv.state === "REVOKED") this.revoking.delete(s)
    const assigned = new Map(r.assigned.map((g) => [g.shard, g.token]))
    for (const [s, token] of [...this.owned])
      if (!assigned.has(s)) {
        this.owned.delete(s)
        this.exhausted.delete(s)
        this.revoking.set(s, { state: "REVOKING", token })
      }
    if (this.leaving) return
    for (const [s, token] of assigned)
      if (!this.revoking.has(s)) {
        this.owned.set(s, token)
        this.tokens.set(s, token)
      }
  }
}
