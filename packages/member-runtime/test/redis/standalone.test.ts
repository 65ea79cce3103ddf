/**
 * Coordinator placement "standalone" on Redis: the group's coordinator is
 * the `shardline coordinator` process (the bin of @shardline/redis-store,
 * packages/redis-store/src/cli.ts), and the runtime's members
 * (`coordinator: "standalone"`) join it through the Redis transport. This
 * process is then no coordinator candidate: its `monitor` is empty, and the
 * group still works end to end.
 */
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import path from "node:path"
import { expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import { start } from "../../src/Runtime.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")

const cliPath = () => {
  // the package's own dependency, as `pnpm exec shardline` runs it
  const cli = path.resolve(
    import.meta.dirname,
    "../../node_modules/@shardline/redis-store/dist/cli.js",
  )
  if (!existsSync(cli))
    throw new Error(`${cli} is missing: run \`pnpm build\` (the shardline bin of redis-store)`)
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
