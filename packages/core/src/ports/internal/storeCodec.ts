/**
 * The one decoder of stored coordinator bytes, shared by every Store backend
 * (through `Store.makeEncoded`): snapshot + record batches -> a checked
 * `Snapshot`, and records -> the bytes of one batch. Anything that does not
 * decode, does not replay to a consistent state, or does not add up (snapshot
 * revision + batches != stored revision) is a `CorruptSnapshot`.
 */
import { Result, Schema } from "effect"
import {
  type CoordinatorState,
  checkSnapshot,
  fromSnapshot,
  initialState,
  replayAll,
  toSnapshot,
} from "../../coordinator/CoordinatorState.js"
import { AuditEvent, CoordinatorRecord } from "../../coordinator/Records.js"
import { type Snapshot, SnapshotJson } from "../../coordinator/Snapshot.js"
import { CorruptSnapshot } from "../../Errors.js"
import type { GroupKey } from "../GroupKey.js"

/** A group's stored bytes, as a byte-level backend returns them. */
export interface EncodedGroup {
  /** The snapshot at revision `revision - batches.length`; absent before the first compaction. */
  readonly snapshot?: string | undefined
  /** Record batches committed after the snapshot, oldest first, one per revision. */
  readonly batches: ReadonlyArray<string>
  /** The stored revision (`storeRevision` of the group). */
  readonly revision: number
}

/** The bytes of one commit: its record batch (audit events removed) and its audit events. */
export interface EncodedBatch {
  readonly records: string
  readonly audit: ReadonlyArray<string>
}

const RecordsJson = Schema.fromJsonString(Schema.Array(CoordinatorRecord))
const AuditEventJson = Schema.fromJsonString(AuditEvent)
const encodeRecords = Schema.encodeSync(RecordsJson)
const decodeRecords = Schema.decodeUnknownResult(RecordsJson)
const encodeAudit = Schema.encodeSync(AuditEventJson)
const decodeAuditResult = Schema.decodeUnknownResult(AuditEventJson)
const decodeSnapshotResult = Schema.decodeUnknownResult(SnapshotJson)

export const encodeSnapshot = Schema.encodeSync(SnapshotJson)

/** Audit records go to the audit log; the batch keeps what `replay` needs. */
export const encodeBatch = (records: ReadonlyArray<CoordinatorRecord>): EncodedBatch => {
  const state: Array<CoordinatorRecord> = []
  const audit: Array<string> = []
  for (const r of records) {
    if (r._tag === "Audit") audit.push(encodeAudit(r.event))
    else state.push(r)
  }
  return { records: encodeRecords(state), audit }
}

/** Decode one stored audit event (undefined if it does not decode). */
export const decodeAuditEvent = (bytes: string): AuditEvent | undefined => {
  const r = decodeAuditResult(bytes)
  return Result.isSuccess(r) ? r.success : undefined
}

/**
 * Why `records` cannot be the first commit of the group `key` (undefined if
 * they can): it must start with `GroupCreated` for that very group.
 */
export const notAGroupCreation = (
  key: GroupKey,
  records: ReadonlyArray<CoordinatorRecord>,
): string | undefined => {
  const first = records[0]
  if (first?._tag !== "GroupCreated") return "the first commit of a group must be GroupCreated"
  return foreign(key, first.config)
}

/** Why a config does not belong under `key` (undefined if it does). */
const foreign = (
  key: GroupKey,
  config: { readonly stream: string; readonly groupId: string },
): string | undefined =>
  config.stream === key.stream && config.groupId === key.group
    ? undefined
    : `the stored group is ${config.groupId} on stream ${config.stream}, not ${key.group} on stream ${key.stream}`

/** Decode a group's bytes into the checked snapshot at the stored revision. */
export const decodeGroup = (
  key: GroupKey,
  stored: EncodedGroup,
): Result.Result<Snapshot, CorruptSnapshot> => {
  const corrupt = (message: string) =>
    Result.fail(new CorruptSnapshot({ stream: key.stream, group: key.group, message }))
  const base = stored.revision - stored.batches.length
  if (base < 0)
    return corrupt(
      `stored revision ${stored.revision} is below its ${stored.batches.length} batches`,
    )
  let state: CoordinatorState
  let batches = stored.batches
  if (stored.snapshot !== undefined) {
    const decoded = decodeSnapshotResult(stored.snapshot)
    if (Result.isFailure(decoded)) return corrupt(`snapshot: ${decoded.failure.message}`)
    const problem = checkSnapshot(decoded.success) ?? foreign(key, decoded.success.config)
    if (problem !== undefined) return corrupt(`snapshot: ${problem}`)
    if (decoded.success.storeRevision !== base)
      return corrupt(
        `snapshot is at revision ${decoded.success.storeRevision}, expected ${base} (stored revision ${stored.revision} minus ${stored.batches.length} batches)`,
      )
    if (batches.length === 0) return Result.succeed(decoded.success)
    state = fromSnapshot(decoded.success)
  } else {
    if (base !== 0 || batches.length === 0)
      return corrupt(`no snapshot, and the batches do not start at revision 1`)
    const first = decodeRecords(batches[0])
    if (Result.isFailure(first)) return corrupt(`batch at revision 1: ${first.failure.message}`)
    const created = first.success[0]
    if (created?._tag !== "GroupCreated")
      return corrupt("the first batch of a group does not start with GroupCreated")
    state = initialState(created.config)
    replayAll(state, first.success)
    batches = batches.slice(1)
  }
  const offset = stored.revision - batches.length
  for (let i = 0; i < batches.length; i++) {
    const records = decodeRecords(batches[i])
    if (Result.isFailure(records))
      return corrupt(`batch at revision ${offset + i + 1}: ${records.failure.message}`)
    replayAll(state, records.success)
  }
  state.storeRevision = stored.revision
  const snapshot = toSnapshot(state)
  const problem = checkSnapshot(snapshot) ?? foreign(key, snapshot.config)
  return problem === undefined ? Result.succeed(snapshot) : corrupt(`after replay: ${problem}`)
}
