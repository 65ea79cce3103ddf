/**
 * Redis port benchmarks, each against a baseline measured on the same server
 * in the same run (docs/redis.md, "Benchmarks"):
 *
 * 1. fenced read + ack (our Lua scripts) vs a raw XREADGROUP + XACK loop,
 *    same batch size, same connection kind;
 * 2. heartbeat round trips through RedisCoordinatorTransport vs a raw ioredis
 *    LPUSH / BLMPOP / RPUSH / BLPOP round trip over the same kind of keys;
 * 3. notice latency (notify -> the member's stream);
 * 4. idle load: commands/s per idle shard (fenced read + waitForEntries loop)
 *    and per idle served group.
 *
 *   pnpm --filter @shardline/redis-store bench            # Redis 7.0 and, if built, 8.x
 *   SHARDLINE_BENCH_QUICK=1 pnpm --filter @shardline/redis-store bench
 */
import { performance } from "node:perf_hooks"
import type { HeartbeatResponse } from "@shardline/core"
import { Effect, Exit, Fiber, Scope, Stream } from "effect"
import { Redis } from "ioredis"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisCoordinatorTransport from "../src/RedisCoordinatorTransport.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { type RedisServer, type ServerKind, ServerMissing, startRedis } from "../src/testing.js"

const QUICK = process.env.SHARDLINE_BENCH_QUICK === "1"
const ENTRIES = QUICK ? 20_000 : 100_000
const BATCH = 100
const ROUNDS = QUICK ? 3 : 5
const HB_SECONDS = QUICK ? 1 : 3
const IDLE_SHARDS = 50
const IDLE_SECONDS = QUICK ? 5 : 15

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}
const fmt = (n: number) => Math.round(n).toLocaleString("en-US")

const record = (flat: ReadonlyArray<string>) => {
  const out: Record<string, string> = {}
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!
  return out
}

const run = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>, scope: Scope.Closeable) =>
  Effect.runPromise(Scope.provide(effect, scope))

const fill = async (raw: Redis, key: string, n: number) => {
  for (let i = 0; i < n; i += 1_000) {
    const p = raw.pipeline()
    for (let j = i; j < Math.min(n, i + 1_000); j++)
      p.xadd(key, "*", "k", `key-${j}`, "v", "x".repeat(64))
    await p.exec()
  }
}

/**
 * Server CPU time (commandstats usec) since the last RESETSTAT. Commands a
 * script calls are also listed on their own and included in its EVALSHA
 * time, so with scripts only EVALSHA/EVAL count.
 */
const serverUsec = async (raw: Redis) => {
  const stats = [
    ...(await raw.info("commandstats")).matchAll(/^cmdstat_(\w+):calls=\d+,usec=(\d+)/gm),
  ].map(([, name, usec]) => ({ name: name!, usec: Number(usec) }))
  const scripts = stats.filter((c) => c.name === "evalsha" || c.name === "eval")
  const counted =
    scripts.length > 0 ? scripts : stats.filter((c) => c.name !== "info" && c.name !== "config")
  return counted.reduce((sum, c) => sum + c.usec, 0)
}

/** entries/s of our fenced read + ack vs raw XREADGROUP + XACK, interleaved rounds. */
const readAck = async (
  server: RedisServer,
  connection: RedisConnection.RedisConnectionShape,
  mode: "ack" | "xackdel",
) => {
  const raw = new Redis(server.port, server.host)
  const streams = RedisShardStreams.makeWith(connection)
  const ours: Array<number> = []
  const base: Array<number> = []
  const oursServer: Array<number> = []
  const baseServer: Array<number> = []
  for (let round = 0; round < ROUNDS; round++) {
    const stream = `bench-${mode}-${round}`
    const oursKey = `{${stream}:0}`
    const rawKey = `{${stream}:1}`
    await fill(raw, oursKey, ENTRIES)
    await fill(raw, rawKey, ENTRIES)
    await raw.xgroup("CREATE", rawKey, "g", "0")
    await Effect.runPromise(streams.setOwnerToken({ stream, shard: 0, group: "g", token: 1 }))

    await raw.config("RESETSTAT")
    let t = performance.now()
    // one fiber for the whole loop, as a read loop of the member runtime runs
    await Effect.runPromise(
      Effect.gen(function* () {
        for (;;) {
          const batch = yield* streams.read({
            stream,
            shard: 0,
            group: "g",
            consumer: "c",
            token: 1,
            count: BATCH,
          })
          if (batch.length === 0) return
          yield* streams.ack({
            stream,
            shard: 0,
            group: "g",
            token: 1,
            ids: batch.map((m) => m.id),
            mode,
          })
        }
      }),
    )
    ours.push(ENTRIES / ((performance.now() - t) / 1_000))
    oursServer.push(await serverUsec(raw))

    await raw.config("RESETSTAT")
    t = performance.now()
    for (;;) {
      const reply = (await raw.xreadgroup(
        "GROUP",
        "g",
        "c",
        "COUNT",
        BATCH,
        "STREAMS",
        rawKey,
        ">",
      )) as Array<[string, Array<[string, Array<string>]>]> | null
      // the same work a consumer does with our batches: records of fields
      const batch = (reply?.[0]?.[1] ?? []).map(([id, flat]) => ({ id, fields: record(flat) }))
      if (batch.length === 0) break
      const ids = batch.map((m) => m.id)
      if (mode === "ack") await raw.xack(rawKey, "g", ...ids)
      else
        await raw
          .multi()
          .xack(rawKey, "g", ...ids)
          .xdel(rawKey, ...ids)
          .exec()
    }
    base.push(ENTRIES / ((performance.now() - t) / 1_000))
    baseServer.push(await serverUsec(raw))
    await raw.del(oursKey, rawKey, `${oursKey}:owner:g`)
  }
  raw.disconnect()
  return {
    ours: median(ours),
    base: median(base),
    // server time per 100 entries, in microseconds
    oursServer: (median(oursServer) / ENTRIES) * 100,
    baseServer: (median(baseServer) / ENTRIES) * 100,
  }
}

