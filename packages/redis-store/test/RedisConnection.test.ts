/**
 * Connections and the feature probe: the native-command paths run where the
 * server has them (Redis 8.6: XACKDEL and XREADGROUP ... CLAIM), the Lua
 * fallbacks everywhere else.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { Redis } from "ioredis"
import { inject } from "vitest"
import * as RedisConnection from "../src/RedisConnection.js"
import { freePort } from "../src/testing.js"
import { connect, describeTarget, redisTargets } from "./support/targets.js"

const expected = {
  redis7: { server: "redis", xackdel: false, readClaim: false },
  redis8: { server: "redis", xackdel: true, readClaim: true },
  valkey8: { server: "valkey", xackdel: false, readClaim: false },
} as const

for (const kind of ["redis7", "redis8", "valkey8"] as const) {
  const info = inject(kind)
  const target = redisTargets().find((t) => t.kind === kind)!

  describeTarget("feature probe", target, connect(target), (subject) => {
    it.live("finds the server's version and native commands", () =>
      Effect.sync(() => {
        const { features } = subject()
        assert.deepStrictEqual(
          { server: features.server, xackdel: features.xackdel, readClaim: features.readClaim },
          expected[kind],
        )
        if (info.ok) assert.strictEqual(features.version, info.version)
      }),
    )
  })

  if (info.ok)
    it.live(`${kind}: connects by URL, by host/port, and can force the Lua fallbacks`, () =>
      Effect.gen(function* () {
        const byUrl = yield* RedisConnection.make({ url: info.url })
        assert.strictEqual(byUrl.features.version, info.version)
        const forced = yield* RedisConnection.make({
          host: info.host,
          port: info.port,
          features: { xackdel: false, readClaim: false },
        })
        assert.isFalse(forced.features.xackdel)
        assert.isFalse(forced.features.readClaim)
        assert.strictEqual(yield* forced.command("ping", (c) => c.ping()), "PONG")
      }),
    )
}

it("the probe reads each command's own docs: an XACKDEL without ACKED is not used (its KEEPREF deletes under other groups)", () => {
  const xreadgroup = ["summary", "x", "arguments", [["name", "claim", "token", "CLAIM"]]]
  const acked = ["arguments", [["name", "condition", "arguments", [["token", "ACKED"]]]]]
  const keepOnly = ["arguments", [["name", "condition", "arguments", [["token", "KEEPREF"]]]]]
  // either order of the reply; a Buffer name as ioredis may give it
  for (const docs of [
    ["xackdel", acked, "xreadgroup", xreadgroup],
    ["xreadgroup", xreadgroup, Buffer.from("xackdel"), acked],
  ]) {
    assert.isTrue(RedisConnection.commandDocs(docs, "xackdel")!.includes("ACKED"))
    assert.isTrue(RedisConnection.commandDocs(docs, "xreadgroup")!.includes("CLAIM"))
  }
  // CLAIM in XACKDEL's docs would not make XREADGROUP take it, nor ACKED the other way round
  const swapped = ["xackdel", ["token", "CLAIM"], "xreadgroup", ["token", "ACKED"]]
  assert.isFalse(RedisConnection.commandDocs(swapped, "xackdel")!.includes("ACKED"))
  assert.isFalse(RedisConnection.commandDocs(swapped, "xreadgroup")!.includes("CLAIM"))
  assert.isFalse(RedisConnection.commandDocs(["xackdel", keepOnly], "xackdel")!.includes("ACKED"))
  // a server without XACKDEL answers only for XREADGROUP
  assert.isUndefined(RedisConnection.commandDocs(["xreadgroup", xreadgroup], "xackdel"))
  assert.isUndefined(RedisConnection.commandDocs(null, "xackdel"))
})

it.live("an unreachable server is BackendUnavailable, not a hang or a defect", () =>
  Effect.gen(function* () {
    const error = yield* Effect.flip(
      RedisConnection.make({
        host: "127.0.0.1",
        port: 1,
        redis: { maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false },
      }),
    )
    assert.strictEqual(error._tag, "BackendUnavailable")
  }),
)

// Connection errors name their cause at once (docs/redis.md, "Connections"):
// with ioredis' defaults a command waited through 20 reconnections (~10 s)
// and failed "max retries per request (20)", never saying ECONNREFUSED.
it.live("a refused port fails at once with ECONNREFUSED and the target, default options", () =>
  Effect.gen(function* () {
    const port = yield* Effect.promise(() => freePort())
    const started = performance.now()
    const error = yield* Effect.flip(
      Effect.scoped(RedisConnection.make({ url: `redis://user:secret@127.0.0.1:${port}` })),
    )
    assert.strictEqual(error._tag, "BackendUnavailable")
    assert.include(error.message, `cannot connect to Redis at redis://user:***@127.0.0.1:${port}`)
    assert.include(error.message, "ECONNREFUSED")
    assert.notInclude(error.message, "secret")
    assert.notInclude(error.message, "max retries")
    // not a timing assertion: the 20 reconnections it used to wait take about 10 s
    assert.isBelow(performance.now() - started, 5_000)
  }),
)

it.live("an unknown host fails at once with ENOTFOUND", () =>
  Effect.gen(function* () {
    const error = yield* Effect.flip(
      Effect.scoped(RedisConnection.make({ url: "redis://no-such-host.invalid:6379" })),
    )
    assert.strictEqual(error._tag, "BackendUnavailable")
    assert.include(error.message, "ENOTFOUND")
    assert.include(error.message, "no-such-host.invalid")
  }),
)

it.live("a cluster none of whose nodes answers names each node's error", () =>
  Effect.gen(function* () {
    const port = yield* Effect.promise(() => freePort())
    const error = yield* Effect.flip(
      Effect.scoped(RedisConnection.make({ cluster: { nodes: [`127.0.0.1:${port}`] } })),
    )
    assert.strictEqual(error._tag, "BackendUnavailable")
    assert.include(error.message, `cannot connect to Redis at the cluster nodes 127.0.0.1:${port}`)
    assert.include(error.message, `127.0.0.1:${port}: connect ECONNREFUSED`)
  }),
)

const redis7 = inject("redis7")
if (redis7.ok) {
  it.live("a database the server does not have is InvalidDatabase, not database 0", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Effect.scoped(RedisConnection.make({ url: `${redis7.url}/99` })),
      )
      assert.strictEqual(error._tag, "InvalidDatabase")
      assert.include(error.message, "cannot use database 99")
      assert.include(error.message, "DB index is out of range")
      // and a database it has is the one used
      const three = yield* RedisConnection.make({ url: `${redis7.url}/3` })
      const key = `db-check-${Math.random()}`
      yield* three.command("set", (c) => c.set(key, "1"))
      const raw = new Redis(`${redis7.url}/3`)
      assert.strictEqual(yield* Effect.promise(() => raw.get(key)), "1")
      yield* Effect.promise(() => raw.del(key).then(() => raw.quit()))
    }),
  )

  it.live("a wrong password fails at once with the server's WRONGPASS", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Effect.scoped(
          RedisConnection.make({ url: redis7.url, username: "nobody", password: "wrong" }),
        ),
      )
      assert.strictEqual(error._tag, "BackendUnavailable")
      assert.include(error.message, "WRONGPASS")
    }),
  )
}
