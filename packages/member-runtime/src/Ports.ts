/**
 * The ports a runtime runs on (docs/runtime.md, "Ports"): the data plane
 * (`ShardStreams`), the heartbeat transport, and, for the embedded
 * coordinator, the group `Store` and the `CoordinatorLease`; optionally the
 * `StreamLayouts` (resharding: coordinators follow it, producers route by
 * it). The memory ports run everything in one process; the Redis ports
 * (`redisPorts` in src/Redis.ts, or `start({ redis })`) are the same
 * services on Redis, so switching is one option:
 *
 * @example
 * const ports = memoryPorts()          // shared by every runtime given it
 * const a = await start({ ports, memberBase: "pod-a", listeners: [new Billing()] })
 * const b = await start({ ports, memberBase: "pod-b", listeners: [new Billing()] })
 * // on Redis: start({ redis: { url: "redis://127.0.0.1:6379" }, ... })
 */
import {
  CoordinatorLease,
  CoordinatorTransport,
  ShardStreams,
  Store,
  StreamLayouts,
} from "@shardline/core"
import { Context, Effect, Layer } from "effect"

/** The port services a runtime runs on (data plane, transport, store, lease). */
export type PortServices =
  | ShardStreams.ShardStreams
  | CoordinatorTransport.CoordinatorTransport
  | Store.Store
  | CoordinatorLease.CoordinatorLease

/** Ports to give `start` or `make`: `memoryPorts()`, `sharedMemoryPorts()` or `redisPorts(options)`. */
export interface Ports {
  /** Provides the four services; built once per runtime that uses it. */
  readonly layer: Layer.Layer<PortServices, unknown>
}

/**
 * In-memory ports whose instances are shared by every runtime given them,
 * with a `StreamLayouts` too: coordinators then follow the stream's layout
 * (resharding) and producers route by it.
 */
export interface MemoryPorts extends Ports {
  readonly layer: Layer.Layer<PortServices | StreamLayouts.StreamLayouts>
  readonly streams: ShardStreams.ShardStreamsShape
  readonly layouts: StreamLayouts.StreamLayoutsShape
  readonly transport: CoordinatorTransport.CoordinatorTransportShape
  readonly store: Store.StoreShape
  readonly lease: CoordinatorLease.CoordinatorLeaseShape
}

/** Options of `memoryPorts()`. */
export interface MemoryPortsOptions {
  /** A heartbeat without an answer fails after this long (default 5,000 ms). */
  readonly transportTimeoutMs?: number
}

/** Fresh in-memory ports (data plane, transport, store, lease), created now. */
export const memoryPorts = (options: MemoryPortsOptions = {}): MemoryPorts => {
  const streams = Effect.runSync(ShardStreams.makeMemory)
  const transport = Effect.runSync(
    CoordinatorTransport.makeMemory(
      options.transportTimeoutMs !== undefined ? { timeoutMs: options.transportTimeoutMs } : {},
    ),
  )
  const lease = Effect.runSync(CoordinatorLease.makeMemory)
  // the store checks each commit's lease fence against this lease table (docs/protocol.md rule 32)
  const store = Effect.runSync(Store.makeMemoryWith({ lease }))
  const layouts = Effect.runSync(StreamLayouts.makeMemory)
  return fromServices({ streams, transport, store, lease, layouts })
}

/** Ports over service instances you built (tests wrap or fault them). */
export const fromServices = (services: {
  readonly streams: ShardStreams.ShardStreamsShape
  readonly transport: CoordinatorTransport.CoordinatorTransportShape
  readonly store: Store.StoreShape
  readonly lease: CoordinatorLease.CoordinatorLeaseShape
  readonly layouts?: StreamLayouts.StreamLayoutsShape
}): MemoryPorts => {
  const layouts = services.layouts ?? Effect.runSync(StreamLayouts.makeMemory)
  return {
    ...services,
    layouts,
    layer: Layer.succeedContext(
      Context.make(ShardStreams.ShardStreams, services.streams).pipe(
        Context.add(CoordinatorTransport.CoordinatorTransport, services.transport),
        Context.add(Store.Store, services.store),
        Context.add(CoordinatorLease.CoordinatorLease, services.lease),
        Context.add(StreamLayouts.StreamLayouts, layouts),
      ),
    ),
  }
}
