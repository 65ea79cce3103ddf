/**
 * Entry point: `pnpm --filter @shardline/bench run bench:runtime-redis`.
 * Starts redis-server (Redis 7.0, and Redis 8.x when
 * scripts/build-redis8.sh has built it) on a free loopback port through
 * redis-store's test harness, or uses `BENCH_REDIS_URL`; runs every case
 * and its baselines in the same process, interleaved (src/runtimeRedis.bench.ts).
 * Writes results/runtime-redis.json and results/runtime-redis.md
 * (runtime-redis-<N>k.* when BENCH_MESSAGES is not the default).
 * BENCH_MESSAGES (default 100,000: shorter rounds last under a second and the
 * first is always the slowest), BENCH_ROUNDS (default 5), BENCH_CASES (a
 * comma-separated subset of the case keys of CASES, e.g. raw4,runtimeGated).
 *
 * `BENCH_CLUSTER=1` (`bench:runtime-redis-cluster`): the same cases on a
 * 3-node Redis Cluster (Redis 7.0, and 8.x when built) started the same way,
 * raw loops on an ioredis `Cluster` client, Redis CPU summed over the nodes;
 * writes results/runtime-redis-cluster.* (no handoff part).
 * BENCH_SHARDS and BENCH_WORKERS (default 16 and 4): the shape, one member
 * owning every shard with that many workers against as many raw loops;
 * another shape writes runtime-redis-<S>x<W>.* (after the -<N>k suffix).
 * BENCH_SERVERS (default `redis7,redis8`): which servers, in that order (the
 * first one measured also warms up Node's JIT; docs/runtime.md, "Where the
 * time goes").
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import {
  type ServerKind,
  ServerMissing,
  startRedis,
  startRedisCluster,
} from "@shardline/redis-store/testing"
import { benchShape, DEFAULT_SHAPE, shapeSuffix } from "./benchShape.js"
import {
  CASES,
  type HandoffSample,
  type RedisRuntimeBenchResults,
  runRedisRuntimeBench,
  runtimeHandoff,
} from "./runtimeRedis.bench.js"

const DEFAULT_MESSAGES = 100_000
const messages = Number(process.env.BENCH_MESSAGES ?? DEFAULT_MESSAGES)
const onCluster = process.env.BENCH_CLUSTER === "1"
const baseName = onCluster ? "runtime-redis-cluster" : "runtime-redis"
const { shards, workers } = benchShape(process.env)
const resultName =
  (messages === DEFAULT_MESSAGES ? baseName : `${baseName}-${Math.round(messages / 1_000)}k`) +
  shapeSuffix({ shards, workers })
const DEFAULT_ROUNDS = 5
const rounds = Number(process.env.BENCH_ROUNDS ?? DEFAULT_ROUNDS)
const shape = { messages, shards, workers, batch: 32 }
const fmt = (n: number) => n.toLocaleString("en-US")
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}
const r2 = (n: number) => Math.round(n * 100) / 100
/**
 * Median of the per-round ratios (each round ran the case and its baseline
 * back to back) and their spread; undefined when BENCH_CASES left one out.
 */
const paired = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  if (a.length === 0 || b.length === 0) return undefined
  const ratios = a.map((x, i) => x / b[i]!).sort((x, y) => x - y)
  return {
    median: r2(ratios[Math.floor(ratios.length / 2)]!),
    min: r2(ratios[0]!),
    max: r2(ratios[ratios.length - 1]!),
  }
}
type Paired = ReturnType<typeof paired>
const showRatio = (p: Paired) => (p === undefined ? "n/a" : `${p.median}x`)
const showSpread = (p: Paired) => (p === undefined ? "" : `${p.min}-${p.max}x`)

