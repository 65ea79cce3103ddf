/**
 * Connections and the feature probe: the native-command paths run where the
 * server has them (Redis 8.6: XACKDEL and XREADGROUP ... CLAIM), the Lua
 * fallbacks everywhere else.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { inject } from "vitest"
import * as RedisConnection from "../src/RedisConnection.js"
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
