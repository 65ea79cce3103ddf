/**
 * Redis port benchmarks, each against a baseline measured on the same server
 * in the same run (docs/redis.md, "Benchmarks"):
 *
 * 1. fenced read + ack, batch 1 / 10 / 100, gated fence (the default: a
 *    gate script + XACK + XREADGROUP in one MULTI), optimistic fence (WATCH +
 *    GET, MULTI/XREADGROUP/EXEC) and script fence (one Lua script), each with
 *    a separate ack and with the ack riding on the next read, vs a raw
 *    XREADGROUP + XACK loop with the same batch size (and a pipelined one);
 * 2. heartbeats/s of 2,000 members in steady state through the Redis
 *    transport, a CoordinatorHost and the Redis Store, vs raw ioredis
 *    LPUSH / BLMPOP / RPUSH / BLPOP round trips over the same kind of keys,
 *    64 and 256 in flight;
 * 3. commit cost of a one-member change at 100 and at 10,000 members;
 * 4. handoff: a revoke accepted -> the new owner's first read (3 s
 *    heartbeat interval; the notice path);
 * 5. notice latency and idle load.
 *
 *   pnpm --filter @shardline/redis-store bench            # Redis 7.0 and, if built, 8.x
 *   SHARDLINE_BENCH_QUICK=1 pnpm --filter @shardline/redis-store bench
 *   SHARDLINE_BENCH_ONLY=b SHARDLINE_BENCH_PROFILE=/tmp/prof ...  # CPU profiles of (b)'s steady phases
 *
 * Results: packages/bench/results/redis.{md,json} and bench/results/latest.{txt,json}.
 */
