/**
 * Ack policies on real Redis (docs/runtime.md, "Acknowledgement and
 * failures"), through `start({ redis })`:
 * - `xackdel` on Redis 7.0, which has no XACKDEL: the Lua fallback acks and
 *   deletes every handled entry (the shard streams end empty; with `ack`
 *   they keep every entry); on Redis 8 both the native command and the
 *   forced fallback;
 * - a message that keeps failing is delivered exactly `maxDeliveries` times,
 *   then copied to the shard's dead-letter stream with its reason,
 *   atomically with its ack, and the shard goes on in order;
 * - poison messages (a handler that throws synchronously, one that rejects,
 *   one that never returns) never crash the process and never block their
 *   shard: each ends in the dead-letter stream, every other message is
 *   handled once, in order;
 * - fan-out (docs/runtime.md, "Ack policies and other groups"): group A
 *   acks with `xackdel` while group B, on the same stream, is live but
 *   stuck in a handler with a backlog on every shard, or stopped and back
 *   later: B handles every message once (Lua fallback on Redis 7.0, native
 *   XACKDEL ... ACKED and the forced fallback on Redis 8).
 */
import { Layout, ShardStreams } from "@shardline/core"
import { Keys, RedisPorts } from "@shardline/redis-store"
import type { RedisServer } from "@shardline/redis-store/testing"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { type ConsumerOptions, consumer } from "../../src/Consumer.js"
import type { RuntimeEvent } from "../../src/Events.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import type { Message } from "../../src/Message.js"
import type { RedisOptions } from "../../src/Redis.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }
let streams = 0

interface Run {
  readonly stream: string
  readonly calls: Array<Message>
  readonly events: Array<RuntimeEvent>
}

/**
 * One runtime on `redis` with one consumer of a fresh stream; produces
 * `messages` (key, fields), waits for `until`, stops.
 */
const runConsumer = async (
  redis: RedisOptions,
  options: Partial<Omit<ConsumerOptions, "eachMessage" | "eachBatch">> & {
    readonly shardCount: number
  },
  messages: ReadonlyArray<{ readonly key: string; readonly fields: Record<string, string> }>,
  handle: (m: Message) => void | Promise<void>,
  until: (run: Run) => boolean,
): Promise<Run> => {
  const stream = `acks-${process.pid}-${++streams}`
  const run: Run = { stream, calls: [], events: [] }
  const runtime = await start({
    redis,
    handleSignals: false,
    memberBase: "acker",
    shutdownTimeoutMs: 5_000,
    onEvent: (e) => {
      run.events.push(e)
    },
    consumers: [
      consumer({
        stream,
        group: "g",
        ...fast,
        ...options,
        eachMessage: (m) => {
          run.calls.push(m)
          return handle(m)
        },
      }),
    ],
  })
  try {
    await eventually("the member owns every shard", () =>
      runtime.members().every((m) => m.owned.length === options.shardCount),
    )
    const producer = runtime.producer(stream, {
      layout: LayoutSource.fixed({ [stream]: options.shardCount }),
    })
    await producer.sendBatch(messages)
    await producer.flush()
    await eventually("the run's condition", () => until(run))
  } finally {
    await runtime.stop()
  }
  return run
}

const numbered = (count: number, key: (n: number) => string) =>
  Array.from({ length: count }, (_, n) => ({ key: key(n), fields: { n: String(n) } }))

const handledOnce = (run: Run, count: number) => {
  const ns = run.calls.map((m) => Number(m.fields.n))
  expect(ns.length).toBe(count)
  expect(new Set(ns).size).toBe(count)
}

const lengths = (server: RedisServer, stream: string, shards: number) =>
  Array.from({ length: shards }, (_, s) =>
    Number(server.cli("XLEN", Keys.defaultKeys.shardKey(stream, s)).trim()),
  )
const pendings = (server: RedisServer, stream: string, shards: number) =>
  Array.from({ length: shards }, (_, s) =>
    Number(
      server.cli("XPENDING", Keys.defaultKeys.shardKey(stream, s), "g").split("\n")[0]!.trim(),
    ),
  )

