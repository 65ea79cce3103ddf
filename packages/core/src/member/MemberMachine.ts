/**
 * The member's reconciliation state machine: one explicit machine in one file,
 * like Kafka's `CurrentAssignmentBuilder`.
 *
 * It is synchronous and deterministic: no clock, no I/O, no randomness. Time
 * arrives as `now` on the events. The runtime (member-runtime) and the
 * simulator drive the very same machine:
 *
 * ```
 * const state = MemberMachine.make(config, now)
 * const { seq, request } = MemberMachine.nextRequest(state, now)   // send it
 * const commands = MemberMachine.step(state, { _tag: "ResponseReceived", seq, response, now })
 * // execute commands: StartShard, StopShard, StopAllShards, SendHeartbeat, ...
 * ```
 *
 * `step` mutates the state it is given (the caller owns it; the machine keeps
 * no global state) and returns the commands to execute, in order. `clone`
 * takes a snapshot. Keeping state mutable keeps a step allocation-light: the
 * simulator runs millions of them.
 *
 * Phases:
 * ```
 *  joining ──NONE──▶ stable ◀──────────────┐
 *     │                │ assignment changed │ all started / revokes acknowledged
 *     │                ▼                    │
 *     │           reconciling ──────────────┘
 *     │      (starting shards / revoking shards)
 *     │                │  lease ran out (no answer in time)
 *     │                ▼
 *     │           suspended ──NONE, same epoch (a fresh lease)──▶ stable / reconciling
 *     │                │
 *     │   UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH (from any active or suspended phase)
 *     │                ▼
 *     │             fenced ──every loop stopped, then NONE (rejoin, epoch 0)──▶ stable / reconciling
 *     │
 *  any active phase ──leave──▶ leaving ──drained, epoch -1 answered (or leave timeout)──▶ left
 * ```
 *
 * A lost lease suspends the member (docs/protocol.md rule 22): it stops every
 * read loop but keeps its epoch, so the first answer that grants a fresh
 * lease resumes it with the same epoch and tokens (no rejoin, no rebalance);
 * only a coordinator that has expired it answers UNKNOWN_MEMBER_ID.
 *
 * Every stopped loop (`StopShard`, `StopAllShards`) is reported back with
 * `ShardDrained` once its in-flight work has ended: a shard is reported
 * REVOKED, and a fenced member sends its rejoin (which releases its held
 * shards, rule 19), only then (rule 19, docs/runtime.md "a handler past its
 * drain").
 *
 * One request is in flight at a time (docs/protocol.md rule 13): the machine
 * emits `SendHeartbeat` only when none is outstanding, and the runtime
 * reports every request's end (`ResponseReceived` or `HeartbeatFailed` on its
 * timeout). The machine decides everything about time itself: when to send,
 * whether its lease still holds (`leaseValid`), when to self-fence, and the
 * next moment it needs a `Tick` (`nextDeadline`).
 */
import {
  HeartbeatRejected,
  InvalidMemberConfig,
  LeaseUnusable,
  MemberSuperseded,
} from "../Errors.js"
import { sortByShard, sortShards } from "../internal/sortShards.js"
import type {
  HeartbeatRequest,
  HeartbeatResponse,
  MemberInfo,
  RevokingShard,
  ShardLayout,
} from "../protocol/Heartbeat.js"

// ---------------------------------------------------------------------------
// config and state

export interface MemberConfig {
  readonly group: string
  /** The logical stream the group consumes; a group is identified by (stream, group). */
  readonly stream: string
  readonly memberId: string
  /**
   * This machine's process start of the member id (`Incarnation` in
   * protocol/Heartbeat.ts): larger for every later start, and never reused by
   * a second machine, since request numbers (`seq`) restart with each machine.
   */
  readonly incarnation: number
  /**
   * This process's random identity (`Instance` in protocol/Heartbeat.ts, at
   * least 64 random bits): with `incarnation` it tells two processes apart
   * even when they started in the same millisecond (docs/protocol.md rule 24).
   */
  readonly instance?: string
  readonly memberInfo: MemberInfo
  /**
   * Self-fence this long before the group's session timeout (learned from the
   * coordinator's answers) would expire the member. Default: a fifth of it.
   */
  readonly safetyMarginMs?: number
  /** Heartbeat interval until the coordinator sends one (default 3000). */
  readonly heartbeatIntervalMs?: number
  /** First retry delay after a failed heartbeat (default 100); doubles per failure. */
  readonly retryBackoffInitialMs?: number
  /** Cap of the retry delay (default 5000); also the retry delay of a superseded member. */
  readonly retryBackoffMaxMs?: number
  /**
   * A leave that cannot finish (drain, then an answered epoch -1) ends on its
   * own after this long. Default: the group's session timeout, else 30000.
   */
  readonly leaveTimeoutMs?: number
}

/** What the member's lifecycle is; `phase` refines `active` into stable / reconciling. */
export type Lifecycle = "joining" | "active" | "suspended" | "fenced" | "leaving" | "left"

export type Phase =
  | "joining"
  | "stable"
  | "reconciling"
  | "suspended"
  | "fenced"
  | "leaving"
  | "left"

/**
 * Local status of one shard:
 * - `starting`: StartShard issued, read loop not yet confirmed (counts as owned)
 * - `reading`:  read loop running (owned)
 * - `revoking`: StopShard issued, in-flight work draining (reported REVOKING)
 * - `revoked`:  drained; reported REVOKED until the coordinator accepts it
 * - `stopping`: stopped by StopAllShards (lease lost, fenced, superseded),
 *   in-flight work not yet ended (`ShardDrained` pending); not reported
 */
export type ShardStatus = "starting" | "reading" | "revoking" | "revoked" | "stopping"

