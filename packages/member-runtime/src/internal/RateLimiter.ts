/**
 * The consumer-side rate limit of a member (docs/runtime.md, "Circuit
 * breaker and rate limit"): at most `messages` per `intervalMs` in any
 * window of that length (a sliding log of the times of the last `messages`
 * reads, exact, not a token bucket that would allow twice as many across a
 * refill). A turn reserves what it may read before it reads and gives back
 * what it did not get, so no worker of the member can overdraw while a read
 * is in flight.
 *
 * Scope `group`: no coordination through Redis; each member takes the share
 * of the group's limit that its owned shards are of the stream's current
 * shard count (`floor(messages * owned / shards)` per interval, or one per
 * proportionally longer interval below one), so the group stays at or below
 * the limit while its shards are owned once (always, outside a reshard's
 * migration, when a member may briefly hold an earlier generation's shards
 * too). Pure: the caller gives the time.
 */
export interface RateLimitSettings {
  readonly messages: number
  readonly intervalMs: number
  readonly scope: "member" | "group"
}

export class RateLimiter {
  /** Times of the reads of the last window, oldest first (a ring would do; N is small). */
  private readonly log: Array<number> = []

  constructor(
    readonly settings: RateLimitSettings,
    /** Group scope: this member's share of the group (owned shards / shard count). */
    private readonly share: () => number,
  ) {}

  /** The limit that applies now: `n` reads per `windowMs`. */
  private limit(): { readonly n: number; readonly windowMs: number } {
    const { messages, intervalMs, scope } = this.settings
    if (scope === "member") return { n: messages, windowMs: intervalMs }
    const share = Math.max(0, Math.min(1, this.share()))
    const allowed = messages * share
    if (allowed >= 1) return { n: Math.floor(allowed), windowMs: intervalMs }
    // below one per interval: one per proportionally longer window
    return { n: 1, windowMs: share === 0 ? Number.POSITIVE_INFINITY : intervalMs / allowed }
  }

  /** Reserve up to `want` reads now; returns how many (0: wait `waitMs`). */
  reserve(now: number, want: number): number {
    const { n, windowMs } = this.limit()
    // drop what left the window, and what a smaller share no longer allows
    while (this.log.length > 0 && this.log[0]! <= now - windowMs) this.log.shift()
    const free = Math.max(0, n - this.log.length)
    const granted = Math.min(want, free)
    for (let i = 0; i < granted; i++) this.log.push(now)
    return granted
  }

  /** Give back `count` reserved reads the read did not use. */
  release(count: number): void {
    for (let i = 0; i < count && this.log.length > 0; i++) this.log.pop()
  }

  /** How long until one more read is allowed (after `reserve` gave 0). */
  waitMs(now: number): number {
    const { n, windowMs } = this.limit()
    if (!Number.isFinite(windowMs)) return 1_000
    const excess = this.log.length - n
    // the entry whose leaving frees a slot
    const oldest = this.log[Math.max(0, excess)]
    return oldest === undefined ? 1 : Math.max(1, Math.ceil(oldest + windowMs - now))
  }
}
