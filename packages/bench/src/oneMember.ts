/**
 * The benchmarks' usual subject: one explicit member (`memberBase: "bench"`,
 * no signal handlers) on the given ports or Redis, and the settled state
 * the throughput benchmarks start from.
 */
import {
  type ConsumerOptions,
  consumer,
  type ShardlineRuntime,
  type StartOptions,
  start,
} from "@shardline/member-runtime"

/**
 * Group timing of the throughput benchmarks: a session long enough that a
 * busy Node thread never loses its shards mid-measurement.
 */
export const THROUGHPUT_TIMING = {
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 20_000,
  heartbeatIntervalMs: 1_000,
} as const

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Starts one member of `options` on `on` (`{ ports }` or `{ redis }`). */
export const startOneMember = (
  on: Pick<StartOptions, "ports" | "redis" | "telemetry">,
  options: ConsumerOptions,
): Promise<ShardlineRuntime> =>
  start({ ...on, handleSignals: false, memberBase: "bench", consumers: [consumer(options)] })

/** Waits until the member owns all `shards`, then pauses them (a backlog can be produced). */
export const ownAllPaused = async (
  runtime: ShardlineRuntime,
  stream: string,
  group: string,
  shards: number,
): Promise<void> => {
  while ((runtime.members()[0]?.owned.length ?? 0) !== shards) await sleep(10)
  for (let shard = 0; shard < shards; shard++) runtime.pause(stream, group, shard)
}