export interface ShardEntry {
  status: ShardStatus
  /** Owner token of the grant being read, or being given up (revoking / revoked). */
  token: number
  /** Sequence number of the first request that reported this shard REVOKED. */
  revokedReportedFromSeq: number
  /**
   * The read loop found the shard drained (a shard of an earlier layout
   * generation: sealed, everything delivered and acknowledged): reported in
   * `drainedShards` until the coordinator takes the shard away.
   */
  exhausted?: boolean
  /**
   * Storage refused the loop's calls because the shard's owner token is
   * missing (deleted, evicted): the token the loop holds, reported in
   * `missingTokens` until the loop reads again (docs/protocol.md rule 30).
   */
  tokenMissing?: number
}

export interface MemberState {
  readonly config: MemberConfig
  lifecycle: Lifecycle
  memberEpoch: number
  assignmentEpoch: number
  metadataVersion: number
  layout: ShardLayout | undefined
  /** The last accepted `assigned`: shard -> owner token. */
  readonly assigned: Map<number, number>
  /** The last accepted `pending` (targeted to us, still revoking elsewhere; never read). */
  pending: ReadonlyArray<number>
  /** Local shard lifecycle; a shard is in at most one status, so never owned and revoking. */
  readonly shards: Map<number, ShardEntry>
  heartbeatIntervalMs: number
  /** The group's session timeout, from the last answer; undefined before the first. */
  sessionTimeoutMs: number | undefined
  /**
   * SEND time of the last request the coordinator answered with NONE (never
   * decreases). The coordinator starts the session deadline when it handles
   * the request, which is after the send, so measuring the member's own lease
   * from here is conservative; measuring it from the response's arrival is not.
   */
  lastSuccessAt: number
  /**
   * seq -> send time of requests that may still be answered, at most
   * `MAX_TRACKED_REQUESTS` (the oldest are dropped); pruned below an accepted
   * seq and cleared on fence. A NONE answer to a seq not here cannot grant a lease.
   */
  readonly sentAt: Map<number, number>
  /** When the next heartbeat is due (interval or retry backoff). */
  nextHeartbeatAt: number
  /** A SendHeartbeat command is outstanding (dedupes them until `nextRequest`). */
  sendRequested: boolean
  /** The request in flight (0: none); no other is sent until it ends. */
  inFlightSeq: number
  /** A heartbeat was wanted while one was in flight: send it when that one ends. */
  sendAfterInFlight: boolean
  /** Consecutive failed heartbeats (drives the backoff). */
  failures: number
  /** Consecutive NONE answers that arrived after the lease they would grant. */
  lateAnswers: number
  /** Sequence number the next request gets. */
  nextSeq: number
  /** Responses to requests with a lower sequence number are stale and ignored. */
  acceptFromSeq: number
  /** Sequence number of the first epoch -1 request, while leaving. */
  leaveSeq: number
  /** When a leave that could not finish ends anyway (0: not leaving). */
  leaveDeadline: number
  /**
   * A leave asked while fenced with stopped loops still running: it begins
   * once they end (until then the member sends nothing; docs/protocol.md
   * rule 19).
   */
  leaveWhenStopped: boolean
  /** The last INVALID_REQUEST surfaced, for inspection. */
  lastRejection: HeartbeatRejected | undefined
}

// ---------------------------------------------------------------------------
// events and commands

export type MemberEvent =
  /** A decoded response to the request `seq` (from `nextRequest`). */
  | {
      readonly _tag: "ResponseReceived"
      readonly seq: number
      readonly response: HeartbeatResponse
      readonly now: number
    }
  /** The request `seq` failed: transport error, timeout, lost response. */
  | { readonly _tag: "HeartbeatFailed"; readonly seq: number; readonly now: number }
  /** The runtime started the read loop of a shard it was told to start. */
  | { readonly _tag: "ShardStarted"; readonly shard: number }
  /** A stopped shard finished its in-flight work. */
  | { readonly _tag: "ShardDrained"; readonly shard: number }
  /**
   * A read loop found its shard drained for the group: sealed by a reshard,
   * everything delivered and acknowledged (`ShardStreams.drainState`).
   */
  | { readonly _tag: "ShardExhausted"; readonly shard: number }
  /**
   * A read loop's fenced call was refused because the shard's owner token is
   * missing (`OwnerTokenMissing`: deleted or evicted), with the token the
   * loop holds: the member asks the coordinator to write it again
   * (docs/protocol.md rule 30).
   */
  | { readonly _tag: "ShardTokenMissing"; readonly shard: number; readonly token: number }
  /** The loop's fenced calls pass again (its token is back): nothing more to report. */
  | { readonly _tag: "ShardTokenBack"; readonly shard: number }
  /** Time passes: due heartbeats, self-fencing, the leave timeout. */
  | { readonly _tag: "Tick"; readonly now: number }
  | { readonly _tag: "LeaveRequested"; readonly now: number }
  /** The coordinator pushed a "look again" notice. */
  | { readonly _tag: "NoticeReceived" }

export type StopReason =
  | "fenced"
  | "unknown-member"
  /** No answer granted a lease in time: suspended, resumes with the same epoch (rule 22). */
  | "lease-lost"
  | "superseded"
  | "left"
  | "leave-timeout"

