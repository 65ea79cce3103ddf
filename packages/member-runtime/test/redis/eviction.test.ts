/**
 * Nothing Shardline stores disappears in silence (docs/protocol.md rule 26;
 * docs/redis.md, "Eviction"), through `start({ redis })` on real servers:
 * - a server that evicts keys (issue 32: `maxmemory 40mb`, `allkeys-lru`,
 *   where a paused group lost 930 of 6,000 accepted messages without a
 *   word) refuses every runtime at start, a producer-only one too, with
 *   `EvictionPolicyRefused` naming the setting; `redis: { allowEviction:
 *   true }` starts it with a warning in the runtime's logger;
 * - on that server (opted in), what a deletion or an eviction does to a
 *   running group: a shard whose owner token vanished is refused (never
 *   read with a fence that lets every token through) and says so, and its
 *   owner gets the same token written again (rule 30), a group
 *   or stream that vanished mid-run is a `dataLost` event and a metric,
 *   and the group reads on;
 * - with `noeviction` a full server refuses sends (OOM) while consumers go
 *   on, and every accepted message is handled exactly once.
 */
import { randomUUID } from "node:crypto"
import { Keys } from "@shardline/redis-store"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { RuntimeEvent } from "../../src/Events.js"
import type { LogFields, Logger } from "../../src/Logging.js"
import type { Message } from "../../src/Message.js"
import type { Producer } from "../../src/Producer.js"
import { type ShardlineRuntime, start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }
const noop = () => {}

/** A logger that keeps what it is given. */
const recording = () => {
  const lines: Array<{
    readonly level: string
    readonly message: string
    readonly fields: LogFields
  }> = []
  const at =
    (level: string) =>
    (fields: LogFields, message: string): void => {
      lines.push({ level, message, fields })
    }
  const logger: Logger = {
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
  }
  return { lines, logger }
}

/** What `start` rejects with. */
const rejection = async (options: Parameters<typeof start>[0]) => {
  try {
    const runtime = await start({ handleSignals: false, logLevel: "silent", ...options })
    await runtime.stop()
  } catch (error) {
    return error as { readonly _tag: string; readonly message: string; readonly policy?: string }
  }
  throw new Error("start succeeded")
}

describe("a server that evicts keys (maxmemory 40mb, allkeys-lru)", () => {
  const server = useRedisServer("redis7", {
    args: ["--maxmemory", "40mb", "--maxmemory-policy", "allkeys-lru"],
  })

  it("start is refused: EvictionPolicyRefused naming maxmemory-policy, the fix and the opt-in", async () => {
    const error = await rejection({
      redis: { url: server().url },
      consumers: [consumer({ stream: "orders", group: "billing", eachMessage: noop, ...fast })],
    })
    expect(error._tag).toBe("EvictionPolicyRefused")
    expect(error.policy).toBe("allkeys-lru")
    expect(error.message).toContain("maxmemory-policy is allkeys-lru")
    expect(error.message).toContain("CONFIG SET maxmemory-policy noeviction")
    expect(error.message).toContain("redis: { allowEviction: true }")
    // nothing was written: no key of the namespace exists
    expect(server().cli("--scan", "--pattern", "shardline:*").trim()).toBe("")
  })

  it("a producer-only runtime is refused too", async () => {
    const error = await rejection({ redis: { url: server().url } })
    expect(error._tag).toBe("EvictionPolicyRefused")
  })

  it("with redis: { allowEviction: true } it starts, and the runtime's logger gets a warning", async () => {
    const { lines, logger } = recording()
    const runtime = await start({
      redis: { url: server().url, allowEviction: true },
      consumers: [consumer({ stream: "orders", group: "billing", eachMessage: noop, ...fast })],
      handleSignals: false,
      logger,
    })
    await runtime.stop()
    const warnings = lines.filter((l) => l.level === "warn" && l.message.includes("evicts keys"))
    expect(warnings).toHaveLength(1)
    expect(warnings[0]!.message).toContain("maxmemory-policy allkeys-lru")
    expect(warnings[0]!.message).toContain("allowEviction is on")
  })

  it("allowEviction must be a boolean", async () => {
    const error = await rejection({
      redis: { url: server().url, allowEviction: "yes" as unknown as boolean },
    })
    expect(error._tag).toBe("InvalidRuntimeConfig")
    expect(error.message).toContain("redis.allowEviction")
  })
})

const keys = Keys.make(Keys.DEFAULT_PREFIX)

type DataLostEvent = Extract<RuntimeEvent, { readonly type: "dataLost" }>

