/**
 * Entry point: `pnpm --filter @shardline/bench run bench:idle-redis`.
 * Writes results/idle-redis.json and results/idle-redis.md: the Redis
 * commands an idle shard of a member runtime costs (docs/redis.md, "Idle
 * shards"). One runtime (one member, embedded coordinator, default
 * `idleWaitMs` 5 s and heartbeat 3 s, lag reported) owns a group of A idle
 * shards, then one of B; Redis' `total_commands_processed` (which counts
 * the commands scripts call) is read over `BENCH_IDLE_SECONDS` once the
 * group settled; per idle shard = the difference / (B - A), the rest is the
 * runtime's own (heartbeats, the coordinator's lease and transport). On
 * Redis 7.0, 8.x and Valkey 8 when their binaries are there (redis-store's
 * test harness starts each on a free loopback port).
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { consumer, start } from "@shardline/member-runtime"
import { type ServerKind, ServerMissing, startRedis } from "@shardline/redis-store/testing"
import { Redis } from "ioredis"

const SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 40)
const SETTLE_MS = Number(process.env.BENCH_IDLE_SETTLE_MS ?? 12_000)
const [A, B] = (process.env.BENCH_IDLE_SHARDS ?? "8,40").split(",").map(Number) as [number, number]
const KINDS = (process.env.BENCH_IDLE_SERVERS ?? "redis7,redis8,valkey8").split(
  ",",
) as Array<ServerKind>

const commands = async (client: Redis): Promise<number> =>
  Number(/total_commands_processed:(\d+)/.exec(await client.info("stats"))?.[1] ?? 0)

/** Commands/s on the server while a runtime owns `shards` idle shards (one member). */
const idleRate = async (url: string, raw: Redis, shards: number): Promise<number> => {
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
    const before = await commands(raw)
    await new Promise((resolve) => setTimeout(resolve, SECONDS * 1_000))
    // the INFO that reads the count is itself one command
    return ((await commands(raw)) - before - 1) / SECONDS
  } finally {
    await runtime.stop()
  }
}

interface Row {
  readonly server: string
  readonly atA: number
  readonly atB: number
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
    const atA = await idleRate(server.url, raw, A)
    const atB = await idleRate(server.url, raw, B)
    const perShard = (atB - atA) / (B - A)
    const row = {
      server: `${kind} ${server.version}`,
      atA,
      atB,
      perShard,
      perRuntime: atA - A * perShard,
    }
    rows.push(row)
    console.log(
      `${row.server}: ${atA.toFixed(2)} commands/s with ${A} idle shards, ${atB.toFixed(2)} with ${B}: ${perShard.toFixed(3)} per idle shard, ${row.perRuntime.toFixed(2)} per runtime`,
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
  shards: [A, B],
  rows,
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL("idle-redis.json", dir), `${JSON.stringify(out, null, 2)}\n`)
const md = `# Idle shards on Redis: commands per second

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores, ${out.date}).
One member runtime (embedded coordinator, \`idleWaitMs\` 5 s, heartbeat 3 s, lag reported)
owning a group of ${A} idle shards, then one of ${B}; Redis' \`total_commands_processed\` (the
commands scripts call included) over ${SECONDS} s once the group settled. Per idle shard: the
difference divided by ${B - A}; per runtime: the rest (heartbeats, the coordinator's lease and
transport). docs/redis.md, "Idle shards", says what an idle shard sends.

| server | commands/s, ${A} shards | ${B} shards | per idle shard | per runtime |
|---|---:|---:|---:|---:|
${rows.map((r) => `| ${r.server} | ${r.atA.toFixed(2)} | ${r.atB.toFixed(2)} | **${r.perShard.toFixed(3)}** | ${r.perRuntime.toFixed(2)} |`).join("\n")}
`
writeFileSync(new URL("idle-redis.md", dir), md)
console.log(md)
process.exit(0)
