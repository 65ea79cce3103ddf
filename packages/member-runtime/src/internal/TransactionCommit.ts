/**
 * A handler's transaction committed with its messages' acknowledgement
 * (docs/exactly-once.md, "The commit"), and the relay of a shard's outbox
 * (docs/exactly-once.md, "The outbox"). The ShardRunner calls `commit` when
 * a handler that used its transaction succeeded, instead of leaving the ack
 * to the shard's next read; the commit is the port's fenced, atomic step
 * (`ShardStreams.transactions.commit`): a stale owner's commit writes and
 * acknowledges nothing, a commit whose messages are no longer pending writes
 * nothing.
 */
import type { ShardStreams, Transaction as Tx } from "@shardline/core"
import { Effect } from "effect"
import type { SendRouter } from "./SendRouter.js"
import { NONE, type TransactionHandle } from "./TransactionHandle.js"

/** What the runner's members share for transactions. */
export interface TransactionEnv {
  /** The port's transactions (undefined: every handle refuses, `Unsupported`). */
  readonly port: Tx.TransactionsShape | undefined
  /** Routes sends over their target streams' layouts. */
  readonly router: SendRouter
}

/** A commit's end, for the runner to act on. */
export type CommitResult =
  /** Committed (or found already committed): these ids are acknowledged. */
  | { readonly _tag: "Acked"; readonly count: number }
  /** Refused before anything was written: the handler's message fails with `error`. */
  | { readonly _tag: "Refused"; readonly error: unknown }
  /** The storage refused the owner token: the shard moved. */
  | { readonly _tag: "Stale" }
  /** Nothing committed (not all pending, or the storage failed): retry the shard's pending entries. */
  | { readonly _tag: "Retry"; readonly error: unknown }

/** Attempts of one commit whose direct send found its target shard sealed (a reshard): re-routed each time. */
const SEALED_ATTEMPTS = 3

/** Whose commit: the shard of a group, under its owner token (the fence). */
export interface CommitAddress {
  readonly stream: string
  readonly shard: number
  readonly group: string
  readonly token: number
}

/**
 * Commit `handle`'s writes and sends with the acknowledgement of `ids`
 * (every one must still be pending, or nothing is written). Sends are
 * routed now, over the layout the router knows; a direct send whose target
 * was sealed meanwhile is routed again over the refreshed layout.
 * (`Effect.fnUntraced`, as every per-batch function here: a generator made
 * once, not a closure and a V8 map per call; docs/runtime.md, "Throughput:
 * Node's young generation".)
 */
export const commit = Effect.fnUntraced(function* (
  tx: TransactionEnv,
  address: CommitAddress,
  mode: "ack" | "xackdel",
  handle: TransactionHandle,
  ids: ReadonlyArray<string>,
) {
  const port = tx.port
  if (port === undefined)
    return { _tag: "Refused", error: handle.refusal ?? new Error("no transactions") } as const
  for (let attempt = 1; ; attempt++) {
    const sends: Array<Tx.Send> = []
    for (const s of handle.sends) {
      const shard = yield* Effect.result(tx.router.route(s.stream, s.key))
      // an unknown target stream is the handler's mistake: its message fails
      if (shard._tag === "Failure") return { _tag: "Refused", error: shard.failure } as const
      sends.push({ stream: s.stream, shard: shard.success, key: s.key, fields: s.fields })
    }
    const done = yield* Effect.result(
      port.commit({ ...address, ids, mode, writes: handle.writes, sends }),
    )
    if (done._tag === "Success") {
      const outcome = done.success
      if (outcome._tag === "NotPending")
        return {
          _tag: "Retry",
          error: new Error(`not pending any more: ${outcome.ids.join(", ")}; nothing committed`),
        } as const
      // AlreadyCommitted: a commit of these ids ran before (its reply was lost)
      return { _tag: "Acked", count: ids.length } as const
    }
    const error = done.failure
    switch (error._tag) {
      case "StaleOwner":
        return { _tag: "Stale" } as const
      case "TransactionRefused":
      case "InvalidArgument":
        return { _tag: "Refused", error } as const
      case "ShardSealed": {
        if (attempt >= SEALED_ATTEMPTS) return { _tag: "Retry", error } as const
        const refreshed = yield* Effect.result(tx.router.refresh(error.stream))
        if (refreshed._tag === "Failure")
          return { _tag: "Retry", error: refreshed.failure } as const
        continue
      }
      default:
        // InvalidEntryId cannot come from ids the storage returned; anything
        // else is the storage failing: the commit may or may not have run,
        // and the retry finds out (a committed message is not pending any more)
        return { _tag: "Retry", error } as const
    }
  }
})

/** One message's share of a group commit: its ids, and its transaction (none: an ack only). */
export interface GroupPart {
  readonly ids: ReadonlyArray<string>
  readonly handle: TransactionHandle | undefined
}

/**
 * A group commit's end: how many leading parts committed (or had
 * committed before), and, when not all did, why the next did not (no part
 * after it committed).
 */
export interface GroupResult {
  readonly committed: number
  readonly stop?: Exclude<CommitResult, { readonly _tag: "Acked" }>
  /** What the read the commit carried delivered (every part committed; `next` given). */
  readonly entries?: ReadonlyArray<ShardStreams.StreamMessage>
}

/**
 * Commit the parts of one shard's batch, in stream order, in one fenced
 * step (docs/exactly-once.md, "Group commit"): each part's writes, sends
 * and ack together, stopping at the first part that cannot commit. Sends
 * are routed now; a direct send whose target was sealed meanwhile stops
 * the group at its part, which is routed again over the refreshed layout
 * and committed with the parts after it (the parts before it committed).
 */
