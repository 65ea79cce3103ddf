/**
 * Ownership as members believe and act on it, whatever storage says: two
 * processes that both hold a valid grant for one shard (their machine started
 * it with a token, their lease is valid by their own clock) and both read it
 * are a violation, even when storage refuses one of them. This is what the
 * protocol promises before the storage fence.
 *
 * No overlap is excused (docs/protocol.md rule 19): a fence, a revoke or
 * confirmation timeout, or a replacement by a newer process holds the shards
 * until the old holder's lease has provably ended or it proved it stopped,
 * so a zombie whose lifecycle the coordinator ended can never overlap the
 * next owner. (Earlier versions excused zombies fenced or replaced before
 * the other holder's grant; nothing a real process can hit is excused now.)
 *
 * Checked whenever a process acts on a shard (each read attempt and each
 * handled batch), against every other holder of the shard.
 *
 * @module
 */

import { fmt, type Report } from "./types.js"

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
  checks = 0

  constructor(
    shards: number,
    private readonly report: Report,
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
}