/** A runtime of one member consuming `stream` (group g, 2 shards), recording what it handles and its events. */
const consuming = async (
  url: string,
  stream: string,
  eachMessage: (m: Message) => unknown = () => {},
  memberBase?: string,
) => {
  const handled: Array<string> = []
  const events: Array<RuntimeEvent> = []
  const runtime = await start({
    redis: { url, allowEviction: true },
    consumers: [
      consumer({
        stream,
        group: "g",
        shardCount: 2,
        ...fast,
        eachMessage: async (m) => {
          await eachMessage(m)
          handled.push(m.fields.n!)
        },
      }),
    ],
    handleSignals: false,
    logLevel: "silent",
    ...(memberBase === undefined ? {} : { memberBase }),
    onEvent: (e) => {
      events.push(e)
    },
  })
  const lost = () => events.filter((e): e is DataLostEvent => e.type === "dataLost")
  return { runtime, handled, events, lost }
}

let sent = 0
/** Sends one message routed to `shard` (keys tried in turn); its `n`. */
const sendTo = async (producer: Producer, shard: number, fields: Record<string, string> = {}) => {
  for (let i = 0; i < 1_000; i++) {
    const n = String(sent++)
    const key = `k-${n}`
    // route first (no send lands on the other shard)
    const routed = await producer.send(key, { n, ...fields })
    if (routed.shard === shard) return n
  }
  throw new Error(`no key routed to shard ${shard}`)
}

/** The value of `shardline_data_lost_total` for `what` in the Prometheus text. */
const lostMetric = async (runtime: ShardlineRuntime, what: string) => {
  const line = (await runtime.metrics())
    .split("\n")
    .find((l) => l.startsWith("shardline_data_lost_total") && l.includes(`what="${what}"`))
  return line === undefined ? 0 : Number(line.split(" ").pop())
}

describe("what vanishes from a running group is said, never read through (allkeys-lru, allowEviction)", () => {
  const server = useRedisServer("redis7", {
    args: ["--maxmemory", "40mb", "--maxmemory-policy", "allkeys-lru"],
  })

  it("an owner token deleted (or evicted) under a steady group of two members: the shard's reads are refused, said once (dataLost token, metric); its owner reports it and the leader writes the same token again (rule 30): handled again by the same owner, no rebalance, no takeover", async () => {
    const stream = `ev-token-${randomUUID().slice(0, 8)}`
    // two members (their own ids: one process would be one id twice, rule 9)
    const a = await consuming(server().url, stream, undefined, "ev-a")
    const b = await consuming(server().url, stream, undefined, "ev-b")
    try {
      /** The shards `c` reads now, from its assigned and revoked events. */
      const owned = (c: typeof a) => {
        const out = new Set<number>()
        for (const e of c.events)
          if (e.type === "assigned") out.add(e.shard)
          else if (e.type === "revoked") out.delete(e.shard)
        return out
      }
      await eventually("one shard each", () => owned(a).size === 1 && owned(b).size === 1, 20_000)
      const [owner, other] = owned(a).has(0) ? [a, b] : [b, a]
      const producer = owner.runtime.producer(stream)
      const before = [await sendTo(producer, 0), await sendTo(producer, 1)]
      await eventually(
        "the first two handled",
        () => before.every((n) => a.handled.includes(n) || b.handled.includes(n)),
        10_000,
      )
      const key = keys.ownerTokenKey(stream, 0, "g")
      const token = server().cli("GET", key).trim()
      expect(Number(token)).toBeGreaterThan(0)
      const seen = [a.events.length, b.events.length] as const
      server().cli("DEL", key)
      const refused = await sendTo(producer, 0)
      await eventually("the loss said", () => owner.lost().length > 0, 10_000)
      const t0 = Date.now()
      await eventually("the refused message handled", () => owner.handled.includes(refused), 10_000)
      const waitedMs = Date.now() - t0
      // the SAME token, written again for the same owner: no new grant
      expect(server().cli("GET", key).trim()).toBe(token)
      expect(owner.lost().map((e) => [e.shard, e.what, e.error._tag])).toEqual([
        [0, "token", "OwnerTokenMissing"],
      ])
      expect(await lostMetric(owner.runtime, "token")).toBe(1)
      // no two owners, no rebalance, no takeover: nothing moved
      expect(other.handled).not.toContain(refused)
      const moved = (c: typeof a, from: number) =>
        c.events
          .slice(from)
          .filter((e) =>
            [
              "assigned",
              "revoking",
              "revoked",
              "staleOwner",
              "coordinatorElected",
              "joined",
            ].includes(e.type),
          )
          .map((e) => e.type)
      expect(moved(a, seen[0])).toEqual([])
      expect(moved(b, seen[1])).toEqual([])
      // a heartbeat interval is 200 ms here; generous for a loaded machine
      expect(waitedMs).toBeLessThan(10_000)
    } finally {
      await Promise.all([a.runtime.stop(), b.runtime.stop()])
    }
  })

  it("a group destroyed mid-run: dataLost (group) and its metric; created again at the stream's start, it handles what the stream holds again and what comes", async () => {
    const stream = `ev-group-${randomUUID().slice(0, 8)}`
    const c = await consuming(server().url, stream)
    try {
      const producer = c.runtime.producer(stream)
      const first = [await sendTo(producer, 0), await sendTo(producer, 0)]
      await eventually("handled", () => first.every((n) => c.handled.includes(n)))
      server().cli("XGROUP", "DESTROY", keys.shardKey(stream, 0), "g")
      const next = await sendTo(producer, 0)
      await eventually("the loss said", () => c.lost().length > 0)
      expect(c.lost().map((e) => [e.shard, e.what, e.error._tag])).toEqual([
        [0, "group", "DataLost"],
      ])
      await eventually("the next handled", () => c.handled.includes(next))
      // at least once: the stream's entries again (never read as empty)
      await eventually("the first two handled again", () =>
        first.every((n) => c.handled.filter((x) => x === n).length === 2),
      )
      expect(await lostMetric(c.runtime, "group")).toBe(1)
    } finally {
      await c.runtime.stop()
    }
  })

  it("a shard stream deleted under a batch in flight: dataLost (stream) and its metric; the group is created again and reads what comes", async () => {
    const stream = `ev-stream-${randomUUID().slice(0, 8)}`
    let entered!: () => void
    const inFlight = new Promise<void>((resolve) => {
      entered = resolve
    })
    let release!: () => void
    const released = new Promise<void>((resolve) => {
      release = resolve
    })
    const c = await consuming(server().url, stream, async (m) => {
      if (m.fields.hold !== "1") return
      entered()
      await released
    })
    try {
      const producer = c.runtime.producer(stream)
      const held = await sendTo(producer, 0, { hold: "1" })
      await inFlight
      server().cli("DEL", keys.shardKey(stream, 0))
      release()
      await eventually("the loss said", () => c.lost().length > 0)
      expect(c.lost().map((e) => [e.shard, e.what, e.error._tag])).toEqual([
        [0, "stream", "DataLost"],
      ])
      expect(c.handled).toContain(held)
      const after = await sendTo(producer, 0)
      await eventually("the next handled", () => c.handled.includes(after))
      expect(await lostMetric(c.runtime, "stream")).toBe(1)
    } finally {
      await c.runtime.stop()
    }
  })
})

