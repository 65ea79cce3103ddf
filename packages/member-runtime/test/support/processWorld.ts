/**
 * One real-process scenario's world (docs/runtime.md, "On Redis"): its own
 * stream on a shared Redis, its member processes (test/support/processes.ts)
 * and a paced producer in this process writing keyed messages, each numbered
 * (`n`) so the checks of test/support/groupChecks.ts can tell what was
 * handled and in which order. Used by test/redis/processes.test.ts,
 * test/redis/availability.test.ts and test/redis/exactlyOnce.test.ts (which
 * also reshards the stream: `reshard`, `generations`, `storedLayout`).
 */
import { writeFileSync } from "node:fs"
import { Layout, StreamLayouts } from "@shardline/core"
import { Keys, RedisConnection, RedisPorts } from "@shardline/redis-store"
import { Effect, Option, Result } from "effect"
import { expect } from "vitest"
import * as LayoutSource from "../../src/LayoutSource.js"
import { decodeRedisOptions, type RedisOptions } from "../../src/Redis.js"
import { type ShardlineRuntime, start } from "../../src/Runtime.js"
import type { MemberProcessConfig } from "../redis/procs/member.js"
import { ownedNow, perKeyOrderViolations, unhandled } from "./groupChecks.js"
import { type Line, MemberProcess } from "./processes.js"
import { eventually } from "./redis.js"

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const lastOf = <A>(list: ReadonlyArray<A>, predicate: (a: A) => boolean): A | undefined => {
  for (let i = list.length - 1; i >= 0; i--) if (predicate(list[i]!)) return list[i]
  return undefined
}

export interface WorldOptions {
  readonly shards?: number
  readonly keys?: number
  readonly group?: string
  /** The member script to start (`buildMemberScript(name)`); default `procs/dist/member.js`. */
  readonly script?: string
  /**
   * The producer is idempotent (message id = `n`) and a batch that fails is
   * sent again until it is appended: the scenarios that cut the producer's
   * connection too (Redis restart, CLIENT KILL) lose nothing and duplicate
   * nothing.
   */
  readonly retrySends?: boolean
  /** Stream name prefix (default `procs`). */
  readonly prefix?: string
  /**
   * The producer routes by the stream's stored layout (it follows a
   * `reshard`, re-routing on ShardSealed) instead of `shards` at generation 0.
   */
  readonly storedLayout?: boolean
}

let streams = 0

export class World {
  readonly stream: string
  readonly shards: number
  readonly keys: number
  readonly group: string
  /** Shard ids every generation so far used: 0 .. shardIds - 1 (grows with `reshard`). */
  shardIds: number
  readonly procs: Array<MemberProcess> = []
  readonly producedByKey = new Map<string, Array<number>>()
  produced = 0
  /** Batches the producer had to send again (retrySends). */
  resends = 0
  private producing: Promise<void> | undefined
  private stopProducing = false
  private producerRuntime: ShardlineRuntime | undefined

  constructor(
    readonly redis: RedisOptions,
    readonly options: WorldOptions = {},
  ) {
    this.stream = `${options.prefix ?? "procs"}-${process.pid}-${++streams}`
    this.shards = options.shards ?? 8
    this.keys = options.keys ?? 40
    this.group = options.group ?? "g"
    this.shardIds = this.shards
  }

  private redisOptions(): RedisPorts.RedisPortsOptions {
    const decoded = decodeRedisOptions(this.redis)
    if (Result.isFailure(decoded)) throw decoded.failure
    return decoded.success
  }

  private layoutOp<A, E>(program: Effect.Effect<A, E, RedisPorts.RedisPorts>): Promise<A> {
    return Effect.runPromise(program.pipe(Effect.provide(RedisPorts.layer(this.redisOptions()))))
  }

  /** Reshard the stream to `count` shards (docs/resharding.md); the members follow it. */
  async reshard(count: number): Promise<void> {
    const stored = await this.layoutOp(Layout.Reshard.reshardStream(this.stream, count))
    const now = Layout.StreamLayout.current(stored.record)
    this.shardIds = Math.max(this.shardIds, now.firstShard + now.shardCount)
  }

  /** The stored layout's live generations (1 once a reshard completed and retired the earlier one). */
  generations(): Promise<number> {
    const stream = this.stream
    return this.layoutOp(
      Effect.gen(function* () {
        const stored = yield* (yield* StreamLayouts.StreamLayouts).load(stream)
        return Option.isSome(stored) ? stored.value.record.generations.length : 0
      }),
    )
  }

  config(memberId: string, overrides: Partial<MemberProcessConfig> = {}): MemberProcessConfig {
    return {
      redis: this.redis,
      stream: this.stream,
      group: this.group,
      memberId,
      shardCount: this.shards,
      sessionTimeoutMs: 4_000,
      heartbeatIntervalMs: 300,
      rebalanceTimeoutMs: 8_000,
      batchSize: 8,
      workers: 2,
      handlerMs: 2,
      ...overrides,
    }
  }

