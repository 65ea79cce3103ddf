/**
 * The opt-in circuit breaker of a member or of one of its shards
 * (docs/runtime.md, "Circuit breaker and rate limit"). After `failures`
 * handler failures in a row it opens: the scope reads nothing, and a failed
 * message is left pending (nacked), never dead-lettered, so a bad deploy
 * stops instead of emptying the stream into the dead-letter streams. After
 * `resetMs` it is half-open: one message is tried; its success closes the
 * breaker, its failure opens it again for twice as long (up to
 * `maxResetMs`). `reset()` closes it by hand.
 *
 * Pure state: the caller gives it the time and acts on what it answers.
 */
export interface BreakerSettings {
  /** Handler failures in a row that open it. */
  readonly failures: number
  /** A member's shards share one breaker, or each shard has its own. */
  readonly scope: "member" | "shard"
  /** Open this long before the first trial. */
  readonly resetMs: number
  /** The longest open period (it doubles after each failed trial). */
  readonly maxResetMs: number
}

/** A circuit breaker's state: `closed` (reading), `open` (not reading until its reset), `halfOpen` (one trial message). */
export type BreakerState = "closed" | "open" | "halfOpen"

/** What a turn may do before it reads. */
export type Admission =
  | { readonly _tag: "Read" }
  /** Half-open: this turn reads one message, the trial (`id` ends it: `endTrial`). */
  | { readonly _tag: "Trial"; readonly id: number }
  | { readonly _tag: "Wait"; readonly ms: number }

/** A failure's effect: still closed (the failure is handled as usual), or it opened / is open. */
export type Verdict = "closed" | "opened" | "open"

/** A circuit breaker as `runtime.breakers()` shows it. */
export interface BreakerView {
  readonly scope: "member" | "shard"
  /** The shard of a shard-scoped breaker. */
  readonly shard: number | undefined
  readonly state: BreakerState
  /** Handler failures in a row. */
  readonly failures: number
  /** When an open breaker lets its next trial through (clock ms). */
  readonly retryAt: number | undefined
}

/** How long a runner waits while another one's trial runs, before it asks again. */
const TRIAL_POLL_MS = 100

export class CircuitBreaker {
  state: BreakerState = "closed"
  consecutive = 0
  retryAt = 0
  private openMs: number
  /** The half-open trial running (one at a time across the scope; 0: none). */
  private trial = 0
  private trials = 0

  constructor(
    readonly settings: BreakerSettings,
    readonly shard: number | undefined,
  ) {
    this.openMs = settings.resetMs
  }

  admit(now: number): Admission {
    if (this.state === "closed") return READ
    if (this.state === "open") {
      if (now < this.retryAt) return { _tag: "Wait", ms: this.retryAt - now }
      this.state = "halfOpen"
    }
    if (this.trial !== 0) return { _tag: "Wait", ms: TRIAL_POLL_MS }
    this.trial = ++this.trials
    return { _tag: "Trial", id: this.trial }
  }

  /**
   * The trial's turn ended. If neither a success nor a failure settled it
   * (its read found nothing, the shard was revoked, the lease lapsed),
   * another runner may try.
   */
  endTrial(id: number): void {
    if (this.trial === id) this.trial = 0
  }

  /** How long a runner waits now (0 when it may go on). */
  waitMs(now: number): number {
    if (this.state === "open") return Math.max(1, this.retryAt - now)
    if (this.state === "halfOpen") return TRIAL_POLL_MS
    return 0
  }

  /** Handler calls succeeded: a half-open breaker closes; true when it did. */
  success(): boolean {
    if (this.state === "open") return false
    this.consecutive = 0
    if (this.state === "halfOpen") {
      this.close()
      return true
    }
    return false
  }

  failure(now: number): Verdict {
    this.consecutive++
    if (this.state === "open") return "open"
    if (this.state === "halfOpen") {
      // the trial failed: open again, for twice as long
      this.openMs = Math.min(this.settings.maxResetMs, this.openMs * 2)
      this.open(now)
      return "opened"
    }
    if (this.consecutive >= this.settings.failures) {
      this.open(now)
      return "opened"
    }
    return "closed"
  }

  /** Close by hand; true when it was not closed. */
  reset(): boolean {
    const was = this.state
    this.close()
    this.consecutive = 0
    return was !== "closed"
  }

  view(): BreakerView {
    return {
      scope: this.settings.scope,
      shard: this.shard,
      state: this.state,
      failures: this.consecutive,
      retryAt: this.state === "closed" ? undefined : this.retryAt,
    }
  }

  private open(now: number): void {
    this.state = "open"
    this.retryAt = now + this.openMs
    this.trial = 0
  }

  private close(): void {
    this.state = "closed"
    this.openMs = this.settings.resetMs
    this.trial = 0
    this.retryAt = 0
  }
}

const READ: Admission = { _tag: "Read" }
