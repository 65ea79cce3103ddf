/**
 * Where a producer learns a stream's shard layout (docs/runtime.md,
 * "Producer"): `fixed` (a shard count at generation 0: the group config's,
 * for streams without a stored layout) or `fromStreamLayouts` (the stream's
 * layout record in core's `StreamLayouts` port, which resharding changes).
 * Producers call `refresh` when an append is refused with `ShardSealed`.
 *
 * @example
 * const layout = LayoutSource.fixed({ orders: 16 })
 * const generation = yield* layout.current("orders") // { generation: 0, firstShard: 0, shardCount: 16 }
 */
import { Layout, type StreamLayouts } from "@shardline/core"
import { Effect, Option } from "effect"
import { LayoutUnavailable, UnknownStream } from "./Errors.js"

export type LayoutError = UnknownStream | LayoutUnavailable

/** `UnknownStream` with what to do about it. */
export const unknownStream = (stream: string): UnknownStream =>
  new UnknownStream({
    stream,
    message: `stream ${JSON.stringify(stream)} has no shard layout yet: no consumer group has created it (a group's coordinator stores the layout when the group first starts) and this producer was given none. Start a consumer of the stream first, or give the producer the layout its consumers will use: runtime.producer(${JSON.stringify(stream)}, { layout: LayoutSource.fixed({ ${JSON.stringify(stream)}: <the group's shardCount> }) })`,
  })

/** Where a producer learns a stream's layout (shard count and generation) to route keys by. */
export interface LayoutSource {
  /** The layout producers route `stream`'s keys by now. */
  readonly current: (stream: string) => Effect.Effect<Layout.Generation, LayoutError>
  /** Look again after an append was refused as sealed: a newer layout, or the same. */
  readonly refresh: (stream: string) => Effect.Effect<Layout.Generation, LayoutError>
}

/** Generation 0 of each stream, with the given shard counts; `refresh` returns the same. */
export const fixed = (shardCounts: Readonly<Record<string, number>>): LayoutSource => {
  const get = (stream: string): Effect.Effect<Layout.Generation, UnknownStream> => {
    const shardCount = Object.hasOwn(shardCounts, stream) ? shardCounts[stream] : undefined
    return shardCount === undefined
      ? Effect.fail(unknownStream(stream))
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
    return g === undefined ? Effect.fail(unknownStream(stream)) : Effect.succeed(g)
  }
  return {
    current: get,
    refresh: get,
    set: (stream, generation) => {
      generations.set(stream, generation)
    },
  }
}

/**
 * The current generation of the stream's stored layout (core's
 * `StreamLayouts` port: created by the group's coordinator, changed by
 * `Reshard.reshardStream`), read on every `current` / `refresh`; `fallback`
 * for streams that have no stored layout yet.
 */
export const fromStreamLayouts = (
  layouts: StreamLayouts.StreamLayoutsShape,
  fallback?: LayoutSource,
): LayoutSource => {
  const get = (stream: string): Effect.Effect<Layout.Generation, LayoutError> =>
    layouts.load(stream).pipe(
      Effect.mapError(
        (cause) =>
          new LayoutUnavailable({ stream, message: `${cause._tag}: ${cause.message}`, cause }),
      ),
      Effect.flatMap((stored) =>
        Option.isSome(stored)
          ? Effect.succeed(Layout.StreamLayout.current(stored.value.record))
          : fallback !== undefined
            ? fallback.current(stream)
            : Effect.fail(unknownStream(stream)),
      ),
    )
  return { current: get, refresh: get }
}
