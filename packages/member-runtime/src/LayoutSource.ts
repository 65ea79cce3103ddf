/**
 * Where a producer learns a stream's shard layout (docs/runtime.md,
 * "Producer"). Today a layout is the group config's shard count at
 * generation 0 (`fixed`); resharding will add a stream-layout port that a
 * `LayoutSource` reads, and producers already call `refresh` when an append
 * is refused with `ShardSealed`.
 *
 * @example
 * const layout = LayoutSource.fixed({ orders: 16 })
 * const generation = yield* layout.current("orders") // { generation: 0, firstShard: 0, shardCount: 16 }
 */
import type { Layout } from "@shardline/core"
import { Effect } from "effect"
import { UnknownStream } from "./Errors.js"

export interface LayoutSource {
  /** The layout producers route `stream`'s keys by now. */
  readonly current: (stream: string) => Effect.Effect<Layout.Generation, UnknownStream>
  /** Look again after an append was refused as sealed: a newer layout, or the same. */
  readonly refresh: (stream: string) => Effect.Effect<Layout.Generation, UnknownStream>
}

/** Generation 0 of each stream, with the given shard counts; `refresh` returns the same. */
export const fixed = (shardCounts: Readonly<Record<string, number>>): LayoutSource => {
  const get = (stream: string): Effect.Effect<Layout.Generation, UnknownStream> => {
    const shardCount = Object.hasOwn(shardCounts, stream) ? shardCounts[stream] : undefined
    return shardCount === undefined
      ? Effect.fail(new UnknownStream({ stream }))
      : Effect.succeed({ generation: 0, firstShard: 0, shardCount })
  }
  return { current: get, refresh: get }
}

/**
 * A layout source over mutable generations (tests, tools): `set` installs a
 * newer generation, as a reshard would.
 */
export const mutable = (
  initial: Readonly<Record<string, Layout.Generation>>,
): LayoutSource & { readonly set: (stream: string, generation: Layout.Generation) => void } => {
  const generations = new Map(Object.entries(initial))
  const get = (stream: string): Effect.Effect<Layout.Generation, UnknownStream> => {
    const g = generations.get(stream)
    return g === undefined ? Effect.fail(new UnknownStream({ stream })) : Effect.succeed(g)
  }
  return {
    current: get,
    refresh: get,
    set: (stream, generation) => {
      generations.set(stream, generation)
    },
  }
}
