/**
 * The pure group coordinator (Kafka `CoordinatorResult` + `replay` style).
 *
 * Handlers take the state, an input and `now` (an `Instant`: monotonic ms
 * for deadlines, wall ms for what is stored; docs/protocol.md rule 21) and
 * return data:
 * records to commit, the response to send after the commit, timers the
 * runtime must call back, members to notify, and per-shard fences the
 * runtime must write to storage before sending the response. Handlers never
 * mutate the state, never read a clock and never do I/O.
 */
import { assignSorted } from "../assignor/internal/assignSorted.js"
import { sortByShard } from "../internal/sortShards.js"
import type {
  HeartbeatRequest,
  HeartbeatResponse,
  PendingHolder,
  ShardGrant,
  ShardLayout,
} from "../protocol/Heartbeat.js"
import {
  type CoordinatorState,
  fromSnapshot,
  type MemberEntry,
  RELEASE_TIMER,
  type ShardDeadline,
  type Timer,
  type TimerKey,
  timerId,
} from "./CoordinatorState.js"
import type { GroupConfig } from "./GroupConfig.js"
import { Draft, type Fence, type Instant, monoOf, wallOf } from "./internal/Draft.js"
import { assignorMembers } from "./internal/MemberOrder.js"
import {
  activeShards,
  blocked,
  dependents,
  isEarlier,
  type LayoutView,
  shardSpace,
} from "./internal/ShardSpace.js"
import type {
  AuditKind,
  CoordinatorEpoch,
  CoordinatorRecord,
  Held,
  MemberState,
} from "./Records.js"
import type { Snapshot } from "./Snapshot.js"

export type { Fence, Instant } from "./internal/Draft.js"

export interface CoordinatorResult<A> {
  readonly records: ReadonlyArray<CoordinatorRecord>
  readonly response: A
  readonly timers: ReadonlyArray<Timer>
  /** Members to push a "look again" notice to (their assignment grew). */
  readonly notices: ReadonlyArray<string>
  /** Owner tokens to write to storage before the response is sent. */
  readonly fences: ReadonlyArray<Fence>
  /** Per-shard deadlines of revocations and grant confirmations (volatile, never a record). */
  readonly shardDeadlines: ReadonlyArray<ShardDeadline>
  /** Deadlines of shards this step holds (docs/protocol.md rule 19; volatile). */
  readonly heldDeadlines?: ReadonlyArray<ShardDeadline>
  /** The request this step handled (docs/protocol.md rule 18; volatile). */
  readonly handled?: { readonly memberId: string; readonly seq: number }
  /** Latest progress report (volatile, never a record). */
  readonly progress?: ProgressReport
}

export interface ProgressReport {
  readonly memberId: string
  readonly shards: NonNullable<HeartbeatRequest["progress"]>
}

type Mutable<A> = { -readonly [K in keyof A]: A[K] }

/**
 * A draft's result. Built as a literal with optional fields appended (same
 * field order as before): object spreads take V8's slow path, and every
 * heartbeat builds one result (docs/simulator.md, Speed).
 */
const done = <A>(
  draft: Draft,
  response: A,
  progress?: ProgressReport,
  handled?: { readonly memberId: string; readonly seq: number },
): CoordinatorResult<A> => {
  const result: Mutable<CoordinatorResult<A>> = {
    records: draft.finish(),
    response,
    timers: draft.timers,
    notices: draft.noticeList(),
    fences: draft.fences,
    shardDeadlines: draft.shardDeadlines,
  }
  if (draft.heldDeadlines.length > 0) result.heldDeadlines = draft.heldDeadlines
  if (progress !== undefined) result.progress = progress
  if (handled !== undefined) result.handled = handled
  return result
}

const nothing = <A>(response: A, timers: ReadonlyArray<Timer> = []): CoordinatorResult<A> => ({
  records: [],
  response,
  timers,
  notices: [],
  fences: [],
  shardDeadlines: [],
})

// ---------------------------------------------------------------------------
// Group creation and load
// ---------------------------------------------------------------------------

/**
 * Records that create a group from its (validated) config. With `elected`,
 * the creating leader's election is part of the same first commit.
 */
export const createGroup = (
  config: GroupConfig,
  now: Instant,
  elected?: CoordinatorEpoch,
  /** The stream's oldest live generation (docs/resharding.md); default: generation 0 of config.shardCount. */
  layout: ShardLayout = { shardCount: config.shardCount, generation: 0, firstShard: 0 },
): ReadonlyArray<CoordinatorRecord> => [
  { _tag: "GroupCreated", config, layout },
  {
    _tag: "Audit",
    event: {
      at: wallOf(now),
      kind: "GroupCreated",
      reason: `group ${config.groupId} created on generation ${layout.generation} (${layout.shardCount} shards)`,
      before: { groupEpoch: 0, assignmentEpoch: 0 },
      after: { groupEpoch: 0, assignmentEpoch: 0 },
    },
  },
  ...(elected === undefined
    ? []
    : electionRecords(elected, now, { groupEpoch: 0, assignmentEpoch: 0 })),
]

const electionRecords = (
  elected: CoordinatorEpoch,
  now: Instant,
  epochs: { readonly groupEpoch: number; readonly assignmentEpoch: number },
): ReadonlyArray<CoordinatorRecord> => [
  { _tag: "CoordinatorElected", holder: elected.holder, leaseToken: elected.leaseToken },
  {
    _tag: "Audit",
    event: {
      at: wallOf(now),
      kind: "CoordinatorElected",
      reason: `coordinator ${elected.holder} elected with lease token ${elected.leaseToken}`,
      before: epochs,
      after: epochs,
    },
  },
]

/**
 * Outcome of an election (`elect`):
 * - `Elected`: commit `records` (CAS on the loaded `storeRevision`) before
 *   serving anything. The commit bumps `storeRevision` (and nothing else), so
 *   every commit an ex-leader attempts from its older state fails the CAS.
 *   `records` is empty only when the state already records this very lease
 *   (a reload by the leader that won it).
 * - `Refused`: the state records an election with a lease token at least as
 *   high (a different lease): this candidate is stale and must not serve.
 */
export type Election =
  | { readonly _tag: "Elected"; readonly records: ReadonlyArray<CoordinatorRecord> }
  | { readonly _tag: "Refused"; readonly current: CoordinatorEpoch; readonly reason: string }

/**
 * A new leader (lease `holder`, fencing token `leaseToken`) takes over the
 * loaded `state`. Pure; the caller commits the records and replays them.
 */
export const elect = (
  state: CoordinatorState,
  candidate: CoordinatorEpoch,
  now: Instant,
): Election => {
  const current = state.coordinator
  if (current !== null) {
    if (current.leaseToken === candidate.leaseToken && current.holder === candidate.holder)
      return { _tag: "Elected", records: [] }
    if (current.leaseToken >= candidate.leaseToken)
      return {
        _tag: "Refused",
        current,
        reason: `lease token ${candidate.leaseToken} of ${candidate.holder} is not above the elected ${current.leaseToken} of ${current.holder}`,
      }
  }
  return {
    _tag: "Elected",
    records: electionRecords(candidate, now, {
      groupEpoch: state.groupEpoch,
      assignmentEpoch: state.assignmentEpoch,
    }),
  }
}

export interface Loaded {
  readonly state: CoordinatorState
  /**
   * Fresh session deadlines for every member, and a fresh Rebalance deadline
   * for every open revocation and unconfirmed grant.
   */
  readonly timers: ReadonlyArray<Timer>
  /** Re-assert every accepted owner's token (idempotent; a failed fence write may have been lost). */
  readonly fences: ReadonlyArray<Fence>
}

