/**
 * Handlers' transactions on real Redis (docs/exactly-once.md), through
 * `start({ redis })`: a handler HINCRBYs a counter per message and sends to
 * a second stream, and fails after writing on the first delivery of some
 * messages. At the end every counter equals the number of messages exactly
 * (a failed handler left no trace, a retried one counted once) and the
 * second stream holds each output once, in per-key order. Per message
 * (Promise and Effect API) and per batch, on one node (direct sends) and on
 * the 3-node cluster (writes in the shard's slot, sends through the outbox
 * relayed by the runtime). Refusals (a command not allowed, a key outside
 * the slot, a transaction too large, a write after the handler returned):
 * the message fails, is dead-lettered with the reason, and nothing of its
 * transaction is written. On the cluster, resharding with the outbox
 * (docs/exactly-once.md, "Resharding and the outbox"): a shard is not
 * reported drained, nor retired, while its outbox holds a send.
 */
import { Layout, ShardStreams, StreamLayouts } from "@shardline/core"
import { Keys, RedisPorts } from "@shardline/redis-store"
import { Context, Effect, Layer, Option } from "effect"
import { Cluster, Redis } from "ioredis"
import { describe, expect, it } from "vitest"
import { type ConsumerDefinition, consumer, effectConsumer } from "../../src/Consumer.js"
import type { RuntimeEvent } from "../../src/Events.js"
import { makeSendRouter } from "../../src/internal/SendRouter.js"
import { relay } from "../../src/internal/TransactionCommit.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import type { Message } from "../../src/Message.js"
import type { RedisOptions } from "../../src/Redis.js"
import { start } from "../../src/Runtime.js"
import type { Transaction } from "../../src/Transaction.js"
import { eventually, useRedisCluster, useRedisServer } from "../support/redis.js"

const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }
const SHARDS = 4
const KEYS = 12
let runs = 0

type Flavour = "message" | "effect" | "batch"

/** Messages `0 .. count-1`, keyed `k<n % KEYS>`. */
const numbered = (count: number) =>
  Array.from({ length: count }, (_, n) => ({ key: `k${n % KEYS}`, fields: { n: String(n) } }))

/** The writes of one message: its key's counter and its output. */
const effects = (tx: Transaction, out: string, m: Message) => {
  tx.hincrby(tx.key("counts"), m.key!, 1)
  tx.send(out, m.key!, { n: m.fields.n! })
}

/**
 * A transactional consumer of `stream` (group g, `effects` per message) and
 * a consumer of its outputs (group check) that hands each output on.
 */
const relayedPair = (
  stream: string,
  out: string,
  shardCount: number,
  onOutput: (m: Message) => void,
  options: { readonly idleWaitMs?: number } = {},
): Array<ConsumerDefinition> => [
  consumer({
    stream,
    group: "g",
    ...fast,
    ...options,
    shardCount,
    eachMessage: (m, { transaction: tx }) => effects(tx, out, m),
  }),
  consumer({ stream: out, group: "check", ...fast, shardCount, eachMessage: onOutput }),
]

/** The first handling of every third message fails after its writes (`tried` remembers). */
const failsNow = (tried: Set<string>, m: Message) => {
  if (Number(m.fields.n) % 3 !== 0 || tried.has(m.id)) return false
  tried.add(m.id)
  return true
}

/**
 * A failing attempt also writes what no committed transaction may hold: a
 * `failed` counter and an output numbered -1 (a commit of a failed handler
 * would leave them, even where its retry is not counted again).
 */
const failedAttempt = (tx: Transaction, out: string, m: Message) => {
  tx.hincrby(tx.key("counts"), "failed", 1)
  tx.send(out, m.key!, { n: "-1" })
}

