/**
 * Copy-on-write overlay over a CoordinatorState used by one handler call.
 * Reads see the handler's own changes; nothing is written to the state.
 * `finish` turns the overlay into records (small deltas, in replay order).
 */

import { sortShards } from "../../internal/sortShards.js"
import type { ShardLayout } from "../../protocol/Heartbeat.js"
import type { CoordinatorState, MemberEntry, ShardDeadline, Timer } from "../CoordinatorState.js"
import type {
  AuditEvent,
  AuditKind,
  CoordinatorRecord,
  Held,
  Revocation,
  ShardOwner,
} from "../Records.js"
import type { LayoutView } from "./ShardSpace.js"

/**
 * Grants per millisecond a shard's token counter takes before it runs ahead of
 * the clock. One keeps tokens at 13 digits for centuries: the Redis fence
 * refuses tokens past 15 digits (Lua formats numbers with 14 significant digits).
 */
export const TOKENS_PER_MS = 1

export interface Fence {
  readonly shard: number
  readonly token: number
  readonly memberId: string
  /**
   * The shard's first grant in the group (no token was issued for it
   * before): the storage creates the group on the shard where it is
   * missing. A later grant or a takeover's re-fence never re-creates a
   * group or stream that vanished: members report it (docs/protocol.md
   * rule 26).
   */
  readonly first?: true
  /**
   * With `first`: where the group starts on the shard if it is created
   * there (the group's `startAt`; absent: the start). An existing group
   * keeps its position.
   */
  readonly startAt?: string
  /**
   * A token written again for the owner that reported it missing
   * (docs/protocol.md rule 30): nothing new is granted, so the host writes
   * it best effort; a failed write is reported again by the owner, and
   * costs no step-down.
   */
  readonly restore?: true
}

/**
 * The time a handler runs at: a number is both clocks (tests, the simulator);
 * a host passes its monotonic clock for every duration and deadline, and its
 * wall clock for what is stored (audit times, the token floor):
 * docs/protocol.md rule 21.
 */
export type Instant = number | { readonly mono: number; readonly wall: number }

export const monoOf = (now: Instant): number => (typeof now === "number" ? now : now.mono)
export const wallOf = (now: Instant): number => (typeof now === "number" ? now : now.wall)

/**
 * A map's entries; an empty overlay (the usual heartbeat) allocates nothing:
 * spreading a Map builds an iterator and entry arrays even when it is empty
 * (docs/simulator.md, Speed).
 */
const entries = <K, V>(map: ReadonlyMap<K, V> | undefined): Array<[K, V]> =>
  map === undefined || map.size === 0 ? [] : [...map]

/**
 * The overlays are Maps and Sets created on first write: most heartbeats
 * change nothing, and eight empty hash tables per request were a large part
 * of the coordinator's allocation (docs/simulator.md, Speed). Reads go
 * through the `_` fields, which stay undefined until something is written.
 */
export class Draft {
  private _members: Map<string, MemberEntry | null> | undefined
  private _target: Map<number, string | null> | undefined
  private _current: Map<number, ShardOwner | null> | undefined
  private _revocations: Map<number, Revocation | null> | undefined
  private _held: Map<number, Held | null> | undefined
  private _notices: Set<string> | undefined
  private _drainedNow: Set<number> | undefined
  private _rebalanceTimerArmed: Set<string> | undefined
  private _layoutView: LayoutView | undefined
  readonly audits: Array<AuditEvent> = []
  readonly timers: Array<Timer> = []
  readonly fences: Array<Fence> = []
  readonly shardDeadlines: Array<ShardDeadline> = []
  readonly heldDeadlines: Array<ShardDeadline> = []
  groupEpoch: number
  assignmentEpoch: number
  maxMemberEpoch: number
  /** The current layout (a migration started by this draft replaces it). */
  layout: ShardLayout
  /** Earlier generations being drained, oldest first. */
  generations: ReadonlyArray<ShardLayout>
  /** Generations this draft starts migrating to, in order (the last is `layout`). */
  readonly started: Array<ShardLayout> = []
  private _migrationCompleted = false
  private readonly memberOrder: Array<string> = []
  /** Monotonic ms: every deadline (docs/protocol.md rule 21). */
  readonly now: number
  /** Wall ms: audit times and the owner-token floor. */
  readonly wall: number

