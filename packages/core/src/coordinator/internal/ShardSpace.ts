/**
 * Which shards a group works with while its layout migrates
 * (docs/resharding.md): the shards of the current layout, plus the shards of
 * earlier generations it has not drained yet. A shard may be granted only
 * when every shard of an earlier generation overlapping its hash range is
 * drained, so every message of a key written under an older layout is
 * acknowledged before any message of that key under a newer one is read.
 */
import { contains, overlapping } from "../../layout/Generations.js"
import type { ShardLayout } from "../../protocol/Heartbeat.js"

/** What the group knows of its layouts. */
export interface LayoutView {
  /** The current (newest) generation. */
  readonly layout: ShardLayout
  /** Earlier generations still being drained, oldest first. */
  readonly generations: ReadonlyArray<ShardLayout>
  readonly isDrained: (shard: number) => boolean
}

/** Number of shard ids ever used up to the current layout: arrays are this long. */
export const shardSpace = (layout: ShardLayout): number => layout.firstShard + layout.shardCount

/** Shards the group assigns: undrained shards of earlier generations, then the current ones. */
export const activeShards = (view: LayoutView): Array<number> => {
  const out: Array<number> = []
  for (const g of view.generations)
    for (let s = g.firstShard; s < g.firstShard + g.shardCount; s++)
      if (!view.isDrained(s)) out.push(s)
  for (let s = view.layout.firstShard; s < shardSpace(view.layout); s++) out.push(s)
  return out
}

/** The generation `shard` belongs to, among the live ones (undefined: retired or unknown). */
export const generationOf = (view: LayoutView, shard: number): ShardLayout | undefined => {
  if (contains(view.layout, shard)) return view.layout
  return view.generations.find((g) => contains(g, shard))
}

/** Is `shard` one of an earlier generation (one the group drains, never a current one)? */
export const isEarlier = (view: LayoutView, shard: number): boolean =>
  view.generations.some((g) => contains(g, shard))

/**
 * May `shard` not be read yet? True while a shard of an earlier generation
 * overlapping its hash range is not drained.
 */
export const blocked = (view: LayoutView, shard: number): boolean => {
  const own = generationOf(view, shard)
  if (own === undefined) return false
  for (const g of view.generations) {
    if (g.generation >= own.generation) break
    for (const s of overlapping(g, own, shard)) if (!view.isDrained(s)) return true
  }
  return false
}

/** Shards of later generations whose hash ranges overlap `shard` (they may unblock when it drains). */
export const dependents = (view: LayoutView, shard: number): Array<number> => {
  const own = generationOf(view, shard)
  if (own === undefined) return []
  const out: Array<number> = []
  for (const g of [...view.generations, view.layout])
    if (g.generation > own.generation) out.push(...overlapping(g, own, shard))
  return out
}
