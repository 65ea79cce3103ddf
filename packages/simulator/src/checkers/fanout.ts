/**
 * Fan-out (docs/simulator.md, Fan-out; docs/runtime.md, "Ack policies and
 * other groups"): no group loses an entry. An entry deleted from a shard
 * stream (some group's `xackdel`) must have been acknowledged by every
 * group of the stream; by the end every fan-out group has acknowledged
 * every produced entry (the simulated group is held to it by the
 * message-loss checker). Kept from the acknowledgements the groups made,
 * not from the data plane's cursors and pending lists.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class FanOutChecker {
  /** Per group, per shard: acknowledged entry ids. */
  private readonly ackedBy: Array<Array<Set<number>>>
  deletionsChecked = 0
  private reported = 0

  constructor(
    private readonly report: Report,
    groups: number,
    shards: number,
    private readonly modes: ReadonlyArray<string>,
  ) {
    this.ackedBy = Array.from({ length: groups }, () =>
      Array.from({ length: groups > 1 ? shards : 0 }, () => new Set<number>()),
    )
  }

  acked(group: number, shard: number, id: number): void {
    this.ackedBy[group]![shard]!.add(id)
  }

  /** Entry `id` of `shard` was deleted from the stream. */
  deleted(shard: number, id: number, time: number): void {
    this.deletionsChecked++
    for (let g = 0; g < this.ackedBy.length; g++) {
      if (this.ackedBy[g]![shard]!.has(id)) continue
      if (++this.reported > 5) return
      this.report({
        checker: "fan-out",
        time,
        shard,
        message: `entry ${id} of shard ${shard} deleted at ${fmt(time)} while group ${g} (${this.modes[g]}) had not acknowledged it (ack modes ${this.modes.join(", ")})`,
      })
    }
  }

  /** The run ended: every fan-out group acknowledged every produced entry. */
  finish(time: number, produced: (shard: number) => number): void {
    for (let g = 1; g < this.ackedBy.length; g++) {
      let missing = 0
      let shards = 0
      for (let s = 0; s < this.ackedBy[g]!.length; s++) {
        const m = produced(s) - this.ackedBy[g]![s]!.size
        if (m > 0) {
          missing += m
          shards++
        }
      }
      if (missing > 0)
        this.report({
          checker: "fan-out",
          time,
          message: `group ${g} (${this.modes[g]}) never acknowledged ${missing} entries on ${shards} shard(s) (ack modes ${this.modes.join(", ")})`,
        })
    }
  }
}
