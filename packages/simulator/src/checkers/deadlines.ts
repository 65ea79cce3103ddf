/**
 * The protocol's deadlines are kept (docs/protocol.md rules 4, 5, 10): while
 * a leader serves, every open revocation ends (REVOKED accepted, or the
 * member fenced) and every unconfirmed grant is confirmed or reclaimed within
 * the revoke timeout, and every member lifecycle the leader stopped hearing
 * from (no NONE answer) is expired within the session timeout. A new leader
 * restarts every deadline when it takes over, so each is measured from the
 * later of its start and the time the current leader began serving; a
 * grant's, from when its member could be told (rule 31: a withheld grant is
 * excused until its fence is written). The slack covers clock drift and the
 * event that runs the timer.
 *
 * Sampled (every second of virtual time), so a missed deadline is reported
 * at most a sample later.
 *
 * @module
 */
import { timing } from "../options.js"
import { fmt, type Report } from "./types.js"
import type { CommittedView } from "./view.js"

const slack = (timeoutMs: number) => 100 + Math.ceil((4 * timing.maxDriftPpm * timeoutMs) / 1e6)

export class DeadlineChecker {
  private readonly reported = new Set<string>()
  worstRevocationMs = 0
  worstGrantMs = 0
  worstSilenceMs = 0

  /**
   * Whether a live candidate withholds the grant (`shard`, `token`) because
   * its fence is not written (its member cannot be told, so cannot confirm
   * it), else since when its member could be told: a withheld grant's
   * confirmation deadline counts from its write (docs/protocol.md rule 31).
   * Set by the coordinator model.
   */
  tellable: (shard: number, token: number) => number | "withheld" | undefined = () => undefined

  constructor(private readonly report: Report) {}

  /** `servingSince`: when the current leader started serving, or undefined if none serves. */
  sample(time: number, view: CommittedView, servingSince: number | undefined): void {
    if (servingSince === undefined) return
    const revoke = timing.revokeTimeoutMs
    const session = timing.sessionTimeoutMs
    for (let s = 0; s < view.revocation.length; s++) {
      const r = view.revocation[s]
      if (r != null) {
        const open = time - Math.max(r.time, servingSince)
        if (open > this.worstRevocationMs) this.worstRevocationMs = open
        if (open > revoke + slack(revoke))
          this.once(
            `r${s}@${r.time}`,
            time,
            s,
            `revocation of shard ${s} from ${r.memberId} (epoch ${r.epoch}) still open ${fmt(open)} after it started or the leader took over (revoke timeout ${fmt(revoke)})`,
          )
      }
      const o = view.owner[s]
      if (o != null && !o.confirmed && r == null) {
        const told = this.tellable(s, o.token)
        if (told === "withheld") continue
        const open = time - Math.max(o.time, servingSince, told ?? 0)
        if (open > this.worstGrantMs) this.worstGrantMs = open
        if (open > revoke + slack(revoke))
          this.once(
            `g${s}@${o.rev}`,
            time,
            s,
            `grant of shard ${s} to ${o.memberId} (token ${o.token}) unconfirmed and not reclaimed ${fmt(open)} after it was granted or the leader took over (revoke timeout ${fmt(revoke)})`,
          )
      }
    }
    for (const m of view.members.values()) {
      const silent = time - Math.max(m.lastTouch, servingSince)
      if (silent > this.worstSilenceMs) this.worstSilenceMs = silent
      if (silent > session + slack(session))
        this.once(
          `m${m.memberId}#${m.epoch}`,
          time,
          undefined,
          `${m.memberId} (epoch ${m.epoch}) not answered by the leader for ${fmt(silent)} and not expired (session timeout ${fmt(session)})`,
        )
    }
  }

  private once(key: string, time: number, shard: number | undefined, message: string): void {
    if (this.reported.has(key)) return
    this.reported.add(key)
    this.report({ checker: "deadline", time, shard, message })
  }
}
