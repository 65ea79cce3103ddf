/**
 * Drives one logical member's polling adapter (`makePoller`) directly, on the
 * memory ShardStreams and effect's TestClock, without a coordinator: the
 * harness fences each shard with token 1 and starts loops itself. Every
 * data-plane call and handler call goes to one ordered log.
 */
import {
  BackendUnavailable,
  type DataPlaneError,
  type ShardStreams,
  Transaction,
} from "@shardline/core"
import { ShardStreams as MemoryShardStreams } from "@shardline/core/testing"
import { Clock, Effect, Scope } from "effect"
import { TestClock } from "effect/testing"
import { type ConsumerSettings, resolveSettings } from "../../src/Config.js"
import type { RuntimeEvent } from "../../src/Events.js"
import { callUser, callUserEffect, isPromiseLike } from "../../src/internal/invoke.js"
import { makePoller, type Poller } from "../../src/internal/Poller.js"
import { makeSendRouter } from "../../src/internal/SendRouter.js"
import type { TurnRecord } from "../../src/internal/ShardRunner.js"
import type { InternalHandler, InternalHooks } from "../../src/internal/spec.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import type { Batch, BatchContext, Message, MessageContext } from "../../src/Message.js"
import { KEY_FIELD } from "../../src/Message.js"

export const stream = "orders"
export const group = "g"

export type LogEntry =
  | { readonly kind: "read"; readonly shard: number; readonly count: number; readonly from: string }
  | { readonly kind: "claim"; readonly shard: number; readonly count: number }
  | {
      readonly kind: "ack"
      readonly shard: number
      readonly ids: ReadonlyArray<string>
      /** `read`: carried by a read (`ReadOptions.ack`); `ack`: a call of its own. */
      readonly via: "read" | "ack"
    }
  | { readonly kind: "nack"; readonly shard: number; readonly id: string }
  | { readonly kind: "deadLetter"; readonly shard: number; readonly id: string }
  | { readonly kind: "seek"; readonly shard: number; readonly position: string }
  | { readonly kind: "wait"; readonly shard: number; readonly afterId: string | undefined }
  | { readonly kind: "info"; readonly shard: number }
  | { readonly kind: "drainState"; readonly shard: number }
  | {
      readonly kind: "handle"
      readonly shard: number
      readonly id: string
      readonly key: string | undefined
      readonly deliveryCount: number
    }
  | { readonly kind: "handled"; readonly shard: number; readonly id: string }

export interface HarnessOptions {
  readonly workers?: number
  readonly settings?: Partial<Parameters<typeof resolveSettings>[0]>
  /** Per-message handler (default: succeed); may return a Promise or an Effect. */
  readonly eachMessage?: (m: Message, ctx: MessageContext) => unknown
  readonly eachBatch?: (b: Batch, ctx: BatchContext) => unknown
  readonly autoResolve?: boolean
  readonly hooks?: Partial<InternalHooks>
  /** Ports without `ShardStreams.setGroupPosition` (a backend that cannot seek yet). */
  readonly withoutSeek?: boolean
  /** Call the handler through `InternalHandler.run` only (default: `direct`, as the runtime does for plain handlers). */
  readonly slowPath?: boolean
  /**
   * The first shard of the group's current layout generation, as the member
   * knows it (`PollerOptions.currentFirstShard`); unknown by default.
   */
  readonly currentFirstShard?: number
  /** Fail this read with BackendUnavailable (nothing acknowledged, nothing read). */
  readonly failRead?: (o: ShardStreams.ReadOptions) => boolean
  /**
   * Run this read (its ack applied, its entries delivered to the consumer),
   * then fail it with BackendUnavailable: the reply lost after the commit.
   */
  readonly loseReply?: (o: ShardStreams.ReadOptions) => boolean
  /** Runs before each read reaches the data plane (a test holds a read in flight with it). */
  readonly beforeRead?: (o: ShardStreams.ReadOptions) => Effect.Effect<void>
  /** Handlers' transactions on the memory port (default: none, every handle refuses `Unsupported`). */
  readonly transactions?: boolean
  /** Wraps the memory port's transactions (a test counts, holds or fails commits with it). */
  readonly wrapTransactions?: (port: Transaction.TransactionsShape) => Transaction.TransactionsShape
  /**
   * The port's group commit carries the shard's next read
   * (`commitGroupThenRead`, docs/exactly-once.md "The commit rides the
   * read"): the (wrapped) group commit, then the harness's read.
   */
  readonly rideReads?: boolean
}

