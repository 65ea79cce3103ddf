/**
 * `@shardline/core/testing`: test hooks of the in-memory ports, and nothing
 * else. Each namespace mirrors the port module of the same name (everything
 * it exports) and adds the hooks:
 * - `CoordinatorTransport`: `CoordinatorTransportFaults` (drop requests or
 *   responses, delay responses, count handled requests); `makeMemory`,
 *   `layerMemory` and `layerMemoryWith` also provide the faults.
 * - `Store`: `makeMemory` / `makeMemoryUnsafe` return a `MemoryStore`, the
 *   memory store plus its bytes (`raw`, `corrupt`, `corruptBatch`), its audit
 *   log and revision per group, and its byte-level `backend`.
 * - `ShardStreams`: `makeMemory` returns a `MemoryShardStreams`, the memory
 *   data plane plus `deleteStream`, `destroyGroup` and `deleteOwnerToken`
 *   (what a deletion or an eviction does on Redis: docs/protocol.md rule 26).
 *
 * @example
 * import { CoordinatorTransport, Store } from "@shardline/core/testing"
 * const faults = yield* CoordinatorTransport.CoordinatorTransportFaults
 * yield* faults.dropResponses(1)
 * const store = Store.makeMemoryUnsafe()
 * store.auditLog({ stream: "orders", group: "workers" })
 */
export * as CoordinatorTransport from "./testing/CoordinatorTransport.js"
export * as ShardStreams from "./testing/ShardStreams.js"
export * as Store from "./testing/Store.js"
