/**
 * Typed messages, errors not worth retrying and dead letters replayed to one
 * group, on a real Redis 7.0 (docs/runtime.md, "Typed messages", "Errors not
 * worth retrying"; docs/redis.md, "Dead letters and groups"):
 *
 * - an entry written with a raw XADD, as a service in another language
 *   would per the documented wire format, is read by a typed consumer;
 * - undecodable and invalid entries and a `NonRetryableError` go to the
 *   dead letters at once, each with its reason;
 * - `replayDeadLetters` (`shardline dlq replay --group`) re-delivers to that
 *   group only: the other group on the stream never sees the replayed
 *   message (its members acknowledge it unseen), and the message carries
 *   its original id and its replay count, counted on across replays.
 */
import { RedisPorts } from "@shardline/redis-store"
import { Admin } from "@shardline/tools"
import { Effect } from "effect"
import { Redis } from "ioredis"
import { expect, it } from "vitest"
import { z } from "zod"
import { consumer } from "../../src/Consumer.js"
import { NonRetryableError } from "../../src/Errors.js"
import type { RuntimeEvent } from "../../src/Events.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import type { Message } from "../../src/Message.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

const Order = z.object({ amount: z.number(), customer: z.string() })
type Order = z.infer<typeof Order>

const settings = {
  shardCount: 1,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 6_000,
  heartbeatIntervalMs: 200,
} as const

it("a foreign producer's XADD per the wire format is read typed; bad entries and NonRetryableError are dead-lettered at once; a replay reaches its group alone, marked", async () => {
  const stream = "typed-orders"
  const billing: Array<Message<Order>> = []
  const audit: Array<Message<Order>> = []
  let refuse = true
  const events: Array<RuntimeEvent> = []
  const runtime = await start({
    redis: { url: server().url },
    handleSignals: false,
    memberBase: "typed",
    logLevel: "silent",
    onEvent: (e) => {
      events.push(e)
    },
    consumers: [
      consumer({
        stream,
        group: "billing",
        ...settings,
        maxDeliveries: 10,
        codec: "json",
        schema: Order,
        eachMessage: (m) => {
          if (m.value.customer === "c-refused" && refuse)
            throw new NonRetryableError({ message: "customer is blocked" })
          billing.push(m)
        },
      }),
      consumer({
        stream,
        group: "audit",
        ...settings,
        codec: "json",
        schema: Order,
        eachMessage: (m) => {
          audit.push(m)
        },
      }),
    ],
  })
  const redis = new Redis(server().url)
  try {
    await eventually("both groups own the shard", () =>
      runtime.members().every((m) => m.owned.length === 1),
    )
    // a service in another language: one XADD with the documented fields (keys: {<stream>:<shard>})
    const key = `shardline:{${stream}:0}`
    await redis.xadd(
      key,
      "*",
      "shardline-key",
      "c-1",
      "shardline-payload",
      JSON.stringify({ amount: 12.5, customer: "c-1" }),
      "shardline-content-type",
      "application/json",
    )
    // the content type is optional
    await redis.xadd(
      key,
      "*",
      "shardline-key",
      "c-2",
      "shardline-payload",
      '{"amount":1,"customer":"c-2"}',
    )
    await redis.xadd(key, "*", "shardline-key", "c-3", "shardline-payload", "{oops")
    await redis.xadd(key, "*", "shardline-key", "c-4", "shardline-payload", '{"amount":"1"}')
    const producer = runtime.producer<Order>(stream, {
      codec: "json",
      layout: LayoutSource.fixed({ [stream]: 1 }),
    })
    await producer.send("c-refused", { amount: 3, customer: "c-refused" })
    await eventually("audit handled the good three", () => audit.length === 3)
    await eventually("billing handled two", () => billing.length === 2)
    await eventually(
      "five dead letters",
      () => events.filter((e) => e.type === "deadLettered").length === 5,
    )
    expect(audit.map((m) => m.value)).toEqual([
      { amount: 12.5, customer: "c-1" },
      { amount: 1, customer: "c-2" },
      { amount: 3, customer: "c-refused" },
    ])
    expect(billing.map((m) => [m.key, m.value.amount])).toEqual([
      ["c-1", 12.5],
      ["c-2", 1],
    ])
    const causes = events.flatMap((e) =>
      e.type === "deadLettered" ? [`${e.group}:${e.cause}:${e.deliveryCount}`] : [],
    )
    expect(causes.sort()).toEqual([
      "audit:invalid:1",
      "audit:undecodable:1",
      "billing:invalid:1",
      "billing:nonRetryable:1",
      "billing:undecodable:1",
    ])

    // replay billing's refused order to billing alone (as `shardline dlq replay --group billing`)
    const admin = <A, E>(effect: Effect.Effect<A, E, Admin.Services>) =>
      Effect.runPromise(effect.pipe(Effect.provide(RedisPorts.layer({ url: server().url }))))
    const letters = await admin(Admin.listDeadLetters({ stream, group: "billing" }))
    const refused = letters.find((l) => l.key === "c-refused")!
    expect(refused.reason).toBe("non-retryable: customer is blocked")
    const dry = await admin(
      Admin.replayDeadLetters({
        stream,
        group: "billing",
        shard: 0,
        ids: [refused.id],
        dryRun: true,
      }),
    )
    expect(dry.planned).toEqual([
      { from: { shard: 0, id: refused.id }, toShard: 0, key: "c-refused", count: 1 },
    ])
    expect(await admin(Admin.countDeadLetters({ stream, group: "billing" }))).toMatchObject({
      total: 3,
    })
    // still refused: dead-lettered again, then replayed a second time
    const first = await admin(
      Admin.replayDeadLetters({ stream, group: "billing", shard: 0, ids: [refused.id] }),
    )
    expect(first.replayed).toHaveLength(1)
    expect(first.otherGroups).toEqual(["audit"])
    await eventually(
      "dead-lettered again",
      () => events.filter((e) => e.type === "deadLettered").length === 6,
    )
    const again = (await admin(Admin.listDeadLetters({ stream, group: "billing" }))).find(
      (l) => l.key === "c-refused",
    )!
    refuse = false
    await admin(Admin.replayDeadLetters({ stream, group: "billing", shard: 0, ids: [again.id] }))
    await eventually("billing handled the replay", () => billing.length === 3)
    const replayed = billing[2]!
    expect(replayed.value).toEqual({ amount: 3, customer: "c-refused" })
    expect(replayed.replay).toEqual({
      group: "billing",
      originalShard: 0,
      originalId: refused.originalId,
      count: 2,
    })
    // audit never saw either replay, and holds nothing pending: its members acknowledged them
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(audit).toHaveLength(3)
    const pending = (await redis.xpending(key, "audit")) as [number, ...Array<unknown>]
    expect(pending[0]).toBe(0)
    const groups = (await redis.xinfo("GROUPS", key)) as Array<Array<string | number>>
    const auditInfo = groups
      .map((g) => Object.fromEntries(g.flatMap((v, i) => (i % 2 === 0 ? [[v, g[i + 1]]] : []))))
      .find((g) => g.name === "audit")!
    // every entry, the two replays included, was delivered to audit
    expect(auditInfo["entries-read"]).toBe(7)
  } finally {
    redis.disconnect()
    await runtime.stop()
  }
}, 90_000)
