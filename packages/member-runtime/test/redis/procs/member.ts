/**
 * One member process of the real-process tests (test/redis/processes.test.ts):
 * a runtime on Redis with one explicit member (`consumer`, batch handler)
 * whose every handled message and every ownership event is one JSON line on
 * stdout, so the test can check the group from outside after `kill -9`,
 * SIGSTOP / SIGCONT, SIGTERM or a rolling restart.
 *
 * argv[2]: JSON `MemberProcessConfig`. Lines (`t`: wall-clock ms with
 * sub-ms precision, comparable across processes on one machine):
 * - `{ ev: "ready" }` once started;
 * - `{ ev: "batch", shard, ids }` when a batch reaches the handler;
 * - `{ ev: "begin" | "done", shard, id, n, key, dc }` around each message
 *   (`{ ev: "aborted", shard, id }` instead of `done` when its signal fired:
 *   the handler gives up, as a handler should);
 * - `{ ev: <runtime event type>, at, shard?, shards?, token?, reason? }` for
 *   joined, assigned, revoking, revoked, lost, staleOwner, left,
 *   coordinatorElected, coordinatorResigned, coordinatorServeRestarted,
 *   coordinatorUnavailable, coordinatorAvailable, leaseLost, leaseRegained,
 *   handlerStuck, superseded, dataPlaneError (`error`: its message), and
 *   `heartbeat` when it was not answered NONE or took a heartbeat interval
 *   or more (`errorCode`, `latencyMs`, `error`);
 * - `{ ev: "stopping" }` on SIGTERM, `{ ev: "exit", stopMs }` after the
 *   graceful stop (`stopMs`: how long `runtime.stop()` took);
 * - `{ ev: "clock", offsetMs }` when the wall-clock offset changed (below).
 *
 * With `clockFile`, `Date.now` (effect's wall clock, and so every event's
 * `at`) is the real time plus the integer in that file, read every 20 ms:
 * the test steps this process's wall clock by writing the file. `t` stays
 * real (performance's clock), and an event's line carries `at` with the
 * offset taken off (`wallAt`: as the runtime stamped it), so the lines of
 * all processes remain comparable.
 * stdout is a pipe, and pipe writes are synchronous on Linux: a line written
 * before a SIGKILL reaches the test.
 */

import { readFileSync } from "node:fs"
import {
  consumer,
  type EachBatch,
  type EachMessage,
  type Message,
  start,
} from "../../../src/index.js"
import type { RedisOptions } from "../../../src/Redis.js"

export interface MemberProcessConfig {
  readonly redis: RedisOptions
  readonly stream: string
  readonly group: string
  readonly memberId: string
  readonly shardCount: number
  readonly sessionTimeoutMs: number
  readonly heartbeatIntervalMs: number
  readonly rebalanceTimeoutMs: number
  readonly batchSize: number
  readonly workers: number
  /** Each message's handler takes this long. */
  readonly handlerMs: number
  /**
   * Until the process receives SIGCONT, each message takes this long instead
   * (a victim stays inside a batch long enough for the test to stop or kill
   * it there, and is fast again once resumed).
   */
  readonly slowUntilContMs?: number
  /** A file holding this process's wall-clock offset in ms (see above). */
  readonly clockFile?: string
  /**
   * Transactional mode (docs/exactly-once.md; test/redis/exactlyOnce.test.ts):
   * a per-message handler that, after its `handlerMs`, HINCRBYs the key's
   * counter in `{<stream>:<shard>}:data:counts` and sends `{ n }` to this
   * stream, both committed with the message's ack. `done` is logged when
   * the handler returns, before its commit.
   */
  readonly transactionOut?: string
  /**
   * With `transactionOut`: only messages of these keys send (default: all).
   * A batch without a send lets its commit carry the shard's next read
   * (docs/exactly-once.md, "The commit rides the read"), so a test that
   * sends for a few keys commits both ways.
   */
  readonly transactionSendKeys?: ReadonlyArray<string>
  /** "standalone": this process is no coordinator candidate (default "embedded"). */
  readonly coordinator?: "embedded" | "standalone"
}

const config = JSON.parse(process.argv[2]!) as MemberProcessConfig
let resumed = false
process.on("SIGCONT", () => {
  resumed = true
})
const handlerMs = () =>
  config.slowUntilContMs !== undefined && !resumed ? config.slowUntilContMs : config.handlerMs
const now = () => performance.timeOrigin + performance.now()
const log = (line: Record<string, unknown>) => {
  process.stdout.write(`${JSON.stringify({ t: now(), ...line })}\n`)
}
/** Resolves after `ms`, or at once when `signal` fires. */
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer)
        resolve()
      },
      { once: true },
    )
  })