const handlerOf = (flavour: Flavour, stream: string, out: string): ConsumerDefinition => {
  const tried = new Set<string>()
  const common = { stream, group: "g", ...fast, shardCount: SHARDS, maxDeliveries: 10 }
  const failed = new Error("fails after writing")
  switch (flavour) {
    case "message":
      return consumer({
        ...common,
        eachMessage: async (m, { transaction: tx }) => {
          effects(tx, out, m)
          await Promise.resolve()
          if (failsNow(tried, m)) {
            failedAttempt(tx, out, m)
            throw failed
          }
        },
      })
    case "effect":
      return effectConsumer({
        ...common,
        retryBackoff: { initialMs: 20 },
        eachMessage: (m, { transaction: tx }) =>
          Effect.flatMap(
            Effect.sync(() => effects(tx, out, m)),
            () =>
              failsNow(tried, m)
                ? Effect.andThen(
                    Effect.sync(() => failedAttempt(tx, out, m)),
                    Effect.fail(failed),
                  )
                : Effect.void,
          ),
      })
    case "batch":
      return consumer({
        ...common,
        batchSize: 5,
        retryBackoff: { initialMs: 20 },
        eachBatch: (batch, { transaction: tx }) => {
          for (const m of batch.messages) effects(tx, out, m)
          const failing = batch.messages.filter((m) => failsNow(tried, m))
          if (failing.length > 0) {
            for (const m of failing) failedAttempt(tx, out, m)
            throw failed
          }
        },
      })
  }
}

interface Outcome {
  readonly counts: Record<string, number>
  readonly outputs: Map<string, Array<number>>
}

const client = (redis: RedisOptions): Redis | Cluster =>
  redis.nodes !== undefined ? new Cluster([...redis.nodes]) : new Redis(redis.url!)

/**
 * One runtime: the transactional consumer of `stream`, and a plain consumer
 * of its output stream recording what lands there; produces `count`
 * messages, waits until every output arrived, reads the counters.
 */
const run = async (redis: RedisOptions, flavour: Flavour, count: number): Promise<Outcome> => {
  const stream = `tx-${process.pid}-${++runs}`
  const out = `${stream}-out`
  const outputs = new Map<string, Array<number>>()
  let received = 0
  const runtime = await start({
    redis,
    handleSignals: false,
    memberBase: "tx",
    shutdownTimeoutMs: 5_000,
    consumers: [
      handlerOf(flavour, stream, out),
      consumer({
        stream: out,
        group: "check",
        ...fast,
        shardCount: SHARDS,
        eachMessage: (m) => {
          received++
          const list = outputs.get(m.key!) ?? []
          list.push(Number(m.fields.n))
          outputs.set(m.key!, list)
        },
      }),
    ],
  })
  try {
    await eventually("the members own every shard", () =>
      runtime.members().every((m) => m.owned.length === SHARDS),
    )
    const producer = runtime.producer(stream, {
      layout: LayoutSource.fixed({ [stream]: SHARDS }),
    })
    await producer.sendBatch(numbered(count))
    await producer.flush()
    await eventually("every output arrived", () => received >= count, 60_000)
    // a duplicate would arrive after the last one: give it time to show
    await new Promise((resolve) => setTimeout(resolve, 500))
  } finally {
    await runtime.stop()
  }
  const redisClient = client(redis)
  try {
    const counts: Record<string, number> = {}
    for (let shard = 0; shard < SHARDS; shard++) {
      const hash = await redisClient.hgetall(Keys.defaultKeys.dataKey(stream, shard, "counts"))
      for (const [k, v] of Object.entries(hash)) counts[k] = (counts[k] ?? 0) + Number(v)
    }
    return { counts, outputs }
  } finally {
    redisClient.disconnect()
  }
}

const exactlyOnce = (outcome: Outcome, count: number) => {
  const expected: Record<string, number> = {}
  const perKey = new Map<string, Array<number>>()
  for (const { key, fields } of numbered(count)) {
    expected[key] = (expected[key] ?? 0) + 1
    perKey.set(key, [...(perKey.get(key) ?? []), Number(fields.n)])
  }
  expect(outcome.counts).toEqual(expected)
  // each output once, in the order its key's messages were produced
  expect(new Map([...outcome.outputs].sort())).toEqual(new Map([...perKey].sort()))
}

