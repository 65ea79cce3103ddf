/**
 * Failures that used to say nothing, through `start({ redis })` on a real
 * server (docs/runtime.md, "On Redis"): each is a typed error or event whose
 * message names the cause and what to do.
 */
import { BackendUnavailable, InvalidDatabase, PermissionDenied } from "@shardline/member-runtime"
import { freePort } from "@shardline/redis-store/testing"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { RuntimeEvent } from "../../src/Events.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")
const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }
const noop = () => {}

/** What `start` rejects with. */
const rejection = async (options: Parameters<typeof start>[0]) => {
  try {
    const runtime = await start({ handleSignals: false, logLevel: "silent", ...options })
    await runtime.stop()
  } catch (error) {
    return error as { readonly _tag: string; readonly message: string }
  }
  throw new Error("start succeeded")
}

describe("connection errors name their cause, at once", () => {
  it("a refused port: BackendUnavailable naming ECONNREFUSED (default ioredis options)", async () => {
    const port = await freePort()
    const error = await rejection({
      redis: { url: `redis://127.0.0.1:${port}` },
      consumers: [consumer({ stream: "s", group: "g", eachMessage: noop })],
    })
    expect(error._tag).toBe("BackendUnavailable")
    expect(error.message).toContain(`cannot connect to Redis at redis://127.0.0.1:${port}`)
    expect(error.message).toContain("ECONNREFUSED")
    expect(error.message).not.toContain("max retries")
  })

  it("an unknown host: BackendUnavailable naming ENOTFOUND", async () => {
    const error = await rejection({
      redis: { url: "redis://no-such-host.invalid:6379" },
      consumers: [consumer({ stream: "s", group: "g", eachMessage: noop })],
    })
    expect(error._tag).toBe("BackendUnavailable")
    expect(error.message).toContain("ENOTFOUND")
  })

  it("a database the server does not have (redis://host/99): InvalidDatabase, not database 0", async () => {
    const error = await rejection({
      redis: { url: `${server().url}/99` },
      consumers: [consumer({ stream: "s", group: "g", eachMessage: noop })],
    })
    expect(error._tag).toBe("InvalidDatabase")
    expect(error.message).toContain("cannot use database 99")
  })
})

describe("the connection errors are the package's own exports (issue 33)", () => {
  it("BackendUnavailable, InvalidDatabase and PermissionDenied, imported from @shardline/member-runtime, are what start rejects with", async () => {
    const port = await freePort()
    const refused = await rejection({ redis: { url: `redis://127.0.0.1:${port}` } })
    expect(refused).toBeInstanceOf(BackendUnavailable)
    const noDatabase = await rejection({ redis: { url: `${server().url}/99` } })
    expect(noDatabase).toBeInstanceOf(InvalidDatabase)
    expect((noDatabase as InvalidDatabase).db).toBe(99)
    // a user without a command its group needs: refused by the probe at start
    server().cli(
      "ACL",
      "SETUSER",
      "no-claim",
      "reset",
      "on",
      ">pw",
      "~*",
      "&*",
      "+@all",
      "-xautoclaim",
    )
    const denied = await rejection({
      redis: { url: server().url, username: "no-claim", password: "pw" },
      consumers: [consumer({ stream: "s", group: "g", eachMessage: noop })],
    })
    expect(denied).toBeInstanceOf(PermissionDenied)
  })
})

describe("a producer-only process", () => {
  it("sending to a stream no group created yet: UnknownStream saying what to do", async () => {
    const unhandled: Array<unknown> = []
    const onUnhandled = (e: unknown) => unhandled.push(e)
    process.on("unhandledRejection", onUnhandled)
    const runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      logLevel: "silent",
    })
    try {
      const error = await runtime
        .producer("never-consumed")
        .send("k", { a: "1" })
        .then(
          () => undefined,
          (e: { readonly _tag: string; readonly message: string }) => e,
        )
      expect(error?._tag).toBe("UnknownStream")
      expect(error?.message).toContain('stream "never-consumed" has no shard layout yet')
      expect(error?.message).toContain("LayoutSource.fixed")
      await new Promise((resolve) => setTimeout(resolve, 50))
      expect(unhandled).toEqual([])
    } finally {
      process.off("unhandledRejection", onUnhandled)
      await runtime.stop()
    }
  })
})

describe("coordinator: standalone with no coordinator running", () => {
  it("heartbeats fail with NoCoordinator naming `shardline coordinator`; stop does not wait for its deadline", async () => {
    const events: Array<RuntimeEvent> = []
    const runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      logLevel: "silent",
      coordinator: "standalone",
      memberBase: "lonely",
      onEvent: (e) => {
        events.push(e)
      },
      consumers: [
        consumer({ stream: "no-coord", group: "g", shardCount: 4, ...fast, eachMessage: noop }),
      ],
    })
    let stopped = false
    try {
      await eventually("a failed heartbeat", () =>
        events.some((e) => e.type === "heartbeat" && e.errorCode === "TRANSPORT_ERROR"),
      )
      const failed = events.find(
        (e): e is Extract<RuntimeEvent, { type: "heartbeat" }> =>
          e.type === "heartbeat" && e.errorCode === "TRANSPORT_ERROR",
      )!
      expect(failed.error?._tag).toBe("NoCoordinator")
      expect(failed.error?.message).toContain(
        "shardline coordinator --redis <url> --stream no-coord --group g --shards 4 --session-timeout 3000 --heartbeat-interval 200 --rebalance-timeout 6000",
      )
      expect(runtime.members()[0]!.lastError?._tag).toBe("NoCoordinator")
      // the default shutdown deadline is 30 s (27 s before members are forced);
      // a member no coordinator can answer stops at once
      const outcome = await Promise.race([
        runtime.stop().then(() => "stopped"),
        new Promise((resolve) => setTimeout(() => resolve("still waiting after 20 s"), 20_000)),
      ])
      stopped = outcome === "stopped"
      expect(outcome).toBe("stopped")
    } finally {
      if (!stopped) await runtime.stop()
    }
  })
})
