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
  private acked: Array<Uint8Array>
  private handled: Array<Uint8Array>
  duplicates = 0
  handledTotal = 0
  ackedTotal = 0
  producedTotal = 0
  /** After `finish`: messages never acknowledged, and the shards they are on. */
  lostMessages = 0
  lostShards = 0

  constructor(shards: number) {
    this.produced = new Int32Array(shards)
    this.acked = Array.from({ length: shards }, () => new Uint8Array(64))
    this.handled = Array.from({ length: shards }, () => new Uint8Array(64))
  }

  produce(shard: number): number {
    const id = this.produced[shard]!
    this.produced[shard] = id + 1
    this.producedTotal++
    ensure(this.acked, shard, id)
    ensure(this.handled, shard, id)
    return id
  }

  handle(shard: number, id: number): void {
    const h = this.handled[shard]!
    if (h[id]! > 0) this.duplicates++
    if (h[id]! < 255) h[id] = h[id]! + 1
    this.handledTotal++
  }

  ack(shard: number, id: number): void {
    const a = this.acked[shard]!
    if (a[id] === 0) this.ackedTotal++
    if (a[id]! < 255) a[id] = a[id]! + 1
  }

  /** How often message `id` of `shard` was acknowledged (saturates at 255). */
  ackedCount(shard: number, id: number): number {
    return this.acked[shard]![id] ?? 0
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
      const a = this.acked[s]!
      let first = -1
      let count = 0
      for (let id = 0; id < this.produced[s]!; id++)
        if (a[id] === 0) {
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

const ensure = (arrays: Array<Uint8Array>, shard: number, id: number): void => {
  const cur = arrays[shard]!
  if (id < cur.length) return
  const next = new Uint8Array(Math.max(cur.length * 2, id + 1))
  next.set(cur)
  arrays[shard] = next
}
