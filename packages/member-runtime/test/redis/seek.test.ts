/**
 * Pause, resume and seek on real Redis (docs/runtime.md, "Pause, resume,
 * seek"): `seek` moves the group's position on a shard this process owns
 * (the Redis ShardStreams' fenced XGROUP SETID), between batches.
 */
import { expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

it("seek to the start re-delivers, to the end skips, to an id resumes after it; pause holds", async () => {
  const stream = "seek"
  const seen: Array<number> = []
  const runtime = await start({
    redis: { url: server().url },
    handleSignals: false,
    memberBase: "seeker",
    consumers: [
      consumer({
        stream,
        group: "g",
        shardCount: 1,
        sessionTimeoutMs: 3_000,
        rebalanceTimeoutMs: 6_000,
        heartbeatIntervalMs: 200,
        eachMessage: (m) => {
          seen.push(Number(m.fields.n))
        },
      }),
    ],
  })
  try {
    await eventually("the member owns the shard", () => runtime.members()[0]!.owned.length === 1)
    const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: 1 }) })
    const send = async (from: number, to: number) => {
      const ids: Array<string> = []
      for (let n = from; n < to; n++) ids.push((await producer.send("k", { n: String(n) })).id)
      return ids
    }
    const ids = await send(0, 10)
    await eventually("0..9 handled", () => seen.length === 10)

    await runtime.seek(stream, "g", 0, "start")
    await eventually("0..9 handled again", () => seen.length === 20)
    expect(seen.slice(10)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])

    await runtime.seek(stream, "g", 0, ids[6]!)
    await eventually("7..9 handled again", () => seen.length === 23)
    expect(seen.slice(20)).toEqual([7, 8, 9])

    runtime.pause(stream, "g", 0)
    await send(10, 15)
    await runtime.seek(stream, "g", 0, "end")
    runtime.resume(stream, "g", 0)
    await send(15, 17)
    await eventually("15 and 16 handled", () => seen.length === 25)
    // 10..14 were skipped by the seek to the end
    expect(seen.slice(23)).toEqual([15, 16])
  } finally {
    await runtime.stop()
  }
})
