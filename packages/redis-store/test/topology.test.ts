/**
 * Connecting to the wrong thing fails at once, typed, naming the address
 * (issue 32, item 8):
 *
 * - a server that accepts TCP connections and never answers: `make` fails
 *   `BackendUnavailable` at its deadline (`connectTimeoutMs`) naming
 *   host:port and the command that got no answer, and so does the CLI
 *   (`--connect-timeout`); before, both stayed pending;
 * - a single-node URL (or host/port) aimed at a node of the 3-node cluster:
 *   `TopologyMismatch` "a Redis Cluster node (MOVED): use `nodes`" (before,
 *   it connected, and every key of another node's slots was answered MOVED);
 * - cluster nodes that are one server: `TopologyMismatch` "not a cluster",
 *   not ioredis' "Failed to refresh slots cache".
 */
import net from "node:net"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { inject } from "vitest"
import * as RedisConnection from "../src/RedisConnection.js"
import { runCli } from "./support/cli.js"

/**
 * A TCP server that accepts every connection and never writes a byte (a
 * hung process, a port forwarded to nothing), closed with the scope.
 */
const silentServer = Effect.acquireRelease(
  Effect.promise(async () => {
    const sockets = new Set<net.Socket>()
    const server = net.createServer((socket) => {
      sockets.add(socket)
      socket.on("error", () => {})
      socket.on("close", () => sockets.delete(socket))
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    return { server, sockets, port: (server.address() as net.AddressInfo).port }
  }),
  ({ server, sockets }) =>
    Effect.promise(
      () =>
        new Promise<void>((resolve) => {
          for (const socket of sockets) socket.destroy()
          server.close(() => resolve())
        }),
    ),
)

describe("a server that accepts connections and never answers", () => {
  it.live(
    "make fails BackendUnavailable at connectTimeoutMs, naming host:port and the unanswered command",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { port } = yield* silentServer
          const error = yield* Effect.flip(
            Effect.scoped(
              RedisConnection.make({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 300 }),
            ),
          )
          assert.strictEqual(error._tag, "BackendUnavailable")
          assert.strictEqual((error as { operation?: string }).operation, "connect")
          assert.include(
            error.message,
            `cannot connect to Redis at redis://127.0.0.1:${port}: CLIENT SETINFO to 127.0.0.1:${port} got no answer within 300 ms (it accepted the TCP connection)`,
          )
          // with a password the first command is AUTH: named, its arguments never
          const withAuth = yield* Effect.flip(
            Effect.scoped(
              RedisConnection.make({
                host: "127.0.0.1",
                port,
                username: "app",
                password: "s3cret",
                connectTimeoutMs: 300,
              }),
            ),
          )
          assert.include(withAuth.message, `AUTH to 127.0.0.1:${port} got no answer within 300 ms`)
          assert.notInclude(withAuth.message, "s3cret")
        }),
      ),
  )

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
  it.live(
    "a cluster node's URL, or host and port: TopologyMismatch, a Redis Cluster node (MOVED): use `nodes`",
    () =>
      Effect.gen(function* () {
        if (!cluster.ok) return yield* Effect.die(new Error(cluster.error))
        const node = cluster.nodes[1]!
        const at = `${node.host}:${node.port}`
        for (const options of [
          { url: `redis://${at}` },
          { host: node.host, port: node.port },
        ] satisfies Array<RedisConnection.RedisConnectionOptions>) {
          const error = yield* Effect.flip(Effect.scoped(RedisConnection.make(options)))
          assert.strictEqual(error._tag, "TopologyMismatch")
          assert.deepInclude(error, { expected: "standalone", found: "cluster", address: at })
          assert.include(error.message, `${at} is a Redis Cluster node (MOVED): use \`nodes\``)
          assert.include(error.message, `--cluster ${at}`)
        }
      }),
  )

  it.live("cluster nodes that are one server: TopologyMismatch, not a cluster", () =>
    Effect.gen(function* () {
      if (!redis7.ok) return yield* Effect.die(new Error(redis7.error))
      const at = `${redis7.host}:${redis7.port}`
      const error = yield* Effect.flip(
        Effect.scoped(RedisConnection.make({ cluster: { nodes: [at] } })),
      )
      assert.strictEqual(error._tag, "TopologyMismatch")
      assert.deepInclude(error, { expected: "cluster", found: "standalone", address: at })
      assert.include(error.message, `${at} is not a cluster`)
      assert.include(error.message, `redis: { url: "redis://${at}" }`)
      assert.notInclude(error.message, "Failed to refresh slots cache")
    }),
  )

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
