/**
 * Owner-token monotonicity per shard (docs/protocol.md rules 16, 21 and 23;
 * docs/simulator.md, Checkers): every grant of a shard carries a token above
 * every token the shard had before, in any grant or hold, whichever leader
 * committed it, and storage's owner token never goes down. A re-grant that
 * keeps the previous token lets the previous owner's reads and acks pass
 * the storage fence; a token that falls (a wall clock stepped back, a new
 * leader's clock behind the old one's) is refused by storage and stops the
 * shard for good. Judged from committed record batches and the fence writes
 * only, never from the coordinator's memory.
 *
 * @module
 */
import type { CoordinatorRecord } from "@shardline/core"
import { fmt, type Report } from "./types.js"

export class TokenChecker {
  /** Per shard: the highest token any committed grant or hold carried. */
  private readonly highest: Float64Array
  /** Per shard: the current grant (owner and token), as committed. */
  private readonly ownerOf: Array<string | null>
  private readonly tokenOf: Float64Array
  /** Per shard: storage's owner token, as written. */
  private readonly stored: Float64Array
  grants = 0
  unwrittenReads = 0
  /** Reads or acks storage let through without an owner token (rule 26). */
  missingPassed = 0

  constructor(
    shards: number,
    private readonly report: Report,
  ) {
    this.highest = new Float64Array(shards)
    this.ownerOf = new Array<string | null>(shards).fill(null)
    this.tokenOf = new Float64Array(shards)
    this.stored = new Float64Array(shards)
  }

  /** One committed batch, in commit order. */
  committed(records: ReadonlyArray<CoordinatorRecord>, time: number): void {
    for (const r of records) {
      if (r._tag === "HeldChanged") {
        for (const { shard, held } of r.shards)
          if (held !== null && held.token > this.highest[shard]!) this.highest[shard] = held.token
        continue
      }
      if (r._tag !== "ShardOwnersChanged") continue
      for (const { shard, owner } of r.shards) {
        if (owner === null) {
          this.ownerOf[shard] = null
          continue
        }
        // The same grant again (its confirmation, a takeover's re-commit).
        if (this.ownerOf[shard] === owner.memberId && this.tokenOf[shard] === owner.token) continue
        this.grants++
        if (owner.token <= this.highest[shard]!)
          this.report({
            checker: "tokens",
            time,
            shard,
            message: `shard ${shard} granted to ${owner.memberId} with owner token ${owner.token} at ${fmt(time)}, not above ${this.highest[shard]!}, a token it had before`,
          })
        this.ownerOf[shard] = owner.memberId
        this.tokenOf[shard] = owner.token
        if (owner.token > this.highest[shard]!) this.highest[shard] = owner.token
      }
    }
  }

  /**
   * The state as it is now; calling the result puts back what the store's
   * records said (a `store-rewind` failover lost the commits since), but
   * never below a token storage holds: a grant must still go above every
   * token storage ever held for its shard (docs/protocol.md rule 23).
   */
  save(): () => void {
    const highest = Float64Array.from(this.highest)
    const ownerOf = [...this.ownerOf]
    const tokenOf = Float64Array.from(this.tokenOf)
    return () => {
      for (let s = 0; s < highest.length; s++) {
        this.highest[s] = Math.max(highest[s]!, this.stored[s]!)
        this.ownerOf[s] = ownerOf[s]!
        this.tokenOf[s] = tokenOf[s]!
      }
    }
  }

  /**
   * A member reads `shard` with `token` above what storage holds: its
   * grant's fence was never written, though a leader writes a step's fences
   * before it answers (docs/protocol.md, Host usage), so storage cannot
   * stop the previous owner.
   */
  unwritten(shard: number, token: number, stored: number, time: number): void {
    this.unwrittenReads++
    if (this.unwrittenReads > 3) return
    this.report({
      checker: "tokens",
      time,
      shard,
      message: `shard ${shard} read with owner token ${token} at ${fmt(time)} while storage holds ${stored}: the grant's fence was never written`,
    })
  }

  /**
   * Storage let a read or ack with `token` through on `shard` while the
   * shard's owner token is missing (evicted or deleted): rule 26 says a
   * missing token refuses every token, so a zombie cannot slip through.
   */
  missingAccepted(shard: number, token: number, what: string, time: number): void {
    this.missingPassed++
    if (this.missingPassed > 3) return
    this.report({
      checker: "tokens",
      time,
      shard,
      message: `shard ${shard}: storage accepted a ${what} with owner token ${token} at ${fmt(time)} while the shard's owner token is missing (rule 26: a missing token refuses every token)`,
    })
  }

  /** A leader writes `token` as shard `shard`'s owner token to storage. */
  fenceWrite(shard: number, token: number, time: number): void {
    if (token < this.stored[shard]!)
      this.report({
        checker: "tokens",
        time,
        shard,
        message: `shard ${shard}: owner token ${token} written to storage at ${fmt(time)} below its stored token ${this.stored[shard]!} (storage refuses it: OwnerTokenRegression)`,
      })
    else this.stored[shard] = token
  }
}
