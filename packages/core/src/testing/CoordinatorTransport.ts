/**
 * The CoordinatorTransport port with the memory transport's fault hooks.
 * Everything of `ports/CoordinatorTransport` is here; the memory constructors
 * and layers below shadow the port's and also provide the faults.
 */
import { Context, Effect, Layer } from "effect"
import {
  CoordinatorTransport,
  type CoordinatorTransportShape,
  type MemoryOptions,
} from "../ports/CoordinatorTransport.js"
import {
  makeMemoryTransport,
  type TransportFaultsShape,
} from "../ports/internal/memoryTransport.js"

export * from "../ports/CoordinatorTransport.js"
export type { TransportFaultsShape } from "../ports/internal/memoryTransport.js"

/** Fault injection for the in-memory transport (tests and simulations). */
export class CoordinatorTransportFaults extends Context.Service<
  CoordinatorTransportFaults,
  TransportFaultsShape
>()("@shardline/core/CoordinatorTransportFaults") {}

/** The in-process transport plus its fault hooks. */
export const makeMemory = (
  options: MemoryOptions = {},
): Effect.Effect<{
  readonly transport: CoordinatorTransportShape
  readonly faults: TransportFaultsShape
}> => makeMemoryTransport(options)

export const layerMemoryWith = (
  options: MemoryOptions,
): Layer.Layer<CoordinatorTransport | CoordinatorTransportFaults> =>
  Layer.effectContext(
    Effect.map(makeMemoryTransport(options), ({ transport, faults }) =>
      Context.make(CoordinatorTransport, transport).pipe(
        Context.add(CoordinatorTransportFaults, faults),
      ),
    ),
  )

export const layerMemory: Layer.Layer<CoordinatorTransport | CoordinatorTransportFaults> =
  layerMemoryWith({})
