/**
 * Coordinator placement "standalone" on Redis: the group's coordinator is
 * the `shardline coordinator` process (the CLI of @shardline/tools,
 * packages/tools/src/cli.ts), and the runtime's members
 * (`coordinator: "standalone"`) join it through the Redis transport. This
 * process is then no coordinator candidate: its `monitor` is empty, and the
 * group still works end to end.
 */
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import path from "node:path"
import { Keys } from "@shardline/redis-store"
import { Redis } from "ioredis"
import { expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

const cliPath = () => {
  // the package's own dependency, as `pnpm exec shardline` runs it
  const cli = path.resolve(import.meta.dirname, "../../node_modules/@shardline/tools/dist/cli.js")
  if (!existsSync(cli))
    throw new Error(`${cli} is missing: run \`pnpm build\` (the shardline CLI of @shardline/tools)`)
  return cli
}

it("members with coordinator: standalone are served by `shardline coordinator`", async () => {
  const timing = { sessionTimeoutMs: 3_000, heartbeatIntervalMs: 200, rebalanceTimeoutMs: 6_000 }
  const child = spawn(
    process.execPath,
    [
      cliPath(),
      "coordinator",
      "--redis",
      server().url,
      "--stream",
      "standalone",
      "--group",
      "g",
      "--shards",
      "4",
      "--session-timeout",
      String(timing.sessionTimeoutMs),
      "--heartbeat-interval",
      String(timing.heartbeatIntervalMs),
      "--rebalance-timeout",
      String(timing.rebalanceTimeoutMs),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  )
  let out = ""
  child.stdout.on("data", (c) => {
    out += String(c)
  })
  child.stderr.on("data", (c) => {
    out += String(c)
  })
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  try {
    await eventually(`the coordinator process is elected\n${out}`, () =>
      out.includes('"event":"coordinator"'),
    )
    const seen = new Set<string>()
    const runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      coordinator: "standalone",
      memberBase: "member",
      consumers: [
        consumer({
          stream: "standalone",
          group: "g",
          shardCount: 4,
          ...timing,
          runtimeMaxConcurrency: 2,
          eachMessage: (m) => {
            seen.add(m.fields.n!)
          },
        }),
      ],
    })
    try {
      await eventually("the member owns all 4 shards", () =>
        runtime.members().every((m) => m.owned.length === 4),
      )
      // no embedded candidate here: this process is not the coordinator
      expect(await runtime.monitor("standalone", "g")).toBeUndefined()
      const producer = runtime.producer("standalone")
      await producer.sendBatch(
        Array.from({ length: 100 }, (_, n) => ({ key: `k${n % 9}`, fields: { n: String(n) } })),
      )
      await producer.flush()
      await eventually("100 messages handled", () => seen.size === 100)
    } finally {
      await runtime.stop()
    }
  } finally {
    child.kill("SIGTERM")
    expect(await exited).toBe(0)
  }
})

it("a running group whose coordinator stopped, its shards idle, is live for `shardline groups delete`: refused without --force", async () => {
  // docs/redis.md, "Dead letters and groups". Once the coordinator is gone
  // (no lease, nobody serves) and the idle shards have not been read for a
  // whole session, only the members' heartbeats say the group runs.
  const stream = "standalone-idle"
  const timing = { sessionTimeoutMs: 2_000, heartbeatIntervalMs: 200, rebalanceTimeoutMs: 4_000 }
  const run = (args: ReadonlyArray<string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [cliPath(), ...args], {
        stdio: ["ignore", "pipe", "pipe"],
      })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (c) => {
        stdout += String(c)
      })
      child.stderr.on("data", (c) => {
        stderr += String(c)
      })
      child.on("exit", (code) => resolve({ code, stdout, stderr }))
    })
  const coordinator = spawn(
    process.execPath,
    [
      cliPath(),
      "coordinator",
      "--redis",
      server().url,
      "--stream",
      stream,
      "--group",
      "g",
      "--shards",
      "2",
      "--session-timeout",
      String(timing.sessionTimeoutMs),
      "--heartbeat-interval",
      String(timing.heartbeatIntervalMs),
      "--rebalance-timeout",
      String(timing.rebalanceTimeoutMs),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  )
  let out = ""
  coordinator.stdout.on("data", (c) => {
    out += String(c)
  })
  const exited = new Promise<number | null>((resolve) =>
    coordinator.on("exit", (code) => resolve(code)),
  )
  const redis = new Redis(server().url)
  const keys = Keys.defaultKeys
  let runtime: Awaited<ReturnType<typeof start>> | undefined
  try {
    await eventually(`the coordinator process is elected\n${out}`, () =>
      out.includes('"event":"coordinator"'),
    )
    let handled = 0
    runtime = await start({
      redis: { url: server().url },
      handleSignals: false,
      coordinator: "standalone",
      memberBase: "member",
      consumers: [
        consumer({
          stream,
          group: "g",
          shardCount: 2,
          ...timing,
          eachMessage: () => {
            handled++
          },
        }),
      ],
    })
    await eventually("the member owns both shards", () =>
      runtime!.members().every((m) => m.owned.length === 2),
    )
    const producer = runtime.producer(stream)
    await producer.sendBatch(
      Array.from({ length: 10 }, (_, n) => ({ key: `k${n}`, fields: { n: String(n) } })),
    )
    await producer.flush()
    await eventually("10 messages handled", () => handled === 10)

    coordinator.kill("SIGTERM")
    expect(await exited).toBe(0)
    const group = { stream, group: "g" }
    const consumersIdleMs = async () => {
      let least = Number.POSITIVE_INFINITY
      for (const shard of [0, 1])
        for (const c of (await redis.call(
          "XINFO",
          "CONSUMERS",
          keys.shardKey(stream, shard),
          "g",
        )) as Array<Array<unknown>>)
          least = Math.min(least, Number(c[c.indexOf("idle") + 1]))
      return least
    }
    // what `groups delete` judged by alone before: all say idle now
    await eventually(
      "no lease, nobody serving, no consumer read within the session",
      async () =>
        (await redis.exists(keys.leaseKey(group))) === 0 &&
        (await redis.exists(keys.servingKey(group))) === 0 &&
        (await consumersIdleMs()) > timing.sessionTimeoutMs,
      30_000,
    )
    expect(runtime.members()).toHaveLength(1)
    const refused = await run([
      "groups",
      "delete",
      "--redis",
      server().url,
      "--stream",
      stream,
      "--group",
      "g",
    ])
    expect(refused.stderr).toMatch(/refused \(GroupLive\).*a member heartbeated/)
    expect(refused.code).toBe(2)
    expect(await redis.exists(keys.storeRevisionKey(group))).toBe(1)
    // stopped, its members heartbeat no more: deletable once a session passed
    await runtime.stop()
    runtime = undefined
    const deleteArgs = ["groups", "delete", "--redis", server().url, "--stream", stream]
    await eventually(
      "the stopped group is deleted",
      async () => (await run([...deleteArgs, "--group", "g"])).code === 0,
      30_000,
      500,
    )
    expect(await redis.exists(keys.storeRevisionKey(group))).toBe(0)
  } finally {
    await runtime?.stop()
    redis.disconnect()
    if (coordinator.exitCode === null) coordinator.kill("SIGKILL")
  }
}, 90_000)