export type MemberCommand =
  /** Start the (single) read loop of `shard`, reading and acking with `token`. */
  | { readonly _tag: "StartShard"; readonly shard: number; readonly token: number }
  /** Stop new reads of `shard`, let in-flight work finish, then report ShardDrained. */
  | { readonly _tag: "StopShard"; readonly shard: number }
  /**
   * Stop every read loop now and stop acking: ownership is gone. Report
   * `ShardDrained` for each stopped loop once its in-flight work has ended
   * (not needed once `Left`).
   */
  | { readonly _tag: "StopAllShards"; readonly reason: StopReason }
  /** Send a heartbeat now (`nextRequest`), without waiting for the interval. */
  | { readonly _tag: "SendHeartbeat" }
  /** The member learned the shard layout, or a newer one (producers route by it). */
  | { readonly _tag: "LayoutChanged"; readonly layout: ShardLayout }
  /** The coordinator rejected a request (INVALID_REQUEST); ownership unchanged. */
  | { readonly _tag: "RequestRejected"; readonly error: HeartbeatRejected }
  /** The member cannot keep a lease (fatal for `MarginTooLarge`: the member leaves). */
  | { readonly _tag: "LeaseUnusable"; readonly error: LeaseUnusable }
  /** A newer process took this member id; this one dropped everything and waits as a standby. */
  | { readonly _tag: "Superseded"; readonly error: MemberSuperseded }
  /** The member has left the group; the runtime may stop its heartbeat loop. */
  | { readonly _tag: "Left" }

// ---------------------------------------------------------------------------
// construction and views

const DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
const DEFAULT_BACKOFF_INITIAL_MS = 100
const DEFAULT_BACKOFF_MAX_MS = 5_000
const DEFAULT_LEAVE_TIMEOUT_MS = 30_000
/** Late answers in a row before `LeaseUnusable { reason: "AnswersTooSlow" }` is surfaced. */
export const LATE_ANSWERS_REPORTED = 3

/** How many outstanding requests' send times the member keeps (the runtime has one in flight). */
export const MAX_TRACKED_REQUESTS = 16

const isId = (v: unknown): boolean => typeof v === "string" && v.length > 0 && v.length <= 256
const isPositiveInt = (v: unknown): boolean => Number.isSafeInteger(v) && (v as number) >= 1

/**
 * Checks a member config; returns the first problem, naming the field, or
 * undefined. `make` throws it: bad config fails before anything is sent.
 */
export const validateConfig = (config: MemberConfig): InvalidMemberConfig | undefined => {
  const bad = (field: string, message: string) => new InvalidMemberConfig({ field, message })
  for (const field of ["group", "stream", "memberId"] as const)
    if (!isId(config[field]))
      return bad(field, `${field} must be a non-empty string of at most 256 characters`)
  if (!isPositiveInt(config.incarnation))
    return bad(
      "incarnation",
      `incarnation must be a positive safe integer, got ${config.incarnation}`,
    )
  const info = config.memberInfo
  if (info === undefined || !isId(info.consumerName))
    return bad(
      "memberInfo.consumerName",
      "memberInfo.consumerName must be a non-empty string of at most 256 characters",
    )
  const margin = config.safetyMarginMs
  if (margin !== undefined && !(Number.isFinite(margin) && margin >= 0))
    return bad("safetyMarginMs", `safetyMarginMs must be a finite number >= 0, got ${margin}`)
  for (const field of [
    "heartbeatIntervalMs",
    "retryBackoffInitialMs",
    "retryBackoffMaxMs",
    "leaveTimeoutMs",
  ] as const) {
    const v = config[field]
    if (v !== undefined && !isPositiveInt(v))
      return bad(field, `${field} must be a positive integer, got ${v}`)
  }
  const initial = config.retryBackoffInitialMs ?? DEFAULT_BACKOFF_INITIAL_MS
  const max = config.retryBackoffMaxMs ?? DEFAULT_BACKOFF_MAX_MS
  if (initial > max)
    return bad(
      "retryBackoffMaxMs",
      `retryBackoffMaxMs (${max}) must be at least retryBackoffInitialMs (${initial})`,
    )
  return undefined
}

/**
 * A new member about to join; its first heartbeat is due at `now`.
 *
 * @throws InvalidMemberConfig when `validateConfig` finds a problem.
 */
export const make = (config: MemberConfig, now: number): MemberState => {
  const invalid = validateConfig(config)
  if (invalid !== undefined) throw invalid
  return {
    config,
    lifecycle: "joining",
    memberEpoch: 0,
    assignmentEpoch: 0,
    metadataVersion: 0,
    layout: undefined,
    assigned: new Map(),
    pending: [],
    shards: new Map(),
    heartbeatIntervalMs: config.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS,
    sessionTimeoutMs: undefined,
    lastSuccessAt: now,
    sentAt: new Map(),
    nextHeartbeatAt: now,
    sendRequested: false,
    inFlightSeq: 0,
    sendAfterInFlight: false,
    failures: 0,
    lateAnswers: 0,
    nextSeq: 1,
    acceptFromSeq: 0,
    leaveSeq: 0,
    leaveDeadline: 0,
    leaveWhenStopped: false,
    lastRejection: undefined,
  }
}

/** A deep copy of the state (for snapshots, model tests and simulator forks). */
export const clone = (state: MemberState): MemberState => {
  const shards = new Map<number, ShardEntry>()
  for (const [shard, entry] of state.shards) shards.set(shard, { ...entry })
  return { ...state, assigned: new Map(state.assigned), sentAt: new Map(state.sentAt), shards }
}

export const phase = (state: MemberState): Phase => {
  switch (state.lifecycle) {
    case "active":
      for (const entry of state.shards.values())
        if (entry.status !== "reading") return "reconciling"
      return "stable"
    default:
      return state.lifecycle
  }
}

const isOwned = (status: ShardStatus) => status === "starting" || status === "reading"

/** Shards the member reads (or is starting to read), ascending. */
export const ownedShards = (state: MemberState): Array<number> => {
  const out: Array<number> = []
  for (const [shard, entry] of state.shards) if (isOwned(entry.status)) out.push(shard)
  return sortShards(out)
}

/** Shards the member is giving up, with REVOKING (draining) or REVOKED (drained), ascending. */
export const revokingShards = (state: MemberState): Array<RevokingShard> => {
  const out: Array<RevokingShard> = []
  for (const [shard, entry] of state.shards) {
    if (entry.status === "revoking") out.push({ shard, state: "REVOKING", token: entry.token })
    else if (entry.status === "revoked") out.push({ shard, state: "REVOKED", token: entry.token })
  }
  return sortByShard(out)
}

