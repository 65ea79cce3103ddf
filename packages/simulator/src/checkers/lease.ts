/**
 * Expiry after the member's own lease: the coordinator expires a member
 * (session timeout) only when the member's process can no longer hold a
 * valid lease on shards (it measures its lease from the send time of its
 * answered request, session timeout minus its safety margin). An expiry
 * while the process still holds shards with a valid lease gives them to
 * someone else while it reads: a premature expiry or an overlong lease.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export interface LeaseFact {
  readonly label: string
  readonly shards: number
  /** ms of lease left by the process's own clock (<= 0: expired). */
  readonly leaseLeftMs: number
}

export class LeaseChecker {
  expiries = 0

  constructor(private readonly report: Report) {}

  expired(time: number, memberId: string, epoch: number, facts: ReadonlyArray<LeaseFact>): void {
    this.expiries++
    for (const f of facts) {
      if (f.shards === 0 || f.leaseLeftMs <= 0) continue
      this.report({
        checker: "lease",
        time,
        message: `${memberId} (epoch ${epoch}) expired at ${fmt(time)} while ${f.label} still held ${f.shards} shard(s) with ${fmt(f.leaseLeftMs)} of lease left`,
      })
      return
    }
  }
}