const SERVER_KINDS: ReadonlyArray<ServerKind> = ["redis7", "redis8"]
const servers = (process.env.BENCH_SERVERS ?? "redis7,redis8").split(",").map((kind) => {
  const known = SERVER_KINDS.find((k) => k === kind.trim())
  if (known === undefined)
    throw new Error(
      `BENCH_SERVERS: unknown server ${JSON.stringify(kind)} (${SERVER_KINDS.join(", ")})`,
    )
  return known
})
const results: Array<RedisRuntimeBenchResults> = []
const handoffs: Array<{ readonly server: string; readonly samples: Array<HandoffSample> }> = []
const HANDOFF_ROUNDS = onCluster ? 0 : Number(process.env.BENCH_HANDOFF_ROUNDS ?? 2)
const measureHandoffs = async (url: string, server: string) => {
  if (HANDOFF_ROUNDS === 0) return
  const samples: Array<HandoffSample> = []
  for (let i = 0; i < HANDOFF_ROUNDS; i++) samples.push(...(await runtimeHandoff(url)))
  console.log(`  handoffs: ${samples.map((s) => s.revokedToAssigned).join(", ")} ms`)
  handoffs.push({ server, samples })
}
const progress = (name: string, rate: number) => console.log(`  ${name}: ${fmt(rate)} msg/s`)
/** Starts a server (or cluster) of `kind`; a missing Redis 8 build is skipped with a line, not an error. */
const startOrSkip = async <S>(
  kind: ServerKind,
  start: () => Promise<S>,
): Promise<S | undefined> => {
  try {
    return await start()
  } catch (error) {
    if (error instanceof ServerMissing && kind === "redis8") {
      console.log(`skipping Redis 8: ${error.message}`)
      return undefined
    }
    throw error
  }
}

if (process.env.BENCH_REDIS_URL !== undefined) {
  console.log(`on ${process.env.BENCH_REDIS_URL}`)
  results.push(
    await runRedisRuntimeBench(
      process.env.BENCH_REDIS_URL,
      process.env.BENCH_REDIS_URL,
      shape,
      rounds,
      progress,
    ),
  )
  await measureHandoffs(process.env.BENCH_REDIS_URL, process.env.BENCH_REDIS_URL)
} else if (onCluster) {
  for (const kind of servers) {
    const cluster = await startOrSkip(kind, () => startRedisCluster({ kind }))
    if (cluster === undefined) continue
    try {
      const name = `cluster of ${cluster.nodes.length} (Redis ${cluster.version})`
      console.log(`on ${name}`)
      results.push(
        await runRedisRuntimeBench({ nodes: cluster.nodes }, name, shape, rounds, progress),
      )
    } finally {
      await cluster.stop()
    }
  }
} else {
  for (const kind of servers) {
    const server = await startOrSkip(kind, () => startRedis({ kind }))
    if (server === undefined) continue
    try {
      console.log(`on ${kind} ${server.version} (${server.url})`)
      results.push(
        await runRedisRuntimeBench(server.url, `Redis ${server.version}`, shape, rounds, progress),
      )
      await measureHandoffs(server.url, `Redis ${server.version}`)
    } finally {
      await server.stop()
    }
  }
}

