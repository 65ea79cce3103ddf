/**
 * The cluster outbox relay (`outbox-relay` with `--tx`; docs/exactly-once.md,
 * "Redis Cluster and the outbox"): sends are exactly once by relay. From
 * facts only (a commit wrote an entry to an outbox, with its key, its
 * per-key sequence and the target its commit routed it to; an entry was
 * appended to a target shard; the shards each target layout routes a key
 * to), it checks:
 * - every entry is delivered exactly once (a second append is reported at
 *   once);
 * - to its routed target: the shard its commit routed it to, or its key's
 *   shard in a newer layout of the target stream (a re-route), never
 *   anything else;
 * - per key, in production order: a key's entry never lands behind a later
 *   entry of the same key;
 * - nothing stranded: at the end of the run (after the quiet tail, faults
 *   off) every entry was delivered.
 *
 * @module
 */
import type { OutboxEntry } from "../outbox.js"
import { fmt, type Report } from "./types.js"

export class OutboxChecker {
  committedN = 0
  deliveredN = 0
  private readonly deliveries = new Map<number, number>()
  private readonly lastSeq = new Map<number, number>()
  private readonly pendingEntries = new Map<number, OutboxEntry>()

  constructor(
    private readonly report: Report,
    /** The shards the target stream's layouts route `key` to, from `from`'s layout on. */
    private readonly routedTargets: (key: number, from: number) => ReadonlyArray<number>,
  ) {}

  committed(e: OutboxEntry): void {
    this.committedN++
    this.pendingEntries.set(e.id, e)
  }

  delivered(time: number, e: OutboxEntry, target: number): void {
    this.deliveredN++
    const n = (this.deliveries.get(e.id) ?? 0) + 1
    this.deliveries.set(e.id, n)
    this.pendingEntries.delete(e.id)
    if (n > 1)
      this.report({
        checker: "outbox",
        time,
        shard: e.source,
        message: `outbox entry ${e.id} of shard ${e.source} (key ${e.key}) delivered ${n} times, now to target ${target}`,
      })
    if (!this.routedTargets(e.key, e.target).includes(target))
      this.report({
        checker: "outbox",
        time,
        shard: e.source,
        message: `outbox entry ${e.id} of shard ${e.source} (key ${e.key}, routed to ${e.target}) delivered to target ${target}, not a shard its key routes to`,
      })
    const last = this.lastSeq.get(e.key) ?? -1
    if (n === 1 && e.seq < last)
      this.report({
        checker: "outbox",
        time,
        shard: e.source,
        message: `key ${e.key}: its send #${e.seq} (outbox entry ${e.id} of shard ${e.source}) delivered after its send #${last}`,
      })
    if (e.seq > last) this.lastSeq.set(e.key, e.seq)
  }

  /** End of run: every committed entry delivered. */
  finish(time: number): void {
    if (this.pendingEntries.size === 0) return
    const first = [...this.pendingEntries.values()].slice(0, 5)
    this.report({
      checker: "outbox",
      time,
      message: `${this.pendingEntries.size} of ${this.committedN} outbox entries never delivered at ${fmt(time)} (stranded), first: ${first.map((e) => `${e.id} of shard ${e.source}`).join(", ")}`,
    })
  }
}
