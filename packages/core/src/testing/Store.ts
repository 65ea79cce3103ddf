/**
 * The Store port with the memory store's test hooks. Everything of
 * `ports/Store` is here; `makeMemory` / `makeMemoryWith` below shadow the
 * port's and return a `MemoryStore`.
 */
import { Effect } from "effect"
import type { AuditEvent } from "../coordinator/Records.js"
import type { GroupKey } from "../ports/GroupKey.js"
import {
  type MemoryStoreBackend,
  makeMemoryStoreBackend,
} from "../ports/internal/memoryStoreBackend.js"
import { decodeAuditEvent, type EncodedGroup } from "../ports/internal/storeCodec.js"
import { type MemoryOptions, makeEncoded, type StoreShape } from "../ports/Store.js"

export type { MemoryStoreBackend } from "../ports/internal/memoryStoreBackend.js"
export * from "../ports/Store.js"

/** The memory store plus its bytes and audit log, per group. */
export interface MemoryStore extends StoreShape {
  /** The byte-level backend behind `makeEncoded` (e.g. to wrap it in a test). */
  readonly backend: MemoryStoreBackend
  /** The stored bytes, or undefined when the group was never created. */
  readonly raw: (key: GroupKey) => EncodedGroup | undefined
  /** Replace the snapshot bytes and drop the batches; the revision stays (simulates corruption). */
  readonly corrupt: (key: GroupKey, bytes: string) => void
  /** Replace the bytes of one stored batch (simulates corruption). */
  readonly corruptBatch: (key: GroupKey, index: number, bytes: string) => void
  /** The group's audit events, oldest first. */
  readonly auditLog: (key: GroupKey) => ReadonlyArray<AuditEvent>
  /** The stored revision (0 when absent). */
  readonly revision: (key: GroupKey) => number
}

/** A fresh memory store with its hooks, synchronously (tests). */
export const makeMemoryUnsafe = (options: MemoryOptions = {}): MemoryStore => {
  const backend = makeMemoryStoreBackend(options.lease)
  return {
    ...makeEncoded(backend, options),
    backend,
    raw: backend.raw,
    corrupt: backend.corrupt,
    corruptBatch: backend.corruptBatch,
    auditLog: (key) =>
      backend.audit(key).flatMap((bytes) => {
        const event = decodeAuditEvent(bytes)
        return event === undefined ? [] : [event]
      }),
    revision: (key) => backend.raw(key)?.revision ?? 0,
  }
}

export const makeMemoryWith = (options: MemoryOptions): Effect.Effect<MemoryStore> =>
  Effect.sync(() => makeMemoryUnsafe(options))

export const makeMemory: Effect.Effect<MemoryStore> = makeMemoryWith({})