const xackdelCases = (
  server: () => RedisServer,
  variants: ReadonlyArray<readonly [string, Partial<RedisOptions>]>,
) => {
  for (const [name, extra] of variants)
    it(`xackdel (${name}): every handled entry is acked and deleted; ack keeps them`, async () => {
      const redis = { url: server().url, ...extra }
      const deleted = await runConsumer(
        redis,
        { shardCount: 4, ack: "xackdel", batchSize: 8 },
        numbered(60, (n) => `k${n % 7}`),
        () => {},
        (r) => r.calls.length >= 60,
      )
      handledOnce(deleted, 60)
      await eventually("xackdel: the shard streams are empty", () =>
        lengths(server(), deleted.stream, 4).every((n) => n === 0),
      )
      expect(pendings(server(), deleted.stream, 4)).toEqual([0, 0, 0, 0])

      const kept = await runConsumer(
        redis,
        { shardCount: 4, ack: "ack", batchSize: 8 },
        numbered(60, (n) => `k${n % 7}`),
        () => {},
        (r) => r.calls.length >= 60,
      )
      handledOnce(kept, 60)
      await eventually("ack: nothing pending", () =>
        pendings(server(), kept.stream, 4).every((n) => n === 0),
      )
      expect(lengths(server(), kept.stream, 4).reduce((a, b) => a + b, 0)).toBe(60)
    })
}

/** A runtime with one consumer of `stream` in `group`, handlers counted in `seen`. */
const startGroup = (
  redis: RedisOptions,
  stream: string,
  group: string,
  options: Partial<Omit<ConsumerOptions, "eachMessage" | "eachBatch">> & {
    readonly shardCount: number
  },
  seen: Array<string>,
  handle: (m: Message) => void | Promise<void> = () => {},
) =>
  start({
    redis,
    handleSignals: false,
    memberBase: `fan-${group}`,
    shutdownTimeoutMs: 5_000,
    consumers: [
      consumer({
        stream,
        group,
        ...fast,
        batchSize: 8,
        ...options,
        eachMessage: async (m) => {
          await handle(m)
          seen.push(m.fields.n!)
        },
      }),
    ],
  })

const produce = async (redis: RedisOptions, stream: string, shardCount: number, count: number) => {
  const runtime = await start({ redis, handleSignals: false })
  try {
    const producer = runtime.producer(stream, {
      layout: LayoutSource.fixed({ [stream]: shardCount }),
    })
    await producer.sendBatch(numbered(count, (n) => `k${n % 11}`))
    await producer.flush()
  } finally {
    await runtime.stop()
  }
}

const groupPendings = (server: RedisServer, stream: string, group: string, shards: number) =>
  Array.from({ length: shards }, (_, s) =>
    Number(
      server.cli("XPENDING", Keys.defaultKeys.shardKey(stream, s), group).split("\n")[0]!.trim(),
    ),
  )

/** Every message of 0..count-1 exactly once. */
const everyOnce = (seen: ReadonlyArray<string>, count: number) => {
  expect([...seen].map(Number).sort((a, b) => a - b)).toEqual(
    Array.from({ length: count }, (_, n) => n),
  )
}

