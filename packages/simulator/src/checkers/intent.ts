/**
 * Ownership as members believe and act on it, whatever storage says: two
 * processes that both hold a valid grant for one shard (their machine started
 * it with a token, their lease is valid by their own clock) and both read it
 * are a violation, even when storage refuses one of them. This is what the
 * protocol promises before the storage fence: a fence that refuses a read
 * hides a coordinator or member bug from the storage-level checker, not from
 * this one.
 *
 * The one overlap the protocol allows by design is a zombie whose lifecycle
 * the coordinator ended (fenced for a revoke/confirmation timeout or an
 * invalid report, replaced by a newer incarnation, or restarted by its own
 * process's newer join) no later than the other holder's grant: the member
 * cannot know yet, and the fence token is what stops it (`exempted` counts
 * them). A session expiry is no such excuse: the member's own lease must
 * have run out first (the lease checker).
 *
 * Checked whenever a process acts on a shard (each read attempt and each
 * handled batch), against every other holder of the shard.
 *
 * @module
 */

import { fmt, type Report } from "./types.js"
import type { LifecycleEnd } from "./view.js"

export interface Holder {
  readonly proc: number
  readonly label: string
  readonly memberId: string
  readonly epoch: number
  readonly token: number
  /** Revision of the grant of `token` (undefined if unknown: never exempting). */
  readonly grantRev: number | undefined
  /** Still holding this grant: its loop for `token` runs, its lease is valid, it is honest. */
  active(): boolean
}

export class IntentChecker {
  private readonly holders: Array<Array<Holder>>
  /** Pairs already reported (shard, two processes): one violation each. */
  private readonly reported = new Set<string>()
  exempted = 0
  /** Of `exempted`: zombies of a lifecycle ended by the same process's newer join. */
  ownRejoin = 0
  checks = 0

  constructor(
    shards: number,
    private readonly report: Report,
    private readonly ended: (memberId: string, epoch: number) => LifecycleEnd | undefined,
    /** Excuse own-rejoin zombies (finding F1); off with `--strict`. */
    private readonly excuseOwnRejoin = true,
  ) {
    this.holders = Array.from({ length: shards }, () => [])
  }

  /** A process started its read loop of `shard` (StartShard). */
  hold(shard: number, h: Holder): void {
    const list = this.holders[shard]!
    for (let i = 0; i < list.length; i++)
      if (list[i]!.proc === h.proc) {
        list[i] = h
        return
      }
    list.push(h)
  }

  /** The process's loop of `shard` ended (drained, dropped, process gone). */
  release(shard: number, proc: number): void {
    const list = this.holders[shard]!
    for (let i = 0; i < list.length; i++)
      if (list[i]!.proc === proc) {
        list.splice(i, 1)
        return
      }
  }

  /** `h` acts on `shard` now (a read attempt or a handled batch) with a valid lease. */
  act(time: number, shard: number, h: Holder): void {
    const list = this.holders[shard]!
    if (list.length < 2) return
    for (const other of list) {
      if (other.proc === h.proc || !other.active()) continue
      this.checks++
      if (this.excused(other, h) || this.excused(h, other)) {
        this.exempted++
        continue
      }
      const key = `${shard}:${Math.min(h.proc, other.proc)}:${Math.max(h.proc, other.proc)}`
      if (this.reported.has(key)) return
      this.reported.add(key)
      this.report({
        checker: "intent",
        time,
        shard,
        message: `shard ${shard}: ${h.label} (token ${h.token}) reads it at ${fmt(time)} while ${other.label} (token ${other.token}) still holds a valid grant for it`,
      })
      return
    }
  }

  /**
   * `zombie` (the lower token) was ended by the coordinator no later than
   * `owner`'s grant: fenced in an earlier commit (docs/protocol.md rule 2:
   * nobody is granted a fenced member's shards in the fence's own result),
   * or replaced by a newer incarnation (the new process may be granted the
   * same shards in the replacing commit, with new tokens written first).
   */
  private excused(zombie: Holder, owner: Holder): boolean {
    if (!(zombie.token < owner.token) || owner.grantRev === undefined) return false
    const end = this.ended(zombie.memberId, zombie.epoch)
    if (end === undefined) return false
    if (end.kind === "MemberFenced") return end.rev < owner.grantRev
    if (end.kind === "MemberReplaced") return end.rev <= owner.grantRev
    if (this.excuseOwnRejoin && end.kind === "MemberRejoined" && end.rev <= owner.grantRev) {
      // The zombie's own process sent a newer join while an older one was
      // still in the network and accepted the older one's answer; the newer
      // join then ended that lifecycle. Only the storage fence stops it
      // (finding F1 in docs/simulator.md).
      this.ownRejoin++
      return true
    }
    return false
  }
}