const out = {
  command: `${process.env.BENCH_SERVERS ? `BENCH_SERVERS=${process.env.BENCH_SERVERS} ` : ""}${process.env.BENCH_CASES ? `BENCH_CASES=${process.env.BENCH_CASES} ` : ""}${HANDOFF_ROUNDS === 2 || onCluster ? "" : `BENCH_HANDOFF_ROUNDS=${HANDOFF_ROUNDS} `}${rounds === DEFAULT_ROUNDS ? "" : `BENCH_ROUNDS=${rounds} `}${messages === DEFAULT_MESSAGES ? "" : `BENCH_MESSAGES=${messages} `}${shards === DEFAULT_SHAPE.shards ? "" : `BENCH_SHARDS=${shards} `}${workers === DEFAULT_SHAPE.workers ? "" : `BENCH_WORKERS=${workers} `}pnpm --filter @shardline/bench run ${onCluster ? "bench:runtime-redis-cluster" : "bench:runtime-redis"}`,
  date: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  shape,
  rounds,
  servers: results.map((r) => ({
    server: r.server,
    medians: Object.fromEntries(
      Object.entries(r.samples)
        .filter(([, v]) => v.length > 0)
        .map(([k, v]) => [k, median(v)]),
    ),
    serverUsPerMessage: Object.fromEntries(
      Object.entries(r.serverUs)
        .filter(([, v]) => v.length > 0)
        .map(([k, v]) => [k, r2(median(v))]),
    ),
    nodeUsPerMessage: Object.fromEntries(
      Object.entries(r.nodeUs)
        .filter(([, v]) => v.length > 0)
        .map(([k, v]) => [k, r2(median(v))]),
    ),
    serverUsRange: Object.fromEntries(
      Object.entries(r.serverUs)
        .filter(([, v]) => v.length > 0)
        .map(([k, v]) => [k, [r2(Math.min(...v)), r2(Math.max(...v))]]),
    ),
    /** Redis CPU per message of the case over raw's (4 loops), paired by round. */
    serverCpuOverRaw4: {
      runtime: paired(r.serverUs[CASES.runtimeGated]!, r.serverUs[CASES.raw4]!),
      runtimeBatch: paired(r.serverUs[CASES.runtimeBatchGated]!, r.serverUs[CASES.raw4]!),
      port: paired(r.serverUs[CASES.port4]!, r.serverUs[CASES.raw4]!),
    },
    ratios: {
      runtimeOverRaw4: paired(r.samples[CASES.runtimeGated]!, r.samples[CASES.raw4]!),
      runtimeBatchOverRaw4: paired(r.samples[CASES.runtimeBatchGated]!, r.samples[CASES.raw4]!),
      runtimeScriptOverRaw4: paired(r.samples[CASES.runtimeScript]!, r.samples[CASES.raw4]!),
      runtimeOverRaw1: paired(r.samples[CASES.runtimeGated]!, r.samples[CASES.raw1]!),
      portOverRaw4: paired(r.samples[CASES.port4]!, r.samples[CASES.raw4]!),
      portScriptOverRaw4: paired(r.samples[CASES.port4Script]!, r.samples[CASES.raw4]!),
      runtimeOverPort4: paired(r.samples[CASES.runtimeGated]!, r.samples[CASES.port4]!),
      runtimeScriptOverPort4Script: paired(
        r.samples[CASES.runtimeScript]!,
        r.samples[CASES.port4Script]!,
      ),
    },
    samples: Object.fromEntries(Object.entries(r.samples).filter(([, v]) => v.length > 0)),
  })),
  handoffs: handoffs.map((h) => ({
    server: h.server,
    count: h.samples.length,
    revokedToAssignedMs: {
      median: median(h.samples.map((s) => s.revokedToAssigned)),
      max: Math.max(...h.samples.map((s) => s.revokedToAssigned)),
    },
    revokingToAssignedMs: {
      median: median(h.samples.map((s) => s.revokingToAssigned)),
      max: Math.max(...h.samples.map((s) => s.revokingToAssigned)),
    },
    samples: h.samples,
  })),
}
const dir = new URL("../results/", import.meta.url)
mkdirSync(dir, { recursive: true })
writeFileSync(new URL(`${resultName}.json`, dir), `${JSON.stringify(out, null, 2)}\n`)

/** The cases' names say "4 loops" (their keys in the JSON); another shape runs one loop per worker. */
const shown = (name: string) => name.replace("4 loops", `${shape.workers} loops`)
const table = out.servers
  .map((s) => {
    const row = (name: string, ratio?: Paired) =>
      s.medians[name] === undefined
        ? undefined
        : `| ${s.server} | ${shown(name)} | ${fmt(s.medians[name]!)} | ${showRatio(ratio)} | ${showSpread(ratio)} | ${s.serverUsPerMessage[name]!.toFixed(2)} µs (${s.serverUsRange[name]!.join("-")}) | ${s.nodeUsPerMessage[name]!.toFixed(2)} µs |`
    return [
      row(CASES.runtimeGated, s.ratios.runtimeOverRaw4),
      row(CASES.runtimeBatchGated, s.ratios.runtimeBatchOverRaw4),
      row(CASES.runtimeScript, s.ratios.runtimeScriptOverRaw4),
      row(CASES.port4, s.ratios.portOverRaw4),
      row(CASES.port4Script, s.ratios.portScriptOverRaw4),
      row(CASES.raw4),
      row(CASES.raw1),
    ]
      .filter((r) => r !== undefined)
      .join("\n")
  })
  .join("\n")
