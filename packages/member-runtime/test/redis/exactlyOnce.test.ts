/**
 * Exactly-once effects with real member processes on a real Redis
 * (docs/exactly-once.md, "How it is tested"): three processes
 * (test/redis/procs/member.ts, `transactionOut`) whose handler HINCRBYs its
 * key's counter and sends `{ n }` to a second stream, committed with the
 * ack (a quarter of the keys send; the other keys' batches commit carrying
 * their shard's next read), while this process produces keyed messages. Faults: kill -9 of a
 * process inside a handler (slow until resumed, so the kill lands there),
 * kill -9 of a fast process the moment it logged a handler's return (its
 * commit in flight, or just done), and SIGSTOP of a process inside a
 * handler past its session, then SIGCONT: it finishes that handler as a
 * zombie, and its commit must be refused by the fence; then a restart of
 * every Redis node (AOF, `appendfsync always`) under load, commits cut in
 * flight (they fail and are retried; the producer resends idempotently);
 * then a reshard of the consumed stream 6 -> 8 and back to 4 while the
 * members commit and the producer (routing by the stored layout) sends.
 * At the end every
 * counter equals the number of messages of its key exactly, and the second
 * stream holds each sending key's outputs once each, in the order they were
 * produced. No timing assertions; waits poll for up to 60 s. One node, then
 * the 3-node cluster (outbox relayed by the runtime).
 */
