/**
 * A server that evicts keys is refused at connect (docs/redis.md,
 * "Eviction"; docs/protocol.md rule 26): every `maxmemory-policy` but
 * `noeviction`, on a single node and on any master of a cluster, fails
 * `EvictionPolicyRefused` naming the setting and both ways out, unless the
 * options opt in (`allowEviction`), which logs a warning. Each kind of
 * server runs here with `maxmemory 40mb` and `allkeys-lru`, the settings
 * that lost 930 of 6,000 accepted messages of a paused group in issue 32.
 * The CLI's refusal and warning: @shardline/tools test/cliEviction.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import type { Redis } from "ioredis"
import { afterAll, beforeAll } from "vitest"
import { aclRules } from "../src/acl.js"
import type { EvictionPolicyRefused } from "../src/Errors.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisPorts from "../src/RedisPorts.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import {
  type RedisCluster,
  type RedisServer,
  SERVER_KINDS,
  startRedis,
  startRedisCluster,
} from "../src/testing.js"

/** The warnings Effect logged while `effect` ran, and its outcome. */
const withWarnings = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const warnings: Array<string> = []
    const capture = Logger.layer([
      Logger.make((o) => {
        if (o.logLevel !== "Warn") return
        const parts = Array.isArray(o.message) ? o.message : [o.message]
        warnings.push(parts.map(String).join(" "))
      }),
    ])
    const exit = yield* Effect.exit(Effect.provide(effect, capture))
    return { warnings, exit }
  })

const refusal = (exit: { readonly _tag: string }): EvictionPolicyRefused => {
  const failure = exit as unknown as {
    readonly _tag: "Failure"
    readonly cause: { readonly reasons: ReadonlyArray<{ readonly error?: unknown }> }
  }
  assert.strictEqual(failure._tag, "Failure", "expected the connection to be refused")
  const error = failure.cause.reasons.find((r) => r.error !== undefined)?.error
  assert.strictEqual((error as { _tag?: string })._tag, "EvictionPolicyRefused")
  return error as EvictionPolicyRefused
}

const EVICTING = ["--maxmemory", "40mb", "--maxmemory-policy", "allkeys-lru"]

for (const kind of SERVER_KINDS) {
  describe(`a server that evicts keys (${kind}, maxmemory 40mb, allkeys-lru)`, () => {
    let server: RedisServer | undefined
    beforeAll(async () => {
      server = await startRedis({ kind, args: EVICTING })
    }, 120_000)
    afterAll(async () => {
      await server?.stop()
    })
    const url = () => server!.url

    it.live(
      "is refused at connect: EvictionPolicyRefused naming maxmemory-policy and both ways out",
      () =>
        Effect.gen(function* () {
          const { exit } = yield* withWarnings(Effect.scoped(RedisConnection.make({ url: url() })))
          const error = refusal(exit)
          assert.strictEqual(error.policy, "allkeys-lru")
          assert.deepStrictEqual(error.nodes, [`${url()} (allkeys-lru)`])
          assert.include(error.message, "maxmemory-policy is allkeys-lru")
          assert.include(error.message, "CONFIG SET maxmemory-policy noeviction")
          assert.include(error.message, "allowEviction: true")
          // every port's layer connects through it: the same refusal
          const ports = yield* withWarnings(
            Effect.scoped(Layer.build(RedisPorts.layer({ url: url() }))),
          )
          assert.strictEqual(refusal(ports.exit).policy, "allkeys-lru")
        }),
    )

    it.live("with allowEviction: connects, and logs a warning naming the policy", () =>
      Effect.gen(function* () {
        const { exit, warnings } = yield* withWarnings(
          Effect.scoped(
            Effect.flatMap(RedisConnection.make({ url: url(), allowEviction: true }), (c) =>
              c.command("ping", (client) => client.ping()),
            ),
          ),
        )
        assert.strictEqual(exit._tag, "Success")
        assert.strictEqual(warnings.length, 1)
        assert.include(warnings[0]!, "WARNING")
        assert.include(warnings[0]!, "maxmemory-policy allkeys-lru")
        assert.include(warnings[0]!, "allowEviction is on")
      }),
    )

    it.live("every policy but noeviction is refused; noeviction connects without a word", () =>
      Effect.gen(function* () {
        const policies = [
          "volatile-lru",
          "allkeys-lfu",
          "volatile-lfu",
          "allkeys-random",
          "volatile-random",
          "volatile-ttl",
        ]
        try {
          for (const policy of policies) {
            server!.cli("CONFIG", "SET", "maxmemory-policy", policy)
            const { exit } = yield* withWarnings(
              Effect.scoped(RedisConnection.make({ url: url() })),
            )
            assert.strictEqual(refusal(exit).policy, policy)
          }
          server!.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
          const { exit, warnings } = yield* withWarnings(
            Effect.scoped(RedisConnection.make({ url: url() })),
          )
          assert.strictEqual(exit._tag, "Success")
          assert.deepStrictEqual(warnings, [])
        } finally {
          server!.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        }
      }),
    )

    it.live(
      "a least-privilege user (no CONFIG) is refused all the same: INFO memory says it, and nothing lands in the ACL log",
      () =>
        Effect.gen(function* () {
          const user = `evict-${kind}`
          server!.cli(
            "ACL",
            "SETUSER",
            user,
            "reset",
            "on",
            ">pw",
            ...aclRules({ xackdel: kind === "redis8" }),
          )
          server!.cli("ACL", "LOG", "RESET")
          const { exit } = yield* withWarnings(
            Effect.scoped(RedisConnection.make({ url: url(), username: user, password: "pw" })),
          )
          assert.strictEqual(refusal(exit).policy, "allkeys-lru")
          assert.notInclude(server!.cli("ACL", "LOG").toLowerCase(), "config")
        }),
    )
  })
}