const flavours: ReadonlyArray<Flavour> = ["message", "effect", "batch"]

/** A data-plane error of the relay made to fail (its relay mark is not a stream id). */
const relayFailed = (error: unknown) =>
  String((error as { message?: unknown })?.message).includes("relay-fails")

describe("one node: writes and direct sends commit with the ack", () => {
  const server = useRedisServer("redis7")
  for (const flavour of flavours)
    it(`${flavour}: every counter exact, every output once and in per-key order, failed handlers left no trace`, async () => {
      exactlyOnce(await run({ url: server().url }, flavour, 120), 120)
    }, 90_000)

  it("a takeover the member has not heard of yet (the owner token moved while its handler ran): the commit writes nothing, acknowledges nothing", async () => {
    // the member's lease is still valid, so the runtime commits: only the
    // storage's owner-token check stands between the stale owner and the write
    const stream = `txf-${process.pid}-${++runs}`
    let release: () => void = () => {}
    const held = new Promise<void>((resolve) => {
      release = resolve
    })
    let started = false
    const stale: Array<number> = []
    const runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      memberBase: "txf",
      shutdownTimeoutMs: 5_000,
      onEvent: (e) => {
        if (e.type === "staleOwner") stale.push(e.shard)
      },
      consumers: [
        consumer({
          stream,
          group: "g",
          ...fast,
          shardCount: 1,
          eachMessage: async (m, { transaction: tx }) => {
            if (m.deliveryCount > 1) return
            tx.incr(tx.key("x"))
            tx.send(`${stream}-out`, "k", { n: "0" })
            started = true
            await held
          },
        }),
        consumer({
          stream: `${stream}-out`,
          group: "o",
          ...fast,
          shardCount: 1,
          eachMessage: () => {},
        }),
      ],
    })
    try {
      await eventually("the members own their shards", () =>
        runtime.members().every((m) => m.owned.length === 1),
      )
      const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: 1 }) })
      await producer.send("k", { n: "0" })
      await producer.flush()
      await eventually("the handler runs", () => started)
      // another owner was granted the shard: a higher token in storage
      const tokenKey = Keys.defaultKeys.ownerTokenKey(stream, 0, "g")
      const token = Number(server().cli("GET", tokenKey).trim())
      expect(token).toBeGreaterThan(0)
      server().cli("SET", tokenKey, String(token + 1))
      release()
      await eventually("the commit was refused as stale", () => stale.includes(0))
      expect(
        server()
          .cli("EXISTS", Keys.defaultKeys.dataKey(stream, 0, "x"))
          .trim(),
      ).toBe("0")
      expect(
        server()
          .cli("XLEN", Keys.defaultKeys.shardKey(`${stream}-out`, 0))
          .trim(),
      ).toBe("0")
      const pending = server().cli("XPENDING", Keys.defaultKeys.shardKey(stream, 0), "g")
      expect(pending.split("\n")[0]!.trim()).toBe("1")
    } finally {
      await runtime.stop()
    }
  }, 60_000)

  it("a sealed shard whose outbox holds sends a runtime on one node cannot relay (committed on a cluster) is not reported drained: outboxStranded is said once; drained once they are gone", async () => {
    const stream = `txo-${process.pid}-${++runs}`
    const events: Array<RuntimeEvent> = []
    const runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      memberBase: "txo",
      shutdownTimeoutMs: 5_000,
      onEvent: (e) => {
        if (e.stream === stream && (e.type === "outboxStranded" || e.type === "exhausted"))
          events.push(e)
      },
      consumers: [
        consumer({
          stream,
          group: "g",
          ...fast,
          idleWaitMs: 200,
          shardCount: 1,
          eachMessage: () => {},
        }),
      ],
    })
    try {
      await eventually("the member owns its shard", () =>
        runtime.members().every((m) => m.owned.length === 1),
      )
      const outbox = Keys.defaultKeys.outboxKey(stream, 0, "g")
      // as commit.lua writes a send on a cluster
      server().cli(
        "XADD",
        outbox,
        "*",
        "shardline-target",
        `${stream}-out`,
        "shardline-shard",
        "0",
        "shardline-key",
        "k",
        "n",
        "0",
      )
      await Effect.runPromise(
        Layout.Reshard.reshardStream(stream, 2).pipe(
          Effect.provide(RedisPorts.layer({ url: server().url })),
        ),
      )
      await eventually("the stranded outbox is said", () =>
        events.some((e) => e.type === "outboxStranded"),
      )
      // several idle waits later: still said once, still not drained
      await new Promise((resolve) => setTimeout(resolve, 1_000))
      expect(events.map((e) => e.type)).toEqual(["outboxStranded"])
      expect(events[0]).toMatchObject({ type: "outboxStranded", shard: 0 })
      server().cli("DEL", outbox)
      await eventually("the shard is reported drained", () =>
        events.some((e) => e.type === "exhausted"),
      )
      expect(events.map((e) => e.type)).toEqual(["outboxStranded", "exhausted"])
    } finally {
      await runtime.stop()
    }
  }, 60_000)

  describe("refusals: the message is dead-lettered with the reason, nothing of it is written", () => {
    const refused = async (
      handle: (m: Message, tx: Transaction, later: Array<() => void>) => void | Promise<void>,
      limits?: { readonly maxOperations?: number; readonly maxBytes?: number },
    ) => {
      const stream = `txr-${process.pid}-${++runs}`
      const later: Array<() => void> = []
      const thrown: Array<unknown> = []
      const runtime = await start({
        redis: { url: server().url },
        handleSignals: false,
        memberBase: "txr",
        shutdownTimeoutMs: 5_000,
        consumers: [
          consumer({
            stream,
            group: "g",
            ...fast,
            shardCount: 1,
            maxDeliveries: 1,
            ...(limits === undefined ? {} : { transaction: limits }),
            eachMessage: (m, { transaction: tx }) => handle(m, tx, later),
          }),
        ],
      })
      const data = Keys.defaultKeys.dataKey(stream, 0, "x")
      try {
        await eventually("the member owns the shard", () =>
          runtime.members().every((m) => m.owned.length === 1),
        )
        const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: 1 }) })
        await producer.send("k", { n: "0" })
        await producer.flush()
        await eventually("the message is dead-lettered", () => {
          const n = Number(server().cli("XLEN", Keys.defaultKeys.deadLetterKey(stream, 0)).trim())
          return n === 1
        })
        for (const f of later)
          try {
            f()
          } catch (error) {
            thrown.push(error)
          }
      } finally {
        await runtime.stop()
      }
      const reason = server().cli("XRANGE", Keys.defaultKeys.deadLetterKey(stream, 0), "-", "+")
      return { reason, written: server().cli("EXISTS", data).trim(), thrown, data }
    }

    it("a command outside the allow-list (even if the handler catches the refusal)", async () => {
      const r = await refused((_m, tx) => {
        tx.incr(tx.key("x"))
        try {
          tx.command("FLUSHALL")
        } catch {
          // caught: the transaction still never commits
        }
      })
      expect(r.reason).toContain("FLUSHALL is not a transaction command")
      expect(r.written).toBe("0")
    }, 60_000)

    it("a transaction past maxOperations", async () => {
      const r = await refused(
        (_m, tx) => {
          tx.incr(tx.key("x")).incr(tx.key("x")).incr(tx.key("x"))
        },
        { maxOperations: 2 },
      )
      expect(r.reason).toContain("more than 2 operations")
      expect(r.written).toBe("0")
    }, 60_000)

    it("a transaction past maxBytes", async () => {
      const r = await refused(
        (_m, tx) => {
          tx.set(tx.key("x"), "v".repeat(200))
        },
        { maxBytes: 100 },
      )
      expect(r.reason).toContain("more than 100 bytes")
      expect(r.written).toBe("0")
    }, 60_000)

    it("one of Shardline's own keys", async () => {
      const r = await refused((m, tx) => {
        tx.incr(tx.key("x"))
        tx.del(Keys.defaultKeys.ownerTokenKey(m.stream, m.shard, m.group))
      })
      expect(r.reason).toContain("is one of Shardline's own keys")
      expect(r.written).toBe("0")
    }, 60_000)

    it("a write after the handler returned is refused (Closed) and writes nothing", async () => {
      let handled = 0
      const r = await refused((_m, tx, later) => {
        handled++
        later.push(() => tx.incr(tx.key("x")))
        // fail so the message is dead-lettered and the test sees it ended
        throw new Error("done")
      })
      expect(handled).toBe(1)
      expect(r.thrown).toHaveLength(1)
      expect(r.thrown[0]).toMatchObject({ _tag: "TransactionRefused", reason: "Closed" })
      expect(r.written).toBe("0")
    }, 60_000)
  })
})

