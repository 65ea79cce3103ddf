/**
 * Real Redis servers for the member runtime's Redis tests, through
 * redis-store's harness (packages/redis-store/src/testing.ts): a server on a
 * free loopback port per test file, stopped after it. A missing binary fails
 * the file with the harness's one-line install hint, never a skip.
 */
import {
  type RedisCluster,
  type RedisServer,
  type ServerKind,
  type StartOptions,
  startRedis,
  startRedisCluster,
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

/** A 3-node cluster started in `beforeAll` and stopped in `afterAll`. */
export const useRedisCluster = (
  kind: ServerKind = "redis7",
  options: Omit<StartOptions, "kind"> = {},
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