import { writeFileSync } from "node:fs"
import inspector from "node:inspector"
import os from "node:os"
import path from "node:path"
import { performance } from "node:perf_hooks"
import {
  Coordinator,
  type CoordinatorRecord,
  CoordinatorTransport,
  type HeartbeatResponse,
  MemberMachine,
  makeCoordinatorHost,
  makeGroupConfig,
  Store,
} from "@shardline/core"
import { Context, Effect, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import { Redis } from "ioredis"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisCoordinatorTransport from "../src/RedisCoordinatorTransport.js"
import * as RedisPorts from "../src/RedisPorts.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import * as RedisStore from "../src/RedisStore.js"
import { type RedisServer, type ServerKind, ServerMissing, startRedis } from "../src/testing.js"
import { makeGroup, makeLog, runUntil } from "../test/support/driver.js"

const QUICK = process.env.SHARDLINE_BENCH_QUICK === "1"
/** Rounds of (a), and windows per side of (b). */
const ROUNDS = QUICK ? 3 : 5
const HB_SECONDS = QUICK ? 2 : 4
const IDLE_SHARDS = 50
const IDLE_SECONDS = QUICK ? 5 : 10
/** Entries per round for a batch size (fewer for small batches: one round trip each). */
const entriesFor = (batch: number) =>
  Math.round((QUICK ? 0.2 : 1) * (batch === 1 ? 10_000 : batch === 10 ? 40_000 : 100_000))

/** `SHARDLINE_BENCH_ONLY=a,b`: run only those parts (a read+ack, b heartbeats, c commits, d handoff, e notices/idle). */
const ONLY = process.env.SHARDLINE_BENCH_ONLY?.split(",")
const part = (name: string) => ONLY === undefined || ONLY.includes(name)

const results: Record<string, unknown> = {}
const lines: Array<string> = []
const say = (line: string) => {
  lines.push(line)
  console.log(line)
}

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

/** The server's CPU time (INFO cpu: user + sys), in microseconds. */
const serverCpu = async (raw: Redis) => {
  const info = await raw.info("cpu")
  const field = (name: string) => Number(new RegExp(`^${name}:([0-9.]+)`, "m").exec(info)?.[1] ?? 0)
  return (field("used_cpu_user") + field("used_cpu_sys")) * 1e6
}

/** How a variant of ours reads and acks: its fence, and whether the ack rides on the next read. */
interface ReadAckVariant {
  readonly read: "gated" | "optimistic" | "script"
  /** true: the batch is acked by the next read (`ReadOptions.ack`), one round trip per batch. */
  readonly fused: boolean
}

const variantName = (v: ReadAckVariant) =>
  `${v.read}, ${v.fused ? "ack with the next read" : "separate ack"}`

/**
 * entries/s of our fenced read + ack (each variant) vs two raw baselines with
 * the same batch size, interleaved in every round: XREADGROUP then XACK (two
 * round trips per batch, the baseline) and XACK of the previous batch
 * + XREADGROUP in one pipeline (one round trip, what fused reads do).
 */
const readAck = async (
  server: RedisServer,
  connection: RedisConnection.RedisConnectionShape,
  mode: "ack" | "xackdel",
  BATCH: number,
  variants: ReadonlyArray<ReadAckVariant>,
) => {
  const ENTRIES = entriesFor(BATCH)
  const raw = new Redis(server.port, server.host)
  const oursRuns = variants.map((v) => ({
    variant: v,
    streams: RedisShardStreams.makeWith(connection, { read: v.read }),
    rates: [] as Array<number>,
    cpu: [] as Array<number>,
  }))
  const base = { rates: [] as Array<number>, cpu: [] as Array<number> }
  const piped = { rates: [] as Array<number>, cpu: [] as Array<number> }
  const ackRaw = (p: ReturnType<Redis["pipeline"]>, key: string, ids: ReadonlyArray<string>) =>
    mode === "ack" ? p.xack(key, "g", ...ids) : p.xack(key, "g", ...ids).xdel(key, ...ids)
  const timed = async (
    into: { rates: Array<number>; cpu: Array<number> },
    body: () => Promise<void>,
  ) => {
    const cpu = await serverCpu(raw)
    const t = performance.now()
    await body()
    into.rates.push(ENTRIES / ((performance.now() - t) / 1_000))
    into.cpu.push((await serverCpu(raw)) - cpu)
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, ours] of oursRuns.entries()) {
      const stream = `bench-${mode}-${BATCH}-${round}-${i}`
      const key = `{${stream}:0}`
      await fill(raw, key, ENTRIES)
      await Effect.runPromise(
        ours.streams.setOwnerToken({ stream, shard: 0, group: "g", token: 1 }),
      )
      const address = { stream, shard: 0, group: "g", token: 1 }
      // one fiber for the whole loop, as a read loop of the member runtime runs
      await timed(ours, () =>
        Effect.runPromise(
          Effect.gen(function* () {
            let previous: ReadonlyArray<string> = []
            for (;;) {
              const batch = yield* ours.streams.read({
                ...address,
                consumer: "c",
                count: BATCH,
                ...(ours.variant.fused && previous.length > 0
                  ? { ack: { ids: previous, mode } }
                  : {}),
              })
              if (batch.length === 0) return
              const ids = batch.map((m) => m.id)
              if (ours.variant.fused) previous = ids
              else yield* ours.streams.ack({ ...address, ids, mode })
            }
          }),
        ),
      )
      await raw.del(key, `${key}:owner:g`)
    }
    const rawKey = `{bench-${mode}-${BATCH}-${round}-raw:0}`
    await fill(raw, rawKey, ENTRIES)
    await raw.xgroup("CREATE", rawKey, "g", "0")
    await timed(base, async () => {
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
        else await ackRaw(raw.multi(), rawKey, ids).exec()
      }
    })
    const pipedKey = `{bench-${mode}-${BATCH}-${round}-piped:0}`
    await fill(raw, pipedKey, ENTRIES)
    await raw.xgroup("CREATE", pipedKey, "g", "0")
    await timed(piped, async () => {
      let previous: Array<string> = []
      for (;;) {
        const p = raw.pipeline()
        if (previous.length > 0) ackRaw(p, pipedKey, previous)
        p.xreadgroup("GROUP", "g", "c", "COUNT", BATCH, "STREAMS", pipedKey, ">")
        const res = await p.exec()
        const reply = res?.[res.length - 1]?.[1] as Array<
          [string, Array<[string, Array<string>]>]
        > | null
        const batch = (reply?.[0]?.[1] ?? []).map(([id, flat]) => ({ id, fields: record(flat) }))
        if (batch.length === 0) break
        previous = batch.map((m) => m.id)
      }
    })
    await raw.del(rawKey, pipedKey)
  }
  raw.disconnect()
  // server time per entry, in microseconds
  const perEntry = (cpu: ReadonlyArray<number>) => median(cpu) / ENTRIES
  return {
    ours: oursRuns.map((o) => ({
      variant: o.variant,
      rate: median(o.rates),
      serverUs: perEntry(o.cpu),
    })),
    base: { rate: median(base.rates), serverUs: perEntry(base.cpu) },
    piped: { rate: median(piped.rates), serverUs: perEntry(piped.cpu) },
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

/**
 * Steady heartbeats of `members` members through the Redis transport, a
 * CoordinatorHost and the Redis Store: the members (core's MemberMachine)
 * join and settle first, then `inFlight` fibers heartbeat for them in
 * turn, each member at most once in flight.
 */
const CONCURRENCY = 64
const heartbeats = async (
  server: RedisServer,
  members: number,
  autoPipelining = false,
  inFlight = CONCURRENCY,
) => {
  const scope = Scope.makeUnsafe()
  const options = {
    host: server.host,
    port: server.port,
    ...(autoPipelining ? { redis: { enableAutoPipelining: true } } : {}),
  }
  const ports = await run(
    Layer.build(
      RedisPorts.layer({
        ...options,
        transport: { timeoutMs: 20_000, popBatch: 128, maxInFlight: 128 },
      }),
    ),
    scope,
  )
  const transport = Context.get(ports, CoordinatorTransport.CoordinatorTransport)
  const key = { stream: `hb-${members}-${inFlight}${autoPipelining ? "-piped" : ""}`, group: "g" }
  const config = {
    groupId: key.group,
    stream: key.stream,
    shardCount: 1_024,
    sessionTimeoutMs: 600_000,
    rebalanceTimeoutMs: 600_000,
    heartbeatIntervalMs: 60_000,
  }
  const host = await run(
    Effect.provide(makeCoordinatorHost({ config, holder: "bench" }), ports),
    scope,
  )
  await run(transport.serve(key, host.heartbeat), scope)
  const machines = Array.from({ length: members }, (_, i) =>
    MemberMachine.make(
      {
        group: key.group,
        stream: key.stream,
        memberId: `m${i}`,
        incarnation: 1,
        memberInfo: { consumerName: `m${i}`, host: "127.0.0.1" },
        heartbeatIntervalMs: 60_000,
      },
      Date.now(),
    ),
  )
  /** One heartbeat of a member; its shards start and drain at once. */
  const beat = (m: MemberMachine.MemberState) =>
    Effect.gen(function* () {
      const { seq, request } = MemberMachine.nextRequest(m, Date.now())
      const response = yield* transport.heartbeat(request)
      const pending = [
        ...MemberMachine.step(m, { _tag: "ResponseReceived", seq, response, now: Date.now() }),
      ]
      while (pending.length > 0) {
        const c = pending.shift()!
        if (c._tag === "StartShard")
          pending.push(...MemberMachine.step(m, { _tag: "ShardStarted", shard: c.shard }))
        if (c._tag === "StopShard")
          pending.push(...MemberMachine.step(m, { _tag: "ShardDrained", shard: c.shard }))
      }
    })
  const all = (effect: (m: MemberMachine.MemberState) => Effect.Effect<void, unknown>) =>
    Effect.forEach(machines, effect, { concurrency: inFlight, discard: true })
  const joinStart = performance.now()
  await Effect.runPromise(all(beat))
  // settle: rounds of heartbeats until the coordinator has nothing in flight
  for (let round = 0; round < 20; round++) {
    await Effect.runPromise(all(beat))
    const mon = Option.getOrThrow(await Effect.runPromise(host.monitor))
    if (!mon.rebalanceInProgress && mon.unownedShards === 0) break
  }
  const settleMs = performance.now() - joinStart
  const monitor = Option.getOrThrow(await Effect.runPromise(host.monitor))
  const revisionBefore = monitor.storeRevision
  // measure: every fiber heartbeats its own members in turn until the deadline
  const perFiber = Math.ceil(members / inFlight)
  const slices = Array.from({ length: inFlight }, (_, f) =>
    machines.slice(f * perFiber, (f + 1) * perFiber),
  )
  const measureOurs = async (ms: number) => {
    const deadline = performance.now() + ms
    const counts = await Effect.runPromise(
      Effect.forEach(
        slices,
        (mine) =>
          Effect.gen(function* () {
            let n = 0
            for (let i = 0; performance.now() < deadline && mine.length > 0; i++) {
              yield* beat(mine[i % mine.length]!)
              n++
            }
            return n
          }),
        { concurrency: "unbounded" },
      ),
    )
    return counts.reduce((a, b) => a + b, 0)
  }
  // ours and raw take turns in short windows, so load from elsewhere on this
  // shared machine lands on both alike
  const raw = autoPipelining ? undefined : await rawRoundTrips(server, members, inFlight)
  const window = (HB_SECONDS * 1_000) / ROUNDS
  const profiler = await startProfile(`hb-${inFlight}${autoPipelining ? "-piped" : ""}`)
  let oursCount = 0
  let rawCount = 0
  for (let round = 0; round < ROUNDS; round++) {
    oursCount += await measureOurs(window)
    if (raw !== undefined) rawCount += await raw.measure(window)
  }
  await profiler()
  const ours = oursCount / HB_SECONDS
  const revisionAfter = Option.getOrThrow(await Effect.runPromise(host.monitor)).storeRevision
  await raw?.close()
  await Effect.runPromise(Scope.close(scope, Exit.void))
  return {
    ours,
    base: raw === undefined ? Number.NaN : rawCount / HB_SECONDS,
    settleMs,
    members: monitor.memberCount,
    shards: monitor.shardCount,
    commitsDuringSteady: revisionAfter - revisionBefore,
  }
}

/** `SHARDLINE_BENCH_PROFILE=dir`: a CPU profile of each steady phase of (b) (only that window). */
const startProfile = async (name: string): Promise<() => Promise<void>> => {
  const dir = process.env.SHARDLINE_BENCH_PROFILE
  if (dir === undefined) return async () => {}
  const session = new inspector.Session()
  session.connect()
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
    )
  await post("Profiler.enable")
  await post("Profiler.start")
  return async () => {
    const { profile } = (await post("Profiler.stop")) as { profile: unknown }
    writeFileSync(path.join(dir, `${name}-${Date.now()}.cpuprofile`), JSON.stringify(profile))
    session.disconnect()
  }
}