  constructor(
    readonly state: CoordinatorState,
    at: Instant,
  ) {
    this.now = monoOf(at)
    this.wall = wallOf(at)
    this.groupEpoch = state.groupEpoch
    this.assignmentEpoch = state.assignmentEpoch
    this.maxMemberEpoch = state.maxMemberEpoch
    this.layout = state.layout
    this.generations = state.resharding._tag === "Migrating" ? state.resharding.generations : []
  }

  /** The members this draft wrote, if any (undefined: none; no map is created). */
  drafted(): ReadonlyMap<string, MemberEntry | null> | undefined {
    return this._members
  }

  /** Members written by this draft (null: removed), in the order of their first write. */
  get members(): Map<string, MemberEntry | null> {
    if (this._members === undefined) this._members = new Map()
    return this._members
  }

  get target(): Map<number, string | null> {
    if (this._target === undefined) this._target = new Map()
    return this._target
  }

  get current(): Map<number, ShardOwner | null> {
    if (this._current === undefined) this._current = new Map()
    return this._current
  }

  get revocations(): Map<number, Revocation | null> {
    if (this._revocations === undefined) this._revocations = new Map()
    return this._revocations
  }

  get held(): Map<number, Held | null> {
    if (this._held === undefined) this._held = new Map()
    return this._held
  }

  /** Members to notify (their assignment grew). */
  get notices(): Set<string> {
    if (this._notices === undefined) this._notices = new Set()
    return this._notices
  }

  /** Shards of earlier generations drained in this draft. */
  get drainedNow(): Set<number> {
    if (this._drainedNow === undefined) this._drainedNow = new Set()
    return this._drainedNow
  }

  /** The members to notify, as a fresh array (empty when none). */
  noticeList(): Array<string> {
    return this._notices === undefined || this._notices.size === 0 ? [] : [...this._notices]
  }

  /** Move to a newer generation: the current one joins those being drained. */
  startMigration(layout: ShardLayout): void {
    this.generations = [...this.generations, this.layout]
    this.layout = layout
    this.started.push(layout)
    this._layoutView = undefined
  }

  /** Retarget `shard` (null: nobody). */
  setTarget(shard: number, memberId: string | null): void {
    this.target.set(shard, memberId)
  }

  /** Mark `shard` (of an earlier generation) drained in this draft. */
  addDrained(shard: number): void {
    this.drainedNow.add(shard)
  }

  /** This draft completes the migration (every earlier generation drained). */
  get migrationCompleted(): boolean {
    return this._migrationCompleted
  }

  /** Complete the migration: every earlier generation is drained. */
  completeMigration(): void {
    this._migrationCompleted = true
    this._layoutView = undefined
  }

  isDrained(shard: number): boolean {
    return this.state.drained.has(shard) || this._drainedNow?.has(shard) === true
  }

  /**
   * The group's layouts as this draft sees them. Built once per draft (and
   * again after `startMigration` / `completeMigration`): its `isDrained`
   * reads the draft, so later drains show through.
   */
  layoutView(): LayoutView {
    if (this._layoutView === undefined)
      this._layoutView = {
        layout: this.layout,
        generations: this.migrationCompleted ? [] : this.generations,
        isDrained: (shard) => this.isDrained(shard),
      }
    return this._layoutView
  }

  member(id: string): MemberEntry | undefined {
    const m = this._members?.get(id)
    if (m === null) return undefined
    return m ?? this.state.members.get(id)
  }

  putMember(m: MemberEntry): void {
    const members = this.members
    if (!members.has(m.memberId)) this.memberOrder.push(m.memberId)
    members.set(m.memberId, m)
    if (m.memberEpoch > this.maxMemberEpoch) this.maxMemberEpoch = m.memberEpoch
  }

  removeMember(id: string): void {
    const members = this.members
    if (!members.has(id)) this.memberOrder.push(id)
    members.set(id, null)
  }

  targetOf(shard: number): string | null {
    const t = this._target?.get(shard)
    return t !== undefined ? t : (this.state.target[shard] ?? null)
  }

  currentOf(shard: number): ShardOwner | null {
    const c = this._current?.get(shard)
    return c !== undefined ? c : (this.state.current[shard] ?? null)
  }

  revocationOf(shard: number): Revocation | null {
    const r = this._revocations?.get(shard)
    return r !== undefined ? r : (this.state.revocations[shard] ?? null)
  }

  tokenOf(shard: number): number {
    const c = this._current?.get(shard)
    const h = this._held?.get(shard)
    const base = this.state.tokens[shard] ?? 0
    return Math.max(base, c?.token ?? 0, h?.token ?? 0)
  }