const response: HeartbeatResponse = {
  errorCode: "NONE",
  memberId: "m0",
  memberEpoch: 1,
  assignmentEpoch: 1,
  assigned: [{ shard: 0, token: 1 }],
  pending: [],
  heartbeatIntervalMs: 1_000,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
}

/** heartbeat round trips/s through the transport vs raw ioredis list round trips. */
const heartbeats = async (
  server: RedisServer,
  connection: RedisConnection.RedisConnectionShape,
  members: number,
) => {
  const scope = Scope.makeUnsafe()
  const transport = RedisCoordinatorTransport.makeWith(connection)
  const key = { stream: `hb-${members}`, group: "g" }
  await run(
    transport.serve(key, () => Effect.succeed(response)),
    scope,
  )
  const request = {
    ...key,
    memberId: "m0",
    incarnation: 1,
    seq: 1,
    memberEpoch: 1,
    assignmentEpoch: 1,
    metadataVersion: 0,
    ownedShards: [0],
    revokingShards: [],
  }
  const loop = (deadline: number) =>
    Effect.gen(function* () {
      let n = 0
      while (performance.now() < deadline) {
        yield* transport.heartbeat(request)
        n++
      }
      return n
    })
  // warm up, then measure
  await Effect.runPromise(loop(performance.now() + 300))
  let deadline = performance.now() + HB_SECONDS * 1_000
  const counts = await Effect.runPromise(
    Effect.forEach(Array.from({ length: members }), () => loop(deadline), {
      concurrency: "unbounded",
    }),
  )
  const ours = counts.reduce((a, b) => a + b, 0) / HB_SECONDS
  await Effect.runPromise(Scope.close(scope, Exit.void))

  // raw: LPUSH a request, the server BLMPOPs it and RPUSHes the reply, the member BLPOPs it
  const tag = `{shardline:raw-${members}:g}`
  const command = new Redis(server.port, server.host)
  const serverBlock = new Redis(server.port, server.host)
  let serving = true
  const serve = (async () => {
    while (serving) {
      const popped = (await serverBlock.call(
        "BLMPOP",
        0.2,
        1,
        `${tag}:req`,
        "RIGHT",
        "COUNT",
        64,
      )) as [string, Array<string>] | null
      for (const item of popped?.[1] ?? []) {
        const { id } = JSON.parse(item) as { id: string }
        void command
          .multi()
          .rpush(`${tag}:reply:${id}`, JSON.stringify(response))
          .pexpire(`${tag}:reply:${id}`, 30_000)
          .exec()
      }
    }
  })()
  const waiters = Array.from({ length: members }, () => new Redis(server.port, server.host))
  let seq = 0
  const rawLoop = async (waiter: Redis, until: number) => {
    let n = 0
    while (performance.now() < until) {
      const id = `${process.pid}-${seq++}`
      await command.lpush(`${tag}:req`, JSON.stringify({ id, request }))
      await waiter.blpop(`${tag}:reply:${id}`, 5)
      n++
    }
    return n
  }
  await Promise.all(waiters.map((w) => rawLoop(w, performance.now() + 300)))
  deadline = performance.now() + HB_SECONDS * 1_000
  const rawCounts = await Promise.all(waiters.map((w) => rawLoop(w, deadline)))
  serving = false
  await serve
  for (const c of [command, serverBlock, ...waiters]) c.disconnect()
  return { ours, base: rawCounts.reduce((a, b) => a + b, 0) / HB_SECONDS }
}

/** notify -> a subscribed member's stream, in milliseconds (median, p99). */
const noticeLatency = async (connection: RedisConnection.RedisConnectionShape) => {
  const scope = Scope.makeUnsafe()
  const transport = RedisCoordinatorTransport.makeWith(connection)
  const key = { stream: "notice", group: "g" }
  const stream = await run(transport.notices(key, "m0"), scope)
  const samples: Array<number> = []
  for (let i = 0; i < 300; i++) {
    const wait = Effect.runFork(Stream.runCollect(Stream.take(stream, 1)))
    const t = performance.now()
    await Effect.runPromise(transport.notify(key, "m0"))
    await Effect.runPromise(Fiber.join(wait))
    samples.push(performance.now() - t)
  }
  await Effect.runPromise(Scope.close(scope, Exit.void))
  const s = samples.sort((a, b) => a - b)
  return { median: s[Math.floor(s.length / 2)]!, p99: s[Math.floor(s.length * 0.99)]! }
}