describe("Redis Cluster: writes in the shard's slot, sends through the outbox", () => {
  const cluster = useRedisCluster("redis7")
  for (const flavour of ["message", "batch"] as const)
    it(`${flavour}: every counter exact, every output once and in per-key order`, async () => {
      exactlyOnce(await run({ nodes: cluster().nodes }, flavour, 80), 80)
    }, 120_000)

  it("a reshard while the outbox relay fails: the sealed shards are not reported drained (nor retired) until their outboxes are relayed; a relayer that delivered and died before removing duplicates nothing; every output once, in per-key order", async () => {
    // docs/exactly-once.md, "Resharding and the outbox". The failure is
    // injected in the relay's own step: each (source shard, target shard)
    // relay mark holds a value that is not a stream id, so every delivery of
    // the old shards' outboxes fails (and nothing else does) until repaired.
    const nodes = cluster().nodes
    const stream = `txo-${process.pid}-${++runs}`
    const out = `${stream}-out`
    const keys = Keys.defaultKeys
    const outputs = new Map<string, Array<number>>()
    let received = 0
    const events: Array<RuntimeEvent> = []
    const layoutOps = <A, E>(program: Effect.Effect<A, E, RedisPorts.RedisPorts>) =>
      Effect.runPromise(
        program.pipe(Effect.provide(RedisPorts.layer({ cluster: { nodes: [...nodes] } }))),
      )
    const reshard = (name: string, count: number) =>
      layoutOps(Layout.Reshard.reshardStream(name, count))
    const generations = (name: string) =>
      layoutOps(
        Effect.gen(function* () {
          const stored = yield* (yield* StreamLayouts.StreamLayouts).load(name)
          return Option.isSome(stored) ? stored.value.record.generations.length : 0
        }),
      )
    const runtime = await start({
      redis: { nodes },
      handleSignals: false,
      memberBase: "txo",
      shutdownTimeoutMs: 5_000,
      onEvent: (e) => {
        if ("stream" in e && e.stream === stream) events.push(e)
      },
      consumers: relayedPair(stream, out, 2, (m) => {
        received++
        const list = outputs.get(m.key!) ?? []
        list.push(Number(m.fields.n))
        outputs.set(m.key!, list)
      }),
    })
    const redisClient = new Cluster([...nodes])
    const produce = async (from: number, count: number) => {
      await producer.sendBatch(numbered(from + count).slice(from))
      await producer.flush()
    }
    const counted = async (shards: number) => {
      let total = 0
      for (let shard = 0; shard < shards; shard++)
        for (const v of Object.values(
          await redisClient.hgetall(keys.dataKey(stream, shard, "counts")),
        ))
          total += Number(v)
      return total
    }
    const outboxLength = async (shard: number) =>
      redisClient.xlen(keys.outboxKey(stream, shard, "g"))
    const marks = [0, 1].flatMap((source) =>
      [0, 1].map((target) => keys.relayMarkKey(out, target, { stream, shard: source, group: "g" })),
    )
    const producer = runtime.producer(stream)
    try {
      await eventually("the members own their shards", () =>
        runtime.members().every((m) => m.owned.length === 2),
      )
      await produce(0, 20)
      await eventually("the first outputs arrived", () => received >= 20, 60_000)
      await eventually(
        "the outboxes are relayed",
        async () => (await outboxLength(0)) + (await outboxLength(1)) === 0,
      )

      // every relay of the old shards fails from now on
      const saved = new Map<string, string | null>()
      for (const mark of marks) {
        saved.set(mark, await redisClient.get(mark))
        await redisClient.set(mark, "relay-fails")
      }
      await produce(20, 20)
      await eventually("the next 20 are committed", async () => (await counted(2)) === 40)
      expect((await outboxLength(0)) + (await outboxLength(1))).toBe(20)

      await reshard(stream, 3)
      const sealedAt = events.length
      const relayFailures = (shard: number) =>
        events
          .slice(sealedAt)
          .filter((e) => e.type === "dataPlaneError" && e.shard === shard && relayFailed(e.error))
          .length
      const exhausted = (shard: number) =>
        events.some((e) => e.type === "exhausted" && e.shard === shard)
      // each old shard has taken turns since the seal (with its relay failing),
      // or reported itself drained
      await eventually(
        "the sealed shards took turns",
        () => [0, 1].every((s) => exhausted(s) || relayFailures(s) >= 3),
        30_000,
      )
      expect([exhausted(0), exhausted(1)]).toEqual([false, false])
      expect(await generations(stream)).toBe(2)

      // a relayer that delivered the oldest entry of shard 0's outbox and died
      // before removing it: the output is in its target shard, the mark says
      // so, the entry is still in the outbox
      const [oldest] = await redisClient.xrange(
        keys.outboxKey(stream, 0, "g"),
        "-",
        "+",
        "COUNT",
        1,
      )
      const [id, flat] = oldest!
      const fields: Record<string, string> = {}
      for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!
      const target = Number(fields["shardline-shard"])
      const sent = Object.entries(fields)
        .filter(
          ([name]) => !["shardline-target", "shardline-shard", "shardline-key"].includes(name),
        )
        .flat()
      await redisClient.xadd(
        keys.shardKey(out, target),
        "*",
        ...sent,
        "shardline-key",
        fields["shardline-key"]!,
      )
      const crashedMark = keys.relayMarkKey(out, target, { stream, shard: 0, group: "g" })
      await redisClient.set(crashedMark, id)
      // and the output stream is resharded too: the mark is checked before the seal
      await reshard(out, 3)
      for (const mark of marks)
        if (mark !== crashedMark) {
          const value = saved.get(mark)
          if (value === null || value === undefined) await redisClient.del(mark)
          else await redisClient.set(mark, value)
        }

      await produce(40, 20)
      await eventually("every output arrived", () => received >= 60, 60_000)
      await eventually(
        "both reshards completed (the old generations retired)",
        async () => (await generations(stream)) === 1 && (await generations(out)) === 1,
        60_000,
      )
      // a duplicate would arrive after the last one: give it time to show
      await new Promise((resolve) => setTimeout(resolve, 500))
      // relayed, then deleted with the retired shards
      expect((await outboxLength(0)) + (await outboxLength(1))).toBe(0)
      for (const shard of [0, 1])
        expect(await redisClient.exists(keys.outboxKey(stream, shard, "g"))).toBe(0)
    } finally {
      await runtime.stop()
    }
    try {
      const counts: Record<string, number> = {}
      for (let shard = 0; shard < 5; shard++) {
        const hash = await redisClient.hgetall(keys.dataKey(stream, shard, "counts"))
        for (const [k, v] of Object.entries(hash)) counts[k] = (counts[k] ?? 0) + Number(v)
      }
      exactlyOnce({ counts, outputs }, 60)
    } finally {
      redisClient.disconnect()
    }
  }, 180_000)

  it("a relay that failed on a quiet shard is tried again without a new message (after a backoff, not at the next append)", async () => {
    const nodes = cluster().nodes
    const stream = `txq-${process.pid}-${++runs}`
    const out = `${stream}-out`
    const keys = Keys.defaultKeys
    const outputs: Array<string> = []
    let failures = 0
    const runtime = await start({
      redis: { nodes },
      handleSignals: false,
      memberBase: "txq",
      shutdownTimeoutMs: 5_000,
      onEvent: (e) => {
        if (e.type === "dataPlaneError" && e.stream === stream && relayFailed(e.error)) failures++
      },
      consumers: relayedPair(stream, out, 1, (m) => {
        outputs.push(m.fields.n!)
      }),
    })
    const redisClient = new Cluster([...nodes])
    try {
      await eventually("the members own their shards", () =>
        runtime.members().every((m) => m.owned.length === 1),
      )
      const mark = keys.relayMarkKey(out, 0, { stream, shard: 0, group: "g" })
      await redisClient.set(mark, "relay-fails")
      const producer = runtime.producer(stream)
      await producer.send("k0", { n: "0" })
      await producer.flush()
      await eventually("the relay failed", () => failures >= 1)
      await redisClient.del(mark)
      // no message follows: the shard is quiet (an idle wait would never end in a relay)
      await eventually("the output arrived", () => outputs.length === 1, 20_000)
      expect(outputs).toEqual(["0"])
      expect(await redisClient.xlen(keys.outboxKey(stream, 0, "g"))).toBe(0)
    } finally {
      redisClient.disconnect()
      await runtime.stop()
    }
  }, 120_000)

  it("a sealed shard whose outbox holds an entry its loop did not commit (relayed before, by its own account) is relayed before it is reported drained", async () => {
    // the loop's own bookkeeping says the outbox is empty (its last relay
    // emptied it, it committed nothing since); the drain asks the storage
    const nodes = cluster().nodes
    const stream = `txd-${process.pid}-${++runs}`
    const out = `${stream}-out`
    const keys = Keys.defaultKeys
    const outputs: Array<string> = []
    let exhausted = false
    const runtime = await start({
      redis: { nodes },
      handleSignals: false,
      memberBase: "txd",
      shutdownTimeoutMs: 5_000,
      onEvent: (e) => {
        if (e.type === "exhausted" && e.stream === stream) exhausted = true
      },
      consumers: relayedPair(
        stream,
        out,
        1,
        (m) => {
          outputs.push(m.fields.n!)
        },
        { idleWaitMs: 300 },
      ),
    })
    const redisClient = new Cluster([...nodes])
    try {
      await eventually("the members own their shards", () =>
        runtime.members().every((m) => m.owned.length === 1),
      )
      const producer = runtime.producer(stream)
      await producer.send("k0", { n: "0" })
      await producer.flush()
      await eventually("the output arrived", () => outputs.length === 1)
      const outbox = keys.outboxKey(stream, 0, "g")
      await eventually("the outbox is relayed", async () => (await redisClient.xlen(outbox)) === 0)
      // written as commit.lua writes a send
      await redisClient.xadd(
        outbox,
        "*",
        "shardline-target",
        out,
        "shardline-shard",
        "0",
        "shardline-key",
        "k0",
        "n",
        "1",
      )
      await Effect.runPromise(
        Layout.Reshard.reshardStream(stream, 2).pipe(
          Effect.provide(RedisPorts.layer({ cluster: { nodes: [...nodes] } })),
        ),
      )
      await eventually("the sealed shard is reported drained", () => exhausted, 30_000)
      await eventually("its outbox entry arrived", () => outputs.length === 2, 10_000)
      expect(outputs).toEqual(["0", "1"])
      expect(await redisClient.xlen(outbox)).toBe(0)
    } finally {
      redisClient.disconnect()
      await runtime.stop()
    }
  }, 120_000)

  it("two relayers on one outbox: the one holding entries the other relayed and removed meanwhile skips them (the re-route answers 'gone'), delivers nothing anywhere else and finds the outbox empty", async () => {
    // docs/exactly-once.md, "Redis Cluster and the outbox". Relayer B reads
    // the outbox; before it goes on, relayer A relays every entry (their
    // target shard is sealed: A re-routes, delivers and removes them). B's
    // deliveries then find the sealed shard without a mark, and its re-route
    // finds the entry gone.
    const nodes = cluster().nodes
    const stream = `txr-${process.pid}-${++runs}`
    const out = `${stream}-out`
    const keys = Keys.defaultKeys
    const redisClient = new Cluster([...nodes])
    try {
      const emptied = await Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const ctx = yield* Layer.build(RedisPorts.layer({ cluster: { nodes: [...nodes] } }))
            const streams = Context.get(ctx, ShardStreams.ShardStreams)
            const port = streams.transactions!
            const outbox = port.outbox!
            const source = { stream, shard: 0, group: "g" }
            yield* streams.setOwnerToken({ ...source, token: 1 })
            for (let n = 0; n < 3; n++) yield* streams.append(stream, 0, { n: String(n) })
            const read = yield* streams.read({ ...source, token: 1, consumer: "c", count: 10 })
            for (const [n, m] of read.entries())
              yield* port.commit({
                ...source,
                token: 1,
                ids: [m.id],
                mode: "ack",
                writes: [],
                sends: [{ stream: out, shard: 0, key: `k${n}`, fields: { n: String(n) } }],
              })
            yield* streams.seal(out, 0)
            const layouts = LayoutSource.mutable({
              [out]: { generation: 1, firstShard: 1, shardCount: 2 },
            })
            const a = { port, router: makeSendRouter(layouts) }
            const b = {
              port: {
                ...port,
                outbox: {
                  ...outbox,
                  read: (s: typeof source, count: number) =>
                    Effect.tap(outbox.read(s, count), () => Effect.orDie(relay(a, s))),
                },
              },
              router: makeSendRouter(layouts),
            }
            return yield* relay(b, source)
          }),
        ),
      )
      expect(emptied).toBe(true)
      const delivered: Array<string> = []
      for (const shard of [1, 2])
        for (const [, flat] of await redisClient.xrange(keys.shardKey(out, shard), "-", "+"))
          delivered.push(flat[flat.indexOf("n") + 1]!)
      expect(delivered.sort()).toEqual(["0", "1", "2"])
      expect(await redisClient.exists(keys.shardKey(out, -1))).toBe(0)
      expect(await redisClient.xlen(keys.shardKey(out, 0))).toBe(0)
      expect(await redisClient.xlen(keys.outboxKey(stream, 0, "g"))).toBe(0)
    } finally {
      redisClient.disconnect()
    }
  }, 90_000)

  it("a key outside the shard's hash slot is refused (KeyOutsideSlot): dead-lettered, nothing written", async () => {
    const stream = `txs-${process.pid}-${++runs}`
    const runtime = await start({
      redis: { nodes: cluster().nodes },
      handleSignals: false,
      memberBase: "txs",
      shutdownTimeoutMs: 5_000,
      consumers: [
        consumer({
          stream,
          group: "g",
          ...fast,
          shardCount: 1,
          maxDeliveries: 1,
          eachMessage: (_m, { transaction: tx }) => {
            tx.incr(tx.key("x"))
            tx.incr("some-other-key")
          },
        }),
      ],
    })
    const redisClient = new Cluster([...cluster().nodes])
    try {
      await eventually("the member owns the shard", () =>
        runtime.members().every((m) => m.owned.length === 1),
      )
      const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: 1 }) })
      await producer.send("k", { n: "0" })
      await producer.flush()
      const dlq = Keys.defaultKeys.deadLetterKey(stream, 0)
      await eventually("dead-lettered", async () => (await redisClient.xlen(dlq)) === 1)
      const entries = await redisClient.xrange(dlq, "-", "+")
      expect(JSON.stringify(entries)).toContain(
        "in a Redis Cluster a transaction writes only its shard's slot",
      )
      expect(await redisClient.exists(Keys.defaultKeys.dataKey(stream, 0, "x"))).toBe(0)
      expect(await redisClient.exists("some-other-key")).toBe(0)
    } finally {
      redisClient.disconnect()
      await runtime.stop()
    }
  }, 90_000)
})