/**
 * Failover: rebuild the state from a snapshot. Every known member gets a
 * fresh session deadline (as Kafka does), every open revocation and
 * unconfirmed grant a fresh per-shard deadline. A new leader then `elect`s
 * itself and commits the election before it serves anything.
 */
export const load = (snapshot: Snapshot, at: Instant): Loaded => {
  const now = monoOf(at)
  const state = fromSnapshot(snapshot)
  const timers: Array<Timer> = []
  for (const id of state.members.keys()) {
    const t: Timer = {
      key: { _tag: "Session", memberId: id },
      at: now + state.config.sessionTimeoutMs,
    }
    timers.push(t)
    state.deadlines.set(timerId(t.key), t.at)
  }
  const rebalanceAt = now + state.config.rebalanceTimeoutMs
  const fences: Array<Fence> = []
  const unfinished = new Set<string>()
  state.current.forEach((o, shard) => {
    if (o === null) return
    fences.push({ shard, token: o.token, memberId: o.memberId })
    if (!o.confirmed || state.revocations[shard] != null) {
      state.shardDeadlines.set(shard, rebalanceAt)
      unfinished.add(o.memberId)
    }
  })
  for (const memberId of unfinished)
    timers.push({ key: { _tag: "Rebalance", memberId }, at: rebalanceAt })
  // A held shard's holder got its last answer before this load at the latest,
  // so its lease has ended one session from now (docs/protocol.md rule 19).
  const releaseAt = now + state.config.sessionTimeoutMs
  let held = false
  state.held.forEach((h, shard) => {
    if (h === null) return
    state.heldDeadlines.set(shard, releaseAt)
    held = true
  })
  if (held) {
    timers.push({ key: RELEASE_TIMER, at: releaseAt })
    state.deadlines.set(timerId(RELEASE_TIMER), releaseAt)
  }
  return { state, timers, fences }
}

/**
 * Outcome of `configure`: the records of an explicit config change, nothing
 * to do, or a refusal (the identity or the layout cannot change this way).
 * `Changed` may carry a `refused` part: a shard count that differs from the
 * stream's is refused and audited while the rest of the change applies.
 */
export type Reconfiguration =
  | { readonly _tag: "Unchanged" }
  | {
      readonly _tag: "Changed"
      readonly result: CoordinatorResult<void>
      readonly refused?: string
    }
  | { readonly _tag: "Refused"; readonly reason: string }

const sameWeights = (a: GroupConfig["memberWeights"], b: GroupConfig["memberWeights"]): boolean => {
  const ka = Object.keys(a ?? {}).sort()
  const kb = Object.keys(b ?? {}).sort()
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && a?.[k] === b?.[k])
}

/**
 * Change the stored group config to `config` (docs/protocol.md rule 12): a
 * `GroupConfigChanged` record, audited with every field that differs; new
 * weights also re-weigh the members, bump `groupEpoch` and recompute the
 * target. The group's identity cannot change here, and a shard count other
 * than the stream's current one is refused: audited (`GroupConfigRefused`)
 * and returned as `refused`, never applied (shard counts change through a
 * reshard).
 */
export const configure = (
  state: CoordinatorState,
  config: GroupConfig,
  now: Instant,
): Reconfiguration => {
  const stored = state.config
  if (config.groupId !== stored.groupId || config.stream !== stored.stream)
    return {
      _tag: "Refused",
      reason: `group ${config.groupId} on ${config.stream} is not the stored group ${stored.groupId} on ${stored.stream}`,
    }
  // shardCount only seeds a new stream's layout; the layout changes through a reshard
  const changes: Array<string> = []
  for (const field of ["sessionTimeoutMs", "rebalanceTimeoutMs", "heartbeatIntervalMs"] as const)
    if (config[field] !== stored[field])
      changes.push(`${field} ${stored[field]} -> ${config[field]}`)
  const weightsChanged = !sameWeights(config.memberWeights, stored.memberWeights)
  if (weightsChanged)
    changes.push(
      `memberWeights ${JSON.stringify(stored.memberWeights ?? {})} -> ${JSON.stringify(config.memberWeights ?? {})}`,
    )
  const layout = state.layout
  const refused =
    config.shardCount !== layout.shardCount
      ? `shardCount ${config.shardCount} refused: the stream ${stored.stream} has ${layout.shardCount} shards (layout generation ${layout.generation}); shard counts change only through a reshard (shardline reshard)`
      : undefined
  if (changes.length === 0 && refused === undefined) return { _tag: "Unchanged" }
  const draft = new Draft(state, now)
  if (refused !== undefined) draft.audit("GroupConfigRefused", refused, {})
  if (changes.length === 0)
    return { _tag: "Changed", result: done(draft, undefined), refused: refused! }
  const before = draft.groupEpoch
  if (weightsChanged) {
    let reweighed = false
    for (const m of state.members.values()) {
      const weight = config.memberWeights?.[m.memberId] ?? m.memberInfo.weight ?? 1
      if (weight !== m.weight) {
        draft.putMember({ ...m, weight })
        reweighed = true
      }
    }
    if (reweighed) draft.groupEpoch += 1
  }
  draft.audit("GroupConfigChanged", changes.join("; "), { groupEpochBefore: before })
  if (draft.groupEpoch !== before) recomputeTarget(draft, "member weights changed")
  const result = done(draft, undefined)
  const kept = { ...config, shardCount: stored.shardCount }
  return {
    _tag: "Changed",
    result: {
      ...result,
      records: [{ _tag: "GroupConfigChanged", config: kept }, ...result.records],
    },
    ...(refused !== undefined ? { refused } : {}),
  }
}

/**
 * The group follows its stream to newer layout generations
 * (docs/resharding.md). `layouts` are the stream's live generations, oldest
 * first; those newer than the group's current layout are adopted in order:
 * each a `MigrationStarted` record (the current layout joins the generations
 * being drained), `groupEpoch` +1, audited; then the target is recomputed
 * over the shards the group works with. New shards are granted only once the
 * earlier shards overlapping them are drained.
 */
export const followLayout = (
  state: CoordinatorState,
  layouts: ReadonlyArray<ShardLayout>,
  now: Instant,
): Reconfiguration => {
  const newer = layouts.filter((l) => l.generation > state.layout.generation)
  if (newer.length === 0) return { _tag: "Unchanged" }
  let prev = state.layout
  for (const l of newer) {
    if (l.generation !== prev.generation + 1 || l.firstShard !== prev.firstShard + prev.shardCount)
      return {
        _tag: "Refused",
        reason: `layout generation ${l.generation} (first shard ${l.firstShard}) does not follow generation ${prev.generation} (shards ${prev.firstShard}..${prev.firstShard + prev.shardCount - 1})`,
      }
    prev = l
  }
  const draft = new Draft(state, now)
  for (const l of newer) {
    const from = draft.layout
    draft.startMigration(l)
    const before = draft.groupEpoch
    draft.groupEpoch += 1
    draft.audit(
      "ReshardStarted",
      `generation ${from.generation} (${from.shardCount} shards) -> generation ${l.generation} (${l.shardCount} shards)`,
      { groupEpochBefore: before },
    )
  }
  // an earlier generation with nothing left (e.g. drained before a rollback) needs no drain
  recomputeTarget(draft, `layout generation ${draft.layout.generation}`)
  return { _tag: "Changed", result: done(draft, undefined) }
}

// ---------------------------------------------------------------------------
// Shared transitions
// ---------------------------------------------------------------------------