const fanOutCases = (
  server: () => RedisServer,
  variants: ReadonlyArray<readonly [string, Partial<RedisOptions>]>,
) => {
  const shardCount = 4
  const count = 60
  for (const [name, extra] of variants) {
    it(`fan-out (${name}): group B, live but stuck in a handler with a backlog on every shard, handles every message that group A acked with xackdel`, async () => {
      const redis = { url: server().url, ...extra }
      const stream = `fanout-live-${process.pid}-${++streams}`
      await produce(redis, stream, shardCount, count)
      const a: Array<string> = []
      const b: Array<string> = []
      let release!: () => void
      const released = new Promise<void>((resolve) => {
        release = resolve
      })
      let entered = 0
      // B's one worker holds its first batch (pending) and has not read its other shards
      const runtimeB = await startGroup(redis, stream, "b", { shardCount }, b, async () => {
        entered++
        await released
      })
      let runtimeA: Awaited<ReturnType<typeof start>> | undefined
      try {
        await eventually(
          "B owns every shard and is stuck in its first message",
          () => runtimeB.members().every((m) => m.owned.length === shardCount) && entered === 1,
        )
        runtimeA = await startGroup(redis, stream, "a", { shardCount, ack: "xackdel" }, a)
        await eventually("A handled everything", () => a.length >= count, 20_000)
        await eventually(
          "A acknowledged everything (its acks ride on its next reads)",
          () => groupPendings(server(), stream, "a", shardCount).every((n) => n === 0),
          20_000,
        )
        release()
        await eventually("B handled everything", () => b.length >= count, 20_000)
        everyOnce(a, count)
        everyOnce(b, count)
        await eventually("B acknowledged everything", () =>
          groupPendings(server(), stream, "b", shardCount).every((n) => n === 0),
        )
        // B's plain acks came last: every entry stays (only an xackdel that completes it deletes)
        expect(lengths(server(), stream, shardCount).reduce((x, y) => x + y, 0)).toBe(count)
      } finally {
        release()
        await Promise.all([runtimeB.stop(), runtimeA?.stop()])
      }
    })

    it(`fan-out (${name}): group B, stopped while group A acked everything with xackdel, handles every message when it comes back; the last xackdel empties the shards`, async () => {
      const redis = { url: server().url, ...extra }
      const stream = `fanout-back-${process.pid}-${++streams}`
      const b: Array<string> = []
      // B has consumed the stream before (its groups exist), then stops
      const first = await startGroup(redis, stream, "b", { shardCount, ack: "xackdel" }, b)
      await eventually("B owns every shard", () =>
        first.members().every((m) => m.owned.length === shardCount),
      )
      await first.stop()
      await produce(redis, stream, shardCount, count)
      const a: Array<string> = []
      const runtimeA = await startGroup(redis, stream, "a", { shardCount, ack: "xackdel" }, a)
      try {
        await eventually("A handled everything", () => a.length >= count, 20_000)
        await eventually(
          "A acknowledged everything",
          () => groupPendings(server(), stream, "a", shardCount).every((n) => n === 0),
          20_000,
        )
        expect(lengths(server(), stream, shardCount).reduce((x, y) => x + y, 0)).toBe(count)
      } finally {
        await runtimeA.stop()
      }
      const back = await startGroup(redis, stream, "b", { shardCount, ack: "xackdel" }, b)
      try {
        await eventually("B handled everything", () => b.length >= count, 20_000)
        everyOnce(b, count)
        await eventually("the last xackdel (B's) deleted every entry", () =>
          lengths(server(), stream, shardCount).every((n) => n === 0),
        )
      } finally {
        await back.stop()
      }
    })

    it(`fan-out (${name}): a reshard 2 -> 4 while group B is stuck in its old generation: A reads the new shards first and acks with xackdel, B still handles every message`, async () => {
      const redis = { url: server().url, ...extra }
      const stream = `fanout-reshard-${process.pid}-${++streams}`
      const a: Array<string> = []
      const b: Array<string> = []
      let release!: () => void
      const released = new Promise<void>((resolve) => {
        release = resolve
      })
      const options = { shardCount: 2, batchSize: 4 }
      const runtimeB = await startGroup(redis, stream, "b", options, b, () => released)
      const runtimeA = await startGroup(redis, stream, "a", { ...options, ack: "xackdel" }, a)
      try {
        await eventually("both groups own every shard", () =>
          [runtimeA, runtimeB].every((r) => r.members().every((m) => m.owned.length === 2)),
        )
        const producer = runtimeA.producer(stream)
        await producer.sendBatch(numbered(20, (n) => `k${n % 11}`))
        await eventually("A handled the old generation", () => a.length >= 20, 20_000)
        await Effect.runPromise(
          Layout.Reshard.reshardStream(stream, 4).pipe(
            Effect.provide(RedisPorts.layer({ url: server().url })),
          ),
        )
        // routed by generation 1 (shards 2..5) after the producer's ShardSealed
        await producer.sendBatch(
          numbered(40, (n) => `k${n % 11}`).map((m) => ({
            ...m,
            fields: { n: String(Number(m.fields.n) + 20) },
          })),
        )
        await eventually("A handled the new generation too", () => a.length >= 60, 30_000)
        await eventually(
          "A acknowledged everything",
          () => groupPendings(server(), stream, "a", 6).every((n) => n === 0),
          20_000,
        )
        expect(b.length).toBe(0)
        release()
        await eventually("B handled everything", () => b.length >= 60, 30_000)
        everyOnce(a, 60)
        everyOnce(b, 60)
      } finally {
        release()
        await Promise.all([runtimeA.stop(), runtimeB.stop()])
      }
    })
  }
}

/** Dead-letter entries of a shard: [id, fields] with fields as an object. */
const deadLetters = (server: RedisServer, stream: string, shard: number) => {
  const out = server.cli("XRANGE", Keys.defaultKeys.deadLetterKey(stream, shard), "-", "+").trim()
  if (out === "") return []
  const lines = out.split("\n")
  const entries: Array<Record<string, string>> = []
  let current: Record<string, string> | undefined
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!
    if (/^\d+-\d+$/.test(line)) {
      current = {}
      entries.push(current)
    } else if (current !== undefined) {
      current[line] = lines[++i] ?? ""
    }
  }
  return entries
}