/** Owned shards the read loops found drained, with their tokens (docs/resharding.md). */
export const drainedShards = (state: MemberState): Array<{ shard: number; token: number }> => {
  const out: Array<{ shard: number; token: number }> = []
  for (const [shard, entry] of state.shards)
    if (entry.exhausted === true && isOwned(entry.status)) out.push({ shard, token: entry.token })
  return sortByShard(out)
}

/** The owner token the member currently uses for `shard`, if it owns it. */
export const tokenOf = (state: MemberState, shard: number): number | undefined => {
  const entry = state.shards.get(shard)
  return entry !== undefined && isOwned(entry.status) ? entry.token : undefined
}

/**
 * How long a NONE answer keeps the member's shards, from its request's send
 * time: the group's session timeout minus the safety margin (docs/protocol.md rule 6).
 * Undefined before the first answer (nothing can be owned then).
 */
export const leaseMs = (state: MemberState): number | undefined => {
  const session = state.sessionTimeoutMs
  if (session === undefined) return undefined
  return session - (state.config.safetyMarginMs ?? Math.floor(session / 5))
}

/** When the member's lease on its shards runs out (it suspends), if it has one. */
export const leaseExpiresAt = (state: MemberState): number | undefined => {
  const lease = leaseMs(state)
  return lease === undefined ? undefined : state.lastSuccessAt + lease
}

/** May the member still read and ack at `now`? (Shards are dropped once it is not.) */
export const leaseValid = (state: MemberState, now: number): boolean => {
  const until = leaseExpiresAt(state)
  return until !== undefined && now < until
}

/**
 * The next moment the machine needs a `Tick`: the next due heartbeat (unless
 * one is requested or in flight, or a fenced member still waits for its
 * loops to stop), the end of its lease (while it reads) and the leave
 * timeout. A runtime that sleeps until then never reads past its lease
 * (docs/protocol.md rule 6). Undefined once left.
 */
export const nextDeadline = (state: MemberState): number | undefined => {
  if (state.lifecycle === "left") return undefined
  let at = Number.POSITIVE_INFINITY
  if (!state.sendRequested && state.inFlightSeq === 0 && !waitingForStops(state))
    at = state.nextHeartbeatAt
  const expires = leaseExpiresAt(state)
  if (holdsLease(state) && expires !== undefined) at = Math.min(at, expires)
  if (state.lifecycle === "leaving" || state.leaveWhenStopped)
    at = Math.min(at, state.leaveDeadline)
  return at
}

// (each walk below first asks the size: a Map iterator is an allocation,
// and most members of a large group hold no shard; docs/simulator.md, Speed)
const draining = (state: MemberState): boolean => {
  if (state.shards.size === 0) return false
  for (const entry of state.shards.values()) if (entry.status !== "revoked") return true
  return false
}

/** Loops stopped by StopAllShards whose in-flight work has not ended yet. */
const stopping = (state: MemberState): boolean => {
  if (state.shards.size === 0) return false
  for (const entry of state.shards.values()) if (entry.status === "stopping") return true
  return false
}

/**
 * A fenced member joins again only once every stopped loop has ended: its
 * join releases the shards held for it (docs/protocol.md rule 19).
 */
const waitingForStops = (state: MemberState): boolean =>
  state.lifecycle === "fenced" && stopping(state)

/** The member acts on a lease: it reads, or is draining, a shard. */
const holdsLease = (state: MemberState): boolean => {
  if (state.lifecycle !== "active" && state.lifecycle !== "leaving") return false
  if (state.shards.size === 0) return false
  for (const entry of state.shards.values())
    if (entry.status !== "revoked" && entry.status !== "stopping") return true
  return false
}

/**
 * The heartbeat the member would send now (as request `seq`). Epoch 0 (join /
 * rejoin) is a full heartbeat carrying `memberInfo`; a leaving member still
 * draining says `leaving`, and once everything is drained sends epoch -1.
 */
export const buildRequest = (state: MemberState, seq = state.nextSeq): HeartbeatRequest => {
  const leaving = state.lifecycle === "leaving"
  if (leaving && !draining(state))
    return requestOf(state.config, seq, -1, state.assignmentEpoch, state.metadataVersion, [], [])
  // One walk over the member's shards builds all three lists (what
  // ownedShards, revokingShards and drainedShards return): every member
  // builds a request per heartbeat (docs/simulator.md, Speed).
  const owned: Array<number> = []
  const revoking: Array<RevokingShard> = []
  let drained: Array<{ shard: number; token: number }> | undefined
  let missing: Array<{ shard: number; token: number }> | undefined
  if (state.shards.size > 0) {
    for (const [shard, entry] of state.shards) {
      const status = entry.status
      if (isOwned(status)) {
        owned.push(shard)
        if (entry.exhausted === true) {
          if (drained === undefined) drained = []
          drained.push({ shard, token: entry.token })
        }
        if (entry.tokenMissing === entry.token) {
          if (missing === undefined) missing = []
          missing.push({ shard, token: entry.token })
        }
      } else if (status === "revoking")
        revoking.push({ shard, state: "REVOKING", token: entry.token })
      else if (status === "revoked") revoking.push({ shard, state: "REVOKED", token: entry.token })
    }
    sortShards(owned)
    sortByShard(revoking)
  }
  const request = requestOf(
    state.config,
    seq,
    state.memberEpoch,
    state.assignmentEpoch,
    state.metadataVersion,
    owned,
    revoking,
  )
  if (state.memberEpoch === 0) {
    request.memberInfo = state.config.memberInfo
    return request
  }
  if (drained !== undefined) request.drainedShards = sortByShard(drained)
  if (missing !== undefined) request.missingTokens = sortByShard(missing)
  if (leaving) request.leaving = true
  return request
}

type Mutable<A> = { -readonly [K in keyof A]: A[K] }