const isEffect = (u: unknown): u is Effect.Effect<void, unknown> => Effect.isEffect(u)

export const makeHarness = (options: HarnessOptions = {}) =>
  Effect.gen(function* () {
    const scope = yield* Scope.Scope
    const clock = yield* Clock.Clock
    const now = () => clock.currentTimeMillisUnsafe()
    const memory = yield* MemoryShardStreams.makeMemory
    const log: Array<LogEntry> = []
    const events: Array<RuntimeEvent> = []
    const records: Array<TurnRecord> = []
    const stale: Array<number> = []
    const exhausted: Array<number> = []
    const stuck: Array<{ shard: number; why: "revoked" | "stopped"; budgetMs: number }> = []
    let leaseValid = true
    const paused = new Set<number>()
    /** In-flight handler calls per shard (must never exceed 1). */
    const inFlight = new Map<number, number>()
    let maxInFlightPerShard = 0

    const full: ShardStreams.ShardStreamsShape = {
      ...memory,
      read: (o) =>
        Effect.tap(
          Effect.andThen(
            options.beforeRead?.(o) ?? Effect.void,
            Effect.suspend(() =>
              options.failRead?.(o) === true
                ? Effect.fail(new BackendUnavailable({ operation: "read", message: "injected" }))
                : options.loseReply?.(o) === true
                  ? Effect.andThen(
                      memory.read(o),
                      Effect.fail(
                        new BackendUnavailable({ operation: "read", message: "reply lost" }),
                      ),
                    )
                  : memory.read(o),
            ),
          ),
          (batch) =>
            Effect.sync(() => {
              // a read acknowledges the previous batch first (ReadOptions.ack)
              if (o.ack !== undefined && o.ack.ids.length > 0)
                log.push({ kind: "ack", shard: o.shard, ids: o.ack.ids, via: "read" })
              log.push({ kind: "read", shard: o.shard, count: batch.length, from: o.from ?? "new" })
            }),
        ),
      claimPending: (o) =>
        Effect.tap(memory.claimPending(o), (r) =>
          Effect.sync(() => log.push({ kind: "claim", shard: o.shard, count: r.messages.length })),
        ),
      ack: (o) =>
        Effect.tap(memory.ack(o), () =>
          Effect.sync(() => log.push({ kind: "ack", shard: o.shard, ids: o.ids, via: "ack" })),
        ),
      nack: (o) =>
        Effect.tap(memory.nack(o), () =>
          Effect.sync(() => log.push({ kind: "nack", shard: o.shard, id: o.id })),
        ),
      deadLetter: (o) =>
        Effect.tap(memory.deadLetter(o), () =>
          Effect.sync(() => log.push({ kind: "deadLetter", shard: o.shard, id: o.id })),
        ),
      setGroupPosition: (o) =>
        Effect.tap(memory.setGroupPosition!(o), () =>
          Effect.sync(() => log.push({ kind: "seek", shard: o.shard, position: o.position })),
        ),
      waitForEntries: (o) =>
        Effect.andThen(
          Effect.sync(() => log.push({ kind: "wait", shard: o.shard, afterId: o.afterId })),
          memory.waitForEntries(o),
        ),
      info: (s, shard) =>
        Effect.andThen(
          Effect.sync(() => log.push({ kind: "info", shard })),
          memory.info(s, shard),
        ),
      drainState: (o) =>
        Effect.andThen(
          Effect.sync(() => log.push({ kind: "drainState", shard: o.shard })),
          memory.drainState(o),
        ),
    }
    const { setGroupPosition: _, ...cannotSeek } = full
    const streams: ShardStreams.ShardStreamsShape = options.withoutSeek ? cannotSeek : full

    const settingsResult = resolveSettings({ stream, group, ...options.settings } as never, "")
    if (settingsResult._tag === "Failure") return yield* Effect.die(settingsResult.failure)
    const settings: ConsumerSettings = settingsResult.success

    const track = <A>(shard: number, body: () => A): A => {
      const n = (inFlight.get(shard) ?? 0) + 1
      inFlight.set(shard, n)
      maxInFlightPerShard = Math.max(maxInFlightPerShard, n)
      return body()
    }
    const untrack = (shard: number) => inFlight.set(shard, (inFlight.get(shard) ?? 1) - 1)

    /** Wrap user code so that it is tracked and may return a Promise, an Effect or nothing. */
    const call = (shard: number, body: () => unknown, settled: () => void, signal: AbortSignal) =>
      Effect.suspend(() => {
        let result: unknown
        let thrown: { readonly error: unknown } | undefined
        try {
          result = track(shard, body)
        } catch (error) {
          thrown = { error }
        }
        const effect =
          thrown !== undefined
            ? callUser(
                () => {
                  throw thrown.error
                },
                settled,
                signal,
              )
            : isEffect(result)
              ? callUserEffect(() => result, settled, signal)
              : callUser(() => result, settled, signal)
        return Effect.ensuring(
          effect,
          Effect.sync(() => untrack(shard)),
        )
      })

    const logHandle = (m: Message) =>
      log.push({
        kind: "handle",
        shard: m.shard,
        id: m.id,
        key: m.key,
        deliveryCount: m.deliveryCount,
      })

    const handler: InternalHandler =
      options.eachBatch !== undefined
        ? {
            kind: "batch",
            autoResolve: options.autoResolve ?? true,
            run: (b, ctx, settled) => {
              for (const m of b.messages) logHandle(m)
              return call(b.shard, () => options.eachBatch!(b, ctx), settled, ctx.signal)
            },
            // the fast path the runtime takes for plain handlers (unless `slowPath`)
            ...(options.slowPath
              ? {}
              : {
                  direct: (b: Batch, ctx: BatchContext): unknown => {
                    for (const m of b.messages) logHandle(m)
                    let result: unknown
                    try {
                      result = track(b.shard, () => options.eachBatch!(b, ctx))
                    } catch (error) {
                      untrack(b.shard)
                      throw error
                    }
                    if (isEffect(result))
                      return Effect.ensuring(
                        result,
                        Effect.sync(() => untrack(b.shard)),
                      )
                    if (isPromiseLike(result))
                      return Promise.resolve(result).finally(() => untrack(b.shard))
                    untrack(b.shard)
                    return undefined
                  },
                }),
          }
        : {
            kind: "message",
            // the fast path the runtime takes for plain handlers (unless `slowPath`)
            ...(options.slowPath
              ? {}
              : {
                  direct: (m: Message, ctx: MessageContext): unknown => {
                    logHandle(m)
                    const done = () => {
                      untrack(m.shard)
                      log.push({ kind: "handled", shard: m.shard, id: m.id })
                    }
                    let result: unknown
                    try {
                      result = track(m.shard, () => options.eachMessage?.(m, ctx))
                    } catch (error) {
                      untrack(m.shard)
                      throw error
                    }
                    if (isEffect(result))
                      return Effect.onExit(result, (exit) =>
                        Effect.sync(() => (exit._tag === "Success" ? done() : untrack(m.shard))),
                      )
                    if (isPromiseLike(result))
                      return Promise.resolve(result).then(done, (error: unknown) => {
                        untrack(m.shard)
                        throw error
                      })
                    done()
                    return undefined
                  },
                }),
            run: (m, ctx, settled) => {
              logHandle(m)
              return Effect.tap(
                call(m.shard, () => options.eachMessage?.(m, ctx), settled, ctx.signal),
                () => Effect.sync(() => log.push({ kind: "handled", shard: m.shard, id: m.id })),
              )
            },
          }

    const poller: Poller = yield* makePoller({
      streams,
      settings,
      handler,
      hooks: {
        onAssigned: options.hooks?.onAssigned,
        onRevoked: options.hooks?.onRevoked,
        onLost: options.hooks?.onLost,
      },
      memberId: "m0",
      consumerName: "m0",
      now,
      wallNow: now,
      mayAct: () => leaseValid,
      isPaused: (shard) => paused.has(shard),
      drainBudgetMs: () => settings.drainTimeoutMs ?? Math.floor(settings.rebalanceTimeoutMs / 2),
      emit: (e) => events.push(e),
      record: (r) => {
        records.push(r)
      },
      workers: options.workers ?? 1,
      scope,
      onStaleOwner: (shard) => stale.push(shard),
      onExhausted: (shard) => exhausted.push(shard),
      onStuck: (shard, why, budgetMs) => stuck.push({ shard, why, budgetMs }),
      ...(options.transactions === true
        ? {
            transactions: {
              port: ((port: Transaction.TransactionsShape) =>
                options.rideReads === true
                  ? {
                      ...port,
                      commitGroupThenRead: Transaction.commitThenReadOf(
                        port.commitGroup,
                        full.read,
                      ),
                    }
                  : port)(
                options.wrapTransactions === undefined
                  ? memory.transactions!
                  : options.wrapTransactions(memory.transactions!),
              ),
              router: makeSendRouter(LayoutSource.fixed({ [stream]: 1 })),
            },
          }
        : {}),
      ...(options.currentFirstShard === undefined
        ? {}
        : { currentFirstShard: () => options.currentFirstShard }),
    })

    const tokens = new Map<number, number>()
    /** Fence the shard for this member (token + 1) and start its loop. */
    const start = (shard: number) =>
      Effect.gen(function* () {
        const token = (tokens.get(shard) ?? 0) + 1
        tokens.set(shard, token)
        yield* memory.setOwnerToken({ stream, shard, group, token })
        poller.start(shard, token)
        return token
      })

    /** Another member takes the shard: raise its token past ours. */
    const steal = (shard: number) =>
      Effect.gen(function* () {
        const token = (tokens.get(shard) ?? 0) + 1
        tokens.set(shard, token)
        yield* memory.setOwnerToken({ stream, shard, group, token })
      })

    let produced = 0
    /** Append `n` messages to `shard` with keys `k<shard>-<i mod keys>`. */
    const produce = (shard: number, n: number, keys = 1) =>
      Effect.gen(function* () {
        const ids: Array<string> = []
        for (let i = 0; i < n; i++)
          ids.push(
            yield* memory.append(stream, shard, {
              [KEY_FIELD]: `k${shard}-${i % keys}`,
              n: String(produced++),
            }),
          )
        return ids
      })

    /** Advance the TestClock in `stepMs` steps until `done()` (dies after `maxSteps`). */
    const runUntil = (what: string, done: () => boolean, maxSteps = 20_000, stepMs = 1) =>
      Effect.gen(function* () {
        for (let i = 0; i < maxSteps; i++) {
          if (done()) return i
          yield* TestClock.adjust(stepMs)
        }
        if (done()) return maxSteps
        return yield* Effect.die(new Error(`not reached after ${maxSteps} steps: ${what}`))
      })

    const handled = () => log.filter((e) => e.kind === "handled")
    const acked = () =>
      log.flatMap((e) => (e.kind === "ack" ? e.ids.map((id) => ({ shard: e.shard, id })) : []))

    const streamsView: ShardStreams.ShardStreamsShape = memory
    const pending = (
      shard: number,
    ): Effect.Effect<ReadonlyArray<ShardStreams.PendingEntry>, DataPlaneError> =>
      memory.pending({ stream, shard, group })
    return {
      streams: streamsView,
      /** What a deletion or an eviction does (docs/protocol.md rule 26): core's memory hooks. */
      vanish: {
        deleteStream: (shard: number) => memory.deleteStream(stream, shard),
        destroyGroup: (shard: number) => memory.destroyGroup(stream, shard, group),
        deleteOwnerToken: (shard: number) => memory.deleteOwnerToken(stream, shard, group),
      },
      /** The coordinator writes the shard's current token again (a failover's re-fence). */
      refence: (shard: number) =>
        memory.setOwnerToken({ stream, shard, group, token: tokens.get(shard) ?? 0 }),
      poller,
      log,
      events,
      records,
      stale,
      exhausted,
      stuck,
      settings,
      paused,
      start,
      steal,
      produce,
      runUntil,
      handled,
      acked,
      setLease: (valid: boolean) => {
        leaseValid = valid
      },
      maxInFlightPerShard: () => maxInFlightPerShard,
      pending,
    }
  })

export type Harness = Effect.Success<ReturnType<typeof makeHarness>>
