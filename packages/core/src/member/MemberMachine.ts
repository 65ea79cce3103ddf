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
 *     │                │
 *     │   UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, self-fence (from any active phase)
 *     │                ▼
 *     │             fenced ──NONE (rejoin, epoch 0 full heartbeat)──▶ stable / reconciling
 *     │
 *  any active phase ──leave──▶ leaving ──drained, epoch -1 answered──▶ left
 * ```
 */
import { HeartbeatRejected } from "../Errors.js"
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
  /** This process start of the member id (see `Incarnation` in protocol/Heartbeat.ts). */
  readonly incarnation: number
  readonly memberInfo: MemberInfo
  /** The group's session timeout: the coordinator expires a member silent for this long. */
  readonly sessionTimeoutMs: number
  /** Self-fence this long before the session timeout would expire the member. */
  readonly safetyMarginMs: number
  /** Heartbeat interval until the coordinator sends one (default 3000). */
  readonly heartbeatIntervalMs?: number
  /** First retry delay after a failed heartbeat (default 100); doubles per failure. */
  readonly retryBackoffInitialMs?: number
  /** Cap of the retry delay (default 5000). */
  readonly retryBackoffMaxMs?: number
}

/** What the member's lifecycle is; `phase` refines `active` into stable / reconciling. */
export type Lifecycle = "joining" | "active" | "fenced" | "leaving" | "left"

export type Phase = "joining" | "stable" | "reconciling" | "fenced" | "leaving" | "left"

/**
 * Local status of one shard:
 * - `starting`: StartShard issued, read loop not yet confirmed (counts as owned)
 * - `reading`:  read loop running (owned)
 * - `revoking`: StopShard issued, in-flight work draining (reported REVOKING)
 * - `revoked`:  drained; reported REVOKED until the coordinator accepts it
 */
export type ShardStatus = "starting" | "reading" | "revoking" | "revoked"

export interface ShardEntry {
  status: ShardStatus
  token: number
  /** Sequence number of the first request that reported this shard REVOKED. */
  revokedReportedFromSeq: number
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
  /** Consecutive failed heartbeats (drives the backoff). */
  failures: number
  /** Sequence number the next request gets. */
  nextSeq: number
  /** Responses to requests with a lower sequence number are stale and ignored. */
  acceptFromSeq: number
  /** Sequence number of the first epoch -1 request, while leaving. */
  leaveSeq: number
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
  /** Time passes: due heartbeats and self-fencing. */
  | { readonly _tag: "Tick"; readonly now: number }
  | { readonly _tag: "LeaveRequested"; readonly now: number }
  /** The coordinator pushed a "look again" notice. */
  | { readonly _tag: "NoticeReceived" }

export type StopReason = "fenced" | "unknown-member" | "self-fence" | "left"

export type MemberCommand =
  /** Start the (single) read loop of `shard`, reading and acking with `token`. */
  | { readonly _tag: "StartShard"; readonly shard: number; readonly token: number }
  /** Stop new reads of `shard`, let in-flight work finish, then report ShardDrained. */
  | { readonly _tag: "StopShard"; readonly shard: number }
  /** Stop every read loop now and stop acking: ownership is gone. No ShardDrained expected. */
  | { readonly _tag: "StopAllShards"; readonly reason: StopReason }
  /** Send a heartbeat now (`nextRequest`), without waiting for the interval. */
  | { readonly _tag: "SendHeartbeat" }
  /** The response carried a newer shard layout (producers route by it). */
  | { readonly _tag: "LayoutChanged"; readonly layout: ShardLayout }
  /** The coordinator rejected a request (INVALID_REQUEST); ownership unchanged. */
  | { readonly _tag: "RequestRejected"; readonly error: HeartbeatRejected }
  /** The member has left the group; the runtime may stop its heartbeat loop. */
  | { readonly _tag: "Left" }

// ---------------------------------------------------------------------------
// construction and views

const DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
const DEFAULT_BACKOFF_INITIAL_MS = 100
const DEFAULT_BACKOFF_MAX_MS = 5_000

/** How many outstanding requests' send times the member keeps (the runtime has one in flight). */
export const MAX_TRACKED_REQUESTS = 16

/** A new member about to join; its first heartbeat is due at `now`. */
export const make = (config: MemberConfig, now: number): MemberState => ({
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
  lastSuccessAt: now,
  sentAt: new Map(),
  nextHeartbeatAt: now,
  sendRequested: false,
  failures: 0,
  nextSeq: 1,
  acceptFromSeq: 0,
  leaveSeq: 0,
  lastRejection: undefined,
})

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
  return out.sort(byNumber)
}

/** Shards the member is giving up, with REVOKING (draining) or REVOKED (drained), ascending. */
export const revokingShards = (state: MemberState): Array<RevokingShard> => {
  const out: Array<RevokingShard> = []
  for (const [shard, entry] of state.shards) {
    if (entry.status === "revoking") out.push({ shard, state: "REVOKING" })
    else if (entry.status === "revoked") out.push({ shard, state: "REVOKED" })
  }
  return out.sort((a, b) => a.shard - b.shard)
}

/** The owner token the member currently uses for `shard`, if it owns it. */
export const tokenOf = (state: MemberState, shard: number): number | undefined => {
  const entry = state.shards.get(shard)
  return entry !== undefined && isOwned(entry.status) ? entry.token : undefined
}

const byNumber = (a: number, b: number) => a - b

const draining = (state: MemberState): boolean => {
  for (const entry of state.shards.values()) if (entry.status !== "revoked") return true
  return false
}

/**
 * The heartbeat the member would send now. Epoch 0 (join / rejoin) is a full
 * heartbeat carrying `memberInfo`; a leaving member that has drained
 * everything sends epoch -1 with nothing owned.
 */
export const buildRequest = (state: MemberState, seq = state.nextSeq): HeartbeatRequest => {
  const { config } = state
  const identity = {
    group: config.group,
    stream: config.stream,
    memberId: config.memberId,
    incarnation: config.incarnation,
    seq,
  }
  if (state.lifecycle === "leaving" && !draining(state)) {
    return {
      ...identity,
      memberEpoch: -1,
      assignmentEpoch: state.assignmentEpoch,
      metadataVersion: state.metadataVersion,
      ownedShards: [],
      revokingShards: [],
    }
  }
  const base = {
    ...identity,
    memberEpoch: state.memberEpoch,
    assignmentEpoch: state.assignmentEpoch,
    metadataVersion: state.metadataVersion,
    ownedShards: ownedShards(state),
    revokingShards: revokingShards(state),
  }
  return state.memberEpoch === 0 ? { ...base, memberInfo: config.memberInfo } : base
}

/**
 * Take the next request to send: numbers it (`seq`, echoed back on
 * ResponseReceived / HeartbeatFailed), records its send time `now` (the lease
 * a NONE answer grants runs from it), marks REVOKED reports as sent, and
 * clears the outstanding SendHeartbeat. Call it when the request is sent.
 */
export const nextRequest = (
  state: MemberState,
  now: number,
): { readonly seq: number; readonly request: HeartbeatRequest } => {
  const seq = state.nextSeq++
  const request = buildRequest(state, seq)
  state.sentAt.set(seq, now)
  // Keys are in seq order (insertion order): drop the oldest beyond the bound.
  for (const old of state.sentAt.keys()) {
    if (state.sentAt.size <= MAX_TRACKED_REQUESTS) break
    state.sentAt.delete(old)
  }
  for (const entry of state.shards.values())
    if (entry.status === "revoked" && entry.revokedReportedFromSeq === 0)
      entry.revokedReportedFromSeq = seq
  if (request.memberEpoch === -1 && state.leaveSeq === 0) state.leaveSeq = seq
  state.sendRequested = false
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
    case "ResponseReceived":
      onResponse(state, event.seq, event.response, event.now, out)
      break
    case "HeartbeatFailed":
      // A failure of a request older than an applied response changes nothing.
      if (event.seq < state.acceptFromSeq) break
      backoff(state, event.now)
      selfFenceIfDue(state, event.now, out)
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
    case "Tick":
      selfFenceIfDue(state, event.now, out)
      // (self-fencing may have finished a leave)
      if (!hasLeft(state) && event.now >= state.nextHeartbeatAt) requestSend(state, out)
      break
    case "LeaveRequested":
      onLeave(state, out)
      break
    case "NoticeReceived":
      requestSend(state, out)
      break
  }
  return out
}

const hasLeft = (state: MemberState) => state.lifecycle === "left"

const requestSend = (state: MemberState, out: Array<MemberCommand>) => {
  if (state.sendRequested) return
  state.sendRequested = true
  out.push({ _tag: "SendHeartbeat" })
}

const backoff = (state: MemberState, now: number) => {
  state.failures++
  const initial = state.config.retryBackoffInitialMs ?? DEFAULT_BACKOFF_INITIAL_MS
  const max = state.config.retryBackoffMaxMs ?? DEFAULT_BACKOFF_MAX_MS
  const delay = Math.min(max, initial * 2 ** Math.min(state.failures - 1, 30))
  state.nextHeartbeatAt = now + delay
}

const isFenceCode = (code: HeartbeatResponse["errorCode"]) =>
  code === "UNKNOWN_MEMBER_ID" || code === "FENCED_MEMBER_EPOCH"

/** Older-than-applied responses must not resurrect ownership. */
const isStale = (state: MemberState, seq: number, response: HeartbeatResponse): boolean => {
  if (seq < state.acceptFromSeq) return true
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
      return finishLeave(state, out)
  }
  if (isStale(state, seq, response)) return
  switch (response.errorCode) {
    case "NONE": {
      // The lease this answer grants runs from the request's send time. If it
      // has already run out (a late answer, e.g. after a pause), or the send
      // time is unknown, the coordinator may have expired us: handle it as a
      // lost response (backoff, self-fence if due), never as an assignment.
      const sentAt = state.sentAt.get(seq)
      if (sentAt === undefined || now - sentAt >= leaseMs(state)) {
        backoff(state, now)
        return selfFenceIfDue(state, now, out)
      }
      return applyAssignment(state, seq, sentAt, response, now, out)
    }
    case "UNKNOWN_MEMBER_ID":
    case "FENCED_MEMBER_EPOCH":
      if (state.lifecycle === "leaving") return finishLeave(state, out)
      return fence(
        state,
        response.errorCode === "FENCED_MEMBER_EPOCH" ? "fenced" : "unknown-member",
        out,
      )
    case "NOT_COORDINATOR":
    case "COORDINATOR_LOAD_IN_PROGRESS":
      backoff(state, now)
      return selfFenceIfDue(state, now, out)
    case "INVALID_REQUEST": {
      const error = new HeartbeatRejected({
        memberId: state.config.memberId,
        errorCode: response.errorCode,
        message: response.errorMessage ?? "the coordinator rejected the heartbeat",
      })
      state.lastRejection = error
      out.push({ _tag: "RequestRejected", error })
      backoff(state, now)
      return selfFenceIfDue(state, now, out)
    }
  }
}

const applyAssignment = (
  state: MemberState,
  seq: number,
  sentAt: number,
  response: HeartbeatResponse,
  now: number,
  out: Array<MemberCommand>,
) => {
  state.acceptFromSeq = seq
  for (const older of state.sentAt.keys()) if (older < seq) state.sentAt.delete(older)
  state.memberEpoch = response.memberEpoch
  state.assignmentEpoch = response.assignmentEpoch
  state.heartbeatIntervalMs = response.heartbeatIntervalMs
  state.lastSuccessAt = Math.max(state.lastSuccessAt, sentAt)
  state.failures = 0
  state.nextHeartbeatAt = now + response.heartbeatIntervalMs
  if (state.lifecycle === "joining" || state.lifecycle === "fenced") state.lifecycle = "active"

  const layout = response.layout
  if (layout !== undefined && layout.generation > state.metadataVersion) {
    state.layout = layout
    state.metadataVersion = layout.generation
    out.push({ _tag: "LayoutChanged", layout })
  } else if (layout !== undefined && state.layout === undefined) {
    state.layout = layout
  }

  // The last accepted assignment. A shard both assigned and pending is treated
  // as pending: never read a shard the coordinator has not cleared.
  state.assigned.clear()
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
}

const onDrained = (state: MemberState, shard: number, out: Array<MemberCommand>) => {
  const entry = state.shards.get(shard)
  if (entry === undefined || entry.status !== "revoking") return
  const token = state.assigned.get(shard)
  if (token !== undefined && state.lifecycle === "active") {
    // Given back (or re-granted with a new token) while draining: read again.
    entry.status = "starting"
    entry.token = token
    out.push({ _tag: "StartShard", shard, token })
    return
  }
  entry.status = "revoked"
  entry.revokedReportedFromSeq = 0
  // Report REVOKED now: the next owner is waiting for it.
  requestSend(state, out)
}

const dropOwnership = (state: MemberState, reason: StopReason, out: Array<MemberCommand>) => {
  out.push({ _tag: "StopAllShards", reason })
  state.shards.clear()
  state.assigned.clear()
  state.pending = []
  state.memberEpoch = 0
  state.assignmentEpoch = 0
  // Whatever is still in flight was sent under the old identity.
  state.acceptFromSeq = state.nextSeq
  state.sentAt.clear()
}

/** UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH / self-fence: drop everything, rejoin with epoch 0. */
const fence = (state: MemberState, reason: StopReason, out: Array<MemberCommand>) => {
  dropOwnership(state, reason, out)
  state.lifecycle = "fenced"
  state.failures = 0
  state.sendRequested = false
  requestSend(state, out)
}

/** How long a NONE answer keeps the member's shards: sessionTimeout − safetyMargin from its send. */
const leaseMs = (state: MemberState) => state.config.sessionTimeoutMs - state.config.safetyMarginMs

const selfFenceIfDue = (state: MemberState, now: number, out: Array<MemberCommand>) => {
  if (state.shards.size === 0) return
  if (now - state.lastSuccessAt < leaseMs(state)) return
  if (state.lifecycle === "leaving") {
    // The coordinator is expiring us anyway: the leave is complete.
    return finishLeave(state, out)
  }
  fence(state, "self-fence", out)
  // Rejoin once a heartbeat is due; retries continue with backoff.
  state.nextHeartbeatAt = now
}

const onLeave = (state: MemberState, out: Array<MemberCommand>) => {
  if (state.lifecycle === "leaving") return
  state.lifecycle = "leaving"
  for (const [shard, entry] of state.shards) {
    if (isOwned(entry.status)) {
      entry.status = "revoking"
      out.push({ _tag: "StopShard", shard })
    }
  }
  // Revoked shards need no more reports: epoch -1 gives everything back.
  for (const [shard, entry] of state.shards)
    if (entry.status === "revoked") state.shards.delete(shard)
  if (!draining(state)) requestSend(state, out)
}

const finishLeave = (state: MemberState, out: Array<MemberCommand>) => {
  dropOwnership(state, "left", out)
  state.lifecycle = "left"
  out.push({ _tag: "Left" })
}
