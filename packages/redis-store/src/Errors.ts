/**
 * Errors of `@shardline/redis-store`: the ports' errors are core's
 * (`StaleOwner`, `LeaseHeld`, `StoreUnavailable`, `CorruptSnapshot`, ...),
 * and so are the three a real backend adds to the data plane
 * (`BackendUnavailable`, `ForeignValue`, `InvalidArgument`). This module
 * re-exports those three under the names this package used before.
 */
export {
  BackendUnavailable,
  type DataPlaneError,
  ForeignValue,
  InvalidArgument,
} from "@shardline/core"

import type { DataPlaneError } from "@shardline/core"

/** What any Redis data-plane operation may fail with besides its own errors. */
export type RedisStoreError = DataPlaneError