import { Keys } from "@shardline/redis-store"
import type { RedisServer } from "@shardline/redis-store/testing"
import { Cluster, Redis } from "ioredis"
import { afterEach, beforeAll, describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { RedisOptions } from "../../src/Redis.js"
import { type ShardlineRuntime, start } from "../../src/Runtime.js"
import { buildMemberScript, type MemberProcess } from "../support/processes.js"
import { sleep, World } from "../support/processWorld.js"
import { eventually, useRedisCluster, useRedisServer } from "../support/redis.js"

const SHARDS = 6

beforeAll(async () => {
  await buildMemberScript()
}, 120_000)

/** A `begin` of `p` not followed by its `done`: `p` is inside that handler now. */
const insideHandler = (p: MemberProcess) =>
  eventually(`${p.proc} inside a handler`, () => {
    const lines = p.lines
    for (let i = lines.length - 1; i >= 0; i--) {
      const l = lines[i]!
      if (l.ev === "done") return false
      if (l.ev === "begin") return true
    }
    return false
  })

const client = (redis: RedisOptions): Redis | Cluster =>
  redis.nodes !== undefined ? new Cluster([...redis.nodes]) : new Redis(redis.url!)

/**
 * The effects in Redis: counters per key (summed over every shard id of
 * every generation: a retired shard's data keys stay), and each key's
 * outputs in stream order.
 */
const effectsOf = async (redis: RedisOptions, w: World, out: string) => {
  const c = client(redis)
  try {
    const counts = new Map<string, number>()
    const outputs = new Map<string, Array<number>>()
    for (let shard = 0; shard < w.shardIds; shard++) {
      const hash = await c.hgetall(Keys.defaultKeys.dataKey(w.stream, shard, "counts"))
      for (const [k, v] of Object.entries(hash)) counts.set(k, (counts.get(k) ?? 0) + Number(v))
    }
    for (let shard = 0; shard < SHARDS; shard++) {
      const entries = await c.xrange(Keys.defaultKeys.shardKey(out, shard), "-", "+")
      for (const [, flat] of entries) {
        const fields: Record<string, string> = {}
        for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!
        const key = fields["shardline-key"]!
        outputs.set(key, [...(outputs.get(key) ?? []), Number(fields.n)])
      }
    }
    return { counts, outputs }
  } finally {
    c.disconnect()
  }
}

const scenario = (redis: () => RedisOptions, servers: () => ReadonlyArray<RedisServer>) => {
  let world: World | undefined
  let checker: ShardlineRuntime | undefined
  afterEach(async () => {
    await checker?.stop()
    await world?.close()
    world = undefined
    checker = undefined
  })

  it("kill -9 inside a handler and right after one, SIGSTOP past the session, a Redis restart, a reshard 6 -> 8 -> 4: every effect exactly once", async () => {
    const w = new World(redis(), {
      shards: SHARDS,
      keys: 24,
      prefix: "eo",
      retrySends: true,
      storedLayout: true,
    })
    world = w
    const out = `${w.stream}-out`
    // the output stream's layout: stored by its own group's coordinator, which
    // the members' sends route by (they do not consume it)
    checker = await start({
      redis: redis(),
      handleSignals: false,
      memberBase: "checker",
      consumers: [
        consumer({
          stream: out,
          group: "check",
          shardCount: SHARDS,
          sessionTimeoutMs: 4_000,
          heartbeatIntervalMs: 300,
          rebalanceTimeoutMs: 8_000,
          eachMessage: () => {},
        }),
      ],
    })
    await eventually("the checker owns the output stream's shards", () =>
      checker!.members().every((m) => m.owned.length === SHARDS),
    )
    // only a quarter of the keys send: batches of the other keys' shards
    // commit carrying their shard's next read (docs/exactly-once.md, "The
    // commit rides the read"), the rest commit, then read
    const sendKeys = Array.from({ length: 24 }, (_, i) => `k${i}`).filter((_, i) => i % 4 === 0)
    const tx = { transactionOut: out, transactionSendKeys: sendKeys }
    const a = w.spawn("a", tx)
    const b = w.spawn("b", { ...tx, slowUntilContMs: 3_000 })
    const c = w.spawn("c", tx)
    await w.settled([a, b, c], "3 members own every shard")
    await w.startProduction()

    // 1. kill -9 inside a (slow) handler
    await insideHandler(b)
    b.signal("SIGKILL")
    await b.exited
    await w.settled([a, c], "a and c own every shard")

    // 2. kill -9 the moment a fast member logged a handler's return (its commit in flight)
    const d = w.spawn("d", tx)
    await w.settled([a, c, d], "a, c and d own every shard")
    const doneBefore = d.lines.filter((l) => l.ev === "done").length
    await eventually(
      "d handled more",
      () => d.lines.filter((l) => l.ev === "done").length > doneBefore + 20,
      60_000,
      1,
    )
    d.signal("SIGKILL")
    await d.exited
    await w.settled([a, c], "a and c own every shard again")

    // 3. SIGSTOP inside a (slow) handler, past the session; SIGCONT: the zombie's commit is fenced
    const e = w.spawn("e", { ...tx, slowUntilContMs: 3_000 })
    await w.settled([a, c, e], "a, c and e own every shard")
    await insideHandler(e)
    e.signal("SIGSTOP")
    await w.settled([a, c], "a and c own every shard while e is stopped")
    e.signal("SIGCONT")
    await eventually("e notices the fence", () =>
      e.lines.some((l) => l.ev === "lost" || l.ev === "staleOwner"),
    )
    await sleep(1_000)

    // 4. every Redis node restarts (AOF) while the members commit
    const beforeRestart = w.produced
    await Promise.all(servers().map((s) => s.restart()))
    if (servers().length > 1)
      await eventually("cluster_state:ok on every node", () =>
        servers().every((s) => s.cli("CLUSTER", "INFO").includes("cluster_state:ok")),
      )
    await eventually("production goes on after the restart", () => w.produced > beforeRestart + 200)

    // 5. reshard while the members commit and the producer sends: grow, then shrink
    for (const count of [8, 4]) {
      const before = w.produced
      await w.reshard(count)
      await eventually(
        `the reshard to ${count} completed (the earlier generation retired)`,
        async () => (await w.generations()) === 1,
        90_000,
        200,
      )
      await eventually(
        `production goes on after the reshard to ${count}`,
        () => w.produced > before + 200,
      )
    }

    await w.drained()
    const { counts } = await effectsOf(redis(), w, out)
    const expectedCounts = new Map([...w.producedByKey].map(([k, ns]) => [k, ns.length]))
    expect(w.produced).toBeGreaterThan(100)
    expect(new Map([...counts].sort())).toEqual(new Map([...expectedCounts].sort()))
    // relayed (cluster) sends may still be on their way: wait for the count, then compare
    const expectedOutputs = new Map(
      [...w.producedByKey].filter(([k]) => sendKeys.includes(k)).sort(),
    )
    const sent = [...expectedOutputs.values()].reduce((n, l) => n + l.length, 0)
    await eventually("every output landed", async () => {
      const now = await effectsOf(redis(), w, out)
      return [...now.outputs.values()].reduce((n, l) => n + l.length, 0) >= sent
    })
    const landed = (await effectsOf(redis(), w, out)).outputs
    expect(new Map([...landed].sort())).toEqual(expectedOutputs)
    // the faults happened where they were meant to: re-deliveries after the kills
    expect(
      w.lines.some((l) => l.ev === "begin" && (l.dc as number) >= 2),
      "some message was delivered again",
    ).toBe(true)
    // and the reshards: messages handled on each generation (shards 6..13, 14..17)
    const handledOn = (from: number, to: number) =>
      w.lines.some(
        (l) => l.ev === "done" && (l.shard as number) >= from && (l.shard as number) < to,
      )
    expect([handledOn(0, 6), handledOn(6, 14), handledOn(14, 18)]).toEqual([true, true, true])
  }, 300_000)
}

describe("one redis-server (AOF)", () => {
  const server = useRedisServer("redis7", { persistence: true })
  scenario(
    () => ({ url: server().url }),
    () => [server()],
  )
})

describe("3-node cluster (AOF)", () => {
  const cluster = useRedisCluster("redis7", { persistence: true })
  scenario(
    () => ({ nodes: cluster().nodes }),
    () => cluster().servers,
  )
})