  heldOf(shard: number): Held | null {
    const h = this._held?.get(shard)
    return h !== undefined ? h : (this.state.held[shard] ?? null)
  }

  /** Shards held for processes of `memberId`, ascending. */
  heldFor(memberId: string): Array<number> {
    return this.view(
      this.state.heldBy,
      this._held,
      (s) => this.heldOf(s)?.memberId ?? null,
      memberId,
    )
  }

  /**
   * Hold `shard` for `holder` until `until` (monotonic ms): nobody is granted
   * it before then unless the holder proves it stopped (docs/protocol.md rule 19).
   */
  hold(shard: number, holder: Held, until: number): void {
    this.held.set(shard, holder)
    this.heldDeadlines.push({ shard, at: until })
    this.timers.push({ key: { _tag: "Release", memberId: "" }, at: until })
  }

  release(shard: number): void {
    this.held.set(shard, null)
  }

  private view(
    index: Map<string, Set<number>>,
    overlay: Map<number, unknown> | undefined,
    read: (shard: number) => string | null,
    memberId: string,
  ): Array<number> {
    const base = index.get(memberId)
    if (overlay === undefined || overlay.size === 0)
      return base === undefined || base.size === 0 ? [] : sortShards([...base])
    const out = new Set<number>()
    if (base !== undefined) for (const s of base) if (read(s) === memberId) out.add(s)
    for (const s of overlay.keys()) if (read(s) === memberId) out.add(s)
    return sortShards([...out])
  }

  /** Shards targeted to a member, ascending. O(its shards + overlay). */
  targetedTo(memberId: string): Array<number> {
    return this.view(this.state.targetOf, this._target, (s) => this.targetOf(s), memberId)
  }

  ownedBy(memberId: string): Array<number> {
    return this.view(
      this.state.ownedBy,
      this._current,
      (s) => this.currentOf(s)?.memberId ?? null,
      memberId,
    )
  }

  revokingFrom(memberId: string): Array<number> {
    return this.view(
      this.state.revokingFrom,
      this._revocations,
      (s) => this.revocationOf(s)?.memberId ?? null,
      memberId,
    )
  }

  setOwner(shard: number, owner: ShardOwner | null): void {
    this.current.set(shard, owner)
  }

  /**
   * Start revoking `shard` from its owner `member` (seed step 1). The
   * revocation gets its own deadline (docs/protocol.md rule 10).
   */
  startRevocation(shard: number, member: MemberEntry): void {
    this.revocations.set(shard, { memberId: member.memberId, memberEpoch: member.memberEpoch })
    this.deadline(shard, member.memberId)
  }

  /**
   * Grant `shard` to `member` with the next token. Tokens also follow the
   * coordinator's clock (at least `now` x TOKENS_PER_MS), so a grant made
   * after the group's metadata was lost or restored from an older copy (Redis
   * without persistence, a point-in-time restore) outranks every token issued
   * before it (docs/redis.md, durability), unless coordinator clocks are
   * skewed by more than the time in between. Its confirmation gets a deadline.
   */
  grant(shard: number, member: MemberEntry): number {
    const first = this.tokenOf(shard) === 0
    const token = Math.max(this.tokenOf(shard) + 1, Math.floor(this.wall) * TOKENS_PER_MS)
    this.setOwner(shard, {
      memberId: member.memberId,
      memberEpoch: member.memberEpoch,
      token,
      confirmed: false,
    })
    this.fences.push(
      first
        ? this.state.config.startAt !== undefined && this.state.config.startAt !== "earliest"
          ? { shard, token, memberId: member.memberId, first, startAt: this.state.config.startAt }
          : { shard, token, memberId: member.memberId, first }
        : { shard, token, memberId: member.memberId },
    )
    this.deadline(shard, member.memberId)
    return token
  }

  /** A per-shard deadline one revoke timeout from now, and the member's Rebalance timer. */
  private deadline(shard: number, memberId: string): void {
    const at = this.now + this.state.config.rebalanceTimeoutMs
    this.shardDeadlines.push({ shard, at })
    if (this._rebalanceTimerArmed === undefined) this._rebalanceTimerArmed = new Set()
    else if (this._rebalanceTimerArmed.has(memberId)) return
    this._rebalanceTimerArmed.add(memberId)
    this.timers.push({ key: { _tag: "Rebalance", memberId }, at })
  }

