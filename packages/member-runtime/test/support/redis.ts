/**
 * Real Redis servers for the member runtime's Redis tests, through
 * redis-store's harness (packages/redis-store/src/testing.ts): a server, a
 * 3-node cluster or a Sentinel deployment on free loopback ports per test
 * file, stopped after it. A missing binary fails the file with the
 * harness's one-line install hint, never a skip.
 */
import {
  type RedisCluster,
  type RedisSentinel,
  type RedisServer,
  type SentinelStartOptions,
  type ServerKind,
  type StartOptions,
  startRedis,
  startRedisCluster,
  startRedisSentinel,
} from "@shardline/redis-store/testing"
import { afterAll, beforeAll } from "vitest"

/**
 * A server started in `beforeAll` and stopped in `afterAll`; call the getter
 * inside tests. `options`: e.g. `{ persistence: true }` (AOF, for restarts).
 */
export const useRedisServer = (
  kind: ServerKind = "redis7",
  options: Omit<StartOptions, "kind"> = {},
): (() => RedisServer) => {
  let server: RedisServer | undefined
  beforeAll(async () => {
    server = await startRedis({ ...options, kind })
  }, 120_000)
  afterAll(async () => {
    await server?.stop()
  })
  return () => {
    if (server === undefined) throw new Error(`the ${kind} server did not start (see beforeAll)`)
    return server
  }
}

/**
 * A 3-node cluster started in `beforeAll` and stopped in `afterAll`
 * (`replicas: 1`: 3 masters with a replica each).
 */
export const useRedisCluster = (
  kind: ServerKind = "redis7",
  options: Omit<StartOptions, "kind"> & { readonly replicas?: number } = {},
): (() => RedisCluster) => {
  let cluster: RedisCluster | undefined
  beforeAll(async () => {
    cluster = await startRedisCluster({ ...options, kind })
  }, 180_000)
  afterAll(async () => {
    await cluster?.stop()
  })
  return () => {
    if (cluster === undefined) throw new Error(`the ${kind} cluster did not start (see beforeAll)`)
    return cluster
  }
}

/**
 * A Redis Sentinel deployment started in `beforeAll` and stopped in
 * `afterAll`: a primary, one replica and 3 sentinels monitoring it as
 * `mymaster` (quorum 2, down-after 1 s, failover-timeout 5 s; `options`
 * changes them). Connect with `redis: { sentinels: d().sentinels, name: d().name }`.
 */
export const useRedisSentinel = (
  kind: ServerKind = "redis7",
  options: Omit<SentinelStartOptions, "kind"> = {},
): (() => RedisSentinel) => {
  let deployment: RedisSentinel | undefined
  beforeAll(async () => {
    deployment = await startRedisSentinel({ ...options, kind })
  }, 120_000)
  afterAll(async () => {
    await deployment?.stop()
  })
  return () => {
    if (deployment === undefined)
      throw new Error(`the ${kind} Sentinel deployment did not start (see beforeAll)`)
    return deployment
  }
}

/** Polls `condition` every `everyMs` until it holds or `timeoutMs` passes (then throws `what`). */
export const eventually = async (
  what: string,
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 60_000,
  everyMs = 50,
): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await condition()) return
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}
