/**
 * Transactional handlers in the data plane (`--tx`; docs/simulator.md,
 * Transactions), modelled on the runtime's commit script (docs/exactly-once.md):
 * a handler's effect (a per-key counter increment and an output entry on a
 * second stream) is buffered while it runs and applied only by the commit,
 * one fenced, atomic step with the batch's ack:
 * 1. the owner token: a stale owner's commit writes nothing and acks nothing;
 * 2. every message of the batch still pending in the group, else nothing
 *    (none pending: a commit of them already ran, "already"; some: "partial",
 *    the rest stay pending and are read again);
 * 3. the effects, then the ack.
 * A handler that fails or a process that dies before the commit leaves no
 * trace (nothing was applied). A commit whose answer is lost (drawn per
 * commit when the run's fault mix has `loss`) ran once: the member does not
 * know, handles the batch again and commits again, and that commit finds
 * nothing pending. A commit may stall 2-20 s between the runtime's lease
 * check and Redis (drawn per commit when the mix has `pause` or `clog`): it
 * lands when the shard may have moved on, and the owner token or the
 * pending check must stop it.
 *
 * BROKEN ON PURPOSE (test-only, the mutants of `pnpm mutate`):
 * `tx-effects-at-handle` applies effects when the handler starts, not at
 * the commit; `tx-commit-without-pending-check` commits whatever is pending or not.
 *
 * @module
 */
import type { TransactionChecker } from "./checkers/transactions.js"
import type { Ctx } from "./ctx.js"
import { Prng } from "./engine/Prng.js"

export type CommitOutcome = "committed" | "already" | "partial" | "fenced"

/** Keys per shard for runs whose messages carry none (non-reshard scenarios). */
export const TX_KEYS_PER_SHARD = 8

export class Transactions {
  /** Probability that a commit's answer is lost after the commit ran. */
  readonly lostAnswerP: number
  /** Probability that a commit stalls 2-20 s between the lease check and Redis. */
  readonly stallP: number
  private readonly rng: Prng
  private readonly atHandle: boolean
  private readonly noPendingCheck: boolean

  constructor(
    private readonly ctx: Ctx,
    readonly checker: TransactionChecker,
  ) {
    // Its own stream: turning the mode on shifts no other draw.
    this.rng = Prng.stream(ctx.options.seed, "tx")
    const lost = this.rng.range(0.02, 0.1)
    const stall = this.rng.range(0.002, 0.01)
    this.lostAnswerP = ctx.mix.intensity.loss > 0 ? lost : 0
    this.stallP = ctx.mix.intensity.clog > 0 || ctx.mix.intensity.pause > 0 ? stall : 0
    this.atHandle = ctx.options.broken === "tx-effects-at-handle"
    this.noPendingCheck = ctx.options.broken === "tx-commit-without-pending-check"
  }

  /** Message `id` of `shard` was produced, with `key` (-1: none; a key of the shard is derived). */
  produced(shard: number, id: number, key: number): void {
    this.checker.produced(
      shard,
      id,
      key >= 0 ? key : shard * TX_KEYS_PER_SHARD + (id % TX_KEYS_PER_SHARD),
    )
  }

  /** A handler starts on `ids` (its effects are buffered; applied here only when broken). */
  handlerStarted(shard: number, ids: ReadonlyArray<number>): void {
    if (this.atHandle) for (const id of ids) this.checker.apply(shard, id)
  }

  /** The fenced, atomic commit of a handled batch: its effects and its ack. */
  commit(shard: number, token: number, ids: ReadonlyArray<number>): CommitOutcome {
    const { data, w } = this.ctx
    if (data.storageFence && token < data.fence[shard]!) {
      data.fencedAcks++
      w.count("tx:fencedCommits")
      return "fenced"
    }
    if (!this.noPendingCheck) {
      const pel = data.pel[shard]!
      let pending = 0
      for (const id of ids) if (pel.has(id)) pending++
      if (pending === 0 && ids.length > 0) {
        w.count("tx:alreadyCommitted")
        return "already"
      }
      if (pending < ids.length) {
        w.count("tx:partialRefused")
        return "partial"
      }
    }
    if (!this.atHandle) for (const id of ids) this.checker.apply(shard, id)
    // the sends go to the shard's outbox in the same step (Redis Cluster)
    this.ctx.outbox?.committed(shard, ids, (id) => this.checker.keyAt(shard, id))
    data.ack(shard, token, ids)
    w.count("tx:committed")
    return "committed"
  }

  /**
   * How long this commit stalls after its lease check (0: it does not). A
   * fault like the others: only in the safety phase, landed by its end.
   */
  commitStall(): number {
    const left = this.ctx.options.durationMs - this.ctx.w.now
    if (this.stallP === 0 || left < 2000 || !this.rng.chance(this.stallP)) return 0
    this.ctx.w.count("tx:commitStalled")
    return Math.min(left, this.rng.range(2000, 20_000))
  }

  /** Was the answer to a commit that ran lost on its way back? */
  answerLost(): boolean {
    if (this.lostAnswerP === 0 || !this.rng.chance(this.lostAnswerP)) return false
    this.ctx.w.count("tx:answerLost")
    return true
  }
}