/** Recompute the target with the assignor; start revocations for moved shards (seed step 1). */
const recomputeTarget = (draft: Draft, reason: string, except?: string): void => {
  const { ids, weights } = assignorMembers(draft)
  // the shards the group works with (earlier generations' undrained ones too)
  const shards = activeShards(draft.layoutView())
  const previous = shards.map((s) => draft.targetOf(s))
  const next = assignSorted(shards.length, ids, weights, previous).owners
  const changed: Array<number> = []
  for (let i = 0; i < shards.length; i++) {
    const to = next[i] ?? null
    if (to !== previous[i]) {
      changed.push(shards[i]!)
      draft.setTarget(shards[i]!, to)
    }
  }
  if (changed.length === 0) return
  const before = draft.assignmentEpoch
  draft.assignmentEpoch += 1
  draft.audit("TargetAssignmentChanged", reason, { shards: changed, assignmentEpochBefore: before })
  const revoked = new Map<string, Array<number>>()
  const view = draft.layoutView()
  for (const s of changed) {
    const cur = draft.currentOf(s)
    const to = draft.targetOf(s)
    if (cur === null) {
      // a shard held back for earlier generations is no news yet
      if (!blocked(view, s)) draft.notify(to, except)
    } else if (cur.memberId !== to && draft.revocationOf(s) === null) {
      // The current owner is registered (an owner leaves the registry only with its shards).
      draft.startRevocation(s, draft.member(cur.memberId)!)
      const list = revoked.get(cur.memberId) ?? []
      list.push(s)
      revoked.set(cur.memberId, list)
    }
  }
  for (const [memberId, shards] of revoked) {
    draft.audit("RevokeRequested", reason, { memberId, shards })
    const m = draft.member(memberId)
    if (m !== undefined && m.state !== "LEAVING" && m.state !== "UNREVOKED_SHARDS")
      draft.putMember({ ...m, state: "UNREVOKED_SHARDS" })
  }
}

/** Release everything a member owns or is revoking; notify the shards' targets. */
const releaseAll = (draft: Draft, memberId: string, except?: string): Array<number> => {
  const owned = draft.ownedBy(memberId)
  for (const s of owned) {
    draft.setOwner(s, null)
    if (draft.revocationOf(s) !== null) draft.endRevocation(s)
    draft.notify(draft.targetOf(s), except ?? memberId)
  }
  return owned
}

/**
 * When `member`'s lease has provably ended: its session deadline (the last
 * NONE answer's handling time plus the session timeout; the member's own
 * lease ran from that request's send time, shorter by its safety margin).
 */
const leaseEndOf = (draft: Draft, member: MemberEntry): number =>
  draft.state.deadlines.get(timerId({ _tag: "Session", memberId: member.memberId })) ??
  draft.now + draft.state.config.sessionTimeoutMs

/**
 * Take everything `member` owns or is revoking away from it, but hold it:
 * nobody is granted those shards until its lease has provably ended or it
 * proves it stopped (docs/protocol.md rule 19). A fence or a replacement ends
 * a lifecycle the process does not know has ended yet.
 */
const holdAll = (draft: Draft, member: MemberEntry, reason: Held["reason"]): Array<number> => {
  const owned = draft.ownedBy(member.memberId)
  const until = leaseEndOf(draft, member)
  for (const s of owned) {
    const cur = draft.currentOf(s)!
    draft.setOwner(s, null)
    if (draft.revocationOf(s) !== null) draft.endRevocation(s)
    draft.hold(
      s,
      {
        memberId: member.memberId,
        memberEpoch: cur.memberEpoch,
        incarnation: member.incarnation,
        instance: member.instance ?? "",
        joinSeq: member.joinSeq,
        token: cur.token,
        reason,
      },
      until,
    )
  }
  if (owned.length > 0)
    draft.audit("ShardsHeld", `${reason}: held until the lease of ${member.memberId} has ended`, {
      memberId: member.memberId,
      shards: owned,
    })
  return owned
}

/**
 * Release the shards held for the process that sent `req`, which proved it
 * stopped reading them: a join with a seq above the held lifecycle's join
 * (the member machine joins only after everything stopped), or a leave (the
 * last thing a process sends). Notifies their targets.
 */
const releaseProven = (draft: Draft, req: HeartbeatRequest, registered = true): void => {
  const released: Array<number> = []
  for (const s of draft.heldFor(req.memberId)) {
    const h = draft.heldOf(s)!
    if (h.reason === "rewind" || !sameProcess(h, req)) continue
    if (req.memberEpoch === 0 && req.seq <= h.joinSeq) continue
    draft.release(s)
    // the registered process learns it from this very answer; another
    // process of the id (the one that replaced the sender) needs a notice
    draft.notify(draft.targetOf(s), registered ? req.memberId : undefined)
    released.push(s)
  }
  if (released.length > 0)
    draft.audit(
      "ShardsReleased",
      req.memberEpoch === -1 ? "its process left" : "its process joined again (it stopped them)",
      { memberId: req.memberId, shards: released },
    )
}

/** Two descriptions of a process of one member id: the same process? (docs/protocol.md rule 24) */
const sameProcess = (
  a: { readonly incarnation: number; readonly instance?: string | undefined },
  b: { readonly incarnation: number; readonly instance?: string | undefined },
): boolean => a.incarnation === b.incarnation && (a.instance ?? "") === (b.instance ?? "")

/** Process order of one member id: (incarnation, instance); negative when `a` is older. */
const compareProcess = (
  a: { readonly incarnation: number; readonly instance?: string | undefined },
  b: { readonly incarnation: number; readonly instance?: string | undefined },
): number => {
  if (a.incarnation !== b.incarnation) return a.incarnation < b.incarnation ? -1 : 1
  const ia = a.instance ?? ""
  const ib = b.instance ?? ""
  return ia === ib ? 0 : ia < ib ? -1 : 1
}

/**
 * Remove a member (leave, expiry, fence): release (or, for a fence, hold),
 * bump groupEpoch, recompute the target.
 */
const remove = (
  draft: Draft,
  member: MemberEntry,
  kind: AuditKind,
  reason: string,
  except?: string,
): void => {
  const before = draft.groupEpoch
  const shards =
    kind === "MemberFenced"
      ? holdAll(draft, member, "fenced")
      : releaseAll(draft, member.memberId, except)
  draft.removeMember(member.memberId)
  draft.groupEpoch += 1
  draft.audit(kind, reason, {
    memberId: member.memberId,
    shards,
    memberEpochBefore: member.memberEpoch,
    groupEpochBefore: before,
  })
  recomputeTarget(draft, `${kind} ${member.memberId}`, except)
}

/**
 * Fence a member (invalid report, revoke or confirmation timeout): it is
 * removed, its next request is answered UNKNOWN_MEMBER_ID and it rejoins as a
 * new lifecycle. Its shards are held, not freed: nobody is granted them until
 * its lease has provably ended or its rejoin proves it stopped
 * (docs/protocol.md rule 19).
 */
const fence = (draft: Draft, member: MemberEntry, reason: string, except?: string): void =>
  remove(draft, member, "MemberFenced", reason, except)

interface Reconciled {
  readonly assigned: Array<ShardGrant>
  readonly pending: Array<number>
  /** The member's shards being revoked (computed when granting: the answer names them). */
  readonly revoking?: Array<number>
  /** The member's entry after reconciliation (when granting). */
  readonly member?: MemberEntry
}

/**
 * Per-member reconciliation: shards targeted to the member that nobody holds
 * are granted now (new token, fence); shards still held or being revoked
 * elsewhere are pending (seed step 6 happens once the revoke is accepted).
 * With `grant: false` nothing is granted and nothing changes: the answer to
 * a request older than one already handled (docs/protocol.md rule 18).
 */
