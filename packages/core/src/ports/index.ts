/**
 * The ports: every piece of I/O the coordinator and the member need, as
 * Effect services keyed by the group (`GroupKey`: stream + group).
 *
 * One convention for every port (effect's `RunnerStorage`): a module
 * per port, exported here as a namespace, holding
 * - `interface XShape` (the operations) and
 *   `class X extends Context.Service<X, XShape>()("@shardline/core/X") {}`;
 * - `makeMemory` (an `Effect` of a fresh in-memory shape) and `layerMemory`,
 *   plus `makeMemoryWith(options)` / `layerMemoryWith(options)` where the
 *   memory implementation takes options;
 * - `make` / `layer` for an implementation built on another port
 *   (`OwnerFence` over `ShardStreams`), `makeEncoded` for a Store over bytes.
 * Test hooks of the memory implementations (transport faults, store bytes and
 * audit log) are exported only from `@shardline/core/testing`.
 *
 * @example
 * import { CoordinatorLease, OwnerFence, ShardStreams, Store } from "@shardline/core"
 * const ports = Layer.mergeAll(Store.layerMemory, CoordinatorLease.layerMemory,
 *   OwnerFence.layer.pipe(Layer.provideMerge(ShardStreams.layerMemory)))
 */
export * as CoordinatorLease from "./CoordinatorLease.js"
export * as CoordinatorTransport from "./CoordinatorTransport.js"
export { type GroupKey, groupKey, groupKeyOf } from "./GroupKey.js"
export * as OwnerFence from "./OwnerFence.js"
export * as ShardStreams from "./ShardStreams.js"
export * as Store from "./Store.js"
export * as StreamLayouts from "./StreamLayouts.js"
export * as Transaction from "./Transaction.js"
