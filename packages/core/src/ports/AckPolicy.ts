/**
 * The rule of the `xackdel` ack policy (docs/runtime.md, "Ack policies and
 * other groups"): an entry acknowledged by one group is deleted from the
 * shard stream only once every group of the stream is done with it
 * (delivered to it and not pending in it). Pure; the memory port's
 * acknowledge and the simulator's fan-out groups both decide with it, and
 * the Redis scripts implement the same rule (XACKDEL ... ACKED, or the
 * fallback script).
 *
 * @example
 * ```ts
 * import { AckPolicy } from "@shardline/core"
 * const groups = [{ delivered: 10, pending: new Set([7]) }, { delivered: 3, pending: new Set() }]
 * AckPolicy.doneByEveryGroup(groups, (g) => 5 <= g.delivered && !g.pending.has(5)) // false
 * ```
 *
 * @module
 */

/** True when `done(g)` holds for every group `g` of the stream. */
export const doneByEveryGroup = <G>(groups: Iterable<G>, done: (group: G) => boolean): boolean => {
  for (const g of groups) if (!done(g)) return false
  return true
}
