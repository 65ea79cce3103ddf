/**
 * Availability (issue 19) and lost-answer tolerance (issue 20): runs whose
 * faults touch no member's process (lost, duplicated, delayed or replayed
 * messages, coordinator crashes and pauses, wall-clock steps, Redis outages
 * shorter than the session, bounded clock skew) must cost no member any
 * shard: zero fences, expiries, replacements and supersessions, and no
 * member told it is fenced or unknown
 * (docs/protocol.md rules 7, 18, 20, 21, 22). A lost answer or a late one,
 * a coordinator failover, a clock step or a Redis blip that makes any member
 * give up its shards is a rebalance the protocol owes nobody. A member may
 * suspend (its lease ran out while Redis was down: rule 22), which keeps
 * its shards and epoch; suspensions are counted, not judged. A rejoin of a
 * process whose join answer was lost is allowed (it held nothing: rule 7);
 * a rejoin after a fence shows as the fence. See
 * docs/simulator.md, Checkers.
 *
 * @module
 */
import type { HeartbeatResponse } from "@shardline/core"
import type { FaultKind, FaultMix } from "../options.js"
import { FAULT_KINDS } from "../options.js"
import { fmt, type Report } from "./types.js"
import type { EndedRevocation } from "./view.js"

/** Faults that touch no member process: under them no member may lose a shard. */
export const COLLATERAL_FREE_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>([
  "loss",
  "dup",
  "delay",
  "replay",
  "coord-crash",
  "coord-stale",
  "clock-step",
  "redis-outage",
  "clock",
  "burst",
  "weights",
  "coord-stop",
  // a shard's storage node hangs for the coordinator (rules 27 and 31): no
  // member may lose a shard for it
  "fence-hang",
])

/** True when a run's faults are all collateral-free and at least one disturbs the protocol. */
export const isCollateralFree = (mix: FaultMix): boolean => {
  let disturbed = false
  for (const k of FAULT_KINDS) {
    if (mix.intensity[k] <= 0) continue
    if (!COLLATERAL_FREE_FAULTS.has(k)) return false
    if (k !== "burst" && k !== "weights") disturbed = true
  }
  return disturbed
}

/**
 * Judges every ownership loss of a member as it happens. A fence or expiry
 * is excused only when at least two of that member's requests or answers
 * were lost within its deadline's window before it (`windowMs`: the revoke
 * timeout plus a request timeout for a fence, the session for an expiry):
 * one lost answer must cost nothing (rule 7), but with a 5 s revoke timeout
 * and a 1.5 s request timeout a revocation that lost its notice and its
 * report in a row cannot finish in time. Every other fence, expiry or
 * removal is collateral. A member told it is fenced or unknown must owe it
 * to such an excused loss.
 *
 * A fence is justified only by what the member could have known (issue 34).
 * For each grant whose revocation timed out, the checker looks at the
 * answers that reached the member's processes: if one granted it that very
 * grant, the member knew it and the loss rule above applies; if none did
 * (the granting answer was lost) but one named the grant's revocation (rule
 * 17: the member then reports it REVOKED at once) a request timeout or more
 * before the fence, the losses that excuse the fence must come after that
 * answer: with none of its messages lost since, the member had the news and
 * a working link, and the fence is collateral.
 */
export class CollateralChecker {
  excused = 0
  /** Revoke-timeout fences of a grant the member never heard of, judged by the rule above. */
  unheardJudged = 0
  private readonly owed = new Map<string, number>()
  /** Per member: `a<shard>:<token>` granted, `r<shard>:<token>` named as revoked -> first arrival. */
  private readonly known = new Map<string, Map<string, number>>()

  constructor(
    private readonly report: Report,
    private readonly faults: string,
    /** Messages of `memberId` lost at or after `since`. */
    private readonly lostSince: (memberId: string, since: number) => number,
    private readonly fenceWindowMs: number,
    private readonly expiryWindowMs: number,
    private readonly revokeTimeoutMs = fenceWindowMs,
    private readonly requestTimeoutMs = 0,
  ) {}

  /** A NONE answer reached a process of `memberId` at `time` (before the machine saw it). */
  answered(memberId: string, response: HeartbeatResponse, time: number): void {
    if (response.errorCode !== "NONE") return
    let known = this.known.get(memberId)
    if (known === undefined) {
      known = new Map()
      this.known.set(memberId, known)
    }
    for (const g of response.assigned) {
      const k = `a${g.shard}:${g.token}`
      if (!known.has(k)) known.set(k, time)
    }
    for (const g of response.revoking ?? []) {
      const k = `r${g.shard}:${g.token}`
      if (!known.has(k)) known.set(k, time)
    }
  }