const commandsProcessed = async (raw: Redis) =>
  Number(/total_commands_processed:(\d+)/.exec(await raw.info("stats"))?.[1] ?? 0)

/** Commands/s per idle shard (read + waitForEntries loops) and per idle served group. */
const idleLoad = async (server: RedisServer, connection: RedisConnection.RedisConnectionShape) => {
  const raw = new Redis(server.port, server.host)
  const streams = RedisShardStreams.makeWith(connection)
  const shardLoop = (shard: number) =>
    Effect.forever(
      Effect.gen(function* () {
        const batch = yield* streams.read({
          stream: "idle",
          shard,
          group: "g",
          consumer: "c",
          token: 0,
          count: 100,
        })
        if (batch.length === 0)
          yield* streams.waitForEntries({ stream: "idle", shard, group: "g", timeoutMs: 5_000 })
      }),
    )
  const fibers = Array.from({ length: IDLE_SHARDS }, (_, shard) => Effect.runFork(shardLoop(shard)))
  await new Promise((r) => setTimeout(r, 1_000)) // settle: everyone is blocked in XREAD
  let before = await commandsProcessed(raw)
  await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1_000))
  const perShard = ((await commandsProcessed(raw)) - before - 1) / IDLE_SECONDS / IDLE_SHARDS
  for (const f of fibers) await Effect.runPromise(Fiber.interrupt(f))

  const scope = Scope.makeUnsafe()
  const transport = RedisCoordinatorTransport.makeWith(connection)
  await run(
    transport.serve({ stream: "idle", group: "g" }, () => Effect.succeed(response)),
    scope,
  )
  await new Promise((r) => setTimeout(r, 1_000))
  before = await commandsProcessed(raw)
  await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1_000))
  const perGroup = ((await commandsProcessed(raw)) - before - 1) / IDLE_SECONDS
  await Effect.runPromise(Scope.close(scope, Exit.void))
  raw.disconnect()
  return { perShard, perGroup }
}

const benchServer = async (kind: ServerKind) => {
  let server: RedisServer
  try {
    server = await startRedis({ kind })
  } catch (error) {
    if (error instanceof ServerMissing)
      return console.log(`\n## ${kind}: skipped (${error.message})`)
    throw error
  }
  const scope = Scope.makeUnsafe()
  try {
    const connection = await run(
      RedisConnection.make({ host: server.host, port: server.port }),
      scope,
    )
    const f = connection.features
    console.log(
      `\n## ${kind} ${server.version} (XACKDEL: ${f.xackdel}, XREADGROUP CLAIM: ${f.readClaim})`,
    )
    console.log(`entries ${fmt(ENTRIES)} per round, batch ${BATCH}, ${ROUNDS} rounds (median)`)
    for (const mode of ["ack", "xackdel"] as const) {
      const r = await readAck(server, connection, mode)
      const baseline = mode === "ack" ? "XREADGROUP + XACK" : "XREADGROUP + MULTI(XACK, XDEL)"
      console.log(
        `fenced read + ${mode}: ${fmt(r.ours)} entries/s vs raw ${baseline} ${fmt(r.base)} entries/s -> ${(r.ours / r.base).toFixed(2)}x` +
          ` (server time per 100 entries: ${fmt(r.oursServer)} vs ${fmt(r.baseServer)} us)`,
      )
    }
    if (f.xackdel) {
      const lua = await run(
        RedisConnection.make({
          host: server.host,
          port: server.port,
          features: { xackdel: false },
        }),
        scope,
      )
      const native = await readAck(server, connection, "xackdel")
      const fallback = await readAck(server, lua, "xackdel")
      console.log(
        `fenced read + xackdel, native XACKDEL vs Lua XACK+XDEL: ${fmt(native.ours)} vs ${fmt(fallback.ours)} entries/s -> ${(native.ours / fallback.ours).toFixed(2)}x`,
      )
    }
    for (const members of [1, 16]) {
      const r = await heartbeats(server, connection, members)
      console.log(
        `heartbeats, ${members} member(s): ${fmt(r.ours)} round trips/s vs raw ioredis list round trip ${fmt(r.base)}/s -> ${(r.ours / r.base).toFixed(2)}x`,
      )
    }
    const n = await noticeLatency(connection)
    console.log(`notice latency: median ${n.median.toFixed(2)} ms, p99 ${n.p99.toFixed(2)} ms`)
    const idle = await idleLoad(server, connection)
    console.log(
      `idle load: ${idle.perShard.toFixed(2)} commands/s per idle shard (${IDLE_SHARDS} shards, waitForEntries 5 s); ${idle.perGroup.toFixed(2)} commands/s per idle served group`,
    )
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await server.stop()
  }
}

const main = async () => {
  console.log(`# redis-store bench (node ${process.version}, ${QUICK ? "quick" : "full"})`)
  for (const kind of ["redis7", "redis8"] as const) await benchServer(kind)
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  },
)