describe("ack policies on Redis 7.0", () => {
  const server = useRedisServer("redis7")

  xackdelCases(server, [["the Lua fallback: Redis 7 has no XACKDEL", {}]])
  fanOutCases(server, [["the Lua fallback", {}]])

  it("a failing message is delivered maxDeliveries times, then dead-lettered with its ack; the shard goes on in order", async () => {
    const run = await runConsumer(
      { url: server().url },
      { shardCount: 1, maxDeliveries: 3, retryBackoff: { initialMs: 20, maxMs: 40 } },
      numbered(10, () => "one-key"),
      (m) => {
        if (m.fields.n === "3") throw new Error("cannot bill order 3")
      },
      (r) => r.calls.filter((m) => m.fields.n === "9").length > 0,
    )
    const ns = run.calls.map((m) => Number(m.fields.n))
    // three deliveries of 3, each before anything after it (per-key order)
    expect(ns).toEqual([0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 8, 9])
    expect(run.calls.filter((m) => m.fields.n === "3").map((m) => m.deliveryCount)).toEqual([
      1, 2, 3,
    ])
    const dlq = deadLetters(server(), run.stream, 0)
    expect(dlq).toHaveLength(1)
    expect(dlq[0]).toMatchObject({
      n: "3",
      [ShardStreams.DeadLetterFields.group]: "g",
      [ShardStreams.DeadLetterFields.deliveryCount]: "3",
      [ShardStreams.DeadLetterFields.originalId]: run.calls.find((m) => m.fields.n === "3")!.id,
    })
    expect(dlq[0]![ShardStreams.DeadLetterFields.reason]).toContain("cannot bill order 3")
    expect(pendings(server(), run.stream, 1)).toEqual([0])
    const dead = run.events.filter((e) => e.type === "deadLettered")
    expect(dead).toHaveLength(1)
    expect(run.events.filter((e) => e.type === "handlerError")).toHaveLength(3)
  })

  it("poison messages (sync throw, rejection, a handler that never returns) end in the dead-letter stream; nothing else is blocked", async () => {
    const poison = new Map([
      ["2", "throw"],
      ["5", "reject"],
      ["8", "hang"],
    ])
    const run = await runConsumer(
      { url: server().url },
      {
        shardCount: 2,
        maxDeliveries: 2,
        handlerTimeoutMs: 300,
        retryBackoff: { initialMs: 20, maxMs: 40 },
      },
      numbered(30, (n) => (n < 10 ? "poisoned" : `other-${n % 3}`)),
      (m) => {
        const kind = poison.get(m.fields.n!)
        if (kind === "throw") throw new Error("sync throw")
        if (kind === "reject") return Promise.reject(new Error("rejected"))
        if (kind === "hang") return new Promise<void>(() => {})
        return undefined
      },
      (r) =>
        r.events.filter((e) => e.type === "deadLettered").length >= 3 &&
        new Set(r.calls.map((m) => m.fields.n)).size >= 30,
    )
    // every message reached the handler; the poison ones exactly maxDeliveries times
    const count = (n: string) => run.calls.filter((m) => m.fields.n === n).length
    for (let n = 0; n < 30; n++)
      expect(count(String(n)), `n=${n}`).toBe(poison.has(String(n)) ? 2 : 1)
    // per-key order on the poisoned key, each poison retried before what follows it
    const poisoned = run.calls.filter((m) => m.key === "poisoned").map((m) => Number(m.fields.n))
    expect(poisoned).toEqual([0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9])
    expect(run.events.filter((e) => e.type === "deadLettered")).toHaveLength(3)
    const shard = run.calls.find((m) => m.key === "poisoned")!.shard
    const dlq = deadLetters(server(), run.stream, shard)
    expect(dlq.map((f) => f.n)).toEqual(["2", "5", "8"])
    const reasons = dlq.map((f) => f[ShardStreams.DeadLetterFields.reason])
    expect(reasons[0]).toContain("sync throw")
    expect(reasons[1]).toContain("rejected")
    expect(reasons[2]).toContain("timed out")
    expect(pendings(server(), run.stream, 2)).toEqual([0, 0])
  })
})

describe("ack policies on Redis 8", () => {
  const server = useRedisServer("redis8")

  xackdelCases(server, [
    ["native XACKDEL", {}],
    ["the Lua fallback, forced", { features: { xackdel: false } }],
  ])
  fanOutCases(server, [
    ["native XACKDEL ... ACKED", {}],
    ["the Lua fallback, forced", { features: { xackdel: false } }],
  ])
})