const reconcile = (draft: Draft, memberId: string, grant = true): Reconciled => {
  const member = draft.member(memberId)!
  const assigned: Array<ShardGrant> = []
  const pending: Array<number> = []
  const granted: Array<number> = []
  const view = draft.layoutView()
  for (const s of draft.targetedTo(memberId)) {
    const cur = draft.currentOf(s)
    // revoked elsewhere, held for a previous holder, or waiting for earlier
    // generations to drain: not yet
    if (
      draft.revocationOf(s) !== null ||
      (cur === null && (draft.heldOf(s) !== null || blocked(view, s) || !grant))
    )
      pending.push(s)
    else if (cur === null) {
      assigned.push({ shard: s, token: draft.grant(s, member) })
      granted.push(s)
    } else if (cur.memberId === memberId) assigned.push({ shard: s, token: cur.token })
    else pending.push(s)
  }
  if (granted.length > 0)
    draft.audit("ShardsGranted", "reconciliation", { memberId, shards: granted })
  if (!grant) return { assigned, pending }
  const revoking = draft.revokingFrom(memberId)
  const state: MemberState =
    member.state === "LEAVING"
      ? "LEAVING"
      : revoking.length > 0
        ? "UNREVOKED_SHARDS"
        : pending.length > 0
          ? "UNRELEASED_SHARDS"
          : "STABLE"
  if (state === member.state) return { assigned, pending, revoking, member }
  const changed: MemberEntry = { ...member, state }
  draft.putMember(changed)
  return { assigned, pending, revoking, member: changed }
}

// ---------------------------------------------------------------------------
// Heartbeat
// ---------------------------------------------------------------------------

/** The group's timing, sent on every response (docs/protocol.md rule 6). */
export const timing = (
  config: GroupConfig,
): Pick<HeartbeatResponse, "heartbeatIntervalMs" | "sessionTimeoutMs" | "rebalanceTimeoutMs"> => ({
  heartbeatIntervalMs: config.heartbeatIntervalMs,
  sessionTimeoutMs: config.sessionTimeoutMs,
  rebalanceTimeoutMs: config.rebalanceTimeoutMs,
})

const errorResponse = (
  state: CoordinatorState,
  req: Pick<HeartbeatRequest, "memberId" | "memberEpoch">,
  errorCode: HeartbeatResponse["errorCode"],
  errorMessage: string,
): HeartbeatResponse => ({
  errorCode,
  errorMessage,
  memberId: req.memberId,
  memberEpoch: req.memberEpoch,
  assignmentEpoch: state.assignmentEpoch,
  assigned: [],
  pending: [],
  heartbeatIntervalMs: state.config.heartbeatIntervalMs,
  sessionTimeoutMs: state.config.sessionTimeoutMs,
  rebalanceTimeoutMs: state.config.rebalanceTimeoutMs,
})

/**
 * A NONE answer, fields in the schema's order, as plain literals (one per
 * combination of the optional `revoking` and `layout`): every heartbeat
 * builds one, and spreads take V8's slow path (docs/simulator.md, Speed).
 */
const okResponse = (
  config: GroupConfig,
  memberId: string,
  memberEpoch: number,
  assignmentEpoch: number,
  assigned: ReadonlyArray<ShardGrant>,
  pending: ReadonlyArray<number>,
  revoking: ReadonlyArray<ShardGrant> | undefined,
  layout: ShardLayout | undefined,
): HeartbeatResponse => {
  const { heartbeatIntervalMs, sessionTimeoutMs, rebalanceTimeoutMs } = config
  if (revoking === undefined && layout === undefined)
    return {
      errorCode: "NONE",
      memberId,
      memberEpoch,
      assignmentEpoch,
      assigned,
      pending,
      heartbeatIntervalMs,
      sessionTimeoutMs,
      rebalanceTimeoutMs,
    }
  if (layout === undefined)
    return {
      errorCode: "NONE",
      memberId,
      memberEpoch,
      assignmentEpoch,
      assigned,
      pending,
      revoking,
      heartbeatIntervalMs,
      sessionTimeoutMs,
      rebalanceTimeoutMs,
    }
  if (revoking === undefined)
    return {
      errorCode: "NONE",
      memberId,
      memberEpoch,
      assignmentEpoch,
      assigned,
      pending,
      layout,
      heartbeatIntervalMs,
      sessionTimeoutMs,
      rebalanceTimeoutMs,
    }
  return {
    errorCode: "NONE",
    memberId,
    memberEpoch,
    assignmentEpoch,
    assigned,
    pending,
    revoking,
    layout,
    heartbeatIntervalMs,
    sessionTimeoutMs,
    rebalanceTimeoutMs,
  }
}

/**
 * Duplicate checks of a request's shard lists: a request's lists are nearly
 * always a few entries long, and a Set per list per heartbeat was a large part
 * of the coordinator's allocation, so a list of at most SCAN_MAX entries is
 * scanned instead (docs/simulator.md, Speed); a longer one gets a Set.
 */
const SCAN_MAX = 16

/** Is `shard` the shard of one of the first `end` entries of `list`? */
const listedBefore = (
  list: ReadonlyArray<{ readonly shard: number }>,
  shard: number,
  end: number,
): boolean => {
  for (let j = 0; j < end; j++) if (list[j]!.shard === shard) return true
  return false
}

const NONE_DRAINED: NonNullable<HeartbeatRequest["drainedShards"]> = []

/** Range and shape checks that need the state; a failure changes nothing. */
export const validateRequest = (
  state: CoordinatorState,
  req: HeartbeatRequest,
): string | undefined => {
  if (req.group !== state.config.groupId || req.stream !== state.config.stream)
    return `group ${req.group} on stream ${req.stream} is not served here (group ${state.config.groupId} on stream ${state.config.stream})`
  if (req.metadataVersion > state.layout.generation)
    return `metadataVersion ${req.metadataVersion} is ahead of layout generation ${state.layout.generation}`
  const n = shardSpace(state.layout)
  const owned = req.ownedShards
  const ownedSet = owned.length > SCAN_MAX ? new Set<number>() : undefined
  for (let i = 0; i < owned.length; i++) {
    const s = owned[i]!
    if (s >= n) return `owned shard ${s} is out of range (shard ids below ${n})`
    if (ownedSet !== undefined ? ownedSet.has(s) : owned.indexOf(s) < i)
      return `owned shard ${s} is listed twice`
    ownedSet?.add(s)
  }
  const revoking = req.revokingShards
  const revokingSet = revoking.length > SCAN_MAX ? new Set<number>() : undefined
  for (let i = 0; i < revoking.length; i++) {
    const r = revoking[i]!
    if (r.shard >= n) return `revoking shard ${r.shard} is out of range (shard ids below ${n})`
    if (revokingSet !== undefined ? revokingSet.has(r.shard) : listedBefore(revoking, r.shard, i))
      return `revoking shard ${r.shard} is listed twice`
    if (ownedSet !== undefined ? ownedSet.has(r.shard) : owned.includes(r.shard))
      return `shard ${r.shard} is both owned and revoking`
    revokingSet?.add(r.shard)
  }
  if (req.progress !== undefined)
    for (const p of req.progress)
      if (p.shard >= n) return `progress shard ${p.shard} is out of range (shard ids below ${n})`
  const drained = req.drainedShards ?? NONE_DRAINED
  const drainedSet = drained.length > SCAN_MAX ? new Set<number>() : undefined
  for (let i = 0; i < drained.length; i++) {
    const d = drained[i]!
    if (d.shard >= n) return `drained shard ${d.shard} is out of range (shard ids below ${n})`
    if (drainedSet !== undefined ? drainedSet.has(d.shard) : listedBefore(drained, d.shard, i))
      return `drained shard ${d.shard} is listed twice`
    drainedSet?.add(d.shard)
  }
  const missing = req.missingTokens ?? NONE_DRAINED
  for (let i = 0; i < missing.length; i++) {
    const m = missing[i]!
    if (listedBefore(missing, m.shard, i))
      return `shard ${m.shard} is listed twice in missingTokens`
    // also keeps the list's length within the owned list's
    if (ownedSet !== undefined ? !ownedSet.has(m.shard) : !owned.includes(m.shard))
      return `missing token of shard ${m.shard} reported, which is not owned`
  }
  if (req.memberEpoch === 0) {
    if (req.memberInfo === undefined) return "memberEpoch 0 (join) requires memberInfo"
    if (req.ownedShards.length > 0 || req.revokingShards.length > 0)
      return "a (re)joining member must not report owned or revoking shards"
    if (req.leaving === true) return "a (re)joining member cannot be leaving"
    if ((req.drainedShards ?? []).length > 0)
      return "a (re)joining member must not report drained shards"
  }
  return undefined
}

