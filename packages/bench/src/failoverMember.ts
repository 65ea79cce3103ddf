/**
 * One member process ("pod") of the failover benchmark (src/failover.ts;
 * docs/runtime.md, "Measured on Redis"): a runtime on Redis with one member
 * of the benchmark's group (embedded coordinator candidate, as every
 * runtime is) whose batches and ownership events are JSON lines on stdout.
 *
 * argv[2]: JSON `FailoverMemberConfig`. Lines (`t`: real ms, comparable
 * across the processes of one machine):
 * - `{ ev: "ready" }` once started;
 * - `{ ev: "batch", shard, count }` when a batch reaches the handler;
 * - `{ ev: <event type>, shard?, shards?, reason? }` for joined, assigned,
 *   revoking, revoked, lost, leaseLost, leaseRegained,
 *   coordinatorElected, coordinatorResigned;
 * - `{ ev: "exit", stopMs }` after SIGTERM (`stopMs`: `runtime.stop()`).
 */
import { consumer, start } from "@shardline/member-runtime"

export interface FailoverMemberConfig {
  readonly url: string
  readonly stream: string
  readonly group: string
  readonly memberId: string
  readonly shardCount: number
  readonly sessionTimeoutMs: number
  readonly heartbeatIntervalMs: number
  readonly rebalanceTimeoutMs: number
}

const config = JSON.parse(process.argv[2]!) as FailoverMemberConfig
const log = (line: Record<string, unknown>) =>
  process.stdout.write(
    `${JSON.stringify({ t: performance.timeOrigin + performance.now(), ...line })}\n`,
  )

const logged = new Set([
  "joined",
  "assigned",
  "revoking",
  "revoked",
  "lost",
  "leaseLost",
  "leaseRegained",
  "coordinatorElected",
  "coordinatorResigned",
])

const runtime = await start({
  redis: { url: config.url },
  memberBase: config.memberId,
  handleSignals: false,
  onEvent: (e) => {
    if (!logged.has(e.type)) return
    const { shard, shards, reason } = e as {
      shard?: number
      shards?: Array<number>
      reason?: string
    }
    log({ ev: e.type, shard, shards, reason })
  },
  consumers: [
    consumer({
      stream: config.stream,
      group: config.group,
      memberId: config.memberId,
      shardCount: config.shardCount,
      sessionTimeoutMs: config.sessionTimeoutMs,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
      rebalanceTimeoutMs: config.rebalanceTimeoutMs,
      runtimeMaxConcurrency: 4,
      idleWaitMs: 500,
      eachBatch: async (batch, { resolve }) => {
        log({ ev: "batch", shard: batch.shard, count: batch.messages.length })
        for (const m of batch.messages) resolve(m)
      },
    }),
  ],
})
log({ ev: "ready" })

process.once("SIGTERM", () => {
  const from = performance.now()
  void runtime.stop().then(
    () => {
      log({ ev: "exit", stopMs: performance.now() - from })
      process.exit(0)
    },
    () => process.exit(1),
  )
})
