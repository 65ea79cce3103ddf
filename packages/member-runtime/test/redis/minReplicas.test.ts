/**
 * A producer on a primary with `min-replicas-to-write 1` whose replica is
 * stopped (docs/redis.md, "`min-replicas-to-write`"; issue 32, item 3):
 * the master refuses the send with NOREPLICAS and the runtime says so with
 * a typed cause (`SendFailed` caused by `NotEnoughReplicas`, not a generic
 * `BackendUnavailable`); nothing was stored. Once the replica is back the
 * send goes through and a consumer handles every accepted message: nothing
 * is lost.
 *
 * A consumer through the same stop: the ack of the message it was handling
 * is refused (`dataPlaneError` with `NotEnoughReplicas`, the message stays
 * pending) and so are its heartbeats (`heartbeat` TRANSPORT_ERROR whose
 * error is caused by `NotEnoughReplicas`); both are retried, the process
 * goes on, and the member keeps its lease (the stop is shorter than the
 * session). Once the replica is back the message is acknowledged and
 * nothing is pending or lost.
 */
import { NotEnoughReplicas } from "@shardline/core"
import { Keys } from "@shardline/redis-store"
import { type RedisServer, startRedis } from "@shardline/redis-store/testing"
import { afterAll, beforeAll, expect, it } from "vitest"
import { SendFailed } from "../../src/Errors.js"
import type { RuntimeEvent } from "../../src/Events.js"
import { consumer } from "../../src/index.js"
import * as LayoutSource from "../../src/LayoutSource.js"
import { start } from "../../src/Runtime.js"
import { eventually } from "../support/redis.js"

let primary: RedisServer
let replica: RedisServer
const goodReplicas = () =>
  Number(/min_slaves_good_slaves:(\d+)/.exec(primary.cli("INFO", "replication"))?.[1] ?? -1)

beforeAll(async () => {
  primary = await startRedis({
    args: ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"],
  })
  replica = await startRedis({ args: ["--replicaof", primary.host, String(primary.port)] })
  await eventually("a good replica", () => goodReplicas() === 1)
}, 60_000)

afterAll(async () => {
  try {
    process.kill(replica.pid, "SIGCONT")
  } catch {
    // already gone
  }
  await replica?.stop()
  await primary?.stop()
})

it("the replica stopped: a send fails SendFailed caused by NotEnoughReplicas and stores nothing; back, every accepted message is handled", async () => {
  const stream = "minrep"
  const handled: Array<string> = []
  const runtime = await start({
    redis: { url: primary.url },
    handleSignals: false,
    consumers: [
      consumer({
        stream,
        group: "g",
        shardCount: 1,
        sessionTimeoutMs: 4_000,
        heartbeatIntervalMs: 300,
        eachMessage: (m) => {
          handled.push(m.fields.n ?? "")
        },
      }),
    ],
  })
  try {
    const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: 1 }) })
    await producer.send("k", { n: "1" })
    process.kill(replica.pid, "SIGSTOP")
    await eventually("the primary to count no good replica", () => goodReplicas() === 0)
    const error = await producer.send("k", { n: "lost?" }).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(error).toBeInstanceOf(SendFailed)
    const cause = (error as SendFailed).cause
    expect(cause).toBeInstanceOf(NotEnoughReplicas)
    expect((error as SendFailed).message).toMatch(/^NotEnoughReplicas: append on .* NOREPLICAS/)
    expect(primary.cli("XLEN", Keys.defaultKeys.shardKey(stream, 0)).trim()).toBe("1")
    process.kill(replica.pid, "SIGCONT")
    await eventually("a good replica again", () => goodReplicas() === 1)
    await producer.send("k", { n: "2" })
    await eventually("both accepted messages handled", () => handled.length === 2, 30_000)
    expect(handled).toEqual(["1", "2"])
  } finally {
    await runtime.stop()
  }
}, 90_000)

it("the replica stopped: the ack of a handled message and the heartbeats fail typed (NotEnoughReplicas) and are retried; back, it is acknowledged, no lease lost", async () => {
  const stream = "minrep-ack"
  const events: Array<RuntimeEvent> = []
  const handled: Array<string> = []
  let release = () => {}
  const gate = new Promise<void>((resolve) => {
    release = resolve
  })
  const runtime = await start({
    redis: { url: primary.url },
    handleSignals: false,
    onEvent: (e) => {
      events.push(e)
    },
    consumers: [
      consumer({
        stream,
        group: "g",
        shardCount: 1,
        // well above the stop below: the member must keep its lease through it
        sessionTimeoutMs: 20_000,
        heartbeatIntervalMs: 300,
        eachMessage: async (m) => {
          handled.push(m.fields.n ?? "")
          if (m.fields.n === "2") await gate
        },
      }),
    ],
  })
  const key = Keys.defaultKeys.shardKey(stream, 0)
  const pending = () => Number(primary.cli("XPENDING", key, "g").split("\n")[0]?.trim())
  const refused = (e: RuntimeEvent, since: number) =>
    e.at >= since &&
    ((e.type === "dataPlaneError" && e.error instanceof NotEnoughReplicas) ||
      (e.type === "heartbeat" &&
        e.errorCode === "TRANSPORT_ERROR" &&
        (e.error as { cause?: unknown } | undefined)?.cause instanceof NotEnoughReplicas))
  try {
    const producer = runtime.producer(stream, { layout: LayoutSource.fixed({ [stream]: 1 }) })
    await producer.send("k", { n: "1" })
    await producer.send("k", { n: "2" })
    await eventually("message 2 in its handler", () => handled.includes("2"), 30_000)
    process.kill(replica.pid, "SIGSTOP")
    await eventually("the primary to count no good replica", () => goodReplicas() === 0)
    const since = Date.now()
    release()
    await eventually(
      "a refused ack or read (dataPlaneError: NotEnoughReplicas)",
      () => events.some((e) => e.type === "dataPlaneError" && refused(e, since)),
      30_000,
    )
    await eventually(
      "a refused heartbeat (TRANSPORT_ERROR caused by NotEnoughReplicas)",
      () => events.some((e) => e.type === "heartbeat" && refused(e, since)),
      30_000,
    )
    // not acknowledged: message 2 is still pending
    expect(pending()).toBeGreaterThanOrEqual(1)
    process.kill(replica.pid, "SIGCONT")
    await eventually("a good replica again", () => goodReplicas() === 1)
    await producer.send("k", { n: "3" })
    await eventually(
      "every message handled and acknowledged",
      () => handled.includes("3") && pending() === 0,
      30_000,
    )
    expect(new Set(handled)).toEqual(new Set(["1", "2", "3"]))
    expect(
      events.filter((e) => e.type === "leaseLost" || e.type === "lost").map((e) => e.type),
      "no lease or shard lost",
    ).toEqual([])
  } finally {
    release()
    await runtime.stop()
  }
}, 90_000)
