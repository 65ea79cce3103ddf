/**
 * The gated fence in a Redis Cluster (docs/redis.md, "The gated fence in a
 * cluster"), on a 3-node Redis 7.0 cluster of this file's own (its slots are
 * moved, its connections killed): each read's MULTI goes to the node that
 * owns the shard's slot on a wire of that node; a transaction that reaches a
 * node not owning the slot (a stale slot map, a slot migrating) is refused
 * by Redis whole and touches nothing, and the read takes the script; a
 * dropped wire fails the read and is replaced, never resent.
 */
import type { ShardStreams } from "@shardline/core"
import { Cause, Effect, Exit, Scope } from "effect"
import { Redis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { clusterRoute } from "../src/internal/clusterGatedRead.js"
import { type GatedRoute, makeGatedReader, ready } from "../src/internal/gatedRead.js"
import { adopt, type Wire } from "../src/internal/wire.js"
import { defaultKeys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import { Scripts } from "../src/scripts.js"
import {
  clusterNodeArgs,
  type RedisCluster,
  startProxy,
  startRedis,
  startRedisCluster,
} from "../src/testing.js"
import { unique } from "./support/targets.js"

const { gateKey, ownerTokenKey, shardKey } = defaultKeys
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

let cluster: RedisCluster
/** An admin connection to each node (plain, not cluster-aware). */
let admins: Array<Redis>
let ids: Array<string>
const scope = Scope.makeUnsafe()
let connection: RedisConnection.RedisConnectionShape
let streams: ShardStreams.ShardStreamsShape

beforeAll(async () => {
  cluster = await startRedisCluster({ kind: "redis7" })
  admins = cluster.nodes.map((n) => new Redis(n.port, n.host))
  ids = await Promise.all(admins.map((a) => a.call("CLUSTER", "MYID") as Promise<string>))
  // no periodic refresh of the slot map: a test decides when it is stale
  connection = await run(
    Scope.provide(
      RedisConnection.make({
        cluster: { nodes: cluster.nodes, options: { slotsRefreshInterval: 0 } },
      }),
      scope,
    ),
  )
  streams = RedisShardStreams.makeWith(connection)
})

afterAll(async () => {
  await run(Scope.close(scope, Exit.void))
  for (const a of admins ?? []) a.disconnect()
  await cluster?.stop()
})

const slotOf = (key: string) =>
  admins[0]!.call("CLUSTER", "KEYSLOT", key).then(Number) as Promise<number>

/** The index of the node that owns `slot`, as the nodes themselves say (CLUSTER SLOTS). */
const ownerOf = async (slot: number, asked = 0) => {
  const ranges = (await admins[asked]!.call("CLUSTER", "SLOTS")) as Array<
    [number, number, [string, number]]
  >
  const [, , [, port]] = ranges.find(([from, to]) => from <= slot && slot <= to)!
  return cluster.nodes.findIndex((n) => n.port === Number(port))
}

/** A refusal as its first word (MOVED, ASK, ...): a node that does not serve the key says so. */
const word = (e: Error) => e.message.split(" ")[0]!

/**
 * What a read could have changed, on the node `at`: the stream, its group,
 * the gate key, how many keys the node holds (a node that does not serve
 * the slot answers MOVED / ASK instead of the key's state).
 */
const stateOn = async (at: number, stream: string) => {
  const a = admins[at]!
  const key = shardKey(stream, 0)
  const [type, gate, groups, size] = await Promise.all([
    a.type(key).catch(word),
    a.exists(gateKey(stream, 0)).catch(word),
    a.call("XINFO", "GROUPS", key).catch(() => []) as Promise<Array<Array<unknown>>>,
    a.dbsize(),
  ])
  const group = groups.map((g) => {
    const o: Record<string, unknown> = {}
    for (let i = 0; i < g.length; i += 2) o[String(g[i])] = g[i + 1]
    return { name: o.name, pending: o.pending, delivered: o["last-delivered-id"] }
  })
  return { type, gate, group, size }
}

/** EXEC calls each node has run so far (only the gated read sends EXEC here). */
const execs = () =>
  Promise.all(
    admins.map(async (a) => {
      const info = await a.info("commandstats")
      return Number(/cmdstat_exec:calls=(\d+)/.exec(info)?.[1] ?? 0)
    }),
  )

/** A shard with `n` entries after one read and acked, token 3; its stream, slot and owner. */
const seeded = async (prefix: string, n: number) => {
  const stream = unique(prefix)
  const base = { stream, shard: 0, group: "g" }
  await run(streams.setOwnerToken({ ...base, token: 3 }))
  for (let i = 0; i <= n; i++) await run(streams.append(stream, 0, { i: String(i) }))
  const [first] = await run(streams.read({ ...base, consumer: "c", token: 3, count: 1 }))
  await run(streams.ack({ ...base, token: 3, ids: [first!.id], mode: "ack" }))
  const slot = await slotOf(shardKey(stream, 0))
  return { stream, base, slot, owner: await ownerOf(slot) }
}

/** Moves `slot` from node `from` to node `to` in the steps Redis Cluster does. */
const migration = (slot: number, from: number, to: number) => ({
  begin: async () => {
    await admins[to]!.call("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]!)
    await admins[from]!.call("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]!)
  },
  move: async (keys?: ReadonlyArray<string>) => {
    const all =
      keys ?? ((await admins[from]!.call("CLUSTER", "GETKEYSINSLOT", slot, 1000)) as Array<string>)
    if (all.length === 0) return
    const target = cluster.nodes[to]!
    await admins[from]!.call("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", ...all)
  },
  finish: async () => {
    await admins[to]!.call("CLUSTER", "SETSLOT", slot, "NODE", ids[to]!)
    await admins[from]!.call("CLUSTER", "SETSLOT", slot, "NODE", ids[to]!)
    for (let i = 0; i < admins.length; i++)
      if (i !== from && i !== to)
        await admins[i]!.call("CLUSTER", "SETSLOT", slot, "NODE", ids[to]!)
  },
})

/** A route that sends every transaction to node `at`, whatever owns the slot (a stale slot map). */
const routeTo = async (at: number) => {
  const client = new Redis(cluster.nodes[at]!.port, cluster.nodes[at]!.host, {
    retryStrategy: () => null,
  })
  await ready(client)
  const inner = adopt(client)
  /** The transactions (MULTI ... EXEC) of each write on the wire. */
  const writes: Array<number> = []
  const wire = Promise.resolve<Wire>({
    ...inner,
    send: (commands) => {
      writes.push(commands.filter(([name]) => name === "MULTI").length)
      return inner.send(commands)
    },
  })
  const redirections: Array<string> = []
  const route: GatedRoute = {
    open: () => wire,
    drop: () => {},
    redirected: (error) => redirections.push(error.message),
  }
  return { route, redirections, writes, close: () => inner.close() }
}

describe("the gated fence on a 3-node cluster", () => {
  it("each read is one MULTI on the node that owns its shard's slot; nothing through the script", async () => {
    const reader = makeGatedReader(connection, clusterRoute(connection))
    const shards = await Promise.all(Array.from({ length: 6 }, (_, i) => seeded(`routed-${i}`, 3)))
    const owners = new Set(shards.map((s) => s.owner))
    assert.isAtLeast(owners.size, 2, "the shards are spread over several nodes")
    // both gates cached on every node: a first use (NOSCRIPT, then EVAL) would count twice
    for (const a of admins)
      for (const lua of [Scripts.gate.lua, Scripts.gateFast.lua]) await a.script("LOAD", lua)
    const before = await execs()
    for (const { base } of shards) {
      const first = await reader.read({ ...base, consumer: "c", token: 3, count: 2 }, undefined)
      assert.strictEqual(first._tag, "Read", JSON.stringify(first))
      const ids = first._tag === "Read" ? first.messages.map((m) => m.id) : []
      const next = await reader.read(
        { ...base, consumer: "c", token: 3, count: 2 },
        { ids, mode: "ack" },
      )
      assert.deepStrictEqual(next._tag === "Read" ? next.messages.map((m) => m.fields.i) : next, [
        "3",
      ])
    }
    const after = await execs()
    // two transactions per shard, each on its slot's owner and nowhere else
    for (let node = 0; node < admins.length; node++)
      assert.strictEqual(
        after[node]! - before[node]!,
        2 * shards.filter((s) => s.owner === node).length,
        `EXECs on node ${node}`,
      )
    for (const { stream, owner } of shards) {
      const state = await stateOn(owner, stream)
      assert.strictEqual(state.type, "stream")
      assert.strictEqual(state.gate, 0)
      assert.deepStrictEqual(
        state.group.map((g) => g.pending),
        [1],
      )
    }
  })

  it("a read after a commit's ack (afterAck) takes the lean gate on its slot's node: no unread check (XINFO), the same fence", async () => {
    const reader = makeGatedReader(connection, clusterRoute(connection))
    const { stream, base, owner } = await seeded("after-ack", 2)
    /** XINFO calls on the shard's node so far (the full gate's unread check runs it). */
    const xinfos = async () =>
      Number(
        /cmdstat_xinfo\|groups:calls=(\d+)/.exec(await admins[owner]!.info("commandstats"))?.[1] ??
          0,
      )
    const read = (afterAck: boolean, token = 3) =>
      reader.read({ ...base, consumer: "c", token, count: 10, afterAck }, undefined)
    const first = await read(true)
    assert.deepStrictEqual(first._tag === "Read" ? first.messages.map((m) => m.fields.i) : first, [
      "1",
      "2",
    ])
    // nothing unread: the full gate asks (XINFO GROUPS), the lean gate does not
    const before = await xinfos()
    assert.deepStrictEqual(await read(false), { _tag: "Read", messages: [] })
    const checked = await xinfos()
    assert.strictEqual(checked - before, 1, "the full gate checks for unread entries")
    assert.deepStrictEqual(await read(true), { _tag: "Read", messages: [] })
    assert.strictEqual(await xinfos(), checked, "afterAck did not take the lean gate")
    // the fence first: a stale owner reads nothing, the stream stays at its key
    await run(streams.setOwnerToken({ ...base, token: 4 }))
    await run(streams.append(stream, 0, { i: "3" }))
    assert.deepStrictEqual(await read(true), { _tag: "Stale", current: 4 })
    const state = await stateOn(owner, stream)
    assert.strictEqual(state.type, "stream")
    assert.strictEqual(state.gate, 0)
    assert.deepStrictEqual(
      state.group.map((g) => g.pending),
      [2],
    )
  })

  it("a transaction sent to a node that does not own the slot (a stale slot map) runs nothing there or anywhere: refused (MOVED), then the script", async () => {
    const { stream, base, owner } = await seeded("stale-map", 4)
    const wrong = (owner + 1) % admins.length
    const { route, redirections, close } = await routeTo(wrong)
    try {
      const reader = makeGatedReader(connection, route)
      const [a] = await run(streams.read({ ...base, consumer: "c", token: 3, count: 1 }))
      const before = await Promise.all([stateOn(owner, stream), stateOn(wrong, stream)])
      // every shape of the gated read: acking natively (gate-fast), acking in the
      // gate (an xackdel before Redis 8.2), acking nothing (if-unread); a stale token too
      for (const [token, ack] of [
        [3, { ids: [a!.id], mode: "ack" }],
        [3, { ids: [a!.id], mode: "xackdel" }],
        [3, undefined],
        [2, { ids: [a!.id], mode: "ack" }],
      ] as const) {
        const result = await reader.read({ ...base, consumer: "c", token, count: 10 }, ack)
        assert.deepStrictEqual(result, { _tag: "Fallback" })
      }
      assert.strictEqual(redirections.length, 4)
      for (const r of redirections) assert.match(r, /^MOVED /)
      const after = await Promise.all([stateOn(owner, stream), stateOn(wrong, stream)])
      assert.deepStrictEqual(after, before, "nothing read, acked or renamed on either node")
      assert.strictEqual(after[1]!.type, "MOVED")
      // the read the runtime makes goes on through the script, on the owner
      const rest = await run(
        streams.read({
          ...base,
          consumer: "c",
          token: 3,
          count: 10,
          ack: { ids: [a!.id], mode: "ack" },
        }),
      )
      assert.deepStrictEqual(
        rest.map((m) => m.fields.i),
        ["2", "3", "4"],
      )
    } finally {
      await close()
    }
  })

  it("reads of one node ready together leave in one write, a transaction each (one MULTI across slots is CROSSSLOT), each judged alone: a slot moved under the burst refuses only its own read", async () => {
    // three shards on one node
    const shards = [await seeded("burst", 3)]
    while (shards.length < 3) {
      const s = await seeded("burst", 3)
      if (s.owner === shards[0]!.owner) shards.push(s)
    }
    const [moved, stale, current] = shards as [
      (typeof shards)[0],
      (typeof shards)[0],
      (typeof shards)[0],
    ]
    const { owner } = moved
    // Redis refuses one MULTI over keys of two slots: why each read keeps its own
    const cross = await admins[owner]!.multi()
      .xlen(shardKey(stale.stream, 0))
      .xlen(shardKey(current.stream, 0))
      .exec()
      .then(
        () => undefined,
        (error: Error) => error.message,
      )
    assert.match(String(cross), /CROSSSLOT/)
    const to = (owner + 1) % admins.length
    const { route, redirections, writes, close } = await routeTo(owner)
    try {
      const reader = makeGatedReader(connection, route)
      const acks = await Promise.all(
        shards.map(async ({ base }) => {
          const [a] = await run(streams.read({ ...base, consumer: "c", token: 3, count: 1 }))
          return { ids: [a!.id], mode: "ack" } as const
        }),
      )
      // `moved`'s slot goes to another node (the route still names the old owner);
      // `stale`'s owner token is raised
      const move = migration(moved.slot, owner, to)
      await move.begin()
      await move.move()
      await move.finish()
      await run(streams.setOwnerToken({ ...stale.base, token: 4 }))
      const before = await Promise.all([
        stateOn(to, moved.stream),
        stateOn(owner, stale.stream),
        stateOn(owner, current.stream),
      ])
      writes.length = 0
      const results = await Promise.all(
        shards.map(({ base }, i) =>
          reader.read({ ...base, consumer: "c", token: 3, count: 10 }, acks[i]),
        ),
      )
      assert.deepStrictEqual(writes, [3], "one write, three transactions")
      assert.deepStrictEqual(results[0], { _tag: "Fallback" })
      assert.deepStrictEqual(results[1], { _tag: "Stale", current: 4 })
      assert.deepStrictEqual(
        results[2]!._tag === "Read" ? results[2]!.messages.map((m) => m.fields.i) : results[2],
        ["2", "3"],
      )
      assert.strictEqual(redirections.length, 1)
      assert.match(redirections[0]!, /^MOVED /)
      const after = await Promise.all([
        stateOn(to, moved.stream),
        stateOn(owner, stale.stream),
        stateOn(owner, current.stream),
      ])
      assert.deepStrictEqual(after[0], before[0], "nothing ran for the moved slot")
      assert.deepStrictEqual(after[1], before[1], "nothing ran for the stale token")
      // the current shard: its ack ran (entry 1 no longer pending), entries 2 and 3 delivered
      assert.deepStrictEqual(
        [after[2]!.gate, after[2]!.group[0]?.pending, before[2]!.group[0]?.pending],
        [0, 2, 1],
      )
      // the moved shard reads on through the script, on its new owner
      const rest = await run(
        streams.read({ ...moved.base, consumer: "c", token: 3, count: 10, ack: acks[0] }),
      )
      assert.deepStrictEqual(
        rest.map((m) => m.fields.i),
        ["2", "3"],
      )
    } finally {
      await close()
    }
  })

  it("a node's wire closed before its queued reads were written (retired, or failed): they take the script, nothing sent", async () => {
    const { base, owner } = await seeded("closed-wire", 2)
    const { route, writes, close } = await routeTo(owner)
    await close()
    const before = await execs()
    const reader = makeGatedReader(connection, route)
    const results = await Promise.all([
      reader.read({ ...base, consumer: "c", token: 3, count: 10 }, undefined),
      reader.read({ ...base, group: "h", consumer: "c", token: 3, count: 10 }, undefined),
    ])
    assert.deepStrictEqual(results, [{ _tag: "Fallback" }, { _tag: "Fallback" }])
    assert.deepStrictEqual(writes, [])
    assert.deepStrictEqual(await execs(), before)
  })

  it("a slot moved to another node: the old owner refuses the MULTI (MOVED), nothing runs; the script reads on, then the new owner's wire", async () => {
    const { stream, base, slot, owner } = await seeded("moved", 5)
    const reader = makeGatedReader(connection, clusterRoute(connection))
    const first = await reader.read({ ...base, consumer: "c", token: 3, count: 2 }, undefined)
    assert.strictEqual(first._tag, "Read")
    const acked = first._tag === "Read" ? first.messages.map((m) => m.id) : []
    const to = (owner + 1) % admins.length
    const move = migration(slot, owner, to)
    await move.begin()
    await move.move()
    await move.finish()
    // the client's slot map still names the old owner (no refresh yet)
    assert.strictEqual(
      (connection.client as import("ioredis").Cluster).slots[slot]?.[0],
      `${cluster.nodes[owner]!.host}:${cluster.nodes[owner]!.port}`,
    )
    const before = await stateOn(to, stream)
    const refused = await reader.read(
      { ...base, consumer: "c", token: 3, count: 2 },
      { ids: acked, mode: "ack" },
    )
    assert.deepStrictEqual(refused, { _tag: "Fallback" })
    assert.deepStrictEqual(await stateOn(to, stream), before, "nothing ran on the new owner")
    assert.strictEqual((await stateOn(owner, stream)).type, "MOVED")
    // through ShardStreams: the script follows MOVED
    const next = await run(
      streams.read({
        ...base,
        consumer: "c",
        token: 3,
        count: 2,
        ack: { ids: acked, mode: "ack" },
      }),
    )
    assert.deepStrictEqual(
      next.map((m) => m.fields.i),
      ["3", "4"],
    )
    // once the slot map is refreshed, gated reads go to the new owner
    for (let i = 0; i < 100; i++) {
      const key = (connection.client as import("ioredis").Cluster).slots[slot]?.[0]
      if (key === `${cluster.nodes[to]!.host}:${cluster.nodes[to]!.port}`) break
      await sleep(20)
    }
    const beforeExecs = await execs()
    const last = await reader.read(
      { ...base, consumer: "c", token: 3, count: 10 },
      { ids: next.map((m) => m.id), mode: "ack" },
    )
    assert.deepStrictEqual(last._tag === "Read" ? last.messages.map((m) => m.fields.i) : last, [
      "5",
    ])
    const afterExecs = await execs()
    assert.strictEqual(afterExecs[to]! - beforeExecs[to]!, 1)
    const state = await stateOn(to, stream)
    assert.deepStrictEqual([state.type, state.gate, state.group[0]?.pending], ["stream", 0, 1])
  })

  it("a slot migrating (keys on the source, on both sides, or moved): every gated read is refused whole (TRYAGAIN / ASK / MOVED without ASKING), nothing runs on either node", async () => {
    const { stream, base, slot, owner } = await seeded("migrating", 4)
    const to = (owner + 2) % admins.length
    const reader = makeGatedReader(connection, clusterRoute(connection))
    const [a] = await run(streams.read({ ...base, consumer: "c", token: 3, count: 1 }))
    const ack = { ids: [a!.id], mode: "ack" } as const
    const importing = await routeTo(to)
    const move = migration(slot, owner, to)
    const both = () => Promise.all([stateOn(owner, stream), stateOn(to, stream)])
    const refusedEverywhere = async (step: string) => {
      const before = await both()
      // to the source (the slot map's owner) and to the importing node
      for (const r of [reader, makeGatedReader(connection, importing.route)])
        for (const acking of [ack, undefined]) {
          const result = await r.read({ ...base, consumer: "c", token: 3, count: 10 }, acking)
          assert.deepStrictEqual(result, { _tag: "Fallback" }, step)
        }
      assert.deepStrictEqual(await both(), before, `${step}: nothing changed`)
    }
    try {
      await move.begin()
      await refusedEverywhere("migrating, every key on the source")
      // the owner token first: the stream on the source, its token on the target
      await move.move([ownerTokenKey(stream, 0, "g")])
      await refusedEverywhere("migrating, the keys split")
      await move.move()
      await refusedEverywhere("migrating, every key on the target")
      for (const r of importing.redirections) assert.match(r, /^MOVED /)
      // the script (the cluster client follows ASK with ASKING) reads on
      const rest = await run(streams.read({ ...base, consumer: "c", token: 3, count: 10, ack }))
      assert.deepStrictEqual(
        rest.map((m) => m.fields.i),
        ["2", "3", "4"],
      )
      await move.finish()
      const state = await stateOn(to, stream)
      assert.deepStrictEqual([state.type, state.gate, state.group[0]?.pending], ["stream", 0, 3])
    } finally {
      await importing.close()
    }
  })

  it("a slot moved after the transaction was queued, before its EXEC: EXEC is refused (MOVED), nothing runs on either node; the script reads on", async () => {
    const { stream, base, slot, owner } = await seeded("moved-before-exec", 4)
    const to = (owner + 1) % admins.length
    const [a] = await run(streams.read({ ...base, consumer: "c", token: 3, count: 1 }))
    // the owner's wire, split before EXEC: the slot moves in between
    const client = new Redis(cluster.nodes[owner]!.port, cluster.nodes[owner]!.host, {
      retryStrategy: () => null,
    })
    await ready(client)
    const inner = adopt(client)
    const replies: Array<unknown> = []
    const split: Wire = {
      send: async (commands) => {
        const queued = await inner.send(commands.slice(0, -1))
        const move = migration(slot, owner, to)
        await move.begin()
        await move.move()
        await move.finish()
        const exec = await inner.send(commands.slice(-1))
        replies.push(...queued, ...exec)
        return [...queued, ...exec]
      },
      closed: inner.closed,
      close: inner.close,
    }
    const redirections: Array<string> = []
    const reader = makeGatedReader(connection, {
      open: () => Promise.resolve(split),
      drop: () => {},
      redirected: (error) => redirections.push(error.message),
    })
    try {
      // the commands were accepted (QUEUED) while the node owned the slot
      const result = await reader.read(
        { ...base, consumer: "c", token: 3, count: 10 },
        { ids: [a!.id], mode: "ack" },
      )
      assert.deepStrictEqual(result, { _tag: "Fallback" })
      assert.deepStrictEqual(replies.slice(0, -1), ["OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED"])
      const exec = replies[replies.length - 1]
      assert.instanceOf(exec, Error)
      assert.match((exec as Error).message, /^MOVED /)
      assert.deepStrictEqual(redirections.length, 1)
      const state = await stateOn(to, stream)
      assert.deepStrictEqual(
        [state.type, state.gate, state.group[0]?.pending, state.group[0]?.delivered],
        ["stream", 0, 1, a!.id],
      )
      assert.strictEqual((await stateOn(owner, stream)).type, "MOVED")
      const rest = await run(
        streams.read({
          ...base,
          consumer: "c",
          token: 3,
          count: 10,
          ack: { ids: [a!.id], mode: "ack" },
        }),
      )
      assert.deepStrictEqual(
        rest.map((m) => m.fields.i),
        ["2", "3", "4"],
      )
    } finally {
      inner.close()
    }
  })

  it("a dropped wire: the next read fails (BackendUnavailable) or reads, never resent; the one after runs on a new wire, fenced", async () => {
    const { stream, base, owner } = await seeded("dropped", 4)
    const reader = makeGatedReader(connection, clusterRoute(connection))
    const first = await reader.read({ ...base, consumer: "c", token: 3, count: 1 }, undefined)
    assert.strictEqual(first._tag, "Read")
    // the wire is the owner's connection whose last command was EXEC
    const list = (await admins[owner]!.call("CLIENT", "LIST")) as string
    const wires = list
      .split("\n")
      .filter((line) => / cmd=exec /.test(line))
      .map((line) => /id=(\d+)/.exec(line)![1]!)
    assert.isAtLeast(wires.length, 1)
    for (const id of wires) await admins[owner]!.call("CLIENT", "KILL", "ID", id)
    await sleep(100)
    const after = await Effect.runPromiseExit(
      streams.read({ ...base, consumer: "c", token: 3, count: 1 }),
    )
    const got = Exit.isSuccess(after) ? after.value.length : 0
    if (Exit.isFailure(after))
      assert.strictEqual(
        (Cause.squash(after.cause) as { _tag?: string })._tag,
        "BackendUnavailable",
      )
    const rest = await reader.read({ ...base, consumer: "c", token: 3, count: 10 }, undefined)
    assert.strictEqual(rest._tag, "Read", "a new wire")
    assert.strictEqual(got + (rest._tag === "Read" ? rest.messages.length : 0), 3)
    const state = await stateOn(owner, stream)
    assert.deepStrictEqual([state.gate, state.group[0]?.pending], [0, 4])
    await run(streams.setOwnerToken({ ...base, token: 4 }))
    assert.deepStrictEqual(
      await reader.read({ ...base, consumer: "c", token: 3, count: 1 }, undefined),
      { _tag: "Stale", current: 4 },
    )
  })

  it("a refresh that drops the node of a wire with a read in flight: the read is answered, then the wire closes", async () => {
    const { base, owner } = await seeded("retired", 4)
    const reader = makeGatedReader(connection, clusterRoute(connection))
    const first = await reader.read({ ...base, consumer: "c", token: 3, count: 1 }, undefined)
    assert.strictEqual(first._tag, "Read")
    const acked = first._tag === "Read" ? first.messages.map((m) => m.id) : []
    const wireOpen = () =>
      (admins[owner]!.call("CLIENT", "LIST") as Promise<string>).then((list) =>
        list.split("\n").some((line) => / flags=N /.test(line) && / cmd=exec /.test(line)),
      )
    assert.isTrue(await wireOpen())
    // the owner holds back write transactions for 500 ms: the next read stays in flight
    await admins[owner]!.call("CLIENT", "PAUSE", 500, "WRITE")
    const inFlight = reader.read(
      { ...base, consumer: "c", token: 3, count: 2 },
      { ids: acked, mode: "ack" },
    )
    await sleep(100)
    // a refresh of the slot map that no longer lists the owner as a master
    const client = connection.client as import("ioredis").Cluster
    const nodes = client.nodes.bind(client)
    const port = cluster.nodes[owner]!.port
    client.nodes = ((role?: "all" | "master" | "slave") =>
      role === "master"
        ? nodes("master").filter((n) => n.options.port !== port)
        : nodes(role)) as typeof client.nodes
    try {
      client.emit("refresh")
    } finally {
      client.nodes = nodes
    }
    const result = await inFlight
    assert.deepStrictEqual(
      result._tag === "Read" ? result.messages.map((m) => m.fields.i) : result,
      ["2", "3"],
    )
    for (let i = 0; await wireOpen(); i++) {
      if (i > 100) throw new Error("the retired wire is still open")
      await sleep(20)
    }
  })

  it("through a NAT map (a proxy per node): the wire connects to the mapped address; a lost reply fails the read, which is not sent again", async () => {
    const proxies = await Promise.all(cluster.nodes.map((n) => startProxy(n)))
    const natMap = Object.fromEntries(
      cluster.nodes.map((n, i) => [
        `${n.host}:${n.port}`,
        { host: "127.0.0.1", port: proxies[i]!.port },
      ]),
    )
    const own = Scope.makeUnsafe()
    try {
      const mapped = await run(
        Scope.provide(
          RedisConnection.make({
            cluster: {
              nodes: proxies.map((p) => ({ host: "127.0.0.1", port: p.port })),
              options: { natMap, slotsRefreshInterval: 0 },
            },
          }),
          own,
        ),
      )
      const { stream, base, owner } = await seeded("nat", 4)
      const reader = makeGatedReader(mapped, clusterRoute(mapped))
      const first = await reader.read({ ...base, consumer: "c", token: 3, count: 1 }, undefined)
      assert.strictEqual(first._tag, "Read")
      const acked = first._tag === "Read" ? first.messages.map((m) => m.id) : []
      // the lean gate cached: its first use would be a NOSCRIPT reply (nothing ran) and the
      // lost reply would be that one, not the transaction's (the test alone, before any other)
      await admins[owner]!.script("LOAD", Scripts.gateFast.lua)
      proxies[owner]!.loseNextReply()
      const lost = await reader
        .read({ ...base, consumer: "c", token: 3, count: 2 }, { ids: acked, mode: "ack" })
        .then(
          () => undefined,
          (error: Error) => error,
        )
      assert.strictEqual(proxies[owner]!.lost(), 1, "the transaction went through the node's proxy")
      assert.instanceOf(lost, Error, "the read whose reply was lost failed")
      await sleep(100)
      // Redis ran it once: its ack and its two entries; nothing more was delivered
      const state = await stateOn(owner, stream)
      assert.deepStrictEqual([state.gate, state.group[0]?.pending], [0, 2])
      const rest = await reader.read({ ...base, consumer: "c", token: 3, count: 10 }, undefined)
      assert.deepStrictEqual(rest._tag === "Read" ? rest.messages.map((m) => m.fields.i) : rest, [
        "4",
      ])
    } finally {
      await run(Scope.close(own, Exit.void))
      await Promise.all(proxies.map((p) => p.close()))
    }
  })

  it("waitForEntries blocks on a connection to the node of the shard's slot (no duplicated cluster client, no CLUSTER SLOTS); a slot moved: the redirection runs it through the cluster client, and it wakes", async () => {
    const { stream, base, slot, owner } = await seeded("wait", 1)
    const slotsCalls = () =>
      Promise.all(admins.map((a) => a.info("commandstats"))).then((infos) =>
        infos.reduce(
          (sum, info) => sum + Number(/cmdstat_cluster\|slots:calls=(\d+)/.exec(info)?.[1] ?? 0),
          0,
        ),
      )
    const wakes = async (at: number, after?: string) => {
      const last = after ?? (await run(streams.append(stream, 0, { i: "before" })))
      const waiting = run(streams.waitForEntries({ ...base, afterId: last, timeoutMs: 10_000 }))
      // blocked on the node `at` (a normal client, its last command XREAD);
      // asked until it shows, for up to 5 s (a redirection takes a while on a
      // loaded machine: a fixed 150 ms found none at load 19)
      const blockedOn = async () => {
        const list = (await admins[at]!.call("CLIENT", "LIST")) as string
        return list.split("\n").filter((line) => / flags=b /.test(line) && / cmd=xread /.test(line))
      }
      let blocked = await blockedOn()
      for (let i = 0; blocked.length === 0 && i < 100; i++) {
        await sleep(50)
        blocked = await blockedOn()
      }
      await run(streams.append(stream, 0, { i: "after" }))
      assert.isTrue(await waiting, "woken by the append")
      return blocked.length
    }
    const before = await slotsCalls()
    assert.strictEqual(await wakes(owner), 1, "blocked on the slot's node")
    assert.strictEqual(await wakes(owner), 1, "again, on the pooled connection")
    assert.strictEqual(await slotsCalls(), before, "no slot map fetched for it")
    // the slot moves; the client's map still names the old owner
    const last = await run(streams.append(stream, 0, { i: "before the move" }))
    const to = (owner + 1) % admins.length
    const move = migration(slot, owner, to)
    await move.begin()
    await move.move()
    await move.finish()
    assert.strictEqual(
      (connection.client as import("ioredis").Cluster).slots[slot]?.[0],
      `${cluster.nodes[owner]!.host}:${cluster.nodes[owner]!.port}`,
    )
    // the pooled node connection is refused (MOVED, nothing ran): through the cluster client, on the new owner
    assert.strictEqual(await wakes(to, last), 1, "blocked on the new owner")
  })

  // last: it adds a replica to the cluster and fails a master over to it
  it("a failover: the demoted master refuses the MULTI (MOVED), nothing runs; the script reads on, then the new master's wire, and the old one is closed", async () => {
    // a shard on node 0, and a replica of node 0
    let seed = await seeded("failover", 5)
    while (seed.owner !== 0) seed = await seeded("failover", 5)
    const { stream, base, slot } = seed
    const replica = await startRedis({ kind: "redis7", args: await clusterNodeArgs() })
    const r = new Redis(replica.port, replica.host)
    try {
      const myself = ((await admins[0]!.call("CLUSTER", "NODES")) as string)
        .split("\n")
        .find((line) => line.includes("myself"))!
      const busPort = /@(\d+)/.exec(myself)![1]!
      await r.call("CLUSTER", "MEET", cluster.nodes[0]!.host, cluster.nodes[0]!.port, busPort)
      for (let i = 0; !((await r.call("CLUSTER", "NODES")) as string).includes(ids[0]!); i++) {
        if (i > 200) throw new Error("the replica never met node 0")
        await sleep(50)
      }
      for (let i = 0; ; i++) {
        const ok = await r.call("CLUSTER", "REPLICATE", ids[0]!).then(
          () => true,
          () => false,
        )
        if (ok) break
        if (i > 200) throw new Error("CLUSTER REPLICATE refused")
        await sleep(50)
      }
      for (let i = 0; !/master_link_status:up/.test(await r.info("replication")); i++) {
        if (i > 400) throw new Error("the replica never synced")
        await sleep(50)
      }
      const reader = makeGatedReader(connection, clusterRoute(connection))
      const first = await reader.read({ ...base, consumer: "c", token: 3, count: 2 }, undefined)
      assert.strictEqual(first._tag, "Read")
      const acked = first._tag === "Read" ? first.messages.map((m) => m.id) : []
      const wireOnOld = () =>
        (admins[0]!.call("CLIENT", "LIST") as Promise<string>).then((list) =>
          // a normal client (not the replication link, whose last command may be EXEC too)
          list.split("\n").some((line) => / flags=N /.test(line) && / cmd=exec /.test(line)),
        )
      assert.isTrue(await wireOnOld())
      // a manual failover: the replica takes over node 0's slots, node 0 becomes its replica
      for (let i = 0; !/^role:master/m.test(await r.info("replication")); i++) {
        // again every 5 s: a manual failover that timed out (a loaded machine) is not retried by Redis
        if (i % 100 === 0) await r.call("CLUSTER", "FAILOVER")
        if (i > 400) throw new Error("the failover did not happen")
        await sleep(50)
      }
      for (let i = 0; !/^role:slave/m.test(await admins[0]!.info("replication")); i++) {
        if (i > 400) throw new Error("node 0 was not demoted")
        await sleep(50)
      }
      const stateOnNew = async () => {
        const [type, gate, groups] = await Promise.all([
          r.type(shardKey(stream, 0)),
          r.exists(gateKey(stream, 0)),
          r.call("XINFO", "GROUPS", shardKey(stream, 0)) as Promise<Array<Array<unknown>>>,
        ])
        return { type, gate, groups }
      }
      const before = await stateOnNew()
      // the client's slot map still names node 0: its wire there is refused
      const refused = await reader.read(
        { ...base, consumer: "c", token: 3, count: 2 },
        { ids: acked, mode: "ack" },
      )
      assert.deepStrictEqual(refused, { _tag: "Fallback" })
      assert.deepStrictEqual(await stateOnNew(), before, "nothing ran on the new master")
      const next = await run(
        streams.read({
          ...base,
          consumer: "c",
          token: 3,
          count: 2,
          ack: { ids: acked, mode: "ack" },
        }),
      )
      assert.deepStrictEqual(
        next.map((m) => m.fields.i),
        ["3", "4"],
      )
      // after the refresh: gated reads on the new master; the demoted one's wire closed
      const newKey = `${replica.host}:${replica.port}`
      const slots = () => (connection.client as import("ioredis").Cluster).slots[slot]?.[0]
      for (let i = 0; slots() !== newKey || (await wireOnOld()); i++) {
        if (i > 200)
          throw new Error(`the slot map names ${slots()}, the old wire open: ${await wireOnOld()}`)
        // as the client's periodic refresh would (off here): a refresh right
        // after the failover may have asked a node that had not heard of it yet
        if (i % 10 === 9) (connection.client as import("ioredis").Cluster).refreshSlotsCache()
        await sleep(50)
      }
      const execsBefore = Number(
        /cmdstat_exec:calls=(\d+)/.exec(await r.info("commandstats"))?.[1] ?? 0,
      )
      const last = await reader.read(
        { ...base, consumer: "c", token: 3, count: 10 },
        { ids: next.map((m) => m.id), mode: "ack" },
      )
      assert.deepStrictEqual(last._tag === "Read" ? last.messages.map((m) => m.fields.i) : last, [
        "5",
      ])
      const execsAfter = Number(
        /cmdstat_exec:calls=(\d+)/.exec(await r.info("commandstats"))?.[1] ?? 0,
      )
      assert.isAtLeast(execsAfter - execsBefore, 1)
      const after = await stateOnNew()
      assert.deepStrictEqual([after.type, after.gate], ["stream", 0])
    } finally {
      r.disconnect()
      await replica.stop()
    }
  })
})
