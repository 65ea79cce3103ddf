/**
 * Where a new group starts (docs/runtime.md, "Where a new group starts"),
 * on a real Redis 7.0 and on the memory ports: `earliest` reads every
 * entry each shard held, `latest` only what was appended after its first
 * grant, an entry id what follows it, on every shard; a group that exists
 * keeps its stored position whatever its `startAt` says.
 */
import { Layout } from "@shardline/core"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import { InvalidRuntimeConfig } from "../../src/Errors.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import { memoryPorts, type Ports } from "../../src/Ports.js"
import { type ShardlineRuntime, type StartOptions, start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

const SHARDS = 3
const g0 = { generation: 0, firstShard: 0, shardCount: SHARDS }
const settings = {
  shardCount: SHARDS,
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 6_000,
  heartbeatIntervalMs: 200,
} as const
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Keys that cover every shard, `perShard` of each. */
const keys = (perShard: number): Array<string> => {
  const out: Array<string> = []
  const count = new Array<number>(SHARDS).fill(0)
  for (let i = 0; out.length < perShard * SHARDS; i++) {
    const shard = Layout.shardOf(g0, `k${i}`)
    if (count[shard]! < perShard) {
      count[shard]!++
      out.push(`k${i}`)
    }
  }
  return out
}

const scenario = (name: string, backend: () => Pick<StartOptions, "ports" | "redis">) =>
  it(`${name}: earliest, latest and an entry id on every shard; an existing group keeps its position`, async () => {
    const stream = `start-at-${name}`
    const seen = new Map<string, Array<string>>()
    const groupOf = (group: string, startAt: string) =>
      consumer({
        stream,
        group,
        ...settings,
        startAt,
        eachMessage: (m) => {
          const list = seen.get(group) ?? []
          list.push(`${m.fields.batch}:${m.shard}`)
          seen.set(group, list)
        },
      })
    const base = { ...backend(), handleSignals: false, logLevel: "silent" } as const
    // a producer alone (no group yet): batches A and B before any group exists
    const producerOnly = await start({ ...base, memberBase: "producer" })
    const producer = producerOnly.producer(stream, {
      layout: LayoutSource.fixed({ [stream]: SHARDS }),
    })
    const sendBatch = async (batch: string) => {
      for (const key of keys(2)) await producer.send(key, { batch })
    }
    let consumers: ShardlineRuntime | undefined
    try {
      await sendBatch("A")
      await sleep(5)
      // the ids of B (on every shard) are above this millisecond (one clock: Redis runs here)
      const between = String(Date.now())
      await sleep(5)
      await sendBatch("B")
      consumers = await start({
        ...base,
        memberBase: "first",
        consumers: [
          groupOf("early", "earliest"),
          groupOf("late", "latest"),
          groupOf("from-id", between),
        ],
      })
      const owning = () =>
        consumers!.members().every((m) => m.owned.length === SHARDS && m.phase === "stable")
      await eventually("every group owns every shard", owning)
      await sendBatch("C")
      const sorted = (group: string) => [...(seen.get(group) ?? [])].sort()
      const expected = (...batches: Array<string>) =>
        batches.flatMap((b) => keys(2).map((k) => `${b}:${Layout.shardOf(g0, k)}`)).sort()
      await eventually(
        "each group read what it starts at",
        () =>
          sorted("early").length === 3 * 2 * SHARDS &&
          sorted("late").length === 2 * SHARDS &&
          sorted("from-id").length === 2 * 2 * SHARDS,
      )
      await sleep(200)
      expect(sorted("early")).toEqual(expected("A", "B", "C"))
      expect(sorted("late")).toEqual(expected("C"))
      expect(sorted("from-id")).toEqual(expected("B", "C"))
      await consumers.stop()
      consumers = undefined

      // the groups exist now: a backlog (D) while they are down, then they
      // come back with other startAt values and resume from their positions
      await sendBatch("D")
      seen.clear()
      consumers = await start({
        ...base,
        memberBase: "second",
        consumers: [groupOf("early", "latest"), groupOf("late", "earliest")],
      })
      await eventually("both read the backlog", () => sorted("early").length === 2 * SHARDS)
      await eventually("late too", () => sorted("late").length === 2 * SHARDS)
      await sleep(200)
      expect(sorted("early")).toEqual(expected("D"))
      expect(sorted("late")).toEqual(expected("D"))
    } finally {
      await consumers?.stop()
      await producerOnly.stop()
    }
  }, 60_000)

describe("startAt", () => {
  scenario("redis", () => ({ redis: { url: server().url } }))
  const ports: Ports = memoryPorts()
  scenario("memory", () => ({ ports }))

  it("bad input: a startAt that is no position is an InvalidRuntimeConfig naming the field", async () => {
    for (const startAt of ["yesterday", "12-", "-1", ""]) {
      const error = await start({
        handleSignals: false,
        consumers: [consumer({ stream: "s", group: "g", startAt, eachMessage: () => {} })],
      }).then(
        () => undefined,
        (e: unknown) => e,
      )
      expect(error).toBeInstanceOf(InvalidRuntimeConfig)
      expect((error as InvalidRuntimeConfig).field).toBe("consumers[0].startAt")
    }
    // declarations of one group in a process agree on it
    await expect(
      start({
        handleSignals: false,
        consumers: [
          consumer({ stream: "s", group: "g", startAt: "latest", eachMessage: () => {} }),
          consumer({ stream: "s", group: "g", memberId: "other", eachMessage: () => {} }),
        ],
      }),
    ).rejects.toMatchObject({ _tag: "InvalidRuntimeConfig", field: "consumers[1].startAt" })
  })
})
