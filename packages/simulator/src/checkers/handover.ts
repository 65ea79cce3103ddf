/**
 * A graceful coordinator stop hands over at once (docs/protocol.md rule 20):
 * the stopping leader releases its lease and announces the handover, and a
 * standby, woken by it, serves within milliseconds, not when the lease runs
 * out. After each graceful stop of the lease holder with a standby able to
 * take over (alive, not paused, not abstaining after a resignation, its
 * check not starved, Redis up), a candidate must start serving the group
 * under a lease within the bound (`handoverBoundMs` in options.ts); the lease
 * expiry path takes from two thirds of a lease TTL to more than one.
 *
 * It sees only facts: a graceful stop (and whether a standby could take
 * over), a serve started under a lease, the first NONE answer after the
 * stop. "Nothing moves" is the exactness checker's: a run whose only fault
 * is `coord-stop` is held to zero fences, expiries and self-fences and to
 * movement at the lower bound (options.ts `DISRUPTIVE_FAULTS`).
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class HandoverChecker {
  /** Graceful stops with a standby available (judged). */
  stops = 0
  /** The longest a judged stop took until a successor served. */
  worstServedMs = 0
  /** The longest from a judged stop to the next NONE answer (reported, not bounded). */
  worstAnsweredMs = 0
  private open: number | undefined
  private awaitingAnswer: number | undefined

  constructor(
    private readonly report: Report,
    readonly boundMs: number,
  ) {}

  /** The lease holder stopped gracefully at `time`; `standby`: another candidate could take over. */
  stopped(time: number, standby: boolean): void {
    this.awaitingAnswer = time
    if (!standby) {
      this.open = undefined
      return
    }
    this.stops++
    this.open = time
  }

  /** A candidate started a serve under a lease it holds. */
  served(time: number): void {
    const at = this.open
    if (at === undefined) return
    this.open = undefined
    const took = time - at
    this.worstServedMs = Math.max(this.worstServedMs, took)
    if (took > this.boundMs)
      this.report({
        checker: "handover",
        time,
        message: `a graceful coordinator stop at ${fmt(at)} was served again only ${fmt(took)} later (bound ${fmt(this.boundMs)}, rule 20: the standby is woken by the handover)`,
      })
  }

  /** A NONE answer was given. */
  answered(time: number): void {
    const at = this.awaitingAnswer
    if (at === undefined) return
    this.awaitingAnswer = undefined
    this.worstAnsweredMs = Math.max(this.worstAnsweredMs, time - at)
  }

  /** End of run: a judged stop nobody took over. */
  finish(time: number): void {
    const at = this.open
    if (at === undefined) return
    this.open = undefined
    this.report({
      checker: "handover",
      time,
      message: `a graceful coordinator stop at ${fmt(at)} was never served again`,
    })
  }
}
