/**
 * Entry point: `pnpm --filter @shardline/bench run bench:commit-script`.
 * The commit script alone (docs/exactly-once.md, "Cost"): Redis time per
 * message of a group commit of `BENCH_COMMIT_PARTS` one-INCR parts (what
 * `eachMessage` commits per batch) and of one part with as many INCRs
 * (`eachBatch`), against the plain fenced ack of as many ids (ack.lua), on
 * one redis-server, interleaved; INFO commandstats `usec` of EVALSHA (the
 * script and the commands it runs) per message. Prints a line per case.
 */
import { ShardStreams } from "@shardline/core"
import { RedisConnection, RedisShardStreams } from "@shardline/redis-store"
import { type ServerKind, startRedis } from "@shardline/redis-store/testing"
import { Effect } from "effect"
import { Redis } from "ioredis"

const PARTS = Number(process.env.BENCH_COMMIT_PARTS ?? 32)
const CALLS = Number(process.env.BENCH_COMMIT_CALLS ?? 200)
const kind = (process.env.BENCH_SERVER ?? "redis7") as ServerKind

const server = await startRedis({ kind })
const raw = new Redis(server.port, server.host)
/** Redis CPU µs so far (INFO cpu: user + sys, getrusage's CPU time, not wall time). */
const cpuUsec = async (): Promise<number> => {
  const info = await raw.info("cpu")
  const user = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0)
  const sys = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0)
  return (user + sys) * 1e6
}

type Case = "ack" | "group" | "batch"
const totals: Record<Case, number> = { ack: 0, group: 0, batch: 0 }

await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const connection = yield* RedisConnection.make({ url: server.url })
      const s = RedisShardStreams.makeWith(connection)
      const tx = s.transactions!
      const base = { stream: "cs", shard: 0, group: "g" }
      yield* s.setOwnerToken({ ...base, token: 1 })
      const key = tx.keys("cs", 0).key("n")
      const incr = { command: "INCR", args: [key] }
      for (let round = 0; round < CALLS; round++)
        for (const c of (round % 2 === 0
          ? ["ack", "group", "batch"]
          : ["batch", "group", "ack"]) as Array<Case>) {
          for (let i = 0; i < PARTS; i++) yield* s.append("cs", 0, { n: String(i) })
          const read = yield* s.read({ ...base, token: 1, consumer: "c", count: PARTS })
          const ids = read.map((m) => m.id)
          const before = yield* Effect.promise(cpuUsec)
          if (c === "ack") yield* s.ack({ ...base, token: 1, ids, mode: "ack" })
          else if (c === "group")
            yield* tx.commitGroup({
              ...base,
              token: 1,
              mode: "ack",
              parts: ids.map((id) => ({ ids: [id], writes: [incr], sends: [] })),
            })
          else
            yield* tx.commit({
              ...base,
              token: 1,
              ids,
              mode: "ack",
              writes: ids.map(() => incr),
              sends: [],
            })
          totals[c] += (yield* Effect.promise(cpuUsec)) - before
        }
      void ShardStreams
    }),
  ),
)
if (process.env.BENCH_COMMIT_PROBE === "1") {
  const probe = (await raw.lrange("probe", 0, -1)).map(Number)
  const sums = [0, 0, 0, 0, 0, 0]
  for (let i = 0; i < probe.length; i++) sums[i % 6]! += probe[i]!
  console.log(
    `probe (µs per call): ${sums.map((x) => (x / (probe.length / 6)).toFixed(1)).join(" ")}`,
  )
}
raw.disconnect()
await server.stop()
const per = (c: Case) => totals[c] / (CALLS * PARTS)
console.log(
  `${kind} ${server.version}: ${PARTS} messages per call, ${CALLS} calls each; Redis CPU µs per message (INFO cpu, the call and one INFO): ack ${per("ack").toFixed(2)}, group commit ${per("group").toFixed(2)} (${(per("group") / per("ack")).toFixed(2)}x), batch commit ${per("batch").toFixed(2)} (${(per("batch") / per("ack")).toFixed(2)}x)`,
)
