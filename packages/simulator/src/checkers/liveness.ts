/**
 * No coordinator stall (docs/protocol.md rule 25; issue 34): while live
 * members' requests keep reaching the transport, Redis is up and at least
 * one coordinator candidate is alive and not paused, some request gets a
 * NONE answer within the bound. The production stall it stands for: one
 * candidate held the lease and renewed it the whole time, its serve had
 * been replaced, nobody took the group's requests, no standby took over.
 *
 * It sees only facts: a request of a live process (alive, not told it is
 * superseded) reached the transport, and when it was sent; a NONE answer
 * was given; Redis went down or came back; how many candidates are alive
 * and not paused; the candidate holding the lease was crashed or paused by
 * a fault. Nothing of the candidates' leases, serves or decisions.
 *
 * The clock of a stall starts at the first live request sent after the last
 * NONE answer (a group nobody asks cannot answer: an idle gap with every
 * member partitioned, crashed, paused or clogged is no stall, swarm seeds
 * 9168 and 9075) and restarts at each excuse, exactly when it happens: Redis comes back (nothing is counted
 * while it is down), a candidate is available again after none was (nothing
 * is counted while none is), the lease holder is crashed or paused by a
 * fault (a takeover is owed; each one in a chain of failovers gets the whole
 * bound). A stall is reported when two requests sent more than the bound
 * after its start have reached the transport, the first of them at least a
 * request timeout ago, and still no NONE answer was given: two, because a
 * process about to learn it is superseded (a twin's standby, FENCED_INSTANCE_ID
 * until the registered one expires) sends one such request before it knows;
 * a request timeout, so that a fenced member's immediate rejoin is answered
 * first. Sampled every second; reported once per stall.
 *
 * The bound (`stallBoundMs` in options.ts: a session timeout, a lease TTL and
 * a check period) and its derivation: docs/simulator.md, Checkers.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class LivenessChecker {
  /** The longest a live member's request waited (sent, reached the transport) past the first live request sent after the last NONE answer or excuse. */
  worstStallMs = 0
  /** Stalls whose clock an excuse restarted while live requests went unanswered (counted). */
  excusedStalls = 0
  private since = 0
  /** When the first live request counted since `since` was sent: the stall's clock (infinity: none yet). */
  private start = Number.POSITIVE_INFINITY
  private redisUp = true
  private available: number
  /** Requests of live processes sent more than the bound after `start` that reached the transport. */
  private late = 0
  private firstLateAt = Number.POSITIVE_INFINITY
  /** Requests of live processes that reached the transport since `since`. */
  private waiting = 0
  private reported = false

  constructor(
    private readonly report: Report,
    readonly boundMs: number,
    /** How long a fenced member's rejoin may take to be answered (a request timeout). */
    private readonly graceMs: number,
    candidates: number,
  ) {
    this.available = candidates
  }

  private restart(time: number): void {
    this.since = time
    this.start = Number.POSITIVE_INFINITY
    this.late = 0
    this.firstLateAt = Number.POSITIVE_INFINITY
    this.waiting = 0
    this.reported = false
  }

  private get excused(): boolean {
    return !this.redisUp || this.available === 0
  }

  /** A NONE answer was given. */
  answered(time: number): void {
    this.restart(time)
  }

  /** Redis went down (`up` false) or came back. */
  redis(time: number, up: boolean): void {
    if (up === this.redisUp) return
    this.redisUp = up
    if (this.waiting > 0) this.excusedStalls++
    this.restart(time)
  }

  /** `n` candidates are alive and not paused now. */
  candidates(time: number, n: number): void {
    const before = this.available
    this.available = n
    if ((before === 0) !== (n === 0)) {
      if (this.waiting > 0) this.excusedStalls++
      this.restart(time)
    }
  }

  /** A fault crashed or paused the candidate holding the lease. */
  holderLost(time: number): void {
    if (this.waiting > 0) this.excusedStalls++
    this.restart(time)
  }

  /** A request of a live process, sent at `sentAt`, reached the transport. */
  arrived(time: number, sentAt: number): void {
    if (this.excused || sentAt < this.since) return
    this.waiting++
    if (sentAt < this.start) this.start = sentAt
    const waited = sentAt - this.start
    if (waited > this.worstStallMs) this.worstStallMs = waited
    if (waited > this.boundMs) {
      this.late++
      if (time < this.firstLateAt) this.firstLateAt = time
    }
  }

  sample(time: number): void {
    if (this.excused || this.reported || this.late < 2 || time - this.firstLateAt < this.graceMs)
      return
    this.reported = true
    this.report({
      checker: "liveness",
      time,
      message: `coordinator stall: no NONE answer for ${fmt(time - this.since)} (since ${fmt(this.since)}) while ${this.waiting} requests of live members reached the transport (the first sent at ${fmt(this.start)}, ${this.late} more than the bound after it), Redis up, ${this.available} candidate(s) alive and not paused (bound ${fmt(this.boundMs)})`,
    })
  }
}
