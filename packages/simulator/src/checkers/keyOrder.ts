/**
 * Per-key order across layout generations (docs/resharding.md, the
 * guarantee), judged from data-plane facts only: which key each message
 * carries, the generation it was written under, and when it is delivered,
 * handled and acknowledged. It does not look at layouts, seals, drain states
 * or the coordinator.
 *
 * Two rules, per key:
 * - **acknowledged before delivered**: when a message written under
 *   generation g is delivered (read), every message of the key written under
 *   an earlier generation has been acknowledged.
 * - **handled in production order**: the first handling of each message comes
 *   after the first handling of every earlier message of the key (a
 *   re-delivered prefix, at least once, is allowed: only a message handled
 *   for the first time ahead of an earlier one that was never handled is a
 *   violation).
 *
 * It also measures how long a key's consumption pauses at a cutover: from
 * the later of its last earlier-generation acknowledgement and its first
 * newer-generation message's append, to that message's first delivery.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

/** Generations a run can go through (reshard scenarios have at most three). */
const GENS = 4

export class KeyOrderChecker {
  /** Per shard, per message id: its key and its sequence number within the key. */
  private keyOf: Array<Int32Array>
  private seqOf: Array<Int32Array>
  private readonly genOfShard: Int32Array
  /** Per key: messages produced, first handlings in order, per generation produced / acknowledged. */
  private readonly nextSeq: Int32Array
  private readonly handledUpTo: Int32Array
  private readonly producedGen: Int32Array
  private readonly ackedGen: Int32Array
  /** Per key and generation: the last first-acknowledgement, the first append. */
  private readonly lastAckAt: Float64Array
  private readonly firstProducedAt: Float64Array
  /** Per key: the newest generation delivered so far. */
  private readonly deliveredGen: Int32Array
  /** Cutover pauses (ms), one per key and newer generation reached. */
  readonly pausesMs: Array<number> = []
  private readonly reported = new Set<number>()
  delivered = 0
  crossGeneration = 0

  constructor(
    shards: number,
    keys: number,
    private readonly report: Report,
    private readonly keyName: (key: number) => string,
  ) {
    this.keyOf = Array.from({ length: shards }, () => new Int32Array(64))
    this.seqOf = Array.from({ length: shards }, () => new Int32Array(64))
    this.genOfShard = new Int32Array(shards).fill(-1)
    this.nextSeq = new Int32Array(keys)
    this.handledUpTo = new Int32Array(keys)
    this.producedGen = new Int32Array(keys * GENS)
    this.ackedGen = new Int32Array(keys * GENS)
    this.lastAckAt = new Float64Array(keys * GENS)
    this.firstProducedAt = new Float64Array(keys * GENS).fill(-1)
    this.deliveredGen = new Int32Array(keys).fill(-1)
  }

  /** Message `id` of `shard` carries `key`, written under `generation`. */
  produced(shard: number, id: number, key: number, generation: number, time = 0): void {
    if (id >= this.keyOf[shard]!.length) {
      this.keyOf[shard] = grow(this.keyOf[shard]!, id)
      this.seqOf[shard] = grow(this.seqOf[shard]!, id)
    }
    this.keyOf[shard]![id] = key
    this.seqOf[shard]![id] = this.nextSeq[key]!++
    this.genOfShard[shard] = generation
    this.producedGen[key * GENS + generation]!++
    if (this.firstProducedAt[key * GENS + generation]! < 0)
      this.firstProducedAt[key * GENS + generation] = time
  }

  /** Message `id` of `shard` is delivered (read) to a member at `time`. */
  deliver(time: number, shard: number, id: number): void {
    this.delivered++
    const key = this.keyOf[shard]![id]!
    const g = this.genOfShard[shard]!
    if (g > this.deliveredGen[key]!) {
      this.deliveredGen[key] = g
      let since = this.firstProducedAt[key * GENS + g]!
      let earlier = false
      for (let e = 0; e < g; e++)
        if (this.producedGen[key * GENS + e]! > 0) {
          earlier = true
          since = Math.max(since, this.lastAckAt[key * GENS + e]!)
        }
      if (earlier) this.pausesMs.push(Math.max(0, time - since))
    }
    for (let e = 0; e < g; e++) {
      const produced = this.producedGen[key * GENS + e]!
      if (produced === 0) continue
      this.crossGeneration++
      const acked = this.ackedGen[key * GENS + e]!
      if (acked < produced)
        this.violate(
          time,
          shard,
          key,
          `key ${this.keyName(key)}: message ${this.seqOf[shard]![id]} (generation ${g}, shard ${shard}) delivered at ${fmt(time)} while ${produced - acked} of its ${produced} message(s) written under generation ${e} are not acknowledged`,
        )
    }
  }

  /** Message `id` of `shard` is handled at `time`. */
  handle(time: number, shard: number, id: number): void {
    const key = this.keyOf[shard]![id]!
    const seq = this.seqOf[shard]![id]!
    const next = this.handledUpTo[key]!
    if (seq === next) this.handledUpTo[key] = next + 1
    else if (seq > next)
      this.violate(
        time,
        shard,
        key,
        `key ${this.keyName(key)}: message ${seq} (shard ${shard}) handled at ${fmt(time)} before message ${next} of the key was ever handled`,
      )
  }

  /** Message `id` of `shard` is acknowledged for the first time. */
  acked(shard: number, id: number, time = 0): void {
    const key = this.keyOf[shard]![id]!
    const i = key * GENS + this.genOfShard[shard]!
    this.ackedGen[i]!++
    this.lastAckAt[i] = time
  }

  private violate(time: number, shard: number, key: number, message: string): void {
    if (this.reported.has(key)) return
    this.reported.add(key)
    this.report({ checker: "key-order", time, shard, message })
  }
}

const grow = (a: Int32Array, id: number): Int32Array => {
  const next = new Int32Array(Math.max(a.length * 2, id + 1))
  next.set(a)
  return next
}