const weightOf = (state: CoordinatorState, memberId: string, req: HeartbeatRequest): number =>
  state.config.memberWeights?.[memberId] ?? req.memberInfo?.weight ?? 1

/**
 * The member's grants being revoked, with their tokens (docs/protocol.md rule
 * 17): a member that never received one of them (its answer was lost) learns
 * it may report it REVOKED, instead of being fenced when the revocation times out.
 */
const revokingGrants = (
  draft: Draft,
  memberId: string,
  revoking: ReadonlyArray<number>,
): Array<ShardGrant> => {
  const out: Array<ShardGrant> = []
  for (const s of revoking) {
    const cur = draft.currentOf(s)
    if (cur !== null && cur.memberId === memberId) out.push({ shard: s, token: cur.token })
  }
  return sortByShard(out)
}

/** When `memberId`'s session ends if it sends nothing more (its session deadline). */
const sessionEndOf = (draft: Draft, memberId: string): number =>
  draft.state.deadlines.get(timerId({ _tag: "Session", memberId })) ??
  draft.now + draft.state.config.sessionTimeoutMs

/**
 * Who the pending shards wait for, per holder and reason (docs/protocol.md
 * rule 29): a revocation not yet confirmed (the holder's session end bounds
 * it when the holder is gone), or a hold (its release deadline). Shards
 * pending only on a reshard's drain are left out. Runs only when something
 * is pending, so a steady heartbeat pays nothing for it.
 */
const waitingOnOf = (
  draft: Draft,
  memberId: string,
  pending: ReadonlyArray<number>,
): Array<PendingHolder> => {
  const byHolder = new Map<string, { -readonly [K in keyof PendingHolder]: PendingHolder[K] }>()
  for (const s of pending) {
    const revocation = draft.revocationOf(s)
    const held = revocation === null ? draft.heldOf(s) : null
    const cur = revocation === null && held === null ? draft.currentOf(s) : null
    let holder: string
    let reason: PendingHolder["reason"]
    let until: number
    if (revocation !== null) {
      holder = revocation.memberId
      reason = "revoking"
      until = sessionEndOf(draft, holder)
    } else if (held !== null) {
      holder = held.memberId
      reason = held.reason
      until =
        draft.heldDeadlines.find((d) => d.shard === s)?.at ??
        draft.state.heldDeadlines.get(s) ??
        draft.now + draft.state.config.sessionTimeoutMs
    } else if (cur !== null && cur.memberId !== memberId) {
      holder = cur.memberId
      reason = "revoking"
      until = sessionEndOf(draft, holder)
    } else continue
    const k = `${reason}\u0000${holder}`
    const entry = byHolder.get(k)
    const inMs = Math.max(0, Math.ceil(until - draft.now))
    if (entry === undefined)
      byHolder.set(k, { memberId: holder, reason, shards: [s], sessionEndsInMs: inMs })
    else {
      ;(entry.shards as Array<number>).push(s)
      entry.sessionEndsInMs = Math.max(entry.sessionEndsInMs, inMs)
    }
  }
  return [...byHolder.values()]
}

const respond = (
  draft: Draft,
  req: HeartbeatRequest,
  memberEpoch: number,
  r: Reconciled,
): HeartbeatResponse => {
  const state = draft.state
  const revoking = revokingGrants(
    draft,
    req.memberId,
    r.revoking ?? draft.revokingFrom(req.memberId),
  )
  const response = okResponse(
    state.config,
    req.memberId,
    memberEpoch,
    draft.assignmentEpoch,
    r.assigned,
    r.pending,
    revoking.length > 0 ? revoking : undefined,
    // A joining member learns the layout even at generation 0 (docs/protocol.md rule 14).
    req.memberEpoch === 0 || req.metadataVersion < state.layout.generation
      ? state.layout
      : undefined,
  )
  if (r.pending.length === 0) return response
  const waitingOn = waitingOnOf(draft, req.memberId, r.pending)
  return waitingOn.length === 0 ? response : { ...response, waitingOn }
}

const sessionTimer = (draft: Draft, memberId: string): void => {
  draft.timers.push({
    key: { _tag: "Session", memberId },
    at: draft.now + draft.state.config.sessionTimeoutMs,
  })
}

type JoinRequest = HeartbeatRequest & { memberInfo: NonNullable<HeartbeatRequest["memberInfo"]> }

/**
 * Answer a member with its current assignment (heartbeats and joins). A step
 * that changes anything also records the request's seq with the member, so
 * an older request is never acted on after it, across a failover too
 * (docs/protocol.md rule 18).
 */
const answer = (
  draft: Draft,
  req: HeartbeatRequest,
  memberEpoch: number,
): CoordinatorResult<HeartbeatResponse> => {
  sessionTimer(draft, req.memberId)
  const r = reconcile(draft, req.memberId)
  const response = respond(draft, req, memberEpoch, r)
  const member = r.member
  if (member !== undefined && draft.hasChanges() && (member.lastSeq ?? 0) < req.seq)
    draft.putMember({ ...member, lastSeq: req.seq })
  return done(
    draft,
    response,
    req.progress !== undefined ? { memberId: req.memberId, shards: req.progress } : undefined,
    { memberId: req.memberId, seq: req.seq },
  )
}

/**
 * The answer to a request older than (or a duplicate of) the newest one
 * handled for its process: the member's standing assignment, with nothing
 * granted, recorded or armed (docs/protocol.md rule 18). The member applies
 * only the answer to its newest request, so this one counts only if it is
 * the duplicate of that request, whose first answer was lost.
 */
const standing = (
  state: CoordinatorState,
  req: HeartbeatRequest,
  member: MemberEntry,
): CoordinatorResult<HeartbeatResponse> => {
  if (req.memberEpoch !== member.memberEpoch && req.memberEpoch !== 0)
    return nothing(
      errorResponse(
        state,
        req,
        "FENCED_MEMBER_EPOCH",
        `request seq ${req.seq} is older than the newest handled for this process`,
      ),
    )
  const draft = new Draft(state, 0)
  return nothing(respond(draft, req, member.memberEpoch, reconcile(draft, req.memberId, false)))
}

/**
 * Epoch 0. A new member joins; a registered one starts a new lifecycle: a
 * rejoin by the same process (after UNKNOWN/FENCED or a lost lease) or the
 * replacement of the registered process by a newer one (docs/protocol.md
 * rules 9 and 24). A rejoin proves the process stopped its earlier
 * lifecycles' shards, so they are released; a replaced process does not know
 * yet, so its shards are held until its lease has ended or it proves it
 * stopped (rule 19). Either way whatever the joiner gets carries new tokens,
 * and every join gets a never-issued epoch.
 */