describe("noeviction: a full server refuses sends, consumption goes on", () => {
  const server = useRedisServer("redis7", {
    args: ["--maxmemory", "8mb", "--maxmemory-policy", "noeviction"],
  })

  it("a producer fills it until OOM command not allowed; consumers keep consuming; every accepted message is handled exactly once", async () => {
    const stream = `oom-${randomUUID().slice(0, 8)}`
    const handled = new Map<string, number>()
    const events: Array<RuntimeEvent> = []
    const runtime = await start({
      redis: { url: server().url },
      consumers: [
        consumer({
          stream,
          group: "g",
          shardCount: 2,
          // acknowledged entries leave the stream: consuming frees memory
          ack: "xackdel",
          batchSize: 16,
          // slower than the producer, so the server fills up while it consumes
          eachMessage: async (m) => {
            await new Promise((resolve) => setTimeout(resolve, 1))
            handled.set(m.fields.n!, (handled.get(m.fields.n!) ?? 0) + 1)
          },
        }),
      ],
      handleSignals: false,
      logLevel: "silent",
      onEvent: (e) => {
        events.push(e)
      },
    })
    try {
      const producer = runtime.producer(stream)
      const payload = "x".repeat(2_048)
      const accepted: Array<string> = []
      let refused = 0
      // accepted after the first refusal: room the consumers made meanwhile
      let acceptedAfter = 0
      for (let i = 0; i < 100_000 && (refused < 20 || acceptedAfter < 200); i++) {
        const n = String(i)
        try {
          await producer.send(`k${i % 64}`, { n, payload })
          accepted.push(n)
          if (refused > 0) acceptedAfter++
        } catch (error) {
          const e = error as {
            readonly _tag?: string
            readonly message?: string
            readonly cause?: unknown
          }
          const text = `${e.message ?? ""} ${String((e.cause as { message?: string } | undefined)?.message ?? "")}`
          if (e._tag !== "SendFailed" || !text.includes("OOM command not allowed")) throw error
          refused++
        }
      }
      expect(refused).toBeGreaterThanOrEqual(20)
      // consumption went on under OOM: it freed what it acknowledged, and sends were accepted again
      expect(acceptedAfter).toBeGreaterThanOrEqual(200)
      await eventually(
        "every accepted message handled",
        () => accepted.every((n) => handled.has(n)),
        120_000,
      )
      expect([...handled.values()].every((count) => count === 1)).toBe(true)
      expect(handled.size).toBe(accepted.length)
      expect(events.filter((e) => e.type === "dataLost")).toEqual([])
    } finally {
      await runtime.stop()
    }
  }, 180_000)
})