  endRevocation(shard: number): void {
    this.revocations.set(shard, null)
  }

  audit(
    kind: AuditKind,
    reason: string,
    fields: {
      readonly memberId?: string
      readonly shards?: ReadonlyArray<number>
      readonly memberEpochBefore?: number
      readonly memberEpochAfter?: number
      readonly groupEpochBefore?: number
      readonly assignmentEpochBefore?: number
    },
  ): void {
    this.audits.push({
      at: this.wall,
      kind,
      reason,
      ...(fields.memberId !== undefined ? { memberId: fields.memberId } : {}),
      ...(fields.shards !== undefined ? { shards: [...fields.shards] } : {}),
      before: {
        groupEpoch: fields.groupEpochBefore ?? this.groupEpoch,
        assignmentEpoch: fields.assignmentEpochBefore ?? this.assignmentEpoch,
        ...(fields.memberEpochBefore !== undefined
          ? { memberEpoch: fields.memberEpochBefore }
          : {}),
      },
      after: {
        groupEpoch: this.groupEpoch,
        assignmentEpoch: this.assignmentEpoch,
        ...(fields.memberEpochAfter !== undefined ? { memberEpoch: fields.memberEpochAfter } : {}),
      },
    })
  }

  /** Notify a member (other than the one being answered) that its assignment grew. */
  notify(memberId: string | null, except?: string): void {
    if (memberId !== null && memberId !== except && this.member(memberId) !== undefined)
      this.notices.add(memberId)
  }

  /** Does this draft change anything (records would be written)? */
  hasChanges(): boolean {
    return (
      (this._members !== undefined && this._members.size > 0) ||
      (this._target !== undefined && this._target.size > 0) ||
      (this._current !== undefined && this._current.size > 0) ||
      (this._revocations !== undefined && this._revocations.size > 0) ||
      (this._held !== undefined && this._held.size > 0) ||
      this.audits.length > 0 ||
      this.started.length > 0 ||
      (this._drainedNow !== undefined && this._drainedNow.size > 0) ||
      this.migrationCompleted ||
      this.groupEpoch !== this.state.groupEpoch ||
      this.assignmentEpoch !== this.state.assignmentEpoch
    )
  }

  finish(): Array<CoordinatorRecord> {
    const records: Array<CoordinatorRecord> = []
    // first: the arrays grow to the new generation's shard ids before anything writes them
    for (const layout of this.started) records.push({ _tag: "MigrationStarted", layout })
    for (const id of this.memberOrder) {
      const m = this._members?.get(id)
      if (m === null) records.push({ _tag: "MemberRemoved", memberId: id })
      else if (m !== undefined) records.push({ _tag: "MemberUpserted", member: m })
    }
    if (this.groupEpoch !== this.state.groupEpoch)
      records.push({ _tag: "GroupEpochBumped", groupEpoch: this.groupEpoch })
    const targetChanges = entries(this._target)
      .filter(([s, m]) => (this.state.target[s] ?? null) !== m)
      .map(([shard, memberId]) => ({ shard, memberId }))
    if (targetChanges.length > 0 || this.assignmentEpoch !== this.state.assignmentEpoch)
      records.push({
        _tag: "TargetAssignmentChanged",
        assignmentEpoch: this.assignmentEpoch,
        shards: targetChanges,
      })
    const revs = entries(this._revocations)
      .filter(([s, m]) => (this.state.revocations[s] ?? null) !== m)
      .map(([shard, revocation]) => ({ shard, revocation }))
    if (revs.length > 0) records.push({ _tag: "RevocationsChanged", shards: revs })
    const owners = entries(this._current)
      .filter(([s, o]) => (this.state.current[s] ?? null) !== o)
      .map(([shard, owner]) => ({ shard, owner }))
    if (owners.length > 0) records.push({ _tag: "ShardOwnersChanged", shards: owners })
    const held = entries(this._held)
      .filter(([s, h]) => (this.state.held[s] ?? null) !== h)
      .map(([shard, h]) => ({ shard, held: h }))
    if (held.length > 0) records.push({ _tag: "HeldChanged", shards: held })
    if (this._drainedNow !== undefined && this._drainedNow.size > 0)
      records.push({ _tag: "ShardsDrained", shards: [...this._drainedNow].sort((a, b) => a - b) })
    if (this.migrationCompleted) records.push({ _tag: "MigrationCompleted" })
    for (const event of this.audits) records.push({ _tag: "Audit", event })
    return records
  }
}
