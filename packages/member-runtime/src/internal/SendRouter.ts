/**
 * Where a transaction's sends go (docs/exactly-once.md, "Sends"): the key
 * routed over its target stream's layout, as the producer routes it
 * (`Layout.shardOf`), from a generation cached per stream and refreshed when
 * a commit or a relay finds the routed shard sealed by a reshard. One per
 * runtime, shared by its members; the layout source is the producer's
 * default (the stream's stored layout, else the declared shard counts).
 */
import { Layout } from "@shardline/core"
import { Effect } from "effect"
import type { LayoutError, LayoutSource } from "../LayoutSource.js"

export interface SendRouter {
  /** The shard `key` of `stream` routes to (the cached generation). */
  readonly route: (stream: string, key: string) => Effect.Effect<number, LayoutError>
  /** Look at the stream's layout again (a send was refused as sealed): the current generation. */
  readonly refresh: (stream: string) => Effect.Effect<Layout.Generation, LayoutError>
}

export const makeSendRouter = (source: LayoutSource): SendRouter => {
  const cache = new Map<string, Layout.Generation>()
  return {
    route: (stream, key) => {
      const g = cache.get(stream)
      if (g !== undefined) return Effect.succeed(Layout.shardOf(g, key))
      return Effect.map(source.current(stream), (fresh) => {
        cache.set(stream, fresh)
        return Layout.shardOf(fresh, key)
      })
    },
    refresh: (stream) =>
      Effect.tap(source.refresh(stream), (fresh) =>
        Effect.sync(() => {
          cache.set(stream, fresh)
        }),
      ),
  }
}