/**
 * A request's fixed fields, in the wire's field order, as plain literals: V8
 * (Node 20) builds `{ ...identity, more }` on a slow path, microseconds per
 * request, and every member builds one per heartbeat (docs/simulator.md,
 * Speed).
 */
const requestOf = (
  config: MemberConfig,
  seq: number,
  memberEpoch: number,
  assignmentEpoch: number,
  metadataVersion: number,
  owned: Array<number>,
  revoking: Array<RevokingShard>,
): Mutable<HeartbeatRequest> =>
  config.instance !== undefined
    ? {
        group: config.group,
        stream: config.stream,
        memberId: config.memberId,
        incarnation: config.incarnation,
        instance: config.instance,
        seq,
        memberEpoch,
        assignmentEpoch,
        metadataVersion,
        ownedShards: owned,
        revokingShards: revoking,
      }
    : {
        group: config.group,
        stream: config.stream,
        memberId: config.memberId,
        incarnation: config.incarnation,
        seq,
        memberEpoch,
        assignmentEpoch,
        metadataVersion,
        ownedShards: owned,
        revokingShards: revoking,
      }

/**
 * Take the next request to send: numbers it (`seq`, echoed back on
 * ResponseReceived / HeartbeatFailed), records its send time `now` (the lease
 * a NONE answer grants runs from it), marks REVOKED reports as sent, and
 * marks it in flight. Call it when the request is sent (on `SendHeartbeat`).
 */
export const nextRequest = (
  state: MemberState,
  now: number,
): { readonly seq: number; readonly request: HeartbeatRequest } => {
  const seq = state.nextSeq++
  const request = buildRequest(state, seq)
  state.sentAt.set(seq, now)
  // Keys are in seq order (insertion order): drop the oldest beyond the bound.
  if (state.sentAt.size > MAX_TRACKED_REQUESTS)
    for (const old of state.sentAt.keys()) {
      if (state.sentAt.size <= MAX_TRACKED_REQUESTS) break
      state.sentAt.delete(old)
    }
  if (state.shards.size > 0)
    for (const entry of state.shards.values())
      if (entry.status === "revoked" && entry.revokedReportedFromSeq === 0)
        entry.revokedReportedFromSeq = seq
  if (request.memberEpoch === -1 && state.leaveSeq === 0) state.leaveSeq = seq
  // Each join starts a lifecycle at the coordinator, which the next join
  // ends: the answer to an earlier join describes a lifecycle this one
  // replaces, and must not be applied (the simulator's finding F1).
  if (request.memberEpoch === 0) state.acceptFromSeq = seq
  state.sendRequested = false
  state.sendAfterInFlight = false
  state.inFlightSeq = seq
  // If nothing comes back, resend after an interval (the runtime's timeout
  // normally reports HeartbeatFailed sooner).
  state.nextHeartbeatAt = now + state.heartbeatIntervalMs
  return { seq, request }
}

// ---------------------------------------------------------------------------
// transitions

/** Apply one event; returns the commands to execute, in order. */
export const step = (state: MemberState, event: MemberEvent): Array<MemberCommand> => {
  const out: Array<MemberCommand> = []
  if (state.lifecycle === "left") return out
  switch (event._tag) {
    case "ResponseReceived": {
      const ended = endInFlight(state, event.seq)
      onResponse(state, event.seq, event.response, event.now, out)
      if (ended && state.sendAfterInFlight && !hasLeft(state)) requestSend(state, out)
      break
    }
    case "HeartbeatFailed":
      // The retry follows the backoff, whatever was wanted meanwhile.
      if (endInFlight(state, event.seq)) state.sendAfterInFlight = false
      // Only the newest request counts (docs/protocol.md rule 18).
      if (event.seq !== state.nextSeq - 1 || event.seq < state.acceptFromSeq) break
      backoff(state, event.now)
      loseLeaseIfDue(state, event.now, out)
      break
    case "ShardStarted": {
      const entry = state.shards.get(event.shard)
      if (entry !== undefined && entry.status === "starting") {
        entry.status = "reading"
        if (phase(state) === "stable") requestSend(state, out)
      }
      break
    }
    case "ShardDrained":
      onDrained(state, event.shard, out)
      break
    case "ShardExhausted": {
      const entry = state.shards.get(event.shard)
      if (entry !== undefined && isOwned(entry.status) && entry.exhausted !== true) {
        entry.exhausted = true
        // tell the coordinator now: shards of the next generation wait for it
        requestSend(state, out)
      }
      break
    }
    case "ShardTokenMissing": {
      const entry = state.shards.get(event.shard)
      // only about the grant the loop reads under (an older loop's report is stale)
      if (
        entry !== undefined &&
        isOwned(entry.status) &&
        entry.token === event.token &&
        entry.tokenMissing !== event.token
      ) {
        entry.tokenMissing = event.token
        // tell the coordinator now: the shard is stopped until it writes the token
        requestSend(state, out)
      }
      break
    }
    case "ShardTokenBack": {
      const entry = state.shards.get(event.shard)
      if (entry !== undefined) entry.tokenMissing = undefined
      break
    }
    case "Tick":
      loseLeaseIfDue(state, event.now, out)
      if (
        !hasLeft(state) &&
        (state.lifecycle === "leaving" || state.leaveWhenStopped) &&
        state.leaveDeadline > 0 &&
        event.now >= state.leaveDeadline
      )
        finishLeave(state, "leave-timeout", out)
      // (a lost lease or the leave timeout may have finished a leave)
      if (!hasLeft(state) && event.now >= state.nextHeartbeatAt) requestSend(state, out)
      break
    case "LeaveRequested":
      onLeave(state, event.now, out)
      break
    case "NoticeReceived":
      requestSend(state, out)
      break
  }
  return out
}

const hasLeft = (state: MemberState) => state.lifecycle === "left"

