/** Baseline assignors the sticky assignor is compared with. */
import * as HashRing from "effect/HashRing"
import * as PrimaryKey from "effect/PrimaryKey"

/** `shard % members` over the members sorted by id. Ignores the previous assignment. */
export const roundRobin = (
  shardCount: number,
  members: ReadonlyArray<string>,
): Array<string | null> => {
  const ids = [...members].sort()
  const owners = new Array<string | null>(shardCount)
  for (let s = 0; s < shardCount; s++) owners[s] = ids.length === 0 ? null : ids[s % ids.length]!
  return owners
}

/** A ring node: effect's HashRing keys nodes by `PrimaryKey`. */
export interface RingNode extends PrimaryKey.PrimaryKey {
  readonly id: string
}

const ringNode = (id: string): RingNode => ({
  id,
  [PrimaryKey.symbol]: () => id,
})

/** A ring holding `members` (default weight, 128 virtual nodes each as in effect's cluster). */
export const makeRing = (members: ReadonlyArray<string>): HashRing.HashRing<RingNode> =>
  HashRing.addMany(HashRing.make<RingNode>(), members.map(ringNode))

/**
 * The consistent-hashing assignment effect's cluster uses (`HashRing.getShards`),
 * as owner ids. This is the timed call; building the ring is not (the cluster
 * keeps its ring up to date incrementally).
 */
export const hashRingShards = (
  ring: HashRing.HashRing<RingNode>,
  shardCount: number,
): ReadonlyArray<RingNode> | undefined => HashRing.getShards(ring, shardCount)

/** {@link hashRingShards} mapped to owner ids (`null` everywhere for an empty ring). */
export const hashRingAssign = (
  ring: HashRing.HashRing<RingNode>,
  shardCount: number,
): Array<string | null> => {
  const nodes = hashRingShards(ring, shardCount)
  return nodes === undefined ? new Array(shardCount).fill(null) : nodes.map((n) => n.id)
}
