/**
 * Nothing waits for a hung storage node longer than `fenceWaitMs`
 * (docs/protocol.md rules 27 and 31; docs/simulator.md, the `fence-hang`
 * fault). For every answer of a leader it sees when the serve took the
 * request, when the host ran its step (it held the lock) and when the
 * answer left:
 *
 * - the wait for the lock is at most two fence waits: only a takeover's
 *   token reads and re-fences may hold the lock for a hung node, each for at
 *   most `fenceWaitMs`; a grant's fence write never holds it (rule 31), so
 *   other members' answers are not held up by a hung shard;
 * - the wait after the step is at most one fence wait: the answer that made
 *   a grant waits for its own fence writes at most `fenceWaitMs`, then
 *   answers the unwritten grants pending (rule 31), never for the command
 *   deadline.
 *
 * On only with the `fence-hang` fault (no other fault makes a host wait
 * for a node this way; `hung-store` holds the lock by design and its
 * waiting requests are taken again at its deadline).
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

const EPSILON_MS = 0.001

export class FenceWaitChecker {
  /** Answers judged, and the longest waits seen (reported in the counters). */
  answers = 0
  worstLockWaitMs = 0
  worstAnswerWaitMs = 0
  private reported = 0

  constructor(
    private readonly report: Report,
    readonly fenceWaitMs: number,
  ) {}

  /** An answer to `memberId` left at `time`; its request was taken at `takenAt`, its step ran at `steppedAt`. */
  answered(time: number, takenAt: number, steppedAt: number, memberId: string): void {
    this.answers++
    const lockWait = steppedAt - takenAt
    const answerWait = time - steppedAt
    if (lockWait > this.worstLockWaitMs) this.worstLockWaitMs = lockWait
    if (answerWait > this.worstAnswerWaitMs) this.worstAnswerWaitMs = answerWait
    // (a wait of exactly the bound comes out a float's width above it)
    if (lockWait > 2 * this.fenceWaitMs + EPSILON_MS)
      this.violation(time, memberId, "the lock", lockWait, 2)
    if (answerWait > this.fenceWaitMs + EPSILON_MS)
      this.violation(time, memberId, "its own fence writes", answerWait, 1)
  }

  private violation(time: number, memberId: string, what: string, ms: number, n: number): void {
    if (++this.reported > 3) return
    this.report({
      checker: "fence-wait",
      time,
      message: `the answer to ${memberId} at ${fmt(time)} waited ${fmt(ms)} for ${what} (bound ${fmt(n * this.fenceWaitMs)}: rule ${n === 2 ? "27, a takeover's reads and re-fences" : "31, a grant's own writes"}, at most fenceWaitMs each)`,
    })
  }
}