const join = (
  draft: Draft,
  req: JoinRequest,
  existing: MemberEntry | undefined,
): CoordinatorResult<HeartbeatResponse> => {
  const state = draft.state
  const weight = weightOf(state, req.memberId, req)
  const epoch = draft.maxMemberEpoch + 1
  const entry: MemberEntry = {
    memberId: req.memberId,
    memberEpoch: epoch,
    incarnation: req.incarnation,
    ...(req.instance !== undefined && req.instance !== "" ? { instance: req.instance } : {}),
    joinSeq: req.seq,
    lastSeq: req.seq,
    state: "STABLE",
    weight,
    memberInfo: req.memberInfo,
  }
  releaseProven(draft, req)
  if (existing === undefined) {
    draft.putMember(entry)
    const before = draft.groupEpoch
    draft.groupEpoch += 1
    draft.audit("MemberJoined", "join (memberEpoch 0)", {
      memberId: req.memberId,
      memberEpochAfter: epoch,
      groupEpochBefore: before,
    })
    recomputeTarget(draft, `join ${req.memberId}`, req.memberId)
    return answer(draft, req, epoch)
  }
  const replaced = !sameProcess(req, existing)
  const shards = replaced ? holdAll(draft, existing, "replaced") : releaseAll(draft, req.memberId)
  draft.putMember(entry)
  draft.audit(
    replaced ? "MemberReplaced" : "MemberRejoined",
    replaced
      ? `process ${processName(req)} replaces ${processName(existing)} (memberEpoch 0)`
      : "rejoin (memberEpoch 0)",
    {
      memberId: req.memberId,
      shards,
      memberEpochBefore: existing.memberEpoch,
      memberEpochAfter: epoch,
    },
  )
  if (weight !== existing.weight || existing.state === "LEAVING") {
    const before = draft.groupEpoch
    draft.groupEpoch += 1
    const why =
      weight !== existing.weight ? `weight ${existing.weight} -> ${weight}` : "no longer leaving"
    draft.audit("MemberRejoined", why, { memberId: req.memberId, groupEpochBefore: before })
    recomputeTarget(draft, `rejoin ${req.memberId}: ${why}`, req.memberId)
  }
  return answer(draft, req, epoch)
}

const processName = (p: {
  readonly incarnation: number
  readonly instance?: string | undefined
}) =>
  p.instance !== undefined && p.instance !== ""
    ? `${p.incarnation}/${p.instance}`
    : `${p.incarnation}`

/**
 * A member asked to leave while still draining (`leaving`): it stops being a
 * target, so every shard it holds is revoked from it at once and moves as
 * soon as it reports that shard REVOKED (docs/protocol.md rule 11).
 */
const startLeaving = (draft: Draft, member: MemberEntry): MemberEntry => {
  const leaving: MemberEntry = { ...member, state: "LEAVING" }
  draft.putMember(leaving)
  const before = draft.groupEpoch
  draft.groupEpoch += 1
  draft.audit("MemberLeaving", "graceful leave started (leaving)", {
    memberId: member.memberId,
    groupEpochBefore: before,
  })
  recomputeTarget(draft, `leave ${member.memberId}`, member.memberId)
  return leaving
}

/**
 * Ownership validation (seed, "Ownership Validation"). Returns the violation,
 * or the accepted revokes and the owned shards to confirm. A revoke report
 * names the grant (owner token) it gives up, so a report about an older grant
 * can never complete a newer revocation (docs/protocol.md rule 10) and a resent terminal
 * REVOKED is ignored (docs/protocol.md rule 3).
 */
const validateOwnership = (
  draft: Draft,
  memberId: string,
  req: HeartbeatRequest,
):
  | { readonly violation: string }
  | {
      readonly revoked: Array<number>
      readonly confirm: Array<number>
      readonly drained: Array<number>
    } => {
  const confirm: Array<number> = []
  for (const s of req.ownedShards) {
    const cur = draft.currentOf(s)
    if (cur?.memberId === memberId) {
      if (!cur.confirmed && draft.revocationOf(s) === null) confirm.push(s)
    } else if (cur !== null)
      return { violation: `claims shard ${s}, owned by live member ${cur.memberId}` }
    else return { violation: `claims shard ${s}, which is neither assigned nor pending for it` }
  }
  const revoked: Array<number> = []
  for (const r of req.revokingShards) {
    const cur = draft.currentOf(r.shard)
    const own = cur !== null && cur.memberId === memberId
    if (own && cur.token === r.token) {
      // A report about its current grant of the shard.
      if (draft.revocationOf(r.shard)?.memberId !== memberId)
        return {
          violation: `reports shard ${r.shard} ${r.state}, which was not removed from its assignment`,
        }
      if (r.state === "REVOKED") revoked.push(r.shard)
    } else if (r.state === "REVOKING" && !own)
      return {
        violation: `still revoking shard ${r.shard} (token ${r.token}), which is no longer its own`,
      }
    // else: a terminal REVOKED of an older grant (already accepted, or superseded by a
    // re-grant), or the drain of an older grant of a shard granted to it again: ignored.
  }
  const drained: Array<number> = []
  const view = draft.layoutView()
  for (const d of req.drainedShards ?? []) {
    // already drained, or a shard of a generation the group retired: nothing to do
    if (draft.isDrained(d.shard) || d.shard < firstLiveShard(view)) continue
    // A shard of the current layout: a reshard sealed it before this leader
    // adopted the newer generation (it reads the stream's layout every
    // layoutPollMs), so a caught-up owner can honestly find it drained first.
    // Ignored, not fenced: the member reports it until the shard is taken
    // away, and the report counts once the generation is adopted
    // (docs/resharding.md; the simulator's finding F4).
    if (!isEarlier(view, d.shard)) continue
    const cur = draft.currentOf(d.shard)
    // a report about an older grant of the shard is stale: ignored
    if (cur?.memberId === memberId && cur.token === d.token) drained.push(d.shard)
  }
  return { revoked, confirm, drained }
}

/**
 * docs/protocol.md rule 30: the owner found its shard's owner token missing
 * (deleted, evicted; every fenced call refuses it, rule 26). A steady group
 * writes no token by itself, so the shard would wait for its next move or a
 * takeover. The token is written again, the SAME one and only for the
 * shard's current owner under that grant: a fence (written before the
 * answer), no record, no new grant. A report about another grant, or of a
 * shard now someone else's, is stale and changes nothing. The write only
 * raises or restores (storage's token never falls), so a stale leader's
 * re-write cannot undo a newer grant.
 */
const refence = (
  draft: Draft,
  memberId: string,
  missing: NonNullable<HeartbeatRequest["missingTokens"]>,
): void => {
  for (const m of missing) {
    const cur = draft.currentOf(m.shard)
    if (cur !== null && cur.memberId === memberId && cur.token === m.token)
      draft.fences.push({ shard: m.shard, token: m.token, memberId, restore: true })
  }
}

const firstLiveShard = (view: LayoutView): number =>
  view.generations[0]?.firstShard ?? view.layout.firstShard

/**
 * docs/resharding.md: the owner found shards of earlier generations drained
 * (sealed, everything delivered and acknowledged). They leave the group's
 * target (their owner stops its read loop and reports REVOKED as for any
 * revocation), the shards of later generations they held back may now be
 * granted (their targets get a notice), and when every earlier generation is
 * drained the migration completes.
 */
