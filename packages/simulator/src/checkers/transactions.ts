/**
 * Exactly-once effects of transactional handlers (docs/simulator.md,
 * Transactions). Each message's handler has one effect, buffered and applied
 * only by the commit that acknowledges it: the message's key's counter goes
 * up by one and one output entry for it lands on a second (simulated)
 * stream. This checker sees only the applied effects and the produced
 * messages: at the end of the run (after the quiet tail) every produced
 * message's effect applied exactly once, every key's counter equals the
 * number of messages of that key, and each key's outputs are in production
 * order. A violation is one report with the full counts.
 *
 * @module
 */
import type { Report } from "./types.js"

/** Keys listed by name in a report; the rest are counted. */
const LISTED = 5

export class TransactionChecker {
  /** Per shard, per message id: its key, its sequence number within the key, effects applied (saturating at 255). */
  private keyOf: Array<Int32Array>
  private seqOf: Array<Int32Array>
  private applied: Array<Uint8Array>
  private readonly producedN: Int32Array
  /** Per key: messages produced, the counter, the output stream's newest sequence number (-1: none). */
  private readonly nextSeq: Int32Array
  private readonly counter: Int32Array
  private readonly lastOut: Int32Array
  effects = 0
  /** Effects applied again, and outputs that landed behind a later message of their key. */
  duplicates = 0
  outOfOrder = 0

  constructor(
    shards: number,
    private readonly keys: number,
    private readonly keyName: (key: number) => string,
  ) {
    this.keyOf = Array.from({ length: shards }, () => new Int32Array(64))
    this.seqOf = Array.from({ length: shards }, () => new Int32Array(64))
    this.applied = Array.from({ length: shards }, () => new Uint8Array(64))
    this.producedN = new Int32Array(shards)
    this.nextSeq = new Int32Array(keys)
    this.counter = new Int32Array(keys)
    this.lastOut = new Int32Array(keys).fill(-1)
  }

  /** The key of message `id` of `shard` (as produced). */
  keyAt(shard: number, id: number): number {
    return this.keyOf[shard]![id]!
  }

  /** Message `id` of `shard` carries `key` (0 <= key < keys). */
  produced(shard: number, id: number, key: number): void {
    if (id >= this.keyOf[shard]!.length) {
      this.keyOf[shard] = grow(this.keyOf[shard]!, id)
      this.seqOf[shard] = grow(this.seqOf[shard]!, id)
      const a = new Uint8Array(this.keyOf[shard]!.length)
      a.set(this.applied[shard]!)
      this.applied[shard] = a
    }
    this.keyOf[shard]![id] = key
    this.seqOf[shard]![id] = this.nextSeq[key]!++
    if (id >= this.producedN[shard]!) this.producedN[shard] = id + 1
  }

  /** The effect of message `id` of `shard` is applied (its counter increment and its output). */
  apply(shard: number, id: number): void {
    this.effects++
    const a = this.applied[shard]![id]!
    if (a > 0) this.duplicates++
    if (a < 255) this.applied[shard]![id] = a + 1
    const key = this.keyOf[shard]![id]!
    this.counter[key]!++
    const seq = this.seqOf[shard]![id]!
    const last = this.lastOut[key]!
    if (seq > last) this.lastOut[key] = seq
    else if (a === 0) this.outOfOrder++
  }

  /** Effects applied to message `id` of `shard` so far (saturates at 255). */
  appliedCount(shard: number, id: number): number {
    return this.applied[shard]![id] ?? 0
  }

  /** Judges the run: one violation with the full counts, or none. Returns the number of messages whose effect is wrong. */
  finish(time: number, report: Report): number {
    let missing = 0
    let repeated = 0
    let messages = 0
    for (let s = 0; s < this.producedN.length; s++) {
      const a = this.applied[s]!
      for (let id = 0; id < this.producedN[s]!; id++) {
        messages++
        if (a[id] === 0) missing++
        else if (a[id]! > 1) repeated++
      }
    }
    let badKeys = 0
    const listed: Array<string> = []
    for (let k = 0; k < this.keys; k++) {
      if (this.counter[k] === this.nextSeq[k]) continue
      badKeys++
      if (listed.length < LISTED)
        listed.push(`${this.keyName(k)}: counter ${this.counter[k]}, messages ${this.nextSeq[k]}`)
    }
    const bad = missing + repeated
    if (bad > 0 || badKeys > 0 || this.outOfOrder > 0)
      report({
        checker: "transactions",
        time,
        message: `effects not exactly once: of ${messages} message(s), ${missing} never applied, ${repeated} applied more than once (${this.duplicates} extra application(s) in all), ${this.outOfOrder} output(s) behind a later message of their key; ${badKeys} key counter(s) wrong${listed.length > 0 ? `: ${listed.join(", ")}${badKeys > LISTED ? `, and ${badKeys - LISTED} more` : ""}` : ""}`,
      })
    return bad
  }
}

const grow = (a: Int32Array, id: number): Int32Array => {
  const next = new Int32Array(Math.max(a.length * 2, id + 1))
  next.set(a)
  return next
}
