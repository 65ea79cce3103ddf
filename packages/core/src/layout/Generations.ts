/**
 * Shard layouts over time (docs/resharding.md).
 *
 * A stream's key space is the 32-bit hash space of `keyHash`. A generation
 * splits it into `shardCount` contiguous ranges; its shards get ids
 * `firstShard .. firstShard + shardCount - 1`, never reused by a later
 * generation, so a shard id alone names its Redis key (`{<stream>:<id>}`)
 * and nothing is renamed when the count changes. Contiguous ranges give
 * locality (as AWS KCL's split and merge): a shard of a new generation
 * overlaps few shards of the one before, and may be read as soon as those
 * are drained.
 */
import { keyHash } from "./KeyHash.js"

/** Size of the hash space: hashes are 0 .. 2^32 - 1. */
export const HASH_SPACE = 2 ** 32

/** One generation of a stream's layout. */
export interface Generation {
  readonly generation: number
  /** Id of its shard 0; ids of earlier generations are all below it. */
  readonly firstShard: number
  readonly shardCount: number
}

/** First hash of the `index`-th shard of a generation with `count` shards (exact integer math). */
const lowerBound = (index: number, count: number): number =>
  Math.floor((index * HASH_SPACE) / count)

/** The hash range `[lo, hi)` of shard `shard` of `g`. */
export const hashRange = (g: Generation, shard: number): readonly [number, number] => {
  const i = shard - g.firstShard
  return [lowerBound(i, g.shardCount), lowerBound(i + 1, g.shardCount)]
}

/** Is `shard` one of `g`'s shards? */
export const contains = (g: Generation, shard: number): boolean =>
  Number.isInteger(shard) && shard >= g.firstShard && shard < g.firstShard + g.shardCount

/** The shard of `g` that owns hash `h` (0 <= h < 2^32). */
export const shardOfHash = (g: Generation, h: number): number => {
  // floor(h * count / 2^32) without losing precision: h < 2^32, count <= 2^16.
  let i = Math.floor((h * g.shardCount) / HASH_SPACE)
  // Guard the boundaries against rounding: lowerBound(i) <= h < lowerBound(i + 1).
  while (i > 0 && lowerBound(i, g.shardCount) > h) i--
  while (i < g.shardCount - 1 && lowerBound(i + 1, g.shardCount) <= h) i++
  return g.firstShard + i
}

/**
 * The shard a producer appends `key` to under generation `g`.
 *
 * @example
 * ```ts
 * shardOf({ generation: 0, firstShard: 0, shardCount: 16 }, "customer-42")
 * ```
 */
export const shardOf = (g: Generation, key: string): number => shardOfHash(g, keyHash(key))

/** Shards of `of` whose hash ranges overlap shard `shard` of `g`, ascending (either may be older). */
export const overlapping = (of: Generation, g: Generation, shard: number): Array<number> => {
  const [lo, hi] = hashRange(g, shard)
  const first = shardOfHash(of, lo)
  const last = shardOfHash(of, hi - 1)
  const out: Array<number> = []
  for (let s = first; s <= last; s++) out.push(s)
  return out
}

/** The generation that follows `g` with `shardCount` shards (ids continue after `g`'s). */
export const next = (g: Generation, shardCount: number): Generation => ({
  generation: g.generation + 1,
  firstShard: g.firstShard + g.shardCount,
  shardCount,
})