/**
 * Raw ioredis request/response round trips with the same concurrency: set
 * up (and warmed) once, then `measure(ms)` counts the round trips of a window.
 */
const rawRoundTrips = async (server: RedisServer, members: number, inFlight: number) => {
  const request = { stream: "raw", group: "g", memberId: "m0", memberEpoch: 1, ownedShards: [0] }
  const response = {
    errorCode: "NONE",
    memberId: "m0",
    memberEpoch: 1,
    assigned: [{ shard: 0, token: 1 }],
  }
  // raw: LPUSH a request, the server BLMPOPs it and RPUSHes the reply, the member BLPOPs it
  const tag = `{shardline:raw-${members}-${inFlight}:g}`
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
  const waiters = Array.from(
    { length: Math.min(members, inFlight) },
    () => new Redis(server.port, server.host),
  )
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
  const measure = async (ms: number) => {
    const until = performance.now() + ms
    const counts = await Promise.all(waiters.map((w) => rawLoop(w, until)))
    return counts.reduce((a, b) => a + b, 0)
  }
  await measure(300)
  return {
    measure,
    close: async () => {
      serving = false
      await serve
      for (const c of [command, serverBlock, ...waiters]) c.disconnect()
    },
  }
}

/**
 * Commit cost of a one-member change (one MemberUpserted + its audit event)
 * in a group of `members` members, through the Redis Store: the snapshot
 * holds every member (compacted first); commits append one batch each.
 * Compaction (every 64 batches by default) is measured on its own.
 */
