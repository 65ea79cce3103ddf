/**
 * Health (docs/runtime.md, "Health"): is the runtime live (its heartbeat
 * loops make progress) and ready (every member joined, and a coordinator
 * answers it)? `runtime.health()` answers from what the members already
 * keep, without I/O; the HTTP endpoint (src/HealthServer.ts) serves it to
 * Kubernetes probes as `/livez` and `/readyz`.
 *
 * - Live: a member's last heartbeat ended (answered, refused or timed out)
 *   within its liveness bound, the larger of its session timeout and twice
 *   (heartbeat interval + heartbeat timeout). A working loop ends one at
 *   least every interval + timeout (retries are at most an interval apart);
 *   one that has not for longer is stuck (a blocked event loop, a fenced
 *   member waiting for a handler that ignores its signal) and a restart is
 *   the cure. A coordinator that does not answer does not make a member
 *   unlive: restarting the pod would not bring it back.
 * - Ready: live, joined (its lifecycle is active: stable or reconciling, not
 *   joining, suspended, fenced or leaving), and no `coordinatorUnavailable`
 *   period is open for it (no coordinator answered it for longer than twice
 *   the coordinator lease, docs/protocol.md rule 25).
 * - A stopping runtime is live but not ready (it drains within
 *   `shutdownTimeoutMs`; a liveness failure then would only cut the drain
 *   short); a stopped one is neither. A runtime without members is both
 *   while it runs.
 *
 * @example
 * const health = runtime.health()
 * if (!health.ready) console.log(health.details.flatMap((m) => m.reasons))
 */
import type { MemberMachine } from "@shardline/core"

/** One logical member's health. */
export interface MemberHealth {
  readonly memberId: string
  readonly stream: string
  readonly group: string
  readonly phase: MemberMachine.Phase
  /** Its heartbeat loop made progress within `livenessBoundMs`. */
  readonly live: boolean
  /** Live, joined, and a coordinator answers it. */
  readonly ready: boolean
  /** Since its last heartbeat ended, answered or not (ms; since its start before the first). */
  readonly sinceHeartbeatMs: number
  /** Past this long without a heartbeat ending, the member is not live (ms). */
  readonly livenessBoundMs: number
  /** No coordinator has answered it for this long (ms), past twice the coordinator lease; else undefined. */
  readonly coordinatorUnavailableForMs: number | undefined
  /** Why it is not live or not ready, in words; empty when it is both. */
  readonly reasons: ReadonlyArray<string>
}

/** Where the runtime is in its life: `stop()` makes it `stopping`, then `stopped`. */
export type RuntimeState = "running" | "stopping" | "stopped"

/** The runtime's health: `live` and `ready` hold for every member. */
export interface Health {
  readonly live: boolean
  readonly ready: boolean
  readonly state: RuntimeState
  readonly details: ReadonlyArray<MemberHealth>
}

/** What one member's health is computed from (monotonic ms). */
export interface MemberHealthInput {
  readonly memberId: string
  readonly stream: string
  readonly group: string
  readonly phase: MemberMachine.Phase
  readonly left: boolean
  readonly heartbeatEndedAt: number
  readonly coordinatorUnavailableSince: number | undefined
  readonly sessionTimeoutMs: number
  readonly heartbeatIntervalMs: number
  readonly heartbeatTimeoutMs: number
}

/** The liveness bound of a member with these settings (see the module doc). */
export const livenessBoundMs = (settings: {
  readonly sessionTimeoutMs: number
  readonly heartbeatIntervalMs: number
  readonly heartbeatTimeoutMs: number
}): number =>
  Math.max(
    settings.sessionTimeoutMs,
    2 * (settings.heartbeatIntervalMs + settings.heartbeatTimeoutMs),
  )

const joinedPhases: ReadonlySet<MemberMachine.Phase> = new Set(["stable", "reconciling"])

/** One member's health at `now` (monotonic ms). */
export const memberHealth = (
  m: MemberHealthInput,
  now: number,
  state: RuntimeState,
): MemberHealth => {
  const bound = livenessBoundMs(m)
  const since = Math.max(0, now - m.heartbeatEndedAt)
  const unavailableFor =
    m.coordinatorUnavailableSince === undefined
      ? undefined
      : Math.max(0, now - m.coordinatorUnavailableSince)
  const reasons: Array<string> = []
  if (state === "stopped") reasons.push("the runtime is stopped")
  else if (state === "running" && m.left) reasons.push("the member has left its group")
  else if (state === "running" && since > bound)
    reasons.push(
      `no heartbeat ended for ${since} ms (bound ${bound} ms): its heartbeat loop makes no progress`,
    )
  const live = reasons.length === 0
  if (state === "stopping") reasons.push("the runtime is stopping")
  if (!joinedPhases.has(m.phase)) reasons.push(`not joined: ${m.phase}`)
  if (unavailableFor !== undefined)
    reasons.push(`no coordinator has answered it for ${unavailableFor} ms`)
  return {
    memberId: m.memberId,
    stream: m.stream,
    group: m.group,
    phase: m.phase,
    live,
    ready: reasons.length === 0,
    sinceHeartbeatMs: since,
    livenessBoundMs: bound,
    coordinatorUnavailableForMs: unavailableFor,
    reasons,
  }
}

/** The runtime's health from its members' (see the module doc). */
export const healthOf = (
  members: ReadonlyArray<MemberHealthInput>,
  now: number,
  state: RuntimeState,
): Health => {
  const details = members.map((m) => memberHealth(m, now, state))
  return {
    live: state !== "stopped" && details.every((d) => d.live),
    ready: state === "running" && details.every((d) => d.ready),
    state,
    details,
  }
}
