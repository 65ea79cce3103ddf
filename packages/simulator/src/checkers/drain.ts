/**
 * Revoke-after-drain: the coordinator frees a shard a member gave up (its
 * REVOKED accepted, or its graceful leave) only once that member's read loop
 * of the shard has ended, in-flight batch included. Checked at the commit
 * that releases the shard, against the processes of that member lifecycle.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

/** A process of the released owner's lifecycle and what it still does with the shard. */
export interface DrainFact {
  readonly label: string
  readonly state: "reading" | "draining" | "idle"
}

export class DrainChecker {
  released = 0

  constructor(private readonly report: Report) {}

  check(
    time: number,
    shard: number,
    memberId: string,
    why: "revoked" | "left",
    facts: ReadonlyArray<DrainFact>,
  ): void {
    this.released++
    for (const f of facts) {
      if (f.state === "idle") continue
      this.report({
        checker: "drain",
        time,
        shard,
        message: `shard ${shard} of ${memberId} freed (${why === "left" ? "graceful leave" : "REVOKED accepted"}) at ${fmt(time)} while ${f.label} ${f.state === "reading" ? "still reads it" : "still has a batch in flight on it"}`,
      })
      return
    }
  }
}