const commitCost = async (server: RedisServer, members: number) => {
  const scope = Scope.makeUnsafe()
  const connection = await run(
    RedisConnection.make({ host: server.host, port: server.port }),
    scope,
  )
  const backend = RedisStore.makeEncodedWith(connection)
  const setup = Store.makeEncoded(backend, { compactEvery: 1 })
  const store = Store.makeEncoded(backend, { compactEvery: 1_000_000 })
  const key = { stream: `commit-${members}`, group: "g" }
  const config = makeGroupConfig({
    groupId: key.group,
    stream: key.stream,
    shardCount: 1_024,
    sessionTimeoutMs: 30_000,
    rebalanceTimeoutMs: 30_000,
    heartbeatIntervalMs: 3_000,
  })
  const member = (i: number, epoch: number): CoordinatorRecord => ({
    _tag: "MemberUpserted",
    member: {
      memberId: `member-${i}`,
      memberEpoch: epoch,
      incarnation: 1,
      joinSeq: 1,
      state: "STABLE",
      weight: 1,
      memberInfo: { consumerName: `member-${i}`, host: "10.0.0.1" },
    },
  })
  const change = (i: number, epoch: number): Array<CoordinatorRecord> => [
    member(i, epoch),
    {
      _tag: "Audit",
      event: {
        at: Date.now(),
        kind: "MemberRejoined",
        memberId: `member-${i}`,
        reason: "bench",
        before: { groupEpoch: 1, assignmentEpoch: 1 },
        after: { groupEpoch: 1, assignmentEpoch: 1 },
      },
    },
  ]
  let revision = await Effect.runPromise(
    setup.commit(key, 0, Coordinator.createGroup(config, Date.now())),
  )
  revision = await Effect.runPromise(
    setup.commit(
      key,
      revision,
      Array.from({ length: members }, (_, i) => member(i, 1)),
    ),
  )
  const snapshotBytes = Number(
    await connection.client.strlen(`{shardline:${key.stream}:g}:store:snapshot`),
  )
  const samples: Array<number> = []
  const COMMITS = QUICK ? 200 : 1_000
  for (let c = 0; c < COMMITS; c++) {
    const t = performance.now()
    revision = await Effect.runPromise(store.commit(key, revision, change(c % members, 2 + c)))
    samples.push((performance.now() - t) * 1_000)
  }
  // compaction: load (decode + replay) + one SET of the snapshot
  const compactions: Array<number> = []
  for (let c = 0; c < 5; c++) {
    const t = performance.now()
    const loaded = Option.getOrThrow(await Effect.runPromise(store.load(key)))
    await Effect.runPromise(
      backend.replaceSnapshot(key, loaded.storeRevision, JSON.stringify(loaded)),
    )
    compactions.push((performance.now() - t) * 1_000)
    revision = await Effect.runPromise(store.commit(key, revision, change(c, 5_000 + c)))
  }
  await Effect.runPromise(Scope.close(scope, Exit.void))
  const sorted = [...samples].sort((a, b) => a - b)
  return {
    members,
    snapshotBytes,
    p50: sorted[Math.floor(sorted.length / 2)]!,
    p99: sorted[Math.floor(sorted.length * 0.99)]!,
    mean: samples.reduce((a, b) => a + b, 0) / samples.length,
    compaction: median(compactions),
  }
}

