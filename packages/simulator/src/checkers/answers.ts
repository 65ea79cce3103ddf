/**
 * Answers applied past the lease they grant (issue 34). A member's lease on
 * its shards runs from the send time of the request an answer answers, for
 * the group's session minus the member's safety margin (docs/protocol.md
 * rules 5, 7 and 22; docs/member.md). An answer that arrives after that
 * lease ran out may describe a group the coordinator has already moved past
 * (it may have expired the member meanwhile), so the machine must treat it as
 * lost: never apply it. Reads stay gated by the lease either way, so no other
 * checker sees the harm; this one watches the machine's lease itself. Judged
 * from the simulated runtime's own record of when it sent each request (on
 * the process's clock), not from the machine's:
 *
 * - an answer the machine applied (its lease moved) arrived within the lease
 *   it grants;
 * - the lease it applied runs from that request's send time, never later
 *   (measured from the answer's arrival, a delayed answer would stretch the
 *   lease past the session the coordinator counts from its handling).
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class AnswerChecker {
  /** Answers the machine applied, judged. */
  applied = 0
  /** NONE answers that arrived after their lease and were dropped (the path is reached). */
  lateDropped = 0

  constructor(private readonly report: Report) {}

  /**
   * `label` got a NONE answer to its request sent at `sentAt` (its clock)
   * at `arrivedAt`; its lease is `leaseMs`. `leaseFrom` is where the
   * machine's lease runs from after the answer, and before it (`before`).
   */
  answer(
    time: number,
    label: string,
    seq: number,
    sentAt: number,
    arrivedAt: number,
    leaseMs: number,
    before: number,
    leaseFrom: number,
  ): void {
    const late = arrivedAt - sentAt >= leaseMs
    if (leaseFrom <= before) {
      if (late) this.lateDropped++
      return
    }
    this.applied++
    if (late)
      this.report({
        checker: "answers",
        time,
        message: `${label} applied the answer to request ${seq} at ${fmt(time)}, ${fmt(arrivedAt - sentAt)} after it sent it: past the ${fmt(leaseMs)} lease the answer grants (the coordinator may have expired it meanwhile)`,
      })
    else if (leaseFrom > sentAt)
      this.report({
        checker: "answers",
        time,
        message: `${label} runs its lease from ${fmt(leaseFrom - sentAt)} after it sent request ${seq} at ${fmt(time)}: a lease runs from the request's send time`,
      })
  }
}