/** The request `seq` ended; true if it was the one in flight. */
const endInFlight = (state: MemberState, seq: number): boolean => {
  if (state.inFlightSeq !== seq) return false
  state.inFlightSeq = 0
  return true
}

const requestSend = (state: MemberState, out: Array<MemberCommand>) => {
  // a fenced member sends its join once its stopped loops have ended (onDrained)
  if (waitingForStops(state)) return
  if (state.inFlightSeq !== 0) {
    state.sendAfterInFlight = true
    return
  }
  if (state.sendRequested) return
  state.sendRequested = true
  out.push({ _tag: "SendHeartbeat" })
}

const backoffMaxMs = (state: MemberState) =>
  state.config.retryBackoffMaxMs ?? DEFAULT_BACKOFF_MAX_MS

const backoff = (state: MemberState, now: number) => {
  state.failures++
  const initial = state.config.retryBackoffInitialMs ?? DEFAULT_BACKOFF_INITIAL_MS
  const delay = Math.min(backoffMaxMs(state), initial * 2 ** Math.min(state.failures - 1, 30))
  state.nextHeartbeatAt = now + delay
}

const isFenceCode = (code: HeartbeatResponse["errorCode"]) =>
  code === "UNKNOWN_MEMBER_ID" || code === "FENCED_MEMBER_EPOCH" || code === "FENCED_INSTANCE_ID"

/**
 * Only the answer to the newest request sent is applied (docs/protocol.md
 * rule 18): it was computed after every answer applied before it had
 * arrived, so it is never older than one already applied. An answer to an
 * earlier request (a duplicate, or one that arrived after its timeout and a
 * resend) may have been computed before or after the newest one's: it is
 * dropped. Older-than-applied epochs are stale too (belt and braces).
 */
const isStale = (state: MemberState, seq: number, response: HeartbeatResponse): boolean => {
  if (seq < state.acceptFromSeq || seq !== state.nextSeq - 1) return true
  if (response.errorCode !== "NONE") return false
  if (response.memberEpoch < state.memberEpoch) return true
  return (
    response.memberEpoch === state.memberEpoch && response.assignmentEpoch < state.assignmentEpoch
  )
}

const onResponse = (
  state: MemberState,
  seq: number,
  response: HeartbeatResponse,
  now: number,
  out: Array<MemberCommand>,
) => {
  if (state.lifecycle === "leaving" && state.leaveSeq !== 0 && seq >= state.leaveSeq) {
    // The answer to our epoch -1 heartbeat (its epochs are -1 by design).
    if (response.errorCode === "NONE" || isFenceCode(response.errorCode))
      return finishLeave(state, "left", out)
  }
  if (isStale(state, seq, response)) return
  // Every answer carries the group's timing; the lease derives from it.
  state.sessionTimeoutMs = response.sessionTimeoutMs
  switch (response.errorCode) {
    case "NONE": {
      const lease = leaseMs(state)!
      if (lease <= response.heartbeatIntervalMs && state.lifecycle !== "leaving") {
        // Fatal misconfiguration: every lease would lapse between two heartbeats.
        out.push({
          _tag: "LeaseUnusable",
          error: new LeaseUnusable({
            memberId: state.config.memberId,
            reason: "MarginTooLarge",
            message: `the group's sessionTimeoutMs ${response.sessionTimeoutMs} minus safetyMarginMs ${response.sessionTimeoutMs - lease} leaves ${lease} ms, not more than the heartbeat interval ${response.heartbeatIntervalMs} ms`,
          }),
        })
        // We are registered now (answered NONE): leave, so our grants are freed at once.
        return beginLeave(
          state,
          now + (state.config.leaveTimeoutMs ?? state.sessionTimeoutMs ?? DEFAULT_LEAVE_TIMEOUT_MS),
          out,
        )
      }
      // The lease this answer grants runs from the request's send time. If it
      // has already run out (a late answer, e.g. after a pause), or the send
      // time is unknown, the coordinator may have expired us: handle it as a
      // lost response (backoff, self-fence if due), never as an assignment.
      const sentAt = state.sentAt.get(seq)
      if (sentAt === undefined || now - sentAt >= lease) {
        state.lateAnswers++
        if (state.lateAnswers === LATE_ANSWERS_REPORTED)
          out.push({
            _tag: "LeaseUnusable",
            error: new LeaseUnusable({
              memberId: state.config.memberId,
              reason: "AnswersTooSlow",
              message: `${state.lateAnswers} answers in a row arrived after the ${lease} ms lease they would grant`,
            }),
          })
        backoff(state, now)
        return loseLeaseIfDue(state, now, out)
      }
      return applyAssignment(state, seq, sentAt, response, now, out)
    }
    case "UNKNOWN_MEMBER_ID":
    case "FENCED_MEMBER_EPOCH":
      if (leaveAsked(state)) return finishLeave(state, "left", out)
      return fence(
        state,
        response.errorCode === "FENCED_MEMBER_EPOCH" ? "fenced" : "unknown-member",
        out,
      )
    case "FENCED_INSTANCE_ID":
      if (leaveAsked(state)) return finishLeave(state, "left", out)
      return supersede(state, response, now, out)
    case "NOT_COORDINATOR":
    case "COORDINATOR_LOAD_IN_PROGRESS":
      backoff(state, now)
      return loseLeaseIfDue(state, now, out)
    case "INVALID_REQUEST": {
      const error = new HeartbeatRejected({
        memberId: state.config.memberId,
        errorCode: response.errorCode,
        message: response.errorMessage ?? "the coordinator rejected the heartbeat",
      })
      state.lastRejection = error
      out.push({ _tag: "RequestRejected", error })
      backoff(state, now)
      return loseLeaseIfDue(state, now, out)
    }
  }
}

