/**
 * A runtime's Promise producer around `stop()` (docs/runtime.md, "Producer"),
 * on any ports: calls made before `stop()` are appended and `stop()` waits
 * for them; a call made after is refused with `RuntimeStopped` and writes
 * nothing. Run on memory (test/ProducerStop.test.ts) and on Redis
 * (test/redis/producer.test.ts).
 */
import { expect } from "vitest"
import * as LayoutSource from "../../src/LayoutSource.js"
import type { ShardlineRuntime } from "../../src/Runtime.js"

/** Entries stored on the stream's shards (after the runtime stopped). */
export type CountEntries = (stream: string, shardCount: number) => Promise<number>

const shardCount = 2

/** send, sendBatch, a typed send and a producer made just before, all called right before stop(). */
export const sendsBeforeStopAreAppended = async (
  runtime: ShardlineRuntime,
  stream: string,
  count: CountEntries,
) => {
  const layout = LayoutSource.fixed({ [stream]: shardCount })
  const raw = runtime.producer(stream, { layout })
  // one producer ready (it sent already), one still being made when stop() is called
  await raw.send("warm", { n: "0" })
  const typed = runtime.producer<{ n: number }>(stream, { layout, codec: "json" })
  const calls = [
    raw.send("a", { n: "1" }),
    raw.sendBatch([
      { key: "b", fields: { n: "2" } },
      { key: "c", fields: { n: "3" } },
    ]),
    typed.send("d", { n: 4 }),
  ]
  const stopped = runtime.stop()
  const outcomes = await Promise.allSettled(calls)
  await stopped
  expect(outcomes.map((o) => (o.status === "rejected" ? o.reason : "appended"))).toEqual([
    "appended",
    "appended",
    "appended",
  ])
  expect(await count(stream, shardCount)).toBe(5)
}

/** stop() first: every later call is RuntimeStopped at once, and nothing more is written. */
export const sendsAfterStopAreRefused = async (
  runtime: ShardlineRuntime,
  stream: string,
  count: CountEntries,
) => {
  const layout = LayoutSource.fixed({ [stream]: shardCount })
  const raw = runtime.producer(stream, { layout })
  await raw.send("warm", { n: "0" })
  const stopped = runtime.stop()
  const late = [
    raw.send("a", { n: "1" }),
    raw.sendBatch([{ key: "b", fields: { n: "2" } }]),
    runtime.producer(stream, { layout }).send("c", { n: "3" }),
  ]
  const outcomes = await Promise.allSettled(late)
  await stopped
  for (const o of outcomes)
    expect(o.status === "rejected" ? o.reason : "appended").toMatchObject({
      _tag: "RuntimeStopped",
    })
  expect(await count(stream, shardCount)).toBe(1)
}