export const commitGroup = Effect.fnUntraced(function* (
  tx: TransactionEnv,
  address: CommitAddress,
  mode: "ack" | "xackdel",
  parts: ReadonlyArray<GroupPart>,
  next?: ShardStreams.ReadOptions,
) {
  const port = tx.port
  const first = parts.find((p) => p.handle !== undefined)?.handle
  if (port === undefined)
    return {
      committed: 0,
      stop: { _tag: "Refused", error: first?.refusal ?? new Error("no transactions") },
    } as const
  let done = 0
  for (let attempt = 1; ; attempt++) {
    const routed: Array<Tx.CommitPart> = []
    // a send to a stream without a layout is its handler's mistake: its message fails
    let unroutable: unknown
    route: for (let i = done; i < parts.length; i++) {
      const part = parts[i]!
      // made at the first send: a part without sends (the usual one) shares NONE
      let sends: Array<Tx.Send> | undefined
      for (const s of part.handle?.sends ?? NONE) {
        const shard = yield* Effect.result(tx.router.route(s.stream, s.key))
        if (shard._tag === "Failure") {
          unroutable = shard.failure
          break route
        }
        sends ??= []
        sends.push({ stream: s.stream, shard: shard.success, key: s.key, fields: s.fields })
      }
      routed.push({
        ids: part.ids,
        writes: part.handle?.writes ?? NONE,
        sends: sends ?? NONE,
      })
    }
    const stopAt = (stop: GroupResult["stop"]): GroupResult =>
      stop === undefined ? { committed: done } : { committed: done, stop }
    if (routed.length === 0) return stopAt({ _tag: "Refused", error: unroutable })
    const group: Tx.GroupCommitOptions = { ...address, mode, parts: routed }
    // the commit carries the shard's next read (docs/exactly-once.md, "The
    // commit rides the read"); never with sends: the outbox is relayed
    // before the next read, and a sealed target is routed again
    const rides =
      next !== undefined &&
      port.commitGroupThenRead !== undefined &&
      attempt === 1 &&
      unroutable === undefined &&
      routed.every((p) => p.sends.length === 0)
    let entries: ReadonlyArray<ShardStreams.StreamMessage> | undefined
    const result = rides
      ? yield* Effect.result(
          Effect.map(port.commitGroupThenRead!(group, next), (done) => {
            entries = done.entries
            return done.outcome
          }),
        )
      : yield* Effect.result(port.commitGroup(group))
    if (result._tag === "Failure") {
      const error = result.failure
      switch (error._tag) {
        case "StaleOwner":
          return stopAt({ _tag: "Stale" })
        case "TransactionRefused":
        case "InvalidArgument":
          return stopAt({ _tag: "Refused", error })
        default:
          // the storage failing: the group may or may not have run, and the
          // retry finds out (a committed message is not pending any more)
          return stopAt({ _tag: "Retry", error })
      }
    }
    const outcome = result.success
    done += outcome.committed.length
    const stopped = outcome.stopped
    if (stopped === undefined) {
      if (unroutable !== undefined) return stopAt({ _tag: "Refused", error: unroutable })
      return entries === undefined ? { committed: done } : { committed: done, entries }
    }
    switch (stopped._tag) {
      case "NotPending":
        return stopAt({
          _tag: "Retry",
          error: new Error(`not pending any more: ${stopped.ids.join(", ")}; nothing committed`),
        })
      case "Refused":
        return stopAt({ _tag: "Refused", error: stopped.error })
      case "Sealed": {
        if (attempt >= SEALED_ATTEMPTS) return stopAt({ _tag: "Retry", error: stopped.error })
        const refreshed = yield* Effect.result(tx.router.refresh(stopped.error.stream))
        if (refreshed._tag === "Failure") return stopAt({ _tag: "Retry", error: refreshed.failure })
      }
    }
  }
})

/** Entries relayed per outbox read. */
const RELAY_BATCH = 64

/**
 * Relay a shard's outbox (Redis Cluster): every waiting entry, in outbox
 * order, to its routed shard, exactly once (the port's per-target mark);
 * a sealed target's entry is re-routed over the refreshed layout; one
 * another relayer delivered and removed meanwhile (the re-route finds it
 * gone) is skipped. Stops at the first failure, so per-key order holds (the
 * next turn goes on from there). True when the outbox is empty.
 */
export const relay = Effect.fnUntraced(function* (
  tx: TransactionEnv,
  source: { readonly stream: string; readonly shard: number; readonly group: string },
) {
  const outbox = tx.port?.outbox
  if (outbox === undefined) return true
  for (;;) {
    const entries = yield* outbox.read(source, RELAY_BATCH)
    if (entries.length === 0) return true
    const delivered: Array<string> = []
    next: for (const entry of entries) {
      let current = entry
      for (;;) {
        const result = yield* Effect.result(outbox.deliver(source, current))
        if (result._tag === "Success") break
        if (result.failure._tag !== "ShardSealed") {
          if (delivered.length > 0) yield* outbox.remove(source, delivered)
          return yield* Effect.fail(result.failure)
        }
        const layout = yield* tx.router.refresh(current.stream)
        const to = yield* tx.router.route(current.stream, current.key)
        if (to === current.shard)
          return yield* Effect.fail(
            new Error(
              `outbox entry ${current.id}: shard ${current.shard} of ${current.stream} is sealed but layout generation ${layout.generation} still routes to it`,
            ),
          )
        const moved = yield* outbox.reroute(source, current.id, current.shard, to)
        // another relayer delivered and removed it since this one read it
        if (moved === "gone") continue next
        current = { ...current, shard: moved }
      }
      delivered.push(entry.id)
    }
    yield* outbox.remove(source, delivered)
  }
})