/**
 * Leaving, or a leave waiting for stopped loops (rule 19). A fence answer
 * then ends the leave: the coordinator no longer knows this member, so there
 * is nothing left to give back (a join sent out of turn, answered fenced,
 * must not turn the leave into another rejoin).
 */
const leaveAsked = (state: MemberState): boolean =>
  state.lifecycle === "leaving" || state.leaveWhenStopped

const applyAssignment = (
  state: MemberState,
  seq: number,
  sentAt: number,
  response: HeartbeatResponse,
  now: number,
  out: Array<MemberCommand>,
) => {
  state.acceptFromSeq = seq
  // (`seq` is in sentAt: with one entry there is nothing older to drop)
  if (state.sentAt.size > 1)
    for (const older of state.sentAt.keys()) if (older < seq) state.sentAt.delete(older)
  state.memberEpoch = response.memberEpoch
  state.assignmentEpoch = response.assignmentEpoch
  state.heartbeatIntervalMs = response.heartbeatIntervalMs
  state.lastSuccessAt = Math.max(state.lastSuccessAt, sentAt)
  state.failures = 0
  state.lateAnswers = 0
  state.nextHeartbeatAt = now + response.heartbeatIntervalMs
  // a first answer, a rejoin, or a fresh lease after a suspension (rule 22)
  if (
    state.lifecycle === "joining" ||
    state.lifecycle === "fenced" ||
    state.lifecycle === "suspended"
  ) {
    state.lifecycle = "active"
    // A leave asked while fenced waits for the stopped loops (rule 19) and
    // the machine asks for no request meanwhile; a join answered all the
    // same (one sent out of turn) starts no shard: the leave begins now
    if (state.leaveWhenStopped) beginLeave(state, state.leaveDeadline, out)
  }

  const layout = response.layout
  if (
    layout !== undefined &&
    (state.layout === undefined || layout.generation > state.metadataVersion)
  ) {
    state.layout = layout
    state.metadataVersion = layout.generation
    out.push({ _tag: "LayoutChanged", layout })
  }

  // The last accepted assignment. A shard both assigned and pending is treated
  // as pending: never read a shard the coordinator has not cleared.
  // (Map.clear allocates a fresh table even when the map is empty)
  if (state.assigned.size > 0) state.assigned.clear()
  for (const grant of response.assigned) {
    const previous = state.assigned.get(grant.shard)
    if (previous === undefined || grant.token > previous)
      state.assigned.set(grant.shard, grant.token)
  }
  for (const shard of response.pending) state.assigned.delete(shard)
  state.pending = response.pending

  const leaving = state.lifecycle === "leaving"
  for (const [shard, entry] of state.shards) {
    const token = state.assigned.get(shard)
    switch (entry.status) {
      case "starting":
      case "reading":
        // No longer assigned, or re-granted under a different token: stop, drain,
        // (restart on drain if still assigned).
        if (token === undefined || token !== entry.token) {
          entry.status = "revoking"
          out.push({ _tag: "StopShard", shard })
        }
        break
      case "revoked":
        if (entry.revokedReportedFromSeq !== 0 && entry.revokedReportedFromSeq <= seq) {
          // This response answers a request that carried REVOKED: accepted.
          state.shards.delete(shard)
        } else if (token !== undefined && !leaving) {
          state.shards.delete(shard)
        }
        break
      case "revoking":
      case "stopping":
        // restarted (or reported REVOKED) once its loop has ended: onDrained
        break
    }
  }
  if (!leaving) {
    for (const [shard, token] of state.assigned) {
      if (state.shards.has(shard)) continue
      state.shards.set(shard, { status: "starting", token, revokedReportedFromSeq: 0 })
      out.push({ _tag: "StartShard", shard, token })
    }
  }
  // Grants being revoked from us that we do not hold (docs/protocol.md rule
  // 17): the answer that granted one was lost, so we never read under it.
  // Report it REVOKED now; its revocation would otherwise wait for a report
  // that never comes and fence us. A later arrival of that lost answer is
  // older than this one, so it is stale (isStale) and never starts the shard.
  // A shard we hold, under any grant, is reported by its own revoke.
  let unheld = false
  for (const grant of response.revoking ?? []) {
    if (state.shards.has(grant.shard) || state.assigned.has(grant.shard)) continue
    state.shards.set(grant.shard, {
      status: "revoked",
      token: grant.token,
      revokedReportedFromSeq: 0,
    })
    unheld = true
  }
  if (unheld) requestSend(state, out)
  if (leaving && !draining(state)) {
    // Everything drained and acknowledged: send the epoch -1.
    requestSend(state, out)
  }
}

const onDrained = (state: MemberState, shard: number, out: Array<MemberCommand>) => {
  const entry = state.shards.get(shard)
  if (entry === undefined) return
  if (entry.status === "stopping") return onStopped(state, shard, entry, out)
  if (entry.status !== "revoking") return
  const token = state.assigned.get(shard)
  if (token !== undefined && state.lifecycle === "active") {
    // Given back (or re-granted with a new token) while draining: read again.
    entry.status = "starting"
    entry.token = token
    entry.exhausted = false
    out.push({ _tag: "StartShard", shard, token })
    return
  }
  entry.status = "revoked"
  entry.revokedReportedFromSeq = 0
  // Report REVOKED now: the next owner is waiting for it.
  requestSend(state, out)
}

/**
 * A loop stopped by StopAllShards has ended. Active again (the lease came
 * back) and still assigned: read it again; active but no longer assigned
 * (revoked meanwhile): report it REVOKED. Otherwise forget it; a fenced
 * member whose last loop ended may now join again.
 */
