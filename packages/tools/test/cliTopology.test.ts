/**
 * The CLI on the wrong thing, and on Redis Sentinel (issue 32, items 6 and
 * 8; redis-store's test/topology.test.ts has the connection's own):
 *
 * - a server that accepts TCP connections and never answers: one line,
 *   exit 2, within `--connect-timeout`;
 * - `--redis` at a node of the 3-node cluster, `--cluster` at one server:
 *   `TopologyMismatch`, named;
 * - Sentinel (a primary, a replica, 3 sentinels: `startRedisSentinel`):
 *   `--sentinels --sentinel-name` reach the primary, and their usage errors.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  type RedisSentinel,
  startRedisSentinel,
  startSilentServer,
} from "@shardline/redis-store/testing"
import { Effect } from "effect"
import { afterAll, beforeAll, inject } from "vitest"
import { unique } from "../../redis-store/test/support/targets.js"
import { runCli } from "./support/cli.js"

/** A server that never answers (`startSilentServer`), closed with the scope. */
const silentServer = Effect.acquireRelease(Effect.promise(startSilentServer), (silent) =>
  Effect.promise(silent.close),
)

describe("a server that accepts connections and never answers", () => {
  it.live("the CLI: one line, exit 2, within --connect-timeout", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { port } = yield* silentServer
        const run = yield* runCli([
          "inspect",
          "--redis",
          `redis://127.0.0.1:${port}`,
          "--connect-timeout",
          "300",
          "--stream",
          "s",
          "--group",
          "g",
        ])
        assert.strictEqual(run.code, 2, run.stderr)
        assert.match(run.stderr, /^shardline: cannot reach Redis/)
        assert.include(run.stderr, `to 127.0.0.1:${port} got no answer within 300 ms`)
        assert.strictEqual(run.stderr.trim().split("\n").length, 1)
      }),
    ),
  )
})

const cluster = inject("cluster7")
const redis7 = inject("redis7")

describe("a single-node URL aimed at a cluster node, cluster nodes that are one server", () => {
  it.live("the CLI names them too: --redis at a cluster node, --cluster at one server", () =>
    Effect.gen(function* () {
      if (!cluster.ok || !redis7.ok) return yield* Effect.die(new Error("a server did not start"))
      const node = `${cluster.nodes[0]!.host}:${cluster.nodes[0]!.port}`
      const single = `${redis7.host}:${redis7.port}`
      const atNode = yield* runCli([
        "groups",
        "list",
        "--redis",
        `redis://${node}`,
        "--stream",
        "s",
      ])
      assert.strictEqual(atNode.code, 2, atNode.stderr)
      assert.match(
        atNode.stderr,
        new RegExp(
          `^shardline: TopologyMismatch: ${node} is a Redis Cluster node \\(MOVED\\): use \`nodes\``,
        ),
      )
      const atSingle = yield* runCli(["groups", "list", "--cluster", single, "--stream", "s"])
      assert.strictEqual(atSingle.code, 2, atSingle.stderr)
      assert.match(
        atSingle.stderr,
        new RegExp(`^shardline: TopologyMismatch: ${single} is not a cluster`),
      )
    }),
  )
})

describe("Redis Sentinel: a primary, a replica and 3 sentinels", () => {
  let deployment: RedisSentinel | undefined
  beforeAll(async () => {
    deployment = await startRedisSentinel({ kind: "redis7" })
  }, 120_000)
  afterAll(async () => {
    await deployment?.stop()
  })
  const d = () => {
    if (deployment === undefined) throw new Error("the Sentinel deployment did not start")
    return deployment
  }

  it.live(
    "the CLI: --sentinels host:port,... --sentinel-name",
    () =>
      Effect.gen(function* () {
        const sentinels = d()
          .sentinels.map((s) => `${s.host}:${s.port}`)
          .join(",")
        const stream = unique("cli-sentinel")
        // it reached the primary: the answer is about the data, not the connection
        const missing = yield* runCli([
          "inspect",
          "--sentinels",
          sentinels,
          "--sentinel-name",
          d().name,
          "--stream",
          stream,
          "--group",
          "g",
        ])
        assert.strictEqual(missing.code, 2)
        assert.match(
          missing.stderr,
          /^shardline: group g on stream cli-sentinel-\w+ does not exist/,
        )
        for (const [args, message] of [
          [["--sentinels", sentinels], "--sentinel-name is required"],
          [["--sentinels", "10.0.0.1", "--sentinel-name", "m"], "--sentinels takes host:port"],
          [
            ["--redis", "redis://h:1", "--sentinels", sentinels, "--sentinel-name", "m"],
            "give one of --redis, --cluster and --sentinels",
          ],
          [
            ["--redis", "redis://h:1", "--sentinel-name", "m"],
            "--sentinel-name goes with --sentinels",
          ],
        ] as const) {
          const usage = yield* runCli(["groups", "list", ...args, "--stream", stream])
          assert.strictEqual(usage.code, 64, usage.stderr)
          assert.include(usage.stderr, message)
        }
      }),
    // five CLI processes: the 60 s default ran out at load 22
    180_000,
  )
})