const where = onCluster
  ? "against the same 3-node Redis Cluster (Redis CPU summed over its nodes; raw loops on one ioredis `Cluster` client)"
  : "against the same server"
const md = `# Member runtime on Redis${onCluster ? " Cluster" : ""}, end to end

Command: \`${out.command}\` (Node ${out.node}, ${out.cpus} cores shared with other work, ${out.date}).
${fmt(messages)} messages over 500 keys, ${shape.shards} shards, ${shape.workers} workers, batches of ${shape.batch};
medians of ${rounds} interleaved rounds; every case and its baselines ran in the same process ${where}.

- runtime: \`start({ redis: { ${onCluster ? "nodes" : "url"} } })\`, one explicit member with \`runtimeMaxConcurrency: ${shape.workers}\` owning
  every shard (embedded coordinator; every read and ack fenced by the shard's owner token), a no-op handler.
  The group settles with every shard paused, the backlog is produced, every shard is resumed: messages/s from the
  resume to the last handled message.
- raw: ${shape.workers} concurrent loops (or 1) on one ioredis connection, each taking the next shard no other loop
  reads and running XREADGROUP COUNT ${shape.batch} + XACK on it, over a backlog of the same entries; no fence.
- ShardStreams alone: the same ${shape.workers} loops through redis-store's \`ShardStreams\` (gated or script fence), each read
  carrying the shard's previous batch's ack, as the runtime's reads do, with no runtime: the data plane's ceiling.

| server | case | messages/s | vs raw, ${shape.workers} loops | spread of the round ratios | Redis CPU per message (range) | Node CPU per message |
|---|---|---:|---:|---:|---:|---:|
${table}

Ratios are medians of the per-round ratios (the case and the baseline ran back to back in each round).
Redis CPU per message: the server's user + sys CPU time (INFO cpu) over the consume phase, per message, median of the rounds:
what one Redis core can serve, whatever the number of consumer processes. Node CPU per message: this process's user + sys
CPU time over the same phase (\`process.cpuUsage\`), median of the rounds; the runtime's includes its coordinator and heartbeats.
${out.servers.map((s) => `${s.server}: Redis CPU per message over raw's (paired) runtime ${showRatio(s.serverCpuOverRaw4.runtime)} (${showSpread(s.serverCpuOverRaw4.runtime)}), eachBatch ${showRatio(s.serverCpuOverRaw4.runtimeBatch)} (${showSpread(s.serverCpuOverRaw4.runtimeBatch)}), ShardStreams alone ${showRatio(s.serverCpuOverRaw4.port)}; runtime / raw 1 loop ${showRatio(s.ratios.runtimeOverRaw1)}; runtime / ShardStreams alone ${showRatio(s.ratios.runtimeOverPort4)} (gated), ${showRatio(s.ratios.runtimeScriptOverPort4Script)} (script).`).join(" ")}
Samples (messages/s): ${out.servers
  .map(
    (s) =>
      `${s.server}: ${Object.entries(s.samples)
        .map(([k, v]) => `${k} ${v.map(fmt).join(", ")}`)
        .join("; ")}`,
  )
  .join(". ")}.
`
const handoffMd = `
## Handoff through the runtime (3 s heartbeat interval)

Member a owns all 16 shards; member b joins; for each of the 8 shards that move
(${HANDOFF_ROUNDS} rounds), from the runtimes' events: a's \`revoked\` (drained, about to be
reported) and a's \`revoking\` (told to revoke) to b's \`assigned\` (its read loop starts).

| server | handoffs | revoked -> assigned, median / max | revoking -> assigned, median / max |
|---|---:|---:|---:|
${out.handoffs
  .map(
    (h) =>
      `| ${h.server} | ${h.count} | ${h.revokedToAssignedMs.median} / ${h.revokedToAssignedMs.max} ms | ${h.revokingToAssignedMs.median} / ${h.revokingToAssignedMs.max} ms |`,
  )
  .join("\n")}
`
const report = handoffs.length === 0 ? md : md + handoffMd
writeFileSync(new URL(`${resultName}.md`, dir), report)
console.log(report)
