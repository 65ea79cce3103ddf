/**
 * The coordinator's store: one group, a compare-and-set on `storeRevision`.
 * Every accepted commit is checked by the store-revision checker and fed to
 * the checkers' committed view (their own replay of the records); a commit
 * based on a stale revision is refused and counted. The last committing
 * shell's snapshot is what a new leader loads.
 *
 * @module
 */
import type { CoordinatorShell, Snapshot, Step } from "@shardline/core"
import type { Ctx } from "./ctx.js"

export class Store {
  revision = 0
  /** The shell whose state is the last committed one (its snapshot is the store's). */
  private source: CoordinatorShell | null = null

  constructor(private readonly ctx: Ctx) {}

  get created(): boolean {
    return this.source !== null
  }

  /**
   * Commits `step.records` on behalf of `shell` (CAS on `shell.revision`),
   * then applies the step to the shell. Returns the new revision, or
   * undefined when the shell is stale (nothing written, nothing applied).
   */
  /**
   * Redis is down (the `redis-outage` fault): no commit, no lease renewal or
   * acquisition, no request or answer on the transport, no read or ack.
   */
  down = false

  commit(
    shell: CoordinatorShell,
    step: Step<unknown>,
    expected = shell.revision,
  ): number | undefined {
    const checks = this.ctx.checks
    if (expected !== this.revision) {
      checks.revisions.reject()
      return undefined
    }
    const rev = ++this.revision
    checks.revisions.commit(this.ctx.w.now, expected, rev)
    shell.apply(step, rev)
    this.source = shell
    checks.tokens.committed(step.records, this.ctx.w.now)
    checks.view.ingest(step.records, rev, this.ctx.w.now)
    return rev
  }

  /** The committed state, as a takeover loads it. */
  snapshot(): Snapshot {
    if (this.source === null) throw new Error("no group created yet")
    return { ...this.source.snapshot(), storeRevision: this.revision }
  }
}
