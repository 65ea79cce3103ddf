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
 *   handled once, in order.
 */
import { ShardStreams } from "@shardline/core"
import type { RedisServer } from "@shardline/redis-store/testing"
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
  options: Partial<ConsumerOptions> & { readonly shardCount: number },
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
    Number(server.cli("XLEN", ShardStreams.shardKey(stream, s)).trim()),
  )
const pendings = (server: RedisServer, stream: string, shards: number) =>
  Array.from({ length: shards }, (_, s) =>
    Number(server.cli("XPENDING", ShardStreams.shardKey(stream, s), "g").split("\n")[0]!.trim()),
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

/** Dead-letter entries of a shard: [id, fields] with fields as an object. */
const deadLetters = (server: RedisServer, stream: string, shard: number) => {
  const out = server.cli("XRANGE", ShardStreams.deadLetterKey(stream, shard), "-", "+").trim()
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
})
