/**
 * One producer process of the real-process failover tests
 * (test/redis/clusterFailover.test.ts; docs/redis.md, "Durability"): one
 * sequential send loop per key, each with a producer of its own (so a key
 * whose shard's master is down holds up only itself), idempotent (the
 * message id is `n`), every send retried with the same `n` until it is
 * confirmed. Per key, the sends are in `n` order, and a send starts only
 * after the previous one was confirmed.
 *
 * argv[2]: JSON `ProducerProcessConfig`. Lines on stdout (`t`: wall-clock
 * ms, comparable across processes):
 * - `{ ev: "ready" }` once started;
 * - `{ ev: "attempt", n, key }` before each send of `n` (the first and every retry);
 * - `{ ev: "sent", n, key, shard, id }` once the send of `n` is confirmed (with
 *   `redis.durability`: once the replicas have it);
 * - `{ ev: "sendFailed", n, key, error }` when an attempt failed (it is tried again);
 * - `{ ev: "exit" }` after SIGTERM, once every loop confirmed its last send
 *   or gave it up (an attempt failed after the SIGTERM).
 * stdout is a pipe and its writes are synchronous on Linux: a `sent` line
 * written before a SIGKILL reaches the test.
 */
import { fixed } from "../../../src/LayoutSource.js"
import type { RedisOptions } from "../../../src/Redis.js"
import { start } from "../../../src/Runtime.js"

export interface ProducerProcessConfig {
  readonly redis: RedisOptions
  readonly stream: string
  readonly shardCount: number
  /** The keys, one send loop each. */
  readonly keys: ReadonlyArray<string>
  /** The first message number; key i's j-th message is `first + j * keys.length + i`. */
  readonly first: number
  /** Pause between two sends of one key (ms). */
  readonly intervalMs: number
  /** Pause before sending `n` again after a failed attempt (ms). */
  readonly retryMs: number
}

const config = JSON.parse(process.argv[2]!) as ProducerProcessConfig
const now = () => performance.timeOrigin + performance.now()
const log = (line: Record<string, unknown>) => {
  process.stdout.write(`${JSON.stringify({ t: now(), ...line })}\n`)
}
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const runtime = await start({
  redis: config.redis,
  handleSignals: false,
  memberBase: "producer",
  logLevel: "silent",
})
let stopping = false
const loops = config.keys.map(async (key, i) => {
  const producer = runtime.producer(config.stream, {
    layout: fixed({ [config.stream]: config.shardCount }),
    idempotent: { producerId: `${process.pid}-${i}` },
    maxAttempts: 1,
  })
  for (let j = 0; !stopping; j++) {
    const n = config.first + j * config.keys.length + i
    for (;;) {
      log({ ev: "attempt", n, key })
      try {
        const sent = await producer.send(key, { n: String(n) }, { idempotencyKey: String(n) })
        log({ ev: "sent", n, key, shard: sent.shard, id: sent.id })
        break
      } catch (error) {
        log({ ev: "sendFailed", n, key, error: String((error as Error).message ?? error) })
        // stopping: give the unconfirmed send up (it may or may not exist)
        if (stopping) return
        await sleep(config.retryMs)
      }
    }
    await sleep(config.intervalMs)
  }
})
log({ ev: "ready" })

process.once("SIGTERM", () => {
  stopping = true
  void Promise.all(loops)
    .then(() => runtime.stop())
    .then(() => {
      log({ ev: "exit" })
      process.exit(0)
    })
})
