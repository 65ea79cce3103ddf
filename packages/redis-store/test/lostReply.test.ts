/**
 * A read whose reply is lost after Redis ran it (docs/redis.md,
 * "Connections"): the read must fail, so its caller reads its pending
 * entries again, and must never be run a second time behind the caller's
 * back. A second XREADGROUP `>` returns the NEXT entries: the first run's
 * entries stay pending with the consumer, unhandled until the shard changes
 * owner, while later entries of the same keys are handled (per-key order
 * broken). The member runtime's availability test found it on a 3-node
 * cluster restarted under load (ioredis' Cluster re-sends a command whose
 * connection closed, `retryDelayOnFailover`).
 *
 * A proxy in front of each node (`startProxy` of src/testing.ts; ioredis' `natMap`
 * sends the cluster's connections through them) lets one request through
 * and loses its reply. The same for a transaction's commit, at the end.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { describe, inject } from "vitest"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { startProxy, type TcpProxy } from "../src/testing.js"
import { unique } from "./support/targets.js"

/**
 * Append 3 entries, read one (the read path is warm: scripts loaded,
 * connections open), lose the reply of the next read of the rest, then
 * compare what that read returned with what Redis recorded as delivered.
 */
const loseOneRead = (
  connection: RedisConnection.RedisConnectionShape,
  proxyOf: (key: string) => Effect.Effect<TcpProxy>,
  options: RedisShardStreams.ShardStreamsOptions = {},
) =>
  Effect.gen(function* () {
    const streams = RedisShardStreams.makeWith(connection, options)
    const stream = unique("lost-reply")
    const address = { stream, shard: 0, group: "g", consumer: "c1", token: 0 }
    yield* streams.setOwnerToken({ stream, shard: 0, group: "g", token: 0 })
    for (const k of ["a", "b", "c"]) yield* streams.append(stream, 0, { k })
    const [first] = yield* streams.read({ ...address, count: 1 })
    yield* streams.ack({ ...address, ids: [first!.id], mode: "ack" })
    const proxy = yield* proxyOf(connection.keys.shardKey(stream, 0))
    proxy.loseNextReply()
    const read = yield* Effect.exit(streams.read({ ...address, count: 10 }))
    const lost = proxy.lost()
    const pending = (yield* Effect.promise(() =>
      connection.client.xpending(connection.keys.shardKey(stream, 0), "g", "-", "+", 10),
    )) as Array<[string, string, number, number]>
    return { read, lost, pending: pending.map(([id]) => id) }
  })

/**
 * Redis 7.0 behind a proxy, and a connection through it (closed with the
 * test's scope).
 */
const proxiedNode = Effect.gen(function* () {
  const server = inject("redis7")
  if (!server.ok) return yield* Effect.die(new Error(server.error))
  const proxy = yield* Effect.acquireRelease(
    Effect.promise(() => startProxy({ host: server.host, port: server.port })),
    (p) => Effect.promise(() => p.close()),
  )
  const connection = yield* RedisConnection.make({ host: "127.0.0.1", port: proxy.port })
  return { proxy, connection }
})