  spawn(
    memberId: string,
    overrides: Partial<MemberProcessConfig> = {},
    wrap: ReadonlyArray<string> = [],
  ): MemberProcess {
    const p = new MemberProcess(this.config(memberId, overrides), this.options.script, wrap)
    this.procs.push(p)
    return p
  }

  get lines(): Array<Line> {
    return this.procs.flatMap((p) => p.lines)
  }

  live(): Array<MemberProcess> {
    return this.procs.filter((p) => p.child.exitCode === null && p.child.signalCode === null)
  }

  /** Every shard owned by exactly one of `procs`, each of them owning at least one. */
  async settled(procs: ReadonlyArray<MemberProcess>, what: string): Promise<void> {
    await eventually(what, () => {
      const owned = procs.map((p) => ownedNow(p.lines))
      if (owned.some((o) => o.size === 0)) return false
      const all = owned.flatMap((o) => [...o])
      return all.length === this.shards && new Set(all).size === this.shards
    })
  }

  /** Produces 20 keyed messages every 50 ms until `stopProduction`. */
  async startProduction(): Promise<void> {
    this.producerRuntime = await start({
      redis: this.redis,
      handleSignals: false,
      memberBase: "producer",
    })
    const producer = this.producerRuntime.producer(this.stream, {
      ...(this.options.storedLayout === true
        ? {}
        : { layout: LayoutSource.fixed({ [this.stream]: this.shards }) }),
      ...(this.options.retrySends === true ? { idempotent: true } : {}),
    })
    this.producing = (async () => {
      while (!this.stopProducing) {
        const batch = Array.from({ length: 20 }, () => {
          const n = this.produced++
          const key = `k${n % this.keys}`
          const list = this.producedByKey.get(key) ?? []
          list.push(n)
          this.producedByKey.set(key, list)
          return {
            key,
            fields: { n: String(n) },
            ...(this.options.retrySends === true ? { options: { idempotencyKey: String(n) } } : {}),
          }
        })
        for (;;) {
          try {
            await producer.sendBatch(batch)
            break
          } catch (error) {
            if (this.options.retrySends !== true) throw error
            this.resends++
            await sleep(100)
          }
        }
        await sleep(50)
      }
      await producer.flush()
    })()
  }

  async stopProduction(): Promise<void> {
    this.stopProducing = true
    await this.producing
    await this.producerRuntime?.stop()
  }

  /** Entries pending in the group, per shard id (XPENDING; 0 for a retired shard). */
  async pending(): Promise<Array<number>> {
    const client = RedisConnection.makeClient(this.redisOptions())
    try {
      const out: Array<number> = []
      for (let s = 0; s < this.shardIds; s++) {
        const key = Keys.defaultKeys.shardKey(this.stream, s)
        if ((await client.exists(key)) === 0) {
          out.push(0)
          continue
        }
        const reply = (await client.xpending(key, this.group)) as [number]
        out.push(Number(reply[0]))
      }
      return out
    } finally {
      client.disconnect()
    }
  }

  /** Stop producing, then wait until every message was handled and nothing is pending. */
  async drained(): Promise<void> {
    await this.stopProduction()
    await eventually(
      `all ${this.produced} messages handled`,
      () => unhandled(this.lines, this.produced).length === 0,
    )
    await eventually("no entry pending in any shard", async () =>
      (await this.pending()).every((n) => n === 0),
    )
  }

  /** The checks every scenario ends with. */
  commonChecks(): void {
    expect(this.produced).toBeGreaterThan(100)
    expect(unhandled(this.lines, this.produced).join(", "), "unhandled messages").toBe("")
    expect(
      perKeyOrderViolations(this.lines, this.producedByKey).join("\n"),
      "per-key order violations",
    ).toBe("")
  }

  /** Each shard's entries (id, n) and the group's state on it, for a dump. */
  async shardState(): Promise<Array<unknown>> {
    const decoded = decodeRedisOptions(this.redis)
    if (Result.isFailure(decoded)) throw decoded.failure
    const client = RedisConnection.makeClient(decoded.success)
    try {
      const out: Array<unknown> = []
      for (let s = 0; s < this.shardIds; s++) {
        const key = Keys.defaultKeys.shardKey(this.stream, s)
        const entries = (await client.xrange(key, "-", "+")) as Array<[string, Array<string>]>
        out.push({
          shard: s,
          entries: entries.map(([id, fields]) => [id, fields[fields.indexOf("n") + 1]]),
          groups: await client.call("XINFO", "GROUPS", key),
          pending: await client.xpending(key, this.group, "-", "+", 1_000),
        })
      }
      return out
    } finally {
      client.disconnect()
    }
  }

  async close(): Promise<void> {
    if (process.env.SHARDLINE_DUMP !== undefined)
      writeFileSync(
        `${process.env.SHARDLINE_DUMP}/${this.stream}.json`,
        JSON.stringify({
          lines: this.lines,
          produced: this.produced,
          resends: this.resends,
          shards: await this.shardState().catch((e: unknown) => String(e)),
        }),
      )
    this.stopProducing = true
    await this.producing?.catch(() => {})
    await this.producerRuntime?.stop().catch(() => {})
    await Promise.all(this.procs.map((p) => p.kill()))
  }
}
