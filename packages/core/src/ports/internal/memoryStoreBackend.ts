/**
 * The memory byte-level Store backend: what a Redis backend keeps in its keys
 * (snapshot string, list of batch strings, revision, audit stream), kept in a
 * Map. Each operation runs in one synchronous step, as one Lua script would.
 * The extra hooks (raw bytes, corruption) are exposed only through
 * `@shardline/core/testing`.
 */
import { Effect, Option } from "effect"
import { StaleRevision } from "../../Errors.js"
import type { CoordinatorLeaseShape } from "../CoordinatorLease.js"
import { type GroupKey, groupKeyString } from "../GroupKey.js"
import type { Encoded } from "../Store.js"
import type { EncodedGroup } from "./storeCodec.js"

interface Entry {
  snapshot: string | undefined
  batches: Array<string>
  revision: number
  readonly audit: Array<string>
}

export interface MemoryStoreBackend extends Encoded {
  /** The stored bytes, or undefined when the group was never created. */
  readonly raw: (key: GroupKey) => EncodedGroup | undefined
  /** The group's audit events as stored (encoded), oldest first. */
  readonly audit: (key: GroupKey) => ReadonlyArray<string>
  /** Replace the snapshot bytes and drop the batches; the revision stays (simulates corruption). */
  readonly corrupt: (key: GroupKey, bytes: string) => void
  /** Replace the bytes of one stored batch (simulates corruption). */
  readonly corruptBatch: (key: GroupKey, index: number, bytes: string) => void
}

/**
 * `lease`: the lease table a commit's fence is checked against (its `check`
 * reads the table without extending anything); without it fences are ignored.
 */
export const makeMemoryStoreBackend = (lease?: CoordinatorLeaseShape): MemoryStoreBackend => {
  const groups = new Map<string, Entry>()
  const entry = (key: GroupKey): Entry | undefined => groups.get(groupKeyString(key))
  return {
    load: (key) =>
      Effect.sync(() => {
        const e = entry(key)
        return e === undefined
          ? Option.none()
          : Option.some({ snapshot: e.snapshot, batches: [...e.batches], revision: e.revision })
      }),
    append: (key, expectedRevision, batch, fence) =>
      Effect.andThen(
        // the lease check and the append run with no yield between them (the
        // check reads a map and the clock): one step, as the Redis script
        // checks the lease key (docs/protocol.md rule 32)
        lease === undefined || fence === undefined
          ? Effect.void
          : lease.check({ key, holder: fence.holder, token: fence.token, expiresAt: 0 }),
        Effect.suspend(() => {
          let e = entry(key)
          const actual = e?.revision ?? 0
          if (actual !== expectedRevision)
            return Effect.fail(
              new StaleRevision({
                stream: key.stream,
                group: key.group,
                expectedRevision,
                actualRevision: actual,
              }),
            )
          if (e === undefined) {
            e = { snapshot: undefined, batches: [], revision: 0, audit: [] }
            groups.set(groupKeyString(key), e)
          }
          e.batches.push(batch.records)
          e.revision += 1
          e.audit.push(...batch.audit)
          return Effect.succeed({ revision: e.revision, batches: e.batches.length })
        }),
      ),
    replaceSnapshot: (key, revision, snapshot) =>
      Effect.sync(() => {
        const e = entry(key)
        if (e === undefined || e.revision !== revision) return false
        e.snapshot = snapshot
        e.batches = []
        return true
      }),
    raw: (key) => {
      const e = entry(key)
      return e === undefined
        ? undefined
        : { snapshot: e.snapshot, batches: [...e.batches], revision: e.revision }
    },
    audit: (key) => entry(key)?.audit ?? [],
    corrupt: (key, bytes) => {
      const e = entry(key)
      if (e === undefined)
        groups.set(groupKeyString(key), { snapshot: bytes, batches: [], revision: 1, audit: [] })
      else {
        e.snapshot = bytes
        e.batches = []
      }
    },
    corruptBatch: (key, index, bytes) => {
      const e = entry(key)
      if (e === undefined || index < 0 || index >= e.batches.length)
        throw new Error(`no batch ${index} stored for ${groupKeyString(key)}`)
      e.batches[index] = bytes
    },
  }
}
