/**
 * `min-replicas-to-write` (docs/redis.md, "`min-replicas-to-write`"; issue
 * 32, item 3) on a real primary and its replica (Redis 7.0): with
 * `min-replicas-to-write 1` and `min-replicas-max-lag 1`, a primary whose
 * replica is gone (stopped: SIGSTOP) refuses writes with NOREPLICAS. A send
 * and a transactional commit then fail with the typed `NotEnoughReplicas`
 * (not a generic `BackendUnavailable`) and write nothing: no entry, no
 * write of the commit, its messages still pending. Once the replica is
 * back, the same calls succeed, and every confirmed send is there.
 */

import { NotEnoughReplicas, ShardStreams } from "@shardline/core"
import { Effect, type Layer, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as RedisPorts from "../src/RedisPorts.js"
import { type RedisServer, startRedis } from "../src/testing.js"
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
})