const acceptDrained = (draft: Draft, member: MemberEntry, shards: ReadonlyArray<number>) => {
  let retargeted = false
  for (const s of shards) {
    draft.addDrained(s)
    if (draft.targetOf(s) !== null) {
      draft.setTarget(s, null)
      retargeted = true
    }
    if (draft.revocationOf(s) === null) draft.startRevocation(s, member)
  }
  if (retargeted) draft.assignmentEpoch += 1
  draft.audit("ShardsDrained", "owner reported drained shards of an earlier generation", {
    memberId: member.memberId,
    shards,
  })
  const view = draft.layoutView()
  for (const s of shards)
    for (const t of dependents(view, s))
      if (draft.currentOf(t) === null && !blocked(view, t))
        draft.notify(draft.targetOf(t), member.memberId)
  if (view.generations.every((g) => allDrained(draft, g))) completeMigration(draft)
}

const allDrained = (draft: Draft, g: ShardLayout): boolean => {
  for (let s = g.firstShard; s < g.firstShard + g.shardCount; s++)
    if (!draft.isDrained(s)) return false
  return true
}

/** Every earlier generation is drained: one layout again; the target is rebalanced over it. */
const completeMigration = (draft: Draft): void => {
  draft.completeMigration()
  const before = draft.groupEpoch
  draft.groupEpoch += 1
  draft.audit(
    "ReshardCompleted",
    `every shard of the earlier generations is drained: generation ${draft.layout.generation} (${draft.layout.shardCount} shards) only`,
    { groupEpochBefore: before },
  )
  recomputeTarget(draft, "reshard completed")
}

/**
 * Handle one (decoded) heartbeat. `now` is the coordinator's clock in ms.
 */
export const heartbeat = (
  state: CoordinatorState,
  req: HeartbeatRequest,
  now: Instant,
): CoordinatorResult<HeartbeatResponse> => {
  const invalid = validateRequest(state, req)
  if (invalid !== undefined) return nothing(errorResponse(state, req, "INVALID_REQUEST", invalid))
  const member = state.members.get(req.memberId)

  // docs/protocol.md rules 9 and 24: one live process per member id.
  if (member !== undefined && !sameProcess(req, member)) {
    if (compareProcess(req, member) < 0) {
      // A superseded process. Its join (sent only once it stopped everything)
      // or its leave proves it stopped the shards held for it.
      const draft = new Draft(state, now)
      if (req.memberEpoch <= 0) releaseProven(draft, req, false)
      return done(
        draft,
        errorResponse(
          state,
          req,
          "FENCED_INSTANCE_ID",
          `member id ${req.memberId} belongs to a newer process (${processName(member)}, this is ${processName(req)})`,
        ),
      )
    }
    // A newer process: its join replaces the registered one.
    if (req.memberEpoch > 0)
      return nothing(
        errorResponse(
          state,
          req,
          "FENCED_MEMBER_EPOCH",
          `process ${processName(req)} has not joined: rejoin with memberEpoch 0`,
        ),
      )
    if (req.memberEpoch === -1) {
      // Its leave removes nothing: the registered process is another one
      // (e.g. an older process that registered again after this one left;
      // this is a resend of a leave whose answer was lost).
      const draft = new Draft(state, now)
      releaseProven(draft, req, false)
      return done(draft, leftResponse(draft, req))
    }
  }

  // docs/protocol.md rule 18: a request older than (or a duplicate of) the
  // newest one handled for this process is answered, never acted on.
  if (member !== undefined && sameProcess(req, member)) {
    const handled = state.handledSeq.get(req.memberId) ?? member.lastSeq ?? member.joinSeq
    if (req.seq <= handled) return standing(state, req, member)
  }

  const draft = new Draft(state, now)
  if (req.memberEpoch === -1) {
    if (member !== undefined && sameProcess(req, member))
      remove(draft, member, "MemberLeft", "graceful leave (memberEpoch -1)", req.memberId)
    // Leaving is idempotent: an unknown member leaving changes nothing but
    // the shards held for it.
    releaseProven(draft, req)
    return done(draft, leftResponse(draft, req))
  }

  // validateRequest guarantees memberInfo on epoch 0
  if (req.memberEpoch === 0) {
    const departed = member === undefined ? state.departed.get(req.memberId) : undefined
    if (departed !== undefined && sameProcess(req, departed) && req.seq <= departed.seq)
      return nothing(
        errorResponse(
          state,
          req,
          "FENCED_MEMBER_EPOCH",
          `stale join (seq ${req.seq} is not above seq ${departed.seq}, handled before this process was removed)`,
        ),
      )
    return join(draft, req as JoinRequest, member)
  }

  if (member === undefined)
    return nothing(errorResponse(state, req, "UNKNOWN_MEMBER_ID", `unknown member ${req.memberId}`))
  // Our memberEpoch moves only on join and fence, so no earlier epoch is ever
  // tolerated: only an older lifecycle sends one (docs/protocol.md rule 7).
  if (req.memberEpoch !== member.memberEpoch)
    return nothing(
      errorResponse(
        state,
        req,
        "FENCED_MEMBER_EPOCH",
        `memberEpoch ${req.memberEpoch} is stale (current ${member.memberEpoch})`,
      ),
    )
  // The member applied an assignment this state never had: the group's
  // metadata was rewound (docs/protocol.md rule 23). Its lifecycle cannot be
  // trusted: fence it (its shards are held until its lease ends or it rejoins).
  if (req.assignmentEpoch > state.assignmentEpoch) {
    const why = `assignmentEpoch ${req.assignmentEpoch} is ahead of ${state.assignmentEpoch} (the group's metadata was rewound)`
    fence(draft, member, why, req.memberId)
    return done(draft, errorResponse(state, req, "FENCED_MEMBER_EPOCH", `fenced: ${why}`))
  }

  const current =
    req.leaving === true && member.state !== "LEAVING" ? startLeaving(draft, member) : member
  const checked = validateOwnership(draft, req.memberId, req)
  if ("violation" in checked) {
    fence(draft, current, `invalid ownership report: ${checked.violation}`, req.memberId)
    return done(
      draft,
      errorResponse(state, req, "FENCED_MEMBER_EPOCH", `fenced: ${checked.violation}`),
    )
  }
  // Seed step 5: accept the revoke acknowledgements; the shards are free now.
  if (checked.revoked.length > 0) {
    for (const s of checked.revoked) {
      draft.endRevocation(s)
      draft.setOwner(s, null)
      draft.notify(draft.targetOf(s), req.memberId)
    }
    draft.audit("RevokeAccepted", "member reported REVOKED", {
      memberId: req.memberId,
      shards: checked.revoked,
    })
  }
  // Seed step 7: the new owner reports ownership; the current assignment observes it.
  if (checked.confirm.length > 0) {
    for (const s of checked.confirm) {
      const cur = draft.currentOf(s)!
      draft.setOwner(s, { ...cur, confirmed: true })
    }
    draft.audit("OwnershipConfirmed", "member reported owned shards", {
      memberId: req.memberId,
      shards: checked.confirm,
    })
  }
  if (checked.drained.length > 0) acceptDrained(draft, current, checked.drained)
  if (req.missingTokens !== undefined) refence(draft, req.memberId, req.missingTokens)
  return answer(draft, req, member.memberEpoch)
}

/** The answer to a leave (epoch -1): its epochs are -1 by design. */
const leftResponse = (draft: Draft, req: HeartbeatRequest): HeartbeatResponse =>
  okResponse(
    draft.state.config,
    req.memberId,
    -1,
    draft.assignmentEpoch,
    [],
    [],
    undefined,
    undefined,
  )

// ---------------------------------------------------------------------------
// Timers
// ---------------------------------------------------------------------------

