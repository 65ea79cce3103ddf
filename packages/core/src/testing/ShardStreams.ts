/**
 * The ShardStreams port with the memory data plane's test hooks. Everything
 * of `ports/ShardStreams` is here; `makeMemory` / `layerMemory` below shadow
 * the port's and return a `MemoryShardStreams`: the data plane plus ways to
 * make what it stores vanish, as a deletion or an eviction would on Redis
 * (docs/protocol.md rule 26).
 */
import { Effect, Layer } from "effect"
import {
  type MemoryShardStreamsHooks,
  memoryShardStreamsHooks,
} from "../ports/internal/memoryShardStreamsHooks.js"
import {
  makeMemory as makePort,
  ShardStreams,
  type ShardStreamsShape,
} from "../ports/ShardStreams.js"

export type { MemoryShardStreamsHooks } from "../ports/internal/memoryShardStreamsHooks.js"
export * from "../ports/ShardStreams.js"

/** The memory data plane and its hooks. */
export interface MemoryShardStreams extends ShardStreamsShape, MemoryShardStreamsHooks {}

export const makeMemory: Effect.Effect<MemoryShardStreams> = Effect.map(makePort, (streams) => ({
  ...streams,
  ...memoryShardStreamsHooks.get(streams)!,
}))

export const layerMemory: Layer.Layer<ShardStreams> = Layer.effect(ShardStreams, makeMemory)
