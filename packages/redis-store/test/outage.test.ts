/**
 * Redis going away under a running member: a heartbeat fails within its
 * timeout (plus a second) instead of waiting in ioredis's offline queue.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisCoordinatorTransport from "../src/RedisCoordinatorTransport.js"
import { startRedis } from "../src/testing.js"

it.live("a heartbeat while Redis is down is a TransportError, bounded by the timeout", () =>
  Effect.gen(function* () {
    const server = yield* Effect.acquireRelease(
      Effect.promise(() => startRedis()),
      (s) => Effect.promise(() => s.stop()),
    )
    // ioredis would keep a command for a lost server forever: only the
    // transport's own bound can end this heartbeat
    const connection = yield* RedisConnection.make({
      host: server.host,
      port: server.port,
      redis: { maxRetriesPerRequest: null },
    })
    const transport = RedisCoordinatorTransport.makeWith(connection, { timeoutMs: 300 })
    const key = { stream: "outage", group: "g" }
    yield* transport.serve(key, () => Effect.never)
    yield* Effect.promise(() => server.stop())
    const error = yield* Effect.flip(
      transport.heartbeat({
        ...key,
        memberId: "m0",
        incarnation: 1,
        seq: 1,
        memberEpoch: 0,
        assignmentEpoch: 0,
        metadataVersion: 0,
        ownedShards: [],
        revokingShards: [],
      }),
    )
    assert.include(["Timeout", "Unavailable"], error.reason)
  }),
)
