/**
 * `min-replicas-to-write` (docs/redis.md, "`min-replicas-to-write`"; issue
 * 32, item 3) on a real primary and its replica (Redis 7.0): with
 * `min-replicas-to-write 1` and `min-replicas-max-lag 1`, a primary whose
 * replica is gone (stopped: SIGSTOP) refuses writes with NOREPLICAS. A send
 * and a transactional commit then fail with the typed `NotEnoughReplicas`
 * (not a generic `BackendUnavailable`) and write nothing: no entry, no
 * write of the commit, its messages still pending. Once the replica is
 * back, the same calls succeed, and every confirmed send is there.
 *
 * The same for what else writes: acks (`ack`, a read carrying its previous
 * batch's ack, a dead letter; every read fence: gated, optimistic, script)
 * fail `NotEnoughReplicas` and leave every entry pending; a member's
 * heartbeat fails `TransportError` "Unavailable" (retried by the member)
 * caused by `NotEnoughReplicas`; a Store commit fails `StoreUnavailable`
 * (the coordinator host steps down, as for any backend failure) caused by
 * `NotEnoughReplicas`, its revision unchanged.
 */

import {
  Coordinator,
  CoordinatorLease,
  CoordinatorTransport,
  type GroupKey,
  type HeartbeatRequest,
  NotEnoughReplicas,
  ShardStreams,
  Store,
  StoreUnavailable,
  TransportError,
} from "@shardline/core"
import { Effect, type Layer, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { defaultKeys } from "../src/keys.js"
import * as RedisPorts from "../src/RedisPorts.js"
import { type RedisServer, startRedis } from "../src/testing.js"
import { bump, configFor } from "./contract/Store.js"
import { unique } from "./support/targets.js"

const waitFor = async (what: string, done: () => boolean, ms = 30_000) => {
  const until = Date.now() + ms
  while (!done()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** The primary's count of replicas within min-replicas-max-lag (INFO replication). */
const goodReplicas = (primary: RedisServer): number =>
  Number(/min_slaves_good_slaves:(\d+)/.exec(primary.cli("INFO", "replication"))?.[1] ?? -1)

describe("min-replicas-to-write 1 on a primary and its replica (Redis 7.0)", () => {
  let primary: RedisServer
  let replica: RedisServer
  let runtime: ManagedRuntime.ManagedRuntime<RedisPorts.RedisPorts, never>

  beforeAll(async () => {
    primary = await startRedis({
      args: ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"],
    })
    replica = await startRedis({ args: ["--replicaof", primary.host, String(primary.port)] })
    await waitFor("a good replica", () => goodReplicas(primary) === 1)
    runtime = ManagedRuntime.make(
      RedisPorts.layer({ url: primary.url }) as Layer.Layer<RedisPorts.RedisPorts, never>,
    )
  }, 60_000)

  afterAll(async () => {
    await runtime?.dispose()
    try {
      process.kill(replica.pid, "SIGCONT")
    } catch {
      // already gone
    }
    await replica?.stop()
    await primary?.stop()
  })

  const run = <A, E>(effect: Effect.Effect<A, E, ShardStreams.ShardStreams>) =>
    runtime.runPromise(
      Effect.gen(function* () {
        const streams = yield* ShardStreams.ShardStreams
        return yield* Effect.result(
          Effect.provideService(effect, ShardStreams.ShardStreams, streams),
        )
      }),
    )

  it("the replica stopped: a send and a commit fail NotEnoughReplicas and write nothing; back, they succeed and nothing is lost", async () => {
    const stream = unique("minrep")
    const out = unique("minrep-out")
    const base = { stream, shard: 0, group: "g" }
    const append = (n: number) =>
      run(Effect.flatMap(ShardStreams.ShardStreams, (s) => s.append(stream, 0, { n: String(n) })))
    const confirmed: Array<string> = []
    for (let n = 0; n < 3; n++) {
      const r = await append(n)
      if (r._tag === "Failure") throw r.failure
      confirmed.push(r.success)
    }
    // the three are read (pending with c1): the commit below acknowledges one
    const read = await run(
      Effect.flatMap(ShardStreams.ShardStreams, (s) =>
        Effect.andThen(
          s.setOwnerToken({ ...base, token: 5 }),
          s.read({ ...base, token: 5, consumer: "c1", count: 10 }),
        ),
      ),
    )
    if (read._tag === "Failure") throw read.failure
    const ids = read.success.map((m) => m.id)
    expect(ids).toEqual(confirmed)
    const commit = () =>
      run(
        Effect.flatMap(ShardStreams.ShardStreams, (s) => {
          const tx = s.transactions!
          return tx.commit({
            ...base,
            token: 5,
            ids: [ids[0]!],
            mode: "ack",
            writes: [{ command: "INCR", args: [tx.keys(stream, 0).key("count")] }],
            sends: [{ stream: out, shard: 0, key: "k", fields: { v: "1" } }],
          })
        }),
      )
    const key = `shardline:{${stream}:0}`
    const countKey = `shardline:{${stream}:0}:data:count`
    const outKey = `shardline:{${out}:0}`

    // the replica stops: past min-replicas-max-lag the primary refuses writes
    process.kill(replica.pid, "SIGSTOP")
    await waitFor("the primary to count no good replica", () => goodReplicas(primary) === 0)

    const refused = await append(99)
    expect(refused._tag).toBe("Failure")
    if (refused._tag === "Failure") {
      expect(refused.failure).toBeInstanceOf(NotEnoughReplicas)
      expect(refused.failure).toMatchObject({ operation: "append", key })
      expect(refused.failure.message).toMatch(
        /min-replicas-to-write \(NOREPLICAS\); nothing was written/,
      )
    }
    const refusedCommit = await commit()
    expect(refusedCommit._tag).toBe("Failure")
    if (refusedCommit._tag === "Failure") {
      expect(refusedCommit.failure).toBeInstanceOf(NotEnoughReplicas)
      expect(refusedCommit.failure).toMatchObject({ operation: "commit", key })
    }
    // nothing written: no fourth entry, no counter, no send, all three still pending
    expect(primary.cli("XLEN", key).trim()).toBe("3")
    expect(primary.cli("EXISTS", countKey).trim()).toBe("0")
    expect(primary.cli("EXISTS", outKey).trim()).toBe("0")
    expect(primary.cli("XPENDING", key, "g").split("\n")[0]?.trim()).toBe("3")

    // the replica is back: the same calls go through
    process.kill(replica.pid, "SIGCONT")
    await waitFor("a good replica again", () => goodReplicas(primary) === 1)
    const again = await append(3)
    expect(again._tag).toBe("Success")
    if (again._tag === "Success") confirmed.push(again.success)
    const committed = await commit()
    expect(committed._tag === "Success" ? committed.success : committed.failure).toEqual({
      _tag: "Committed",
    })
    // every confirmed send is on the primary and on its replica
    await waitFor("the replica to catch up", () => replica.cli("XLEN", key).trim() === "4")
    const onReplica = replica.cli("XRANGE", key, "-", "+")
    for (const id of confirmed) expect(onReplica).toContain(id)
    expect(primary.cli("GET", countKey).trim()).toBe("1")
  }, 90_000)

  it("the replica stopped: acks, a heartbeat and a Store commit fail typed (NotEnoughReplicas) and write nothing; back, they go through", async () => {
    const modes = ["gated", "optimistic", "script"] as const
    const runtimes = modes.map((read) =>
      ManagedRuntime.make(
        RedisPorts.layer({ url: primary.url, shardStreams: { read } }) as Layer.Layer<
          RedisPorts.RedisPorts,
          never
        >,
      ),
    )
    const attempt = <A, E>(
      at: number,
      effect: Effect.Effect<A, E, RedisPorts.RedisPorts>,
    ): Promise<{ ok: true; value: A } | { ok: false; error: E }> =>
      runtimes[at]!.runPromise(
        Effect.match(effect, {
          onSuccess: (value) => ({ ok: true as const, value }),
          onFailure: (error) => ({ ok: false as const, error }),
        }),
      )
    const must = async <A, E>(at: number, effect: Effect.Effect<A, E, RedisPorts.RedisPorts>) => {
      const r = await attempt(at, effect)
      if (!r.ok) throw r.error
      return r.value
    }
    const refusedWith = async <E>(
      at: number,
      effect: Effect.Effect<unknown, E, RedisPorts.RedisPorts>,
    ): Promise<E> => {
      const r = await attempt(at, effect)
      if (r.ok) throw new Error(`expected a refusal, got ${JSON.stringify(r.value)}`)
      return r.error
    }
    const streams = ShardStreams.ShardStreams
    try {
      // per read fence: four entries, all read (pending with c1), the fence armed
      const shards = await Promise.all(
        modes.map(async (mode, at) => {
          const base = { stream: unique(`minrep-${mode}`), shard: 0, group: "g", token: 5 }
          const ids = await must(
            at,
            Effect.gen(function* () {
              const s = yield* streams
              for (let n = 0; n < 4; n++) yield* s.append(base.stream, 0, { n: String(n) })
              yield* s.setOwnerToken(base)
              const first = yield* s.read({ ...base, consumer: "c1", count: 2 })
              const second = yield* s.read({ ...base, consumer: "c1", count: 2 })
              return [...first, ...second].map((m) => m.id)
            }),
          )
          expect(ids).toHaveLength(4)
          return { base, ids, key: defaultKeys.shardKey(base.stream, 0) }
        }),
      )
      const group: GroupKey = { stream: unique("minrep-store"), group: "g" }
      await must(
        0,
        Effect.flatMap(Store.Store, (store) =>
          store.commit(group, 0, Coordinator.createGroup(configFor(group), 0)),
        ),
      )
      const revisionKey = defaultKeys.storeRevisionKey(group)
      expect(primary.cli("GET", revisionKey).trim()).toBe("1")

      process.kill(replica.pid, "SIGSTOP")
      await waitFor("the primary to count no good replica", () => goodReplicas(primary) === 0)

      for (const [at, { base, ids, key }] of shards.entries()) {
        const mode = modes[at]
        const ack = await refusedWith(
          at,
          Effect.flatMap(streams, (s) => s.ack({ ...base, ids: [ids[0]!], mode: "ack" })),
        )
        expect(ack, `${mode}: ack`).toBeInstanceOf(NotEnoughReplicas)
        expect(ack, `${mode}: ack`).toMatchObject({ operation: "ack", key })
        const readAck = await refusedWith(
          at,
          Effect.flatMap(streams, (s) =>
            s.read({ ...base, consumer: "c1", count: 2, ack: { ids: [ids[1]!], mode: "ack" } }),
          ),
        )
        expect(readAck, `${mode}: a read carrying an ack`).toBeInstanceOf(NotEnoughReplicas)
        expect(readAck, `${mode}: a read carrying an ack`).toMatchObject({
          operation: "read",
          key,
        })
        const dead = await refusedWith(
          at,
          Effect.flatMap(streams, (s) => s.deadLetter({ ...base, id: ids[2]!, reason: "boom" })),
        )
        expect(dead, `${mode}: deadLetter`).toBeInstanceOf(NotEnoughReplicas)
        // nothing acknowledged, nothing dead-lettered: all four still pending
        expect(primary.cli("XPENDING", key, "g").split("\n")[0]?.trim(), mode).toBe("4")
        expect(primary.cli("EXISTS", defaultKeys.deadLetterKey(base.stream, 0)).trim()).toBe("0")
      }

      // a member's heartbeat: a retried TransportError, caused by NotEnoughReplicas
      const heartbeat = await refusedWith(
        0,
        Effect.flatMap(CoordinatorTransport.CoordinatorTransport, (t) =>
          t.heartbeat(heartbeatOf(group)),
        ),
      )
      expect(heartbeat).toBeInstanceOf(TransportError)
      expect(heartbeat).toMatchObject({ reason: "Unavailable" })
      expect((heartbeat as TransportError).cause).toBeInstanceOf(NotEnoughReplicas)
      expect((heartbeat as TransportError).message).toMatch(/NOREPLICAS/)

      // a Store commit: StoreUnavailable caused by NotEnoughReplicas, revision unchanged
      const commit = await refusedWith(
        0,
        Effect.flatMap(Store.Store, (store) => store.commit(group, 1, bump(1))),
      )
      expect(commit).toBeInstanceOf(StoreUnavailable)
      expect((commit as StoreUnavailable).cause).toBeInstanceOf(NotEnoughReplicas)
      expect((commit as StoreUnavailable).cause).toMatchObject({ key: revisionKey })
      expect(primary.cli("GET", revisionKey).trim()).toBe("1")

      // the coordinator lease: its acquisition StoreUnavailable caused by NotEnoughReplicas
      const leaseRefused = await refusedWith(
        0,
        Effect.flatMap(CoordinatorLease.CoordinatorLease, (leases) =>
          leases.acquire(group, "c1", 5_000),
        ),
      )
      expect(leaseRefused).toBeInstanceOf(StoreUnavailable)
      expect((leaseRefused as StoreUnavailable).cause).toBeInstanceOf(NotEnoughReplicas)
      expect((leaseRefused as StoreUnavailable).cause).toMatchObject({
        operation: "lease acquire",
        key: defaultKeys.leaseKey(group),
      })

      // the replica is back: every one goes through
      process.kill(replica.pid, "SIGCONT")
      await waitFor("a good replica again", () => goodReplicas(primary) === 1)
      for (const [at, { base, ids, key }] of shards.entries()) {
        expect(
          await must(
            at,
            Effect.flatMap(streams, (s) => s.ack({ ...base, ids: [ids[0]!], mode: "ack" })),
          ),
        ).toBe(1)
        await must(
          at,
          Effect.flatMap(streams, (s) =>
            s.read({ ...base, consumer: "c1", count: 2, ack: { ids: [ids[1]!], mode: "ack" } }),
          ),
        )
        await must(
          at,
          Effect.flatMap(streams, (s) => s.deadLetter({ ...base, id: ids[2]!, reason: "boom" })),
        )
        expect(primary.cli("XPENDING", key, "g").split("\n")[0]?.trim(), modes[at]).toBe("1")
      }
      // no coordinator serves the group: refused so, not for want of replicas
      const served = await refusedWith(
        0,
        Effect.flatMap(CoordinatorTransport.CoordinatorTransport, (t) =>
          t.heartbeat(heartbeatOf(group)),
        ),
      )
      expect((served as TransportError).message).toMatch(/no coordinator serves/)
      expect(
        await must(
          0,
          Effect.flatMap(Store.Store, (store) => store.commit(group, 1, bump(1))),
        ),
      ).toBe(2)
    } finally {
      await Promise.all(runtimes.map((r) => r.dispose()))
    }
  }, 90_000)
})

const heartbeatOf = (key: GroupKey): HeartbeatRequest => ({
  stream: key.stream,
  group: key.group,
  memberId: "m0",
  incarnation: 1,
  seq: 1,
  memberEpoch: 0,
  assignmentEpoch: 0,
  metadataVersion: 0,
  ownedShards: [],
  revokingShards: [],
  memberInfo: { consumerName: "m0", host: "h" },
})