/**
 * A deadline fired. A timer that fires before its (moved) deadline re-arms
 * itself. Session: the member is expired. Rebalance: the member is fenced if
 * one of its revocations or unconfirmed grants passed its own deadline
 * (docs/protocol.md rules 4 and 10), else the timer re-arms at the earliest open one.
 */
export const onTimer = (
  state: CoordinatorState,
  key: TimerKey,
  at: Instant,
): CoordinatorResult<void> => {
  const now = monoOf(at)
  if (key._tag === "Release") return releaseDue(state, at)
  const member = state.members.get(key.memberId)
  if (member === undefined) return nothing(undefined)
  if (key._tag === "Session") {
    const deadline = state.deadlines.get(timerId(key))
    if (deadline !== undefined && deadline > now) return nothing(undefined, [{ key, at: deadline }])
    const draft = new Draft(state, at)
    remove(draft, member, "MemberExpired", `session timeout (${state.config.sessionTimeoutMs} ms)`)
    return done(draft, undefined)
  }
  let next = Number.POSITIVE_INFINITY
  const revokes: Array<number> = []
  const grants: Array<number> = []
  for (const s of state.ownedBy.get(key.memberId) ?? []) {
    const at = state.shardDeadlines.get(s)
    if (at === undefined) continue
    if (at > now) next = Math.min(next, at)
    else if (state.revocations[s] != null) revokes.push(s)
    else grants.push(s)
  }
  if (revokes.length === 0 && grants.length === 0)
    return Number.isFinite(next) ? nothing(undefined, [{ key, at: next }]) : nothing(undefined)
  const timeout = state.config.rebalanceTimeoutMs
  const reason =
    revokes.length > 0
      ? `revoke timeout (${timeout} ms) for shards ${revokes.join(",")}`
      : `grant not confirmed within ${timeout} ms for shards ${grants.join(",")}`
  const draft = new Draft(state, at)
  fence(draft, member, reason)
  return done(draft, undefined)
}

/**
 * Held shards whose holder's lease has provably ended are free again; their
 * targets get a notice (docs/protocol.md rule 19). Re-arms at the next one.
 */
const releaseDue = (state: CoordinatorState, at: Instant): CoordinatorResult<void> => {
  const now = monoOf(at)
  let next = Number.POSITIVE_INFINITY
  const due: Array<number> = []
  for (const [shard, deadline] of state.heldDeadlines) {
    if (state.held[shard] == null) continue
    if (deadline <= now) due.push(shard)
    else next = Math.min(next, deadline)
  }
  const timers: Array<Timer> = Number.isFinite(next) ? [{ key: RELEASE_TIMER, at: next }] : []
  if (due.length === 0) return nothing(undefined, timers)
  const draft = new Draft(state, at)
  due.sort((a, b) => a - b)
  for (const s of due) {
    draft.release(s)
    draft.notify(draft.targetOf(s))
  }
  draft.audit("ShardsReleased", "the holder's lease has ended", { shards: due })
  draft.timers.push(...timers)
  return done(draft, undefined)
}

/**
 * A grant its member cannot be told yet (its owner-token fence is not
 * written: its storage node is down or hung, docs/protocol.md rule 31)
 * cannot be confirmed either, so its confirmation deadline (rule 10) counts
 * from `now` again: a volatile step that moves the grant deadlines of
 * `shards` (each still granted, unconfirmed and not being revoked) to `now`
 * plus `rebalanceTimeoutMs`.
 * Without it, a node that stays hung past the rebalance timeout fenced a
 * healthy member and took every shard it had. Nothing is recorded.
 */
export const deferGrantDeadlines = (
  state: CoordinatorState,
  shards: Iterable<number>,
  now: Instant,
): CoordinatorResult<void> => {
  const at = monoOf(now) + state.config.rebalanceTimeoutMs
  const deadlines: Array<ShardDeadline> = []
  for (const shard of shards) {
    const owner = state.current[shard]
    if (owner == null || owner.confirmed || state.revocations[shard] != null) continue
    if ((state.shardDeadlines.get(shard) ?? Number.POSITIVE_INFINITY) >= at) continue
    deadlines.push({ shard, at })
  }
  // no timer: the owner's Rebalance timer, armed at the grant's first
  // deadline, finds this one ahead and re-arms at it (`onTimer`)
  return { ...nothing(undefined), shardDeadlines: deadlines }
}

/**
 * docs/protocol.md rule 23: after a takeover, storage holds owner tokens the
 * loaded state never issued (`stored`: shard -> token storage holds): the
 * group's metadata lost commits (a restore, a lost AOF tail, an async
 * failover) whose grants storage kept. Whoever was granted those shards may
 * still read them, and the state does not know who: each such shard is held
 * until every lease handed out before this takeover has ended (one session),
 * with storage's token, so its next grant goes above it; its recorded owner
 * (whose token storage now refuses) is fenced, its other shards held the same
 * way. A shard whose token storage lost altogether (evicted, deleted) while
 * the state issued one is held the same way when a rewind is found, with
 * the highest token storage holds: the lost commits may have granted it
 * too. Undefined when storage holds nothing newer.
 */
export const rewound = (
  state: CoordinatorState,
  stored: ReadonlyArray<{ readonly shard: number; readonly token: number }>,
  at: Instant,
): CoordinatorResult<void> | undefined => {
  const found = stored.filter(
    (t) => t.shard < state.tokens.length && t.token > (state.tokens[t.shard] ?? 0),
  )
  if (found.length === 0) return undefined
  // Rewound, and a shard the state issued a token for has none in storage
  // (evicted or deleted, rule 26): its token may have come from the lost
  // commits too, and nothing shows how high it was. Held as well, its next
  // grant above the highest token storage holds, not re-fenced with the
  // state's lower token, which storage would take (rule 30) while an owner of
  // the lost grant reads on above it (docs/simulator.md, store-rewind's
  // finding 2). Without a rewind a missing token stays rule 30's to restore.
  const top = Math.max(...found.map((t) => t.token))
  const missing = stored
    .filter(
      (t) => t.shard < state.tokens.length && t.token === 0 && (state.tokens[t.shard] ?? 0) > 0,
    )
    .map((t) => ({ shard: t.shard, token: Math.max(top, state.tokens[t.shard] ?? 0) }))
  const ahead = [...found, ...missing]
  const draft = new Draft(state, at)
  const until = draft.now + state.config.sessionTimeoutMs
  const shards = ahead.map((t) => t.shard).sort((a, b) => a - b)
  draft.audit(
    "MetadataRewindDetected",
    `storage holds owner tokens above the stored state for shards ${found
      .map((t) => t.shard)
      .sort((a, b) => a - b)
      .join(
        ",",
      )}${missing.length > 0 ? ` and none for shards ${missing.map((t) => t.shard).join(",")}` : ""}: the group's metadata was rewound; those shards are held for one session (${state.config.sessionTimeoutMs} ms) and their recorded owners fenced`,
    { shards },
  )
  const owners = new Set<string>()
  for (const t of ahead) {
    const cur = draft.currentOf(t.shard)
    if (cur !== null) owners.add(cur.memberId)
  }
  for (const id of [...owners].sort()) {
    const m = draft.member(id)
    if (m !== undefined) fence(draft, m, "owner token regressed in storage (metadata rewind)")
  }
  for (const t of ahead)
    draft.hold(
      t.shard,
      {
        memberId: "",
        memberEpoch: 0,
        incarnation: 0,
        instance: "",
        joinSeq: 0,
        token: t.token,
        reason: "rewind",
      },
      until,
    )
  return done(draft, undefined)
}
