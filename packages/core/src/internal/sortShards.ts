/**
 * Ascending sorts of shard lists, in place. Every heartbeat sorts a few short
 * lists (a request's owned, revoking and drained shards; a member's targeted
 * and revoking shards at the coordinator), and `Array.prototype.sort`
 * allocates a work array per call: ~0.25 us for two items on Node 20, more
 * than the rest of building the list (docs/simulator.md, Speed). Short lists
 * (the usual case) use an insertion sort; longer ones the built-in sort.
 * Both are stable; shard ids in one list are distinct anyway.
 */

const SHORT = 16

/** Sorts shard ids ascending, in place; returns `shards`. */
export const sortShards = (shards: Array<number>): Array<number> => {
  const n = shards.length
  if (n > SHORT) return shards.sort((a, b) => a - b)
  for (let i = 1; i < n; i++) {
    const x = shards[i]!
    let j = i - 1
    while (j >= 0 && shards[j]! > x) {
      shards[j + 1] = shards[j]!
      j--
    }
    shards[j + 1] = x
  }
  return shards
}

/** Sorts items by their `shard`, ascending, in place; returns `items`. */
export const sortByShard = <A extends { readonly shard: number }>(items: Array<A>): Array<A> => {
  const n = items.length
  if (n > SHORT) return items.sort((a, b) => a.shard - b.shard)
  for (let i = 1; i < n; i++) {
    const x = items[i]!
    let j = i - 1
    while (j >= 0 && items[j]!.shard > x.shard) {
      items[j + 1] = items[j]!
      j--
    }
    items[j + 1] = x
  }
  return items
}