describe("a read whose reply is lost", () => {
  it.live("on a 3-node cluster: it fails, and is not run again behind the caller's back", () =>
    Effect.gen(function* () {
      const cluster = inject("cluster7")
      if (!cluster.ok) return yield* Effect.die(new Error(cluster.error))
      const proxies = yield* Effect.acquireRelease(
        Effect.promise(() => Promise.all(cluster.nodes.map((n) => startProxy(n)))),
        (ps) => Effect.promise(() => Promise.all(ps.map((p) => p.close()))),
      )
      const natMap = Object.fromEntries(
        cluster.nodes.map((n, i) => [
          `${n.host}:${n.port}`,
          { host: "127.0.0.1", port: proxies[i]!.port },
        ]),
      )
      const connection = yield* RedisConnection.make({
        cluster: {
          nodes: proxies.map((p) => ({ host: "127.0.0.1", port: p.port })),
          options: { natMap },
        },
      })
      // the proxy of the node that serves the shard's slot
      const proxyOf = (key: string) =>
        Effect.promise(async () => {
          const slot = Number(await connection.client.call("CLUSTER", "KEYSLOT", key))
          const ranges = (await connection.client.call("CLUSTER", "SLOTS")) as Array<
            [number, number, [string, number]]
          >
          const [, , [, port]] = ranges.find(([from, to]) => from <= slot && slot <= to)!
          return proxies[cluster.nodes.findIndex((n) => n.port === Number(port))]!
        })
      const { read, lost, pending } = yield* loseOneRead(connection, proxyOf)
      assert.strictEqual(lost, 1, "one reply was lost")
      // Redis ran it: both entries are pending with the consumer ...
      assert.strictEqual(pending.length, 2)
      // ... so the caller must know the read failed (it then reads its pending entries)
      assert.isTrue(
        Exit.isFailure(read),
        `the read failed; it returned ${Exit.isSuccess(read) ? JSON.stringify(read.value.map((m) => m.id)) : "-"} while Redis delivered ${JSON.stringify(pending)}`,
      )
    }).pipe(Effect.scoped),
  )

  it.live("on one node (the gated read, its own connection): it fails", () =>
    Effect.gen(function* () {
      const { proxy, connection } = yield* proxiedNode
      const { read, lost, pending } = yield* loseOneRead(connection, () => Effect.succeed(proxy))
      assert.strictEqual(lost, 1, "one reply was lost")
      assert.strictEqual(pending.length, 2)
      assert.isTrue(Exit.isFailure(read), "the read failed (its outcome is unknown)")
    }).pipe(Effect.scoped),
  )

  it.live(
    "on one node (the script read, on the shared command connection): it fails, and the connection serves the next command",
    () =>
      Effect.gen(function* () {
        const { proxy, connection } = yield* proxiedNode
        const { read, lost, pending } = yield* loseOneRead(
          connection,
          () => Effect.succeed(proxy),
          { read: "script" },
        )
        assert.strictEqual(lost, 1, "one reply was lost")
        // Redis ran it once: both entries are pending (a second run would have
        // found nothing new, and the caller would have got an empty read)
        assert.strictEqual(pending.length, 2)
        assert.isTrue(
          Exit.isFailure(read),
          `the read failed; it returned ${Exit.isSuccess(read) ? JSON.stringify(read.value.map((m) => m.id)) : "-"} while Redis delivered ${JSON.stringify(pending)}`,
        )
        // the command connection reconnects and works on
        assert.strictEqual(yield* Effect.promise(() => connection.client.ping()), "PONG")
      }).pipe(Effect.scoped),
  )
})

/**
 * A commit whose reply is lost after Redis ran it (docs/exactly-once.md, "Why
 * this is exactly once"): the caller cannot tell whether it committed, so it
 * sends it again, and the commit's pending check makes the second run write
 * nothing. Here the reply is lost on the wire (the proxy closes the
 * connection after Redis answered), not simulated by calling twice.
 */
describe("a commit whose reply is lost", () => {
  it.live("on one node: sent again, it is AlreadyCommitted and its writes happen once", () =>
    Effect.gen(function* () {
      const { proxy, connection } = yield* proxiedNode
      const streams = RedisShardStreams.makeWith(connection)
      const stream = unique("lost-commit")
      const base = { stream, shard: 0, group: "g" }
      yield* streams.setOwnerToken({ ...base, token: 3 })
      for (const k of ["a", "b"]) yield* streams.append(stream, 0, { k })
      const read = yield* streams.read({ ...base, token: 3, consumer: "c1", count: 10 })
      const tx = streams.transactions!
      const counter = tx.keys(stream, 0).key("counter")
      const commit = {
        ...base,
        token: 3,
        ids: read.map((m) => m.id),
        mode: "ack" as const,
        writes: [{ command: "INCRBY", args: [counter, "5"] }],
        sends: [],
      }
      proxy.loseNextReply()
      const first = yield* Effect.exit(tx.commit(commit))
      assert.strictEqual(proxy.lost(), 1, "one reply was lost")
      // whatever the caller saw of the first run (a failure, or the outcome of
      // a run the client sent again itself), a second send writes nothing more
      const again = yield* tx.commit(commit)
      assert.deepStrictEqual(
        again,
        { _tag: "AlreadyCommitted" },
        `the commit sent again (the first: ${Exit.isFailure(first) ? "failed" : JSON.stringify(first.value)})`,
      )
      assert.deepStrictEqual(yield* tx.read(counter), { type: "string", value: "5" })
      const pending = yield* Effect.promise(() =>
        connection.client.xpending(connection.keys.shardKey(stream, 0), "g"),
      )
      assert.strictEqual(Number((pending as [number])[0]), 0, "nothing left pending")
    }).pipe(Effect.scoped),
  )
})
