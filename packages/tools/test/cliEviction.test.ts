/**
 * The CLI on a server that evicts keys (docs/redis.md, "Eviction";
 * docs/protocol.md rule 26): a command that writes is refused in one line
 * (exit 2) unless `--allow-eviction`; one that only reads warns on stderr.
 * The connection's own refusal: redis-store's test/eviction.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { type RedisServer, startRedis } from "@shardline/redis-store/testing"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import { runCli } from "./support/cli.js"

/** The settings that lost 930 of 6,000 accepted messages of a paused group in issue 32. */
const EVICTING = ["--maxmemory", "40mb", "--maxmemory-policy", "allkeys-lru"]

describe("the CLI on a server that evicts keys (redis7, allkeys-lru)", () => {
  let server: RedisServer | undefined
  beforeAll(async () => {
    server = await startRedis({ kind: "redis7", args: EVICTING })
  }, 120_000)
  afterAll(async () => {
    await server?.stop()
  })

  it.live(
    "a command that writes is refused in one line (exit 2) unless --allow-eviction; one that reads warns on stderr, its output untouched",
    () =>
      Effect.gen(function* () {
        const url = server!.url
        const refused = yield* runCli(["reshard", "--redis", url, "--stream", "s", "--shards", "8"])
        assert.strictEqual(refused.code, 2)
        assert.strictEqual(refused.stderr.trim().split("\n").length, 1)
        assert.match(
          refused.stderr,
          /^shardline: EvictionPolicyRefused: .*maxmemory-policy is allkeys-lru/,
        )
        assert.include(refused.stderr, "--allow-eviction")
        const allowed = yield* runCli([
          "reshard",
          "--redis",
          url,
          "--stream",
          "s",
          "--shards",
          "8",
          "--allow-eviction",
        ])
        // it connects (and then finds no such stream), after a warning
        assert.include(allowed.stderr, "shardline: warning: WARNING: Redis at")
        assert.notInclude(allowed.stderr, "EvictionPolicyRefused")
        const listed = yield* runCli(["groups", "list", "--redis", url, "--stream", "s", "--json"])
        assert.include(listed.stderr, "shardline: warning: WARNING: Redis at")
        assert.notInclude(listed.stdout, "WARNING")
      }),
  )
})
