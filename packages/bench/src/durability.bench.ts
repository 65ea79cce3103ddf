/**
 * What `durability: { replicas: 1 }` costs (docs/redis.md, "Cost of
 * durability"), measured by src/durabilityRedis.ts and, with tiny sizes, by
 * test/durabilityBench.test.ts. On one primary and its replica (redis-store's
 * test harness, both on this machine), paired rounds: in each, the same
 * work through two RedisPorts layers, one with `durability: { replicas: 1,
 * timeoutMs }` and one without, in alternating order:
 * - sends: `sends` producer sends (`ShardStreams.append`, what a producer's
 *   send runs), each awaited before the next, as a caller that waits for its
 *   confirmation does;
 * - commits: `commits` one-write transactional commits (`INCR` of a key in
 *   the shard's slot with the message's ack, one script call each: what a
 *   per-message transaction commits), each awaited before the next.
 * Reported: operations/s per run and the ratio durable / plain per round,
 * and the median of those ratios.
 */
import { ShardStreams } from "@shardline/core"
import { RedisPorts } from "@shardline/redis-store"
import { type RedisServer, startRedis } from "@shardline/redis-store/testing"
import { Effect, type Layer, ManagedRuntime } from "effect"

export interface DurabilityBenchOptions {
  readonly rounds: number
  readonly sends: number
  readonly commits: number
  /** `durability.timeoutMs` (default 1,000): a healthy replica answers far sooner. */
  readonly timeoutMs?: number
}

export interface DurabilityRun {
  readonly sendsPerSec: number
  readonly commitsPerSec: number
}

export interface DurabilityRound {
  readonly plain: DurabilityRun
  readonly durable: DurabilityRun
  readonly sendRatio: number
  readonly commitRatio: number
}

export interface DurabilitySummary {
  readonly server: string
  readonly rounds: ReadonlyArray<DurabilityRound>
  readonly median: {
    readonly plainSendsPerSec: number
    readonly durableSendsPerSec: number
    readonly sendRatio: number
    readonly plainCommitsPerSec: number
    readonly durableCommitsPerSec: number
    readonly commitRatio: number
  }
}

export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

