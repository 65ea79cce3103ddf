/**
 * A producer on a primary with `min-replicas-to-write 1` whose replica is
 * stopped (docs/redis.md, "`min-replicas-to-write`"; issue 32, item 3):
 * the master refuses the send with NOREPLICAS and the runtime says so with
 * a typed cause (`SendFailed` caused by `NotEnoughReplicas`, not a generic
 * `BackendUnavailable`); nothing was stored. Once the replica is back the
 * send goes through and a consumer handles every accepted message: nothing
 * is lost.
 */
import { NotEnoughReplicas } from "@shardline/core"
import { Keys } from "@shardline/redis-store"
import { type RedisServer, startRedis } from "@shardline/redis-store/testing"
import { afterAll, beforeAll, expect, it } from "vitest"
import { SendFailed } from "../../src/Errors.js"
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
