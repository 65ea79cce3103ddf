/**
 * storeRevision is never overwritten stale: every accepted write names the
 * revision it read, that revision is the current one, and the new revision is
 * exactly one more. Rejected stale writes are counted.
 *
 * @module
 */
import type { Report } from "./types.js"

export class RevisionChecker {
  private current = 0
  accepted = 0
  rejected = 0

  constructor(private readonly report: Report) {}

  commit(time: number, expected: number, written: number): void {
    if (expected !== this.current || written !== this.current + 1)
      this.report({
        checker: "store-revision",
        time,
        message: `store write based on revision ${expected} stored ${written} over revision ${this.current}`,
      })
    this.current = written
    this.accepted++
  }

  /** The store failed over to a replica at `revision` (`store-rewind`): later commits are lost. */
  rewound(revision: number): void {
    this.current = revision
  }

  reject(): void {
    this.rejected++
  }
}