const waitFor = async (what: string, done: () => boolean) => {
  const until = Date.now() + 30_000
  while (!done()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

let streams = 0

/** One run of the sends and the commits through `runtime`. */
const runOnce = (
  runtime: ManagedRuntime.ManagedRuntime<RedisPorts.RedisPorts, never>,
  options: DurabilityBenchOptions,
): Promise<DurabilityRun> =>
  runtime.runPromise(
    Effect.gen(function* () {
      const s = yield* ShardStreams.ShardStreams
      const stream = `durability-bench-${process.pid}-${++streams}`
      const started = performance.now()
      for (let n = 0; n < options.sends; n++) yield* s.append(stream, 0, { n: String(n) })
      const sendsPerSec = options.sends / ((performance.now() - started) / 1_000)
      // the commits acknowledge what the sends wrote (read first: pending with c1)
      const address = { stream, shard: 0, group: "g" }
      yield* s.setOwnerToken({ ...address, token: 1 })
      const read = yield* s.read({ ...address, token: 1, consumer: "c1", count: options.commits })
      const tx = s.transactions!
      const counter = tx.keys(stream, 0).key("n")
      const from = performance.now()
      for (const m of read)
        yield* tx.commit({
          ...address,
          token: 1,
          ids: [m.id],
          mode: "ack",
          writes: [{ command: "INCR", args: [counter] }],
          sends: [],
        })
      const commitsPerSec = read.length / ((performance.now() - from) / 1_000)
      return { sendsPerSec, commitsPerSec }
    }),
  )

/** Starts a primary and its replica, runs the paired rounds, stops both. */
export const runDurabilityBench = async (
  options: DurabilityBenchOptions,
  log: (line: string) => void = () => {},
): Promise<DurabilitySummary> => {
  if (options.commits > options.sends)
    throw new RangeError(
      `commits (${options.commits}) must not exceed sends (${options.sends}): each acknowledges a sent message`,
    )
  const primary: RedisServer = await startRedis({ kind: "redis7" })
  const replica: RedisServer = await startRedis({
    kind: "redis7",
    args: ["--replicaof", primary.host, String(primary.port)],
  })
  const layer = (durable: boolean) =>
    ManagedRuntime.make(
      RedisPorts.layer({
        url: primary.url,
        ...(durable ? { durability: { replicas: 1, timeoutMs: options.timeoutMs ?? 1_000 } } : {}),
      }) as Layer.Layer<RedisPorts.RedisPorts, never>,
    )
  const plain = layer(false)
  const durable = layer(true)
  try {
    await waitFor("the replica's link", () =>
      replica.cli("INFO", "replication").includes("master_link_status:up"),
    )
    const rounds: Array<DurabilityRound> = []
    for (let r = 0; r < options.rounds; r++) {
      // alternate which goes first: a warm-up or a neighbour's burst favours neither
      const first = r % 2 === 0 ? plain : durable
      const second = first === plain ? durable : plain
      const a = await runOnce(first, options)
      const b = await runOnce(second, options)
      const p = first === plain ? a : b
      const d = first === plain ? b : a
      const round = {
        plain: p,
        durable: d,
        sendRatio: d.sendsPerSec / p.sendsPerSec,
        commitRatio: d.commitsPerSec / p.commitsPerSec,
      }
      rounds.push(round)
      log(
        `round ${r + 1}: sends ${p.sendsPerSec.toFixed(0)} -> ${d.sendsPerSec.toFixed(0)}/s (${round.sendRatio.toFixed(2)}), commits ${p.commitsPerSec.toFixed(0)} -> ${d.commitsPerSec.toFixed(0)}/s (${round.commitRatio.toFixed(2)})`,
      )
    }
    return {
      server: `redis7 ${primary.version}, primary + 1 replica`,
      rounds,
      median: {
        plainSendsPerSec: median(rounds.map((r) => r.plain.sendsPerSec)),
        durableSendsPerSec: median(rounds.map((r) => r.durable.sendsPerSec)),
        sendRatio: median(rounds.map((r) => r.sendRatio)),
        plainCommitsPerSec: median(rounds.map((r) => r.plain.commitsPerSec)),
        durableCommitsPerSec: median(rounds.map((r) => r.durable.commitsPerSec)),
        commitRatio: median(rounds.map((r) => r.commitRatio)),
      },
    }
  } finally {
    await plain.dispose()
    await durable.dispose()
    await replica.stop()
    await primary.stop()
  }
}

/** The results page (results/durability-redis.md). */
export const durabilityMarkdown = (
  summary: DurabilitySummary,
  options: DurabilityBenchOptions,
  machine: string,
): string => {
  const m = summary.median
  const row = (label: string, p: DurabilityRun, d: DurabilityRun) =>
    `| ${label} | ${p.sendsPerSec.toFixed(0)} | ${d.sendsPerSec.toFixed(0)} | ${(d.sendsPerSec / p.sendsPerSec).toFixed(2)} | ${p.commitsPerSec.toFixed(0)} | ${d.commitsPerSec.toFixed(0)} | ${(d.commitsPerSec / p.commitsPerSec).toFixed(2)} |`
  return `# The cost of \`durability: { replicas: 1 }\` (Redis)

\`pnpm --filter @shardline/bench run bench:durability-redis\` (src/durabilityRedis.ts;
docs/redis.md, "Cost of durability"). ${summary.server}, ${machine}, shared with
other work. ${options.rounds} paired rounds, plain and durable in alternating order;
each run: ${options.sends} sends, then ${options.commits} one-write transactional
commits, each awaited before the next.

| round | plain sends/s | durable sends/s | durable / plain | plain commits/s | durable commits/s | durable / plain |
| --- | --- | --- | --- | --- | --- | --- |
${summary.rounds.map((r, i) => row(String(i + 1), r.plain, r.durable)).join("\n")}
| median | ${m.plainSendsPerSec.toFixed(0)} | ${m.durableSendsPerSec.toFixed(0)} | ${m.sendRatio.toFixed(2)} | ${m.plainCommitsPerSec.toFixed(0)} | ${m.durableCommitsPerSec.toFixed(0)} | ${m.commitRatio.toFixed(2)} |

A durable send or commit is followed by \`WAIT 1 <timeoutMs>\` on the
connection that ran it: one more round trip, and the replica's own round
trip to take the write and acknowledge it (the ratios are medians of the
per-round ratios). Callers that send concurrently pay the wait once per
connection's batch, not per message.
`
}
