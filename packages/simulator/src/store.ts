/**
 * The coordinator's store: one group, a compare-and-set on `storeRevision`.
 * Every accepted commit is checked by the store-revision checker and fed to
 * the checkers' committed view (their own replay of the records); a commit
 * based on a stale revision is refused and counted. The last committing
 * shell's snapshot is what a new leader loads.
 *
 * Two faults act here: `refused` (a full server, `noeviction` with
 * `maxmemory`: every write refused with OOM while `refusing`; the host
 * checks it, see `CoordinatorHost.commit`) and `store-rewind` (a failover to
 * a replica that missed the last commits: `lagBehind`, then `failover`;
 * docs/protocol.md rule 23). A commit made under a lease term (`fence`) is
 * refused, like the Redis commit script refuses it, once that term no
 * longer holds the lease (docs/protocol.md rule 32); the lease is not
 * rewound with the Store here (an expired lease rewound stays expired).
 *
 * @module
 */
import type { CoordinatorShell, Snapshot, Step } from "@shardline/core"
import type { Ctx } from "./ctx.js"

/** The lease term a commit is made under: its candidate and its lease token (docs/protocol.md rule 32). */
export interface CommitFence {
  readonly node: number
  readonly token: number
}

export class Store {
  revision = 0
  /** The shell whose state is the last committed one (its snapshot is the store's). */
  private source: CoordinatorShell | null = null
  /** After a `store-rewind` failover: the replica's state, until the next commit. */
  private rewoundTo: Snapshot | undefined = undefined
  /** A replica that stopped replicating (`store-rewind`): its revision, its state, the checkers' then. */
  private lagging:
    | { readonly revision: number; readonly snapshot: Snapshot; readonly restore: () => void }
    | undefined = undefined
  /**
   * The server is full (the `refused` fault's OOM, `noeviction` with
   * `maxmemory`): Store commits, fence writes, heartbeats (LPUSH) and
   * transactional commits are refused; reads and acks go on
   * (docs/redis.md, "Eviction").
   */
  refusing = false

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
    fence?: CommitFence,
  ): number | undefined {
    const checks = this.ctx.checks
    // docs/protocol.md rule 32: the commit script also reads the lease key
    // and refuses a term that no longer holds it, whatever the revision.
    // BROKEN ON PURPOSE with `no-commit-lease-fence` (test-only): the CAS
    // alone, so a paused ex-leader passes after a rewind to its revision;
    // and with `skip-election` (the host before both fixes: with the fence
    // on, the fence alone stops the ex-leader the election commit stops).
    const broken = this.ctx.options.broken
    if (fence !== undefined && !this.holds(fence)) {
      if (broken !== "no-commit-lease-fence" && broken !== "skip-election") {
        this.ctx.w.count("store:leaseFencedCommits")
        return undefined
      }
      this.ctx.w.count("store:leaseFenceSkipped")
    }
    if (expected !== this.revision) {
      checks.revisions.reject()
      return undefined
    }
    const rev = ++this.revision
    checks.revisions.commit(this.ctx.w.now, expected, rev)
    shell.apply(step, rev)
    this.source = shell
    this.rewoundTo = undefined
    checks.tokens.committed(step.records, this.ctx.w.now)
    checks.view.ingest(step.records, rev, this.ctx.w.now)
    return rev
  }

  /** The lease store holds the lease of term `fence.token` for candidate `fence.node` (by true time). */
  holds(fence: CommitFence): boolean {
    return this.ctx.lease.held(fence.node) && this.ctx.lease.token === fence.token
  }

  /** The committed state, as a takeover loads it. */
  snapshot(): Snapshot {
    if (this.rewoundTo !== undefined) return { ...this.rewoundTo, storeRevision: this.revision }
    if (this.source === null) throw new Error("no group created yet")
    return { ...this.source.snapshot(), storeRevision: this.revision }
  }

  /**
   * `store-rewind`: the replica the Store's next failover promotes stops
   * replicating now (it keeps the state as it is). False when the group
   * does not exist yet or a replica already lags.
   */
  lagBehind(): boolean {
    if (this.source === null || this.lagging !== undefined) return false
    this.lagging = {
      revision: this.revision,
      snapshot: structuredClone(this.snapshot()),
      restore: ((view, tokens) => () => {
        view()
        tokens()
      })(this.ctx.checks.view.save(), this.ctx.checks.tokens.save()),
    }
    return true
  }

  /** `store-rewind` at the liveness phase: the lagging replica catches up (nothing lost). */
  catchUp(): void {
    this.lagging = undefined
  }

  /**
   * `store-rewind`: the Store fails over to the lagging replica. Every
   * commit since `lagBehind` is lost, fences written meanwhile stay (owner
   * tokens live with the shards, on other nodes: docs/protocol.md rule 23).
   * The checkers' committed view goes back with it (it is what the store
   * holds); the token checker keeps every token storage ever held. Returns
   * the commits lost.
   */
  failover(): number {
    const l = this.lagging
    this.lagging = undefined
    if (l === undefined) return 0
    const lost = this.revision - l.revision
    if (lost === 0) return 0
    this.revision = l.revision
    this.rewoundTo = l.snapshot
    l.restore()
    this.ctx.checks.revisions.rewound(l.revision)
    return lost
  }
}
