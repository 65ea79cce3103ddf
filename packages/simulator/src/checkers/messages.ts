/**
 * No message lost: every produced message is acknowledged at least once by
 * the end of the run (the liveness phase, plus the quiet tail while a group
 * still works off its backlog: see `Simulation`). Duplicates (handled more
 * than once) are counted; exact runs allow none (the exactness checker).
 * A loss is one violation with the full counts (messages, shards) and the
 * first few shards, so a report of thousands stays readable.
 *
 * @module
 */
import type { Report } from "./types.js"

/** Shards listed by name in a loss report; the rest are counted. */
const LISTED = 5

export class MessageChecker {
  private produced: Int32Array
  /**
   * Per shard, two counters per message (saturating at 255): handled at
   * `2 * id`, acknowledged at `2 * id + 1`, side by side in one array (one
   * cache line for both on the hot path; docs/simulator.md, Speed).
   */
  private counts: Array<Uint8Array>
  duplicates = 0
  handledTotal = 0
  ackedTotal = 0
  producedTotal = 0
  /** After `finish`: messages never acknowledged, and the shards they are on. */
  lostMessages = 0
  lostShards = 0
  /** Messages a vanished stream took that a member reported lost (rule 26). */
  reportedLost = 0
  private readonly vanished = new Map<number, Array<number>>()

  constructor(shards: number) {
    this.produced = new Int32Array(shards)
    this.counts = Array.from({ length: shards }, () => new Uint8Array(128))
  }

  produce(shard: number): number {
    const id = this.produced[shard]!
    this.produced[shard] = id + 1
    this.producedTotal++
    const cur = this.counts[shard]!
    if (2 * id + 1 >= cur.length) {
      const next = new Uint8Array(Math.max(cur.length * 2, 2 * id + 2))
      next.set(cur)
      this.counts[shard] = next
    }
    return id
  }

  handle(shard: number, id: number): void {
    const c = this.counts[shard]!
    const h = c[2 * id]!
    if (h > 0) this.duplicates++
    if (h < 255) c[2 * id] = h + 1
    this.handledTotal++
  }

  ack(shard: number, id: number): void {
    const c = this.counts[shard]!
    const a = c[2 * id + 1]!
    if (a === 0) this.ackedTotal++
    if (a < 255) c[2 * id + 1] = a + 1
  }

  /** How often message `id` of `shard` was acknowledged (saturates at 255). */
  ackedCount(shard: number, id: number): number {
    return this.counts[shard]![2 * id + 1] ?? 0
  }

  /**
   * Messages `from`..`to` (exclusive) of `shard` vanished with its stream
   * (the `evict` fault); those not acknowledged yet are lost, and must be
   * reported lost (`reportLost`) by the member that finds the stream gone:
   * nothing is lost in silence (docs/protocol.md rule 26).
   */
  vanish(shard: number, from: number, to: number): void {
    let list = this.vanished.get(shard)
    if (list === undefined) {
      list = []
      this.vanished.set(shard, list)
    }
    for (let id = from; id < to; id++) if (this.ackedCount(shard, id) === 0) list.push(id)
  }

  /** A member found `shard`'s stream gone and said so: what it took is lost, not lost in silence. */
  reportLost(shard: number): void {
    const list = this.vanished.get(shard)
    if (list === undefined) return
    for (const id of list) {
      const c = this.counts[shard]!
      if (c[2 * id + 1] === 0) {
        // settled: counted with the acknowledged, so the quiet tail ends
        c[2 * id + 1] = 1
        this.ackedTotal++
        this.reportedLost++
      }
    }
    this.vanished.delete(shard)
  }

  producedOn(shard: number): number {
    return this.produced[shard]!
  }

  /**
   * Counts the messages never acknowledged and their shards; reports them as
   * one violation (full counts, the first few shards by name). Returns the
   * number of messages lost. `why` says how the run ended, for the report.
   */
  finish(time: number, report: Report, why = ""): number {
    let lost = 0
    let shards = 0
    const listed: Array<string> = []
    let firstShard: number | undefined
    for (let s = 0; s < this.produced.length; s++) {
      const c = this.counts[s]!
      let first = -1
      let count = 0
      for (let id = 0; id < this.produced[s]!; id++)
        if (c[2 * id + 1] === 0) {
          if (first < 0) first = id
          count++
        }
      if (count === 0) continue
      lost += count
      shards++
      firstShard ??= s
      if (listed.length < LISTED) listed.push(`shard ${s}: ${count} (first id ${first})`)
    }
    this.lostMessages = lost
    this.lostShards = shards
    if (lost > 0)
      report({
        checker: "message-loss",
        time,
        shard: firstShard,
        message: `${lost} message(s) on ${shards} shard(s) never acknowledged${why === "" ? "" : ` (${why})`}: ${listed.join(", ")}${shards > LISTED ? `, and ${shards - LISTED} more shard(s)` : ""}`,
      })
    return lost
  }
}