/** The wall-clock offset now in effect (`clockFile`). */
let offsetMs = 0
if (config.clockFile !== undefined) {
  const file = config.clockFile
  const realNow = Date.now.bind(Date)
  Date.now = () => realNow() + offsetMs
  const readOffset = () => {
    let next = offsetMs
    try {
      next = Number.parseInt(readFileSync(file, "utf8"), 10)
    } catch {
      // not written yet: no offset
    }
    if (Number.isSafeInteger(next) && next !== offsetMs) {
      offsetMs = next
      log({ ev: "clock", offsetMs })
    }
  }
  readOffset()
  setInterval(readOffset, 20)
}

const describe = (m: Message) => ({
  shard: m.shard,
  id: m.id,
  n: Number(m.fields.n),
  key: m.key,
  dc: m.deliveryCount,
})

const sendKeys =
  config.transactionSendKeys === undefined ? undefined : new Set(config.transactionSendKeys)

/** The transactional handler (`transactionOut`). */
function transactional(out: string): EachMessage {
  return async (m, { signal, transaction: tx }) => {
    log({ ev: "begin", ...describe(m) })
    const ms = handlerMs()
    if (ms > 0) await sleep(ms, signal)
    if (signal.aborted) {
      log({ ev: "aborted", shard: m.shard, id: m.id })
      throw new Error("aborted")
    }
    tx.hincrby(tx.key("counts"), m.key ?? "", 1)
    if (sendKeys === undefined || sendKeys.has(m.key ?? ""))
      tx.send(out, m.key ?? "", { n: m.fields.n ?? "" })
    log({ ev: "done", ...describe(m) })
  }
}

const logged = new Set([
  "joined",
  "assigned",
  "revoking",
  "revoked",
  "lost",
  "staleOwner",
  "left",
  "coordinatorElected",
  "coordinatorResigned",
  "coordinatorServeRestarted",
  "coordinatorUnavailable",
  "coordinatorAvailable",
  "leaseLost",
  "leaseRegained",
  "handlerStuck",
  "superseded",
  "dataPlaneError",
  "shardsWaiting",
])

const runtime = await start({
  redis: config.redis,
  memberBase: config.memberId,
  shutdownTimeoutMs: 20_000,
  handleSignals: false,
  ...(config.coordinator === undefined ? {} : { coordinator: config.coordinator }),
  onEvent: (e) => {
    if (e.type === "heartbeat") {
      if (e.errorCode !== "NONE" || e.latencyMs >= config.heartbeatIntervalMs)
        log({
          ev: "heartbeat",
          errorCode: e.errorCode,
          latencyMs: e.latencyMs,
          error: e.error === undefined ? undefined : String(e.error.message),
        })
      return
    }
    if (!logged.has(e.type)) return
    const { type, stream: _s, group: _g, ...rest } = e as unknown as Record<string, unknown>
    const error = rest.error as { message?: unknown } | undefined
    log({
      ev: type,
      ...rest,
      ...(offsetMs === 0 ? {} : { at: (rest.at as number) - offsetMs, wallAt: rest.at }),
      ...(error === undefined ? {} : { error: String(error.message ?? error) }),
    })
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
      batchSize: config.batchSize,
      runtimeMaxConcurrency: config.workers,
      idleWaitMs: 500,
      ...(config.transactionOut === undefined
        ? { eachBatch: batchHandler() }
        : { eachMessage: transactional(config.transactionOut) }),
    }),
  ],
})
log({ ev: "ready" })

/** The plain batch handler (not `transactionOut`). */
function batchHandler(): EachBatch {
  // as a well-behaved handler does, it gives up when its signal fires
  // (revoked past the drain deadline, fenced, stopped)
  return async (batch, { resolve, signal }) => {
    log({ ev: "batch", shard: batch.shard, ids: batch.messages.map((m) => m.id) })
    for (const m of batch.messages) {
      if (signal.aborted) {
        log({ ev: "aborted", shard: batch.shard, id: m.id })
        // throw, not return: a batch handler that returns resolves the whole batch
        throw new Error("aborted")
      }
      log({ ev: "begin", ...describe(m) })
      const ms = handlerMs()
      if (ms > 0) await sleep(ms, signal)
      if (signal.aborted) {
        log({ ev: "aborted", shard: batch.shard, id: m.id })
        // throw, not return: a batch handler that returns resolves the whole batch
        throw new Error("aborted")
      }
      log({ ev: "done", ...describe(m) })
      resolve(m)
    }
  }
}

const stop = () => {
  log({ ev: "stopping" })
  const stoppingAt = performance.now()
  void runtime.stop().then(
    () => {
      log({ ev: "exit", stopMs: performance.now() - stoppingAt })
      process.exit(0)
    },
    (error: unknown) => {
      log({ ev: "stopFailed", error: String(error) })
      process.exit(1)
    },
  )
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