  /**
   * The committed view ended a lifecycle of `memberId` (`kind`: its audit
   * kind; `revoking`: the grants still being revoked from it).
   */
  ended(
    memberId: string,
    kind: string,
    time: number,
    revoking: ReadonlyArray<EndedRevocation> = [],
  ): void {
    const known = this.known.get(memberId)
    this.known.delete(memberId)
    // A leave, a rejoin of a process whose join answer was lost (it held
    // nothing: rule 7), and a replacement (only a restart of the member's own
    // process starts a newer one in these runs: its old process had left)
    // cost no one else anything.
    if (kind === "MemberLeft" || kind === "MemberRejoined" || kind === "MemberReplaced") return
    const window = kind === "MemberExpired" ? this.expiryWindowMs : this.fenceWindowMs
    const lost = this.lostSince(memberId, time - window)
    const unheard =
      kind === "MemberFenced" ? this.unheardFence(memberId, time, revoking, known) : ""
    if ((kind === "MemberFenced" || kind === "MemberExpired") && lost >= 2 && unheard === "") {
      this.excused++
      this.owed.set(memberId, (this.owed.get(memberId) ?? 0) + 1)
      return
    }
    this.report({
      checker: "collateral",
      time,
      message: `${memberId}: ${kind} at ${fmt(time)} with ${lost} of its messages lost in the ${fmt(window)} before${unheard}, under faults that touch no member (${this.faults})`,
    })
  }

  /** Why the revoke timeout of a grant the member never heard of is not excused ("" if it is). */
  private unheardFence(
    memberId: string,
    time: number,
    revoking: ReadonlyArray<EndedRevocation>,
    known: Map<string, number> | undefined,
  ): string {
    for (const r of revoking) {
      // still within its revoke timeout: not what the fence is for
      if (r.since > time - this.revokeTimeoutMs) continue
      if (known?.has(`a${r.shard}:${r.token}`)) continue
      const told = known?.get(`r${r.shard}:${r.token}`)
      if (told === undefined || told > time - this.requestTimeoutMs) continue
      this.unheardJudged++
      if (this.lostSince(memberId, told) > 0) continue
      return `; the answer granting shard ${r.shard} (token ${r.token}) never reached it, one naming its revocation did at ${fmt(told)} and none of its messages was lost since (rule 17: it owed a REVOKED)`
    }
    return ""
  }

  /** A process of `memberId` stopped every shard because it was told `reason`. */
  memberStopped(memberId: string, reason: string, time: number): void {
    if (reason !== "fenced" && reason !== "unknown-member" && reason !== "superseded") return
    const owed = this.owed.get(memberId) ?? 0
    if (owed > 0) {
      this.owed.set(memberId, owed - 1)
      return
    }
    this.report({
      checker: "collateral",
      time,
      message: `${memberId} dropped its shards (${reason}) at ${fmt(time)} without a fence or expiry that lost messages explain, under faults that touch no member (${this.faults})`,
    })
  }
}

/**
 * A member whose lease (the group's session minus its safety margin) is not
 * longer than a heartbeat interval can never keep a lease: it must never
 * start a shard (docs/member.md; core surfaces `LeaseUnusable` and the
 * member leaves). Judged from the member's configuration and the group's
 * timing, not from the machine.
 */
export class LeaseConfigChecker {
  unusableStarts = 0

  constructor(
    private readonly report: Report,
    private readonly sessionTimeoutMs: number,
    private readonly heartbeatIntervalMs: number,
  ) {}

  /** `label` starts reading `shard` with safety margin `marginMs`. */
  started(time: number, label: string, shard: number, marginMs: number): void {
    const lease = this.sessionTimeoutMs - marginMs
    if (lease > this.heartbeatIntervalMs) return
    this.unusableStarts++
    if (this.unusableStarts > 3) return
    this.report({
      checker: "lease-config",
      time,
      shard,
      message: `${label} started shard ${shard} at ${fmt(time)} with a lease of ${lease} ms (session ${this.sessionTimeoutMs} ms minus margin ${marginMs} ms), not longer than a heartbeat interval (${this.heartbeatIntervalMs} ms): a configuration that can never hold a lease was accepted`,
    })
  }
}