/**
 * Handoff latency with a 3 s heartbeat interval: member a owns both shards,
 * b joins, shard 1 is revoked from a; from the coordinator accepting a's
 * REVOKED (the RevokeAccepted audit event) to b's read loop starting on the
 * shard (its first claimPending runs in the same driver round), through the
 * notice path (b is told to heartbeat now, not at its next 3 s heartbeat).
 */
const handoff = async (server: RedisServer, repeats: number) => {
  const samples: Array<number> = []
  for (let r = 0; r < repeats; r++) {
    const scope = Scope.makeUnsafe()
    const ports = await run(
      Layer.build(RedisPorts.layer({ host: server.host, port: server.port })),
      scope,
    )
    const connection = Context.get(ports, RedisConnection.RedisConnection)
    const log = makeLog()
    const sample = await run(
      Effect.gen(function* () {
        const group = yield* makeGroup(ports, log, {
          stream: `handoff-${r}`,
          group: "g",
          shardCount: 2,
          heartbeatIntervalMs: 3_000,
          sessionTimeoutMs: 30_000,
          rebalanceTimeoutMs: 30_000,
        })
        yield* group.startHost("coord")
        yield* group.addMember("a")
        yield* runUntil([group], "a owns both", group.settled, { tickMs: 1, maxMs: 20_000 })
        yield* group.addMember("b")
        yield* runUntil(
          [group],
          "b reads",
          () => log.events.some((e) => e.member === "b" && e.kind === "start"),
          {
            tickMs: 1,
            maxMs: 20_000,
          },
        )
        const started = log.events.find((e) => e.member === "b" && e.kind === "start")!
        const audit = yield* RedisStore.auditEvents(connection, group.key, 50)
        const accepted = audit
          .map((a) => JSON.parse(a.event) as { at: number; kind: string })
          .find((e) => e.kind === "RevokeAccepted")
        return accepted === undefined ? Number.NaN : started.at - accepted.at
      }),
      scope,
    )
    samples.push(sample)
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
  const sorted = [...samples].sort((a, b) => a - b)
  return {
    median: sorted[Math.floor(sorted.length / 2)]!,
    max: sorted[sorted.length - 1]!,
    samples,
  }
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
    // granted first (a missing owner token refuses every read: docs/protocol.md rule 26)
    Effect.andThen(
      streams.setOwnerToken({ stream: "idle", shard, group: "g", token: 0 }),
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
      ),
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
    if (error instanceof ServerMissing) return say(`\n## ${kind}: skipped (${error.message})`)
    throw error
  }
  const scope = Scope.makeUnsafe()
  const out: Record<string, unknown> = {}
  try {
    const connection = await run(
      RedisConnection.make({ host: server.host, port: server.port }),
      scope,
    )
    const f = connection.features
    out.server = { kind, version: server.version, xackdel: f.xackdel, readClaim: f.readClaim }
    say(`\n## ${kind} ${server.version} (XACKDEL: ${f.xackdel}, XREADGROUP CLAIM: ${f.readClaim})`)
    if (part("a")) {
      say(
        `\n### (a) fenced read + ack vs raw XREADGROUP + XACK, same batch size (${ROUNDS} rounds, median)\n`,
      )
      say(
        "Raw: XREADGROUP then XACK, two round trips per batch (the baseline); raw pipelined: XACK of the previous batch + XREADGROUP in one pipeline, one round trip. " +
          "Ours with `ack with the next read` acks each batch in the next read's fenced call (`ReadOptions.ack`), as the member runtime does.\n",
      )
      say(
        "| batch | ours | ours entries/s | raw entries/s | **vs raw** | raw pipelined entries/s | vs raw pipelined | server CPU per entry: ours / raw / pipelined |",
      )
      say("|---:|---|---:|---:|---:|---:|---:|---:|")
      const variants: ReadonlyArray<ReadAckVariant> = [
        { read: "gated", fused: true },
        { read: "script", fused: true },
        { read: "optimistic", fused: true },
        { read: "gated", fused: false },
        { read: "script", fused: false },
        { read: "optimistic", fused: false },
      ]
      const curve: Array<unknown> = []
      for (const batch of [1, 10, 100]) {
        const r = await readAck(server, connection, "ack", batch, variants)
        for (const o of r.ours) {
          const ratio = o.rate / r.base.rate
          const pipedRatio = o.rate / r.piped.rate
          curve.push({
            batch,
            ours: variantName(o.variant),
            rate: o.rate,
            raw: r.base.rate,
            ratio,
            rawPipelined: r.piped.rate,
            pipedRatio,
            serverUsPerEntry: [o.serverUs, r.base.serverUs, r.piped.serverUs],
          })
          say(
            `| ${batch} | ${variantName(o.variant)} | ${fmt(o.rate)} | ${fmt(r.base.rate)} | **${ratio.toFixed(2)}x** | ${fmt(r.piped.rate)} | ${pipedRatio.toFixed(2)}x | ${o.serverUs.toFixed(1)} / ${r.base.serverUs.toFixed(1)} / ${r.piped.serverUs.toFixed(1)} us |`,
          )
        }
      }
      out.readAck = curve
      const xd = await readAck(server, connection, "xackdel", 100, [
        { read: "gated", fused: true },
        { read: "script", fused: true },
        { read: "optimistic", fused: true },
      ])
      out.readXackdel = xd
      say(
        `\nfenced read + xackdel, batch 100, vs raw XREADGROUP + MULTI(XACK, XDEL) ${fmt(xd.base.rate)} entries/s: ` +
          xd.ours
            .map(
              (o) =>
                `${variantName(o.variant)} ${fmt(o.rate)} -> **${(o.rate / xd.base.rate).toFixed(2)}x**`,
            )
            .join("; "),
      )
    }
    if (part("b")) {
      say(
        "\n### (b) heartbeats, 2,000 members in steady state (transport + CoordinatorHost + Redis Store)\n",
      )
      const hb = await heartbeats(server, 2_000)
      const piped = await heartbeats(server, 2_000, true)
      // raw's one request per round trip is bound by how many are in flight:
      // both again with 4x as many, in the same run
      const wide = await heartbeats(server, 2_000, false, 4 * CONCURRENCY)
      out.heartbeats = {
        ...hb,
        autoPipelined: piped.ours,
        wide: { inFlight: 4 * CONCURRENCY, ...wide },
      }
      say(
        `${fmt(hb.ours)} heartbeats/s vs raw ioredis LPUSH/BLMPOP/RPUSH/BLPOP round trips ${fmt(hb.base)}/s -> **${(hb.ours / hb.base).toFixed(2)}x** ` +
          `(${hb.members} members x ${hb.shards} shards, ${CONCURRENCY} in flight; ours and raw take turns, ${ROUNDS} windows of ${(HB_SECONDS / ROUNDS).toFixed(1)} s each; joined and settled in ${(hb.settleMs / 1_000).toFixed(1)} s; ${hb.commitsDuringSteady} commits during the steady run)`,
      )
      say(
        `with ioredis enableAutoPipelining on the ports' connection: ${fmt(piped.ours)} heartbeats/s -> **${(piped.ours / hb.base).toFixed(2)}x** of the same raw baseline`,
      )
      say(
        `${4 * CONCURRENCY} in flight (both): ${fmt(wide.ours)} heartbeats/s vs raw ${fmt(wide.base)}/s -> **${(wide.ours / wide.base).toFixed(2)}x** (${wide.commitsDuringSteady} commits during the steady run)`,
      )
    }
    if (part("c")) {
      say("\n### (c) commit cost of a one-member change\n")
      say("| members | snapshot bytes | p50 | p99 | mean | compaction (every 64 commits) |")
      say("|---:|---:|---:|---:|---:|---:|")
      const commits: Array<unknown> = []
      for (const members of [100, 10_000]) {
        const c = await commitCost(server, members)
        commits.push(c)
        say(
          `| ${fmt(members)} | ${fmt(c.snapshotBytes)} | ${fmt(c.p50)} us | ${fmt(c.p99)} us | ${fmt(c.mean)} us | ${fmt(c.compaction)} us |`,
        )
      }
      out.commits = commits
    }
    if (part("d")) {
      say(
        "\n### (d) handoff: revoke accepted -> the new owner's read loop starts (3 s heartbeat interval)\n",
      )
      const h = await handoff(server, QUICK ? 3 : 7)
      out.handoff = h
      say(
        `median ${h.median.toFixed(1)} ms, max ${h.max.toFixed(1)} ms over ${h.samples.length} handoffs (samples: ${h.samples.map((x) => x.toFixed(1)).join(", ")} ms)`,
      )
    }
    if (part("e")) {
      say("\n### notices and idle load\n")
      const n = await noticeLatency(connection)
      out.notices = n
      say(
        `notice latency (notify -> the member's stream): median ${n.median.toFixed(2)} ms, p99 ${n.p99.toFixed(2)} ms`,
      )
      const idle = await idleLoad(server, connection)
      out.idle = idle
      say(
        `idle load: ${idle.perShard.toFixed(2)} commands/s per idle shard (${IDLE_SHARDS} shards, a fenced read, on a single node a gated MULTI of 5 commands, then waitForEntries 5 s); ${idle.perGroup.toFixed(2)} commands/s per idle served group`,
      )
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await server.stop()
  }
  results[kind] = out
}

const main = async () => {
  const started = new Date().toISOString()
  say(`# Redis benchmark`)
  say(
    `\nCommand: \`pnpm --filter @shardline/redis-store bench\`${QUICK ? " (SHARDLINE_BENCH_QUICK=1)" : ""} (Node ${process.version}, 2 cores, ${started}). ` +
      "Every number is against a baseline measured on the same server in the same run; servers start on loopback with no persistence. " +
      `Load average at the start: ${os
        .loadavg()
        .map((x) => x.toFixed(1))
        .join(" / ")}.`,
  )
  for (const kind of ["redis7", "redis8"] as const) await benchServer(kind)
  const root = path.resolve(import.meta.dirname, "..")
  const json = JSON.stringify({ started, quick: QUICK, node: process.version, results }, null, 2)
  const md = `${lines.join("\n")}\n`
  for (const dir of [
    path.join(root, "bench", "results"),
    path.join(root, "..", "bench", "results"),
  ]) {
    const name = dir.includes(`${path.sep}redis-store${path.sep}`) ? "latest" : "redis"
    writeFileSync(path.join(dir, `${name}.json`), `${json}\n`)
    writeFileSync(path.join(dir, `${name}.md`), md)
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  },
)