describe("an eviction under a group that does not read (redis7, maxmemory 4mb, allkeys-lru, allowEviction)", () => {
  let server: RedisServer | undefined
  beforeAll(async () => {
    server = await startRedis({
      kind: "redis7",
      args: [
        "--maxmemory",
        "4mb",
        "--maxmemory-policy",
        "allkeys-lru",
        "--maxmemory-samples",
        "10",
      ],
    })
  }, 120_000)
  afterAll(async () => {
    await server?.stop()
  })

  it.live(
    "the shard's keys evicted by other writes: its next fenced read is refused (OwnerTokenMissing or DataLost), never an empty batch",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const connection = yield* RedisConnection.make({ url: server!.url, allowEviction: true })
          const streams = RedisShardStreams.makeWith(connection)
          const base = { stream: "paused", shard: 0, group: "g" }
          yield* streams.setOwnerToken({ ...base, token: 7 })
          for (let i = 0; i < 20; i++) yield* streams.append("paused", 0, { n: String(i) })
          const [first] = yield* streams.read({ ...base, consumer: "c", token: 7, count: 1 })
          assert.isDefined(first)
          // the group pauses: its keys idle past the LRU clock's second (setup, not an assertion)
          yield* Effect.sleep(2_100)
          const token = connection.keys.ownerTokenKey("paused", 0, "g")
          const stream = connection.keys.shardKey("paused", 0)
          const exists = () =>
            Effect.promise(() => connection.client.exists(token, stream) as Promise<number>)
          // other writes fill the server until it evicts one of the shard's keys
          const junk = "j".repeat(1_024)
          for (let i = 0; (yield* exists()) === 2; i++) {
            assert.isBelow(i, 200_000, "nothing of the shard was evicted")
            yield* Effect.promise(() => connection.client.set(`other:${i}`, junk))
          }
          const read = yield* Effect.flip(
            streams.read({ ...base, consumer: "c", token: 7, count: 100 }),
          )
          assert.include(["OwnerTokenMissing", "DataLost"], read._tag)
          const pending = yield* Effect.flip(
            streams.read({ ...base, consumer: "c", token: 7, count: 100, from: "pending" }),
          )
          assert.include(["OwnerTokenMissing", "DataLost"], pending._tag)
        }),
      ),
  )
})

describe("a cluster with one evicting master (redis7, 3 nodes)", () => {
  let cluster: RedisCluster | undefined
  beforeAll(async () => {
    cluster = await startRedisCluster({ kind: "redis7" })
    cluster.servers[1]!.cli("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
  }, 180_000)
  afterAll(async () => {
    await cluster?.stop()
  })

  it.live("every master is checked: refused naming that node alone; allowEviction warns", () =>
    Effect.gen(function* () {
      const nodes = cluster!.nodes
      const evicting = `${nodes[1]!.host}:${nodes[1]!.port}`
      const { exit } = yield* withWarnings(
        Effect.scoped(RedisConnection.make({ cluster: { nodes } })),
      )
      const error = refusal(exit)
      assert.strictEqual(error.policy, "volatile-lru")
      assert.deepStrictEqual(error.nodes, [`${evicting} (volatile-lru)`])
      const allowed = yield* withWarnings(
        Effect.scoped(RedisConnection.make({ cluster: { nodes }, allowEviction: true })),
      )
      assert.strictEqual(allowed.exit._tag, "Success")
      // one eviction warning (this cluster also runs Redis' default
      // cluster-require-full-coverage yes, which has a warning of its own)
      const eviction = allowed.warnings.filter((w) => w.includes("evicts keys"))
      assert.strictEqual(eviction.length, 1)
      assert.include(eviction[0]!, `${evicting} (volatile-lru)`)
    }),
  )
})

describe("where the policy comes from", () => {
  /** A node that answers INFO memory and CONFIG GET as given (a thrown reply: refused). */
  const node = (info: string | Error, config: ReadonlyArray<string> | Error) =>
    ({
      info: () => (info instanceof Error ? Promise.reject(info) : Promise.resolve(info)),
      config: () => (config instanceof Error ? Promise.reject(config) : Promise.resolve(config)),
    }) as unknown as Redis

  it.live("INFO memory first; CONFIG GET when INFO does not say it", () =>
    Effect.gen(function* () {
      const fromInfo = yield* Effect.promise(() =>
        RedisConnection.evictionPolicyOf(
          node("# Memory\r\nmaxmemory_policy:allkeys-lru\r\n", new Error("NOPERM")),
        ),
      )
      assert.strictEqual(fromInfo, "allkeys-lru")
      const fromConfig = yield* Effect.promise(() =>
        RedisConnection.evictionPolicyOf(
          node("# Memory\r\n", ["maxmemory-policy", "volatile-ttl"]),
        ),
      )
      assert.strictEqual(fromConfig, "volatile-ttl")
      const { exit } = yield* withWarnings(
        RedisConnection.checkEviction(
          node(new Error("ERR"), ["maxmemory-policy", "allkeys-lfu"]),
          "a:1",
          false,
        ),
      )
      assert.strictEqual(refusal(exit).policy, "allkeys-lfu")
    }),
  )

  it.live("neither readable: a warning that says so, not a refusal", () =>
    Effect.gen(function* () {
      const { exit, warnings } = yield* withWarnings(
        RedisConnection.checkEviction(
          node("# Memory\r\n", new Error("ERR unknown command 'CONFIG'")),
          "managed:6379",
          false,
        ),
      )
      assert.strictEqual(exit._tag, "Success")
      assert.strictEqual(warnings.length, 1)
      assert.include(warnings[0]!, "could not read maxmemory-policy on managed:6379")
    }),
  )
})
