/**
 * Entry point: `pnpm --filter @shardline/bench run bench:idle-redis`.
 * Writes results/idle-redis.json and results/idle-redis.md: the Redis
 * commands an idle shard of a member runtime costs (docs/redis.md, "Idle
 * shards"). One runtime (one member, embedded coordinator, default
 * `idleWaitMs` 5 s and heartbeat 3 s, lag reported) owns a group of idle
 * shards, for each count of `BENCH_IDLE_SHARDS` in turn (default 8, 40 and
 * 1,024); Redis' `total_commands_processed` (which counts the commands
 * scripts call) is read over `BENCH_IDLE_SECONDS` once the group settled;
 * per idle shard = the difference between the largest and the smallest
 * group over their difference in shards, the rest is the runtime's own
 * (heartbeats, the coordinator's lease and transport). Each line also
 * shows the connections the runtime held while idle. On
 * Redis 7.0, 8.x and Valkey 8 when their binaries are there (redis-store's
 * test harness starts each on a free loopback port).
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { consumer, start } from "@shardline/member-runtime"
import { type ServerKind, ServerMissing, startRedis } from "@shardline/redis-store/testing"
import { Redis } from "ioredis"

// 60 s: each idle shard's once-a-minute XINFO GROUPS lookup falls in the window once
const SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60)
const SETTLE_MS = Number(process.env.BENCH_IDLE_SETTLE_MS ?? 12_000)
const COUNTS = (process.env.BENCH_IDLE_SHARDS ?? "8,40,1024").split(",").map(Number)
if (
  COUNTS.length < 2 ||
  COUNTS.some((n, i) => !Number.isInteger(n) || n < 1 || (i > 0 && n <= (COUNTS[i - 1] as number)))
) {
  throw new Error(
    `BENCH_IDLE_SHARDS must list at least two increasing shard counts, got ${process.env.BENCH_IDLE_SHARDS}`,
  )
}
const A = COUNTS[0] as number
const B = COUNTS[COUNTS.length - 1] as number
const KINDS = (process.env.BENCH_IDLE_SERVERS ?? "redis7,redis8,valkey8").split(
  ",",
) as Array<ServerKind>

const commands = async (client: Redis): Promise<number> =>
  Number(/total_commands_processed:(\d+)/.exec(await client.info("stats"))?.[1] ?? 0)

const connections = async (client: Redis): Promise<number> =>
  Number(/connected_clients:(\d+)/.exec(await client.info("clients"))?.[1] ?? 0)

interface Idle {
  readonly shards: number
  /** Commands/s on the server. */
  readonly rate: number
  /** Connections the runtime held (the bench's own one not counted). */
  readonly connections: number
}

/** Commands/s on the server while a runtime owns `shards` idle shards (one member). */
const idleRate = async (url: string, raw: Redis, shards: number): Promise<Idle> => {
  const stream = `idle-${shards}-${Date.now()}`
  const runtime = await start({
    redis: { url },
    handleSignals: false,
    logLevel: "silent",
    consumers: [consumer({ stream, group: "g", shardCount: shards, eachMessage: () => {} })],
  })
  try {
    // join, grants, the first (empty) read of every shard
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS))
    const held = (await connections(raw)) - 1
    const before = await commands(raw)
    await new Promise((resolve) => setTimeout(resolve, SECONDS * 1_000))
    // the INFO that reads the count is itself one command
    return { shards, rate: ((await commands(raw)) - before - 1) / SECONDS, connections: held }
  } finally {
    await runtime.stop()
  }
}

interface Row {
  readonly server: string
  readonly groups: ReadonlyArray<Idle>
  readonly perShard: number
  readonly perRuntime: number
}

const rows: Array<Row> = []
for (const kind of KINDS) {
  let server: Awaited<ReturnType<typeof startRedis>>
  try {
    server = await startRedis({ kind })
  } catch (error) {
    if (error instanceof ServerMissing) {
      console.log(`${kind}: skipped (${error.message})`)
      continue
    }
    throw error
  }
  const raw = new Redis(server.port, server.host)
  try {
    const groups: Array<Idle> = []
    for (const shards of COUNTS) {
      const idle = await idleRate(server.url, raw, shards)
      groups.push(idle)
      console.log(
        `${kind}: ${idle.rate.toFixed(2)} commands/s with ${shards} idle shards (${idle.connections} connections)`,
      )
    }
    const atA = (groups[0] as Idle).rate
    const atB = (groups[groups.length - 1] as Idle).rate
    const perShard = (atB - atA) / (B - A)
    const row = {
      server: `${kind} ${server.version}`,
      groups,
      perShard,
      perRuntime: atA - A * perShard,
    }
    rows.push(row)
    console.log(
      `${row.server}: ${perShard.toFixed(3)} commands/s per idle shard, ${row.perRuntime.toFixed(2)} per runtime`,
    )
  } finally {
    raw.disconnect()
    await server.stop()
  }
}

const out = {
  command: "pnpm --filter @shardline/bench run bench:idle-redis",
  date: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  seconds: SECONDS,
  shards: COUNTS,
  rows,
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("idle-redis.json", dir), `${JSON.stringify(out, null, 2)}\n`)
const md = `# Idle shards on Redis: commands per second

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores, ${out.date}).
One member runtime (embedded coordinator, \`idleWaitMs\` 5 s, heartbeat 3 s, lag reported)
owning a group of ${COUNTS.join(", then one of ")} idle shards; Redis' \`total_commands_processed\`
(the commands scripts call included) over ${SECONDS} s once the group settled. Per idle shard:
the difference between ${B} and ${A} shards divided by ${B - A}; per runtime: the rest
(heartbeats, the coordinator's lease and transport). In brackets, the connections the runtime
held while idle. docs/redis.md, "Idle shards", says what an idle shard sends.

| server | ${COUNTS.map((n) => `commands/s, ${n} shards`).join(" | ")} | per idle shard | per runtime |
|---|${COUNTS.map(() => "---:|").join("")}---:|---:|
${rows.map((r) => `| ${r.server} | ${r.groups.map((g) => `${g.rate.toFixed(2)} (${g.connections})`).join(" | ")} | **${r.perShard.toFixed(3)}** | ${r.perRuntime.toFixed(2)} |`).join("\n")}
`
writeFileSync(new URL("idle-redis.md", dir), md)
console.log(md)
process.exit(0)
