/**
 * Every port of a coordinator and its members on ONE Redis connection:
 * `Store`, `CoordinatorLease`, `OwnerFence` (core's, over the Redis
 * `ShardStreams`), `CoordinatorTransport`, `ShardStreams` and
 * `StreamLayouts`, plus the `RedisConnection` itself.
 *
 * @example
 * const ports = RedisPorts.layer({ url: "redis://localhost:6379" })
 * const program = Effect.scoped(Effect.gen(function* () {
 *   const host = yield* makeCoordinatorHost({ config, holder: "pod-1" })
 *   const transport = yield* CoordinatorTransport.CoordinatorTransport
 *   yield* transport.serve(host.key, host.heartbeat)
 *   return yield* Effect.never
 * }))
 * Effect.runPromise(Effect.provide(program, ports))
 */
import {
  type CoordinatorLease,
  type CoordinatorTransport,
  OwnerFence,
  type ShardStreams,
  type Store,
  type StreamLayouts,
} from "@shardline/core"
import { Layer } from "effect"
import * as RedisConnection from "./RedisConnection.js"
import * as RedisCoordinatorLease from "./RedisCoordinatorLease.js"
import * as RedisCoordinatorTransport from "./RedisCoordinatorTransport.js"
import * as RedisShardStreams from "./RedisShardStreams.js"
import * as RedisStore from "./RedisStore.js"
import * as RedisStreamLayouts from "./RedisStreamLayouts.js"

export interface RedisPortsOptions extends RedisConnection.RedisConnectionOptions {
  readonly store?: RedisStore.RedisStoreOptions
  readonly transport?: RedisCoordinatorTransport.RedisTransportOptions
  readonly shardStreams?: RedisShardStreams.ShardStreamsOptions
}

export type RedisPorts =
  | RedisConnection.RedisConnection
  | Store.Store
  | CoordinatorLease.CoordinatorLease
  | OwnerFence.OwnerFence
  | CoordinatorTransport.CoordinatorTransport
  | ShardStreams.ShardStreams
  | StreamLayouts.StreamLayouts

/** Every port over the `RedisConnection` in context. */
export const layerFromConnection = (
  options: Omit<RedisPortsOptions, keyof RedisConnection.RedisConnectionOptions> = {},
): Layer.Layer<
  Exclude<RedisPorts, RedisConnection.RedisConnection>,
  never,
  RedisConnection.RedisConnection
> =>
  Layer.mergeAll(
    RedisStore.layerFromConnection(options.store),
    RedisCoordinatorLease.layerFromConnection,
    RedisCoordinatorTransport.layerFromConnection(options.transport),
    RedisStreamLayouts.layerFromConnection,
    OwnerFence.layer.pipe(
      Layer.provideMerge(RedisShardStreams.layerFromConnectionWith(options.shardStreams)),
    ),
  )

/** Every port on one connection of their own (closed with the layer). */
export const layer = (
  options: RedisPortsOptions,
): Layer.Layer<RedisPorts, RedisConnection.ConnectError> =>
  layerFromConnection(options).pipe(Layer.provideMerge(RedisConnection.layer(options)))
