/**
 * `durability: { replicas, timeoutMs }` (docs/redis.md, "Durability"; issue
 * 32, item 3) on a real primary and its replica (Redis 7.0): a send or a
 * metadata commit is confirmed only once the replica has it. A send confirmed
 * so survives kill -9 of the primary and the replica's promotion; without
 * durability, sends the primary confirmed while its replica lagged (its link
 * held by a proxy) die with it, which is what the option is for. With the replica stopped, a
 * durable send fails with `NotReplicated` and, as its message says, still
 * exists on the primary. An outbox relay's delivery (a cluster's
 * transactional sends) is confirmed the same way before the relay drops the
 * outbox entry.
 */

import {
  CoordinatorShell,
  makeGroupConfig,
  NotReplicated,
  ShardStreams,
  Store,
} from "@shardline/core"
import { Effect, Layer, ManagedRuntime } from "effect"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisPorts from "../src/RedisPorts.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { makeTransactions } from "../src/RedisTransactions.js"
import { type RedisServer, startProxy, startRedis, type TcpProxy } from "../src/testing.js"
import { unique } from "./support/targets.js"

const waitFor = async (what: string, done: () => boolean, ms = 20_000) => {
  const until = Date.now() + ms
  while (!done()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

const linkUp = (replica: RedisServer) =>
  waitFor("the replica's link to its primary", () =>
    replica.cli("INFO", "replication").includes("master_link_status:up"),
  )

/**
 * The replication link goes through a proxy (`startProxy`) that can hold
 * what the primary sends (a lagging replica: a slow or cut network). Held
 * bytes die with the primary, as they do when a master is lost before it
 * replicated.
 */
/** Promote the replica once the primary is gone (what Sentinel or an operator does). */
const promote = (replica: RedisServer) => replica.cli("REPLICAOF", "NO", "ONE")

const ids = (server: RedisServer, key: string): Set<string> =>
  new Set(
    server
      .cli("XRANGE", key, "-", "+")
      .split("\n")
      .filter((l) => /^\d+-\d+$/.test(l.trim()))
      .map((l) => l.trim()),
  )

describe("durability on a primary and its replica (Redis 7.0)", () => {
  let primary: RedisServer
  let replica: RedisServer
  const runtimes: Array<ManagedRuntime.ManagedRuntime<unknown, unknown>> = []

  let link: TcpProxy
  beforeEach(async () => {
    primary = await startRedis()
    link = await startProxy(primary)
    replica = await startRedis({ args: ["--replicaof", "127.0.0.1", String(link.port)] })
    await linkUp(replica)
  }, 60_000)

  afterEach(async () => {
    for (const r of runtimes.splice(0)) await r.dispose().catch(() => {})
    await link.close()
    for (const s of [primary, replica]) {
      try {
        process.kill(s.pid, "SIGCONT")
      } catch {
        // already gone
      }
      await s.stop()
    }
  })

  /** A runtime of one RedisConnection to the primary with `durability` (disposed after the test). */
  const connectionOn = (durability: { replicas: number; timeoutMs: number }) => {
    const runtime = ManagedRuntime.make(
      RedisConnection.layer({ url: primary.url, durability }) as Layer.Layer<
        RedisConnection.RedisConnection,
        never
      >,
    )
    runtimes.push(runtime as ManagedRuntime.ManagedRuntime<unknown, unknown>)
    return runtime
  }

  const portsOn = (durability?: { replicas: number; timeoutMs: number }) => {
    const runtime = ManagedRuntime.make(
      RedisPorts.layer({
        url: primary.url,
        ...(durability === undefined ? {} : { durability }),
      }) as Layer.Layer<RedisPorts.RedisPorts, never>,
    )
    runtimes.push(runtime as ManagedRuntime.ManagedRuntime<unknown, unknown>)
    const append = (stream: string, n: number) =>
      runtime.runPromise(
        Effect.gen(function* () {
          const s = yield* ShardStreams.ShardStreams
          return yield* Effect.result(s.append(stream, 0, { n: String(n) }))
        }),
      )
    return { runtime, append }
  }

  it("kill -9 of the primary loses no send confirmed with replicas: 1; without durability, sends confirmed while the replica lagged are lost", async () => {
    // a long wait while the replica keeps up (a loaded machine may take
    // over 300 ms to replicate), a short one once its link is held
    const patient = portsOn({ replicas: 1, timeoutMs: 10_000 })
    const durable = portsOn({ replicas: 1, timeoutMs: 300 })
    const plain = portsOn()
    const stream = unique("durable")
    const key = `shardline:{${stream}:0}`
    const confirmed: Array<string> = []
    const notConfirmed: Array<number> = []
    const send = async (n: number, ports = durable) => {
      const r = await ports.append(stream, n)
      if (r._tag === "Success") confirmed.push(r.success)
      else if (r.failure._tag === "NotReplicated") notConfirmed.push(n)
      else throw r.failure
    }
    for (let n = 0; n < 50; n++) await send(n, patient)
    // the replica lags (its link holds what the primary sends)
    link.hold()
    for (let n = 50; n < 55; n++) await send(n)
    const lostIfPrimaryDies: Array<string> = []
    for (let n = 100; n < 120; n++) {
      const r = await plain.append(stream, n)
      if (r._tag === "Failure") throw r.failure
      lostIfPrimaryDies.push(r.success)
    }
    process.kill(primary.pid, "SIGKILL")
    await link.close()
    promote(replica)
    const survived = ids(replica, key)
    expect(confirmed.length).toBe(50)
    expect(notConfirmed).toEqual([50, 51, 52, 53, 54])
    expect(confirmed.filter((id) => !survived.has(id))).toEqual([])
    // what durability is for: the primary confirmed these, and they died with it
    expect(lostIfPrimaryDies.filter((id) => survived.has(id))).toEqual([])
  }, 60_000)

  it("the replica stopped: a durable send fails with NotReplicated, and it still exists on the primary", async () => {
    const durable = portsOn({ replicas: 1, timeoutMs: 300 })
    const stream = unique("durable")
    const key = `shardline:{${stream}:0}`
    process.kill(replica.pid, "SIGSTOP")
    const r = await durable.append(stream, 1)
    expect(r._tag).toBe("Failure")
    if (r._tag !== "Failure") return
    expect(r.failure).toBeInstanceOf(NotReplicated)
    const failure = r.failure as NotReplicated
    expect(failure).toMatchObject({ replicas: 1, acknowledged: 0, timeoutMs: 300, key })
    expect(failure.message).toMatch(/may still exist/)
    expect(ids(primary, key).size).toBe(1)
    // once the replica is back, the next send is confirmed again
    process.kill(replica.pid, "SIGCONT")
    await linkUp(replica)
    const again = await durable.append(stream, 2)
    expect(again._tag).toBe("Success")
  }, 60_000)

  it("a group metadata commit is confirmed only once the replica has it; not confirmed, it fails StoreUnavailable", async () => {
    const durable = portsOn({ replicas: 1, timeoutMs: 300 })
    const key = { stream: unique("meta"), group: "g" }
    const created = CoordinatorShell.create(
      makeGroupConfig({
        groupId: key.group,
        stream: key.stream,
        shardCount: 2,
        sessionTimeoutMs: 10_000,
        rebalanceTimeoutMs: 10_000,
        heartbeatIntervalMs: 1_000,
      }),
      { mono: 0, wall: 0 },
      { holder: "c1", leaseToken: 1 },
    )
    const commit = (expected: number) =>
      durable.runtime.runPromise(
        Effect.gen(function* () {
          const store = yield* Store.Store
          return yield* Effect.result(store.commit(key, expected, created.step.records))
        }),
      )
    process.kill(replica.pid, "SIGSTOP")
    const refused = await commit(0)
    expect(refused._tag).toBe("Failure")
    if (refused._tag === "Failure") {
      expect(refused.failure._tag).toBe("StoreUnavailable")
      expect(refused.failure.message).toMatch(/0 of 1 replica/)
    }
    process.kill(replica.pid, "SIGCONT")
  }, 60_000)

  it("an outbox relay's delivery is confirmed only once the target's replica has it; not confirmed, it fails NotReplicated and still exists (the relay keeps the outbox entry)", async () => {
    const runtime = connectionOn({ replicas: 1, timeoutMs: 1_000 })
    const stream = unique("relay")
    const source = { stream: unique("relay-source"), shard: 0, group: "g" }
    const deliver = (id: string, n: number) =>
      runtime.runPromise(
        Effect.gen(function* () {
          const connection = yield* RedisConnection.RedisConnection
          const outbox = makeTransactions(connection, { sends: "outbox" }).outbox!
          return yield* Effect.result(
            outbox.deliver(source, { id, stream, shard: 0, key: "k", fields: { n: String(n) } }),
          )
        }),
      )
    expect(await deliver("1-0", 1)).toMatchObject({ _tag: "Success", success: "appended" })
    process.kill(replica.pid, "SIGSTOP")
    const refused = await deliver("2-0", 2)
    expect(refused._tag).toBe("Failure")
    if (refused._tag === "Failure") {
      expect(refused.failure).toBeInstanceOf(NotReplicated)
      expect(refused.failure.message).toMatch(/outbox \(deliver\).*may still exist/)
    }
    expect(ids(primary, `shardline:{${stream}:0}`).size).toBe(2)
    process.kill(replica.pid, "SIGCONT")
    await linkUp(replica)
    // delivered again by the relay's next turn: the relay mark dedupes, now confirmed
    expect(await deliver("2-0", 2)).toMatchObject({ _tag: "Success", success: "duplicate" })
  }, 60_000)

  it("a group commit with durability does not carry its read (docs/exactly-once.md, 'The commit rides the read'): its WAIT counts the writes of its own connection", async () => {
    const runtime = connectionOn({ replicas: 1, timeoutMs: 5_000 })
    const done = await runtime.runPromise(
      Effect.gen(function* () {
        const s = RedisShardStreams.makeWith(yield* RedisConnection.RedisConnection)
        const base = { stream: unique("ride"), shard: 0, group: "g" }
        yield* s.setOwnerToken({ ...base, token: 1 })
        yield* s.append(base.stream, 0, { n: "0" })
        const [m] = yield* s.read({ ...base, token: 1, consumer: "c", count: 1 })
        yield* s.append(base.stream, 0, { n: "1" })
        return yield* s.transactions!.commitGroupThenRead!(
          { ...base, token: 1, mode: "ack", parts: [{ ids: [m!.id], writes: [], sends: [] }] },
          { ...base, token: 1, consumer: "c", count: 10 },
        )
      }),
    )
    // committed and confirmed by the replica, the read left to the next turn
    expect(done).toEqual({ outcome: { committed: ["Committed"] } })
  }, 60_000)

  it("refuses a durability it cannot honour: replicas below 1, a timeout of 0", async () => {
    for (const durability of [
      { replicas: 0, timeoutMs: 100 },
      { replicas: 1, timeoutMs: 0 },
      { replicas: 1.5, timeoutMs: 100 },
    ]) {
      const exit = await Effect.runPromiseExit(
        Layer.build(RedisPorts.layer({ url: primary.url, durability })).pipe(Effect.scoped),
      )
      expect(exit._tag).toBe("Failure")
      expect(JSON.stringify(exit)).toMatch(/InvalidArgument/)
    }
  }, 60_000)
})