const onStopped = (
  state: MemberState,
  shard: number,
  entry: ShardEntry,
  out: Array<MemberCommand>,
) => {
  const token = state.assigned.get(shard)
  if (state.lifecycle === "active" && token !== undefined) {
    entry.status = "starting"
    entry.token = token
    entry.exhausted = false
    out.push({ _tag: "StartShard", shard, token })
    return
  }
  if (state.lifecycle === "active") {
    entry.status = "revoked"
    entry.revokedReportedFromSeq = 0
    requestSend(state, out)
    return
  }
  state.shards.delete(shard)
  if (state.lifecycle === "fenced" && !stopping(state)) {
    // the last stopped loop ended: a leave asked meanwhile begins now
    if (state.leaveWhenStopped) return beginLeave(state, state.leaveDeadline, out)
    requestSend(state, out)
  }
  if (state.lifecycle === "leaving" && !draining(state)) requestSend(state, out)
}

/**
 * Stop every loop; keep each one that had work as `stopping` until
 * ShardDrained. A suspended member keeps its REVOKED reports (same
 * lifecycle); any other stop ends the lifecycle they belong to.
 */
const stopAll = (state: MemberState, reason: StopReason, out: Array<MemberCommand>) => {
  out.push({ _tag: "StopAllShards", reason })
  for (const [shard, entry] of state.shards) {
    if (entry.status === "revoked") {
      if (reason !== "lease-lost") state.shards.delete(shard)
    } else {
      entry.status = "stopping"
      entry.exhausted = false
    }
  }
}

const dropOwnership = (state: MemberState, reason: StopReason, out: Array<MemberCommand>) => {
  stopAll(state, reason, out)
  state.assigned.clear()
  state.pending = []
  state.memberEpoch = 0
  state.assignmentEpoch = 0
  // Whatever is still in flight was sent under the old identity.
  state.acceptFromSeq = state.nextSeq
  state.sentAt.clear()
  state.inFlightSeq = 0
  state.sendAfterInFlight = false
}

/**
 * UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: drop everything, rejoin with epoch
 * 0 once every stopped loop has ended.
 */
const fence = (state: MemberState, reason: StopReason, out: Array<MemberCommand>) => {
  dropOwnership(state, reason, out)
  state.lifecycle = "fenced"
  state.failures = 0
  state.sendRequested = false
  requestSend(state, out)
}

/**
 * FENCED_INSTANCE_ID: a newer process holds this member id (docs/protocol.md rule 9). Drop
 * everything and stay a standby: rejoin only at the slowest retry pace, so
 * this process takes over once the newer one is gone (expired or left).
 */
const supersede = (
  state: MemberState,
  response: HeartbeatResponse,
  now: number,
  out: Array<MemberCommand>,
) => {
  const wasActive = state.lifecycle !== "fenced" || state.shards.size > 0
  dropOwnership(state, "superseded", out)
  state.lifecycle = "fenced"
  state.sendRequested = false
  state.failures = 0
  // A process that held shards joins once at once when its loops have
  // stopped: the join proves it stopped, so the coordinator releases the
  // shards it holds for it (docs/protocol.md rule 19); then the slowest pace.
  state.nextHeartbeatAt = wasActive ? now : now + backoffMaxMs(state)
  if (wasActive)
    out.push({
      _tag: "Superseded",
      error: new MemberSuperseded({
        memberId: state.config.memberId,
        incarnation: state.config.incarnation,
        message: response.errorMessage ?? "a newer process joined with this member id",
      }),
    })
}

/**
 * The lease ran out (no answer granted one in time): stop every loop, but
 * keep the epoch (docs/protocol.md rule 22). The next answer that grants a
 * fresh lease resumes the member; a coordinator that expired it says
 * UNKNOWN_MEMBER_ID and it rejoins. Heartbeats continue with the backoff.
 */
const loseLeaseIfDue = (state: MemberState, now: number, out: Array<MemberCommand>) => {
  if (!holdsLease(state)) return
  const until = leaseExpiresAt(state)
  if (until === undefined || now < until) return
  if (state.lifecycle === "leaving") {
    // The coordinator is expiring us anyway: the leave is complete.
    return finishLeave(state, "left", out)
  }
  stopAll(state, "lease-lost", out)
  state.assigned.clear()
  state.pending = []
  state.lifecycle = "suspended"
}

const onLeave = (state: MemberState, now: number, out: Array<MemberCommand>) => {
  if (state.lifecycle === "leaving") return
  if (state.lifecycle === "joining" && state.inFlightSeq === 0 && state.sentAt.size === 0) {
    // Never sent a join: nothing to give back.
    return finishLeave(state, "left", out)
  }
  const deadline =
    now + (state.config.leaveTimeoutMs ?? state.sessionTimeoutMs ?? DEFAULT_LEAVE_TIMEOUT_MS)
  if (waitingForStops(state)) {
    // Fenced, with stopped loops still running (a handler past its abort):
    // any request now would carry epoch 0, a join, which tells the
    // coordinator this process stopped, and it releases the shards it holds
    // for us (rule 19) while a handler still runs on one. The leave waits
    // for the loops, as the join does (issue 34, swarm seed 7060).
    state.leaveWhenStopped = true
    state.leaveDeadline = deadline
    return
  }
  beginLeave(state, deadline, out)
}

/** Stop reading everything and tell the coordinator; epoch -1 follows once drained. */
const beginLeave = (state: MemberState, deadline: number, out: Array<MemberCommand>) => {
  state.lifecycle = "leaving"
  state.leaveWhenStopped = false
  state.leaveDeadline = deadline
  for (const [shard, entry] of state.shards) {
    if (isOwned(entry.status)) {
      entry.status = "revoking"
      out.push({ _tag: "StopShard", shard })
    }
  }
  // Tell the coordinator at once: its shards move as each is drained (docs/protocol.md rule 11).
  requestSend(state, out)
}

const finishLeave = (state: MemberState, reason: StopReason, out: Array<MemberCommand>) => {
  dropOwnership(state, reason, out)
  state.lifecycle = "left"
  state.leaveDeadline = 0
  state.leaveWhenStopped = false
  out.push({ _tag: "Left" })
}
