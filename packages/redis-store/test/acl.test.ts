/**
 * The ports' core operations as a least-privilege ACL user (src/acl.ts,
 * docs/redis.md "ACL"), on every Redis target: if a command or key the ports
 * use were missing from the rules, an operation here would fail NOPERM; and
 * the user can do nothing to a key or channel outside its namespace.
 */
import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { Coordinator, Layout, ShardStreams } from "@shardline/core"
import { Effect, Fiber, Option, Stream } from "effect"
import { Cluster, type Redis } from "ioredis"
import {
  aclChannelPatterns,
  aclCommands,
  aclKeyPatterns,
  aclRules,
  checkPermissions,
  checkProducerPermissions,
  globMatches,
  keySlot,
  probeKeys,
  probeLines,
} from "../src/acl.js"
import { defaultKeys, make as keySpace } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisCoordinatorLease from "../src/RedisCoordinatorLease.js"
import * as RedisCoordinatorTransport from "../src/RedisCoordinatorTransport.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import * as RedisStore from "../src/RedisStore.js"
import * as RedisStreamLayouts from "../src/RedisStreamLayouts.js"
import { bump, configFor } from "./contract/Store.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"

const USER = "shardline-test"
const PASSWORD = "s3cret-for-tests"

for (const target of redisTargets()) {
  // as the default user: learn the features, create the restricted user on every node
  const acquire = Effect.gen(function* () {
    const admin = yield* connect(target)
    const rules = aclRules({ xackdel: admin.features.xackdel, cluster: admin.isCluster })
    const nodes: ReadonlyArray<Redis> =
      admin.client instanceof Cluster ? admin.client.nodes("master") : [admin.client]
    yield* Effect.promise(() =>
      Promise.all(
        nodes.map((n) => n.call("ACL", "SETUSER", USER, "reset", "on", `>${PASSWORD}`, ...rules)),
      ),
    )
    const connection = yield* RedisConnection.make({
      ...target.options,
      username: USER,
      password: PASSWORD,
    })
    return { admin, connection }
  })

  describeTarget("least-privilege ACL user", target, acquire, (subject) => {
    it.live("runs every port's core operations", () =>
      Effect.gen(function* () {
        const { connection } = subject()
        const streams = RedisShardStreams.makeWith(connection)
        // the optimistic fence needs WATCH / MULTI / EXEC: read and ack through it too
        const optimistic = RedisShardStreams.makeWith(connection, { read: "optimistic" })
        const lease = RedisCoordinatorLease.makeWith(connection)
        const transport = RedisCoordinatorTransport.makeWith(connection, { timeoutMs: 2_000 })
        const stream = unique("acl")
        const base = { stream, shard: 0, group: "g" }

        yield* streams.setOwnerToken({ ...base, token: 1 })
        for (const k of ["a", "b", "c", "d"]) yield* streams.append(stream, 0, { k })
        // an idempotent, trimmed append on another shard (the producer's window hash)
        const idem = { producerId: "p", messageId: "1" }
        const once = yield* streams.append(
          stream,
          1,
          { k: "x" },
          { idempotency: idem, trim: { maxLen: 10 } },
        )
        assert.strictEqual(
          yield* streams.append(stream, 1, { k: "x" }, { idempotency: idem }),
          once,
        )
        const [a, b] = yield* streams.read({ ...base, consumer: "c1", token: 1, count: 2 })
        assert.strictEqual(yield* streams.ack({ ...base, token: 1, ids: [a!.id], mode: "ack" }), 1)
        assert.isTrue(yield* streams.nack({ ...base, token: 1, id: b!.id }))
        yield* streams.read({ ...base, consumer: "c1", token: 1, count: 1, from: "pending" })
        yield* streams.claimPending({ ...base, token: 1, consumer: "c2", minIdleMs: 0, count: 10 })
        yield* streams.read({ ...base, consumer: "c2", token: 1, count: 10, claimIdleMs: 0 })
        const pending = yield* streams.pending(base)
        assert.isDefined(
          yield* streams.deadLetter({ ...base, token: 1, id: pending[0]!.id, reason: "r" }),
        )
        assert.strictEqual(
          yield* streams.ack({
            ...base,
            token: 1,
            ids: pending.slice(1).map((p) => p.id),
            mode: "xackdel",
          }),
          pending.length - 1,
        )
        assert.strictEqual((yield* streams.info(stream, 0)).groups[0]!.ownerToken, 1)
        yield* streams.range(ShardStreams.deadLetterKey(stream, 0))
        assert.isFalse(yield* streams.waitForEntries({ ...base, timeoutMs: 20 }))
        // seek (XGROUP SETID) forward to the end and back to where it was
        const { lastDeliveredId } = (yield* streams.info(stream, 0)).groups[0]!
        yield* streams.setGroupPosition!({ ...base, token: 1, position: "end" })
        yield* streams.setGroupPosition!({ ...base, token: 1, position: lastDeliveredId })
        assert.strictEqual(yield* streams.ownerToken(base), 1)
        yield* streams.append(stream, 0, { k: "e" })
        const viaWatch = yield* optimistic.read({ ...base, consumer: "c3", token: 1, count: 10 })
        assert.strictEqual(viaWatch.length, 1)
        assert.strictEqual(
          yield* optimistic.ack({ ...base, token: 1, ids: viaWatch.map((m) => m.id), mode: "ack" }),
          1,
        )
        yield* streams.seal(stream, 0)
        assert.strictEqual(
          (yield* Effect.flip(streams.append(stream, 0, { k: "late" })))._tag,
          "ShardSealed",
        )
        assert.isTrue((yield* streams.drainState(base)).drained)
        yield* streams.retireShard(stream, 0, ["g"])

        const key = { stream, group: "g" }
        // Store (commits, compaction, audit) and StreamLayouts
        const store = RedisStore.makeWith(connection, { compactEvery: 2, auditMaxLen: 100 })
        yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
        for (let i = 1; i <= 3; i++) yield* store.commit(key, i, bump(i))
        assert.strictEqual(Option.getOrThrow(yield* store.load(key)).storeRevision, 4)
        assert.strictEqual((yield* RedisStore.auditEvents(connection, key, 10)).length, 4)
        const layouts = RedisStreamLayouts.makeWith(connection)
        yield* layouts.save(stream, 0, Layout.StreamLayout.create(stream, 4))
        assert.strictEqual(Option.getOrThrow(yield* layouts.load(stream)).revision, 1)

        const grant = yield* lease.acquire(key, "coordinator", 5_000)
        yield* lease.renew(grant, 5_000)
        yield* lease.check(grant)
        yield* lease.release(grant)

        yield* transport.serve(key, (raw) =>
          Effect.succeed({
            errorCode: "NONE" as const,
            memberId: (raw as { memberId: string }).memberId,
            memberEpoch: 1,
            assignmentEpoch: 1,
            assigned: [],
            pending: [],
            heartbeatIntervalMs: 1_000,
            sessionTimeoutMs: 10_000,
            rebalanceTimeoutMs: 10_000,
          }),
        )
        const notices = yield* transport.notices(key, "m0")
        const notice = yield* Effect.forkChild(Stream.runCollect(Stream.take(notices, 1)))
        const response = yield* transport.heartbeat({
          ...key,
          memberId: "m0",
          incarnation: 1,
          seq: 1,
          memberEpoch: 0,
          assignmentEpoch: 0,
          metadataVersion: 0,
          ownedShards: [],
          revokingShards: [],
        })
        assert.strictEqual(response.memberEpoch, 1)
        yield* transport.notify(key, "m0")
        assert.strictEqual((yield* Fiber.join(notice)).length, 1)
      }),
    )

    it.live(
      "the probe passes the least-privilege user and a user with every right, and runs nothing",
      () =>
        Effect.gen(function* () {
          const { admin, connection } = subject()
          const stream = unique("probe")
          const probed = { stream, group: "billing", memberIds: ["m0"] }
          yield* checkPermissions(connection, [probed])
          // the default user may run everything: every line is queued, none may run; in a
          // namespace of its own, whose schema key no other test writes
          const fresh = keySpace(`${unique("probe-ns")}:`)
          const everything = yield* RedisConnection.make({
            ...target.options,
            keyPrefix: fresh.prefix,
          })
          yield* checkPermissions(everything, [probed])
          const keys = Object.entries(probeKeys(fresh, stream, "billing", "m0")).filter(
            ([name]) => name !== "group" && name !== "notice" && name !== "handover",
          )
          for (const [name, key] of keys)
            assert.strictEqual(
              yield* Effect.promise(() => admin.client.exists(key)),
              0,
              `${name} (${key}) exists after the probe`,
            )
        }).pipe(Effect.scoped),
    )

    /** A user with the rules (of `role`) minus `drop`, on every master. */
    const userWithout = (drop: string | undefined, role: "member" | "producer" = "member") =>
      Effect.gen(function* () {
        const { admin } = subject()
        const user = unique("acl-less")
        const rules = aclRules({ xackdel: admin.features.xackdel, cluster: admin.isCluster, role })
        if (drop !== undefined) assert.include(rules, drop)
        const nodes: ReadonlyArray<Redis> =
          admin.client instanceof Cluster ? admin.client.nodes("master") : [admin.client]
        yield* Effect.promise(() =>
          Promise.all(
            nodes.map((n) =>
              n.call(
                "ACL",
                "SETUSER",
                user,
                "reset",
                "on",
                `>${PASSWORD}`,
                ...rules.filter((r) => r !== drop),
              ),
            ),
          ),
        )
        return yield* RedisConnection.make({
          ...target.options,
          username: user,
          password: PASSWORD,
        })
      })

    for (const [drop, kind] of [
      ["+xautoclaim", "command"],
      ["+watch", "command"],
      ["+multi", "command"],
      ["+exec", "command"],
      ["+ssubscribe", "command"],
      ["~shardline:*", "key"],
      ["&shardline:*", "channel"],
    ] as const)
      it.live(`a user without ${drop}: PermissionDenied naming it (${kind})`, () =>
        Effect.scoped(
          Effect.gen(function* () {
            const connection = yield* userWithout(drop)
            const stream = unique("probe")
            const error = yield* Effect.flip(
              checkPermissions(connection, [{ stream, group: "billing", memberIds: ["m0"] }]),
            )
            assert.strictEqual(error._tag, "PermissionDenied")
            if (error._tag !== "PermissionDenied") return
            // a missing namespace pattern is one rule, however many keys it refused
            assert.deepStrictEqual(
              error.missing.map((m) => [m.kind, m.rule]),
              [[kind, drop]],
            )
            assert.include(error.message, `ACL SETUSER ${error.user} ${drop}`)
            assert.include(error.message, `billing of ${stream}`)
            if (kind === "key") assert.match(error.message, /key \S+ \(used by [A-Z]/)
          }),
        ),
      )

    it.live(
      "a producer's user (role producer) sends and keeps layouts, passes the producer probe, not a member's",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const connection = yield* userWithout(undefined, "producer")
            const stream = unique("producer")
            yield* checkProducerPermissions(connection, [stream])
            // no stream yet (a runtime with producers only, at its start): passes too
            yield* checkProducerPermissions(connection, [])
            // what createProducer does: the layout created and read, idempotent trimmed appends
            const layouts = RedisStreamLayouts.makeWith(connection)
            yield* layouts.save(stream, 0, Layout.StreamLayout.create(stream, 2))
            assert.strictEqual(Option.getOrThrow(yield* layouts.load(stream)).revision, 1)
            const streams = RedisShardStreams.makeWith(connection)
            const idem = { producerId: "p", messageId: "1" }
            const once = yield* streams.append(
              stream,
              1,
              { k: "x" },
              { idempotency: idem, trim: { maxLen: 10 } },
            )
            assert.strictEqual(
              yield* streams.append(stream, 1, { k: "x" }, { idempotency: idem }),
              once,
            )
            yield* streams.append(stream, 0, { k: "y" })
            // a consumer's commands are not granted: the member probe says so
            const error = yield* Effect.flip(
              checkPermissions(connection, [{ stream, group: "billing", memberIds: ["m0"] }]),
            )
            assert.strictEqual(error._tag, "PermissionDenied")
            if (error._tag === "PermissionDenied")
              assert.includeMembers(
                error.missing.map((m) => m.rule),
                ["+xreadgroup", "+xautoclaim", "+publish"],
              )
          }),
        ),
    )

    for (const drop of ["+xadd", "+evalsha", "+hset", "~shardline:*"] as const)
      it.live(
        `a producer's user without ${drop}: the producer probe names exactly it, with a stream or none`,
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const connection = yield* userWithout(drop, "producer")
              const stream = unique("producer")
              const error = yield* Effect.flip(checkProducerPermissions(connection, [stream]))
              assert.strictEqual(error._tag, "PermissionDenied")
              if (error._tag !== "PermissionDenied") return
              assert.deepStrictEqual(
                error.missing.map((m) => m.rule),
                [drop],
              )
              assert.include(error.message, `needs to send to ${stream}: `)
              assert.include(error.message, `ACL SETUSER ${error.user} ${drop}`)
              // no stream (a runtime with producers only): the same rule, the namespace named
              const any = yield* Effect.flip(checkProducerPermissions(connection, []))
              assert.strictEqual(any._tag, "PermissionDenied")
              if (any._tag !== "PermissionDenied") return
              assert.deepStrictEqual(
                any.missing.map((m) => m.rule),
                [drop],
              )
              assert.include(any.message, "needs to send to the streams of namespace shardline:: ")
            }),
          ),
      )

    if (target.kind === "cluster7")
      it.live("keySlot agrees with CLUSTER KEYSLOT", () =>
        Effect.gen(function* () {
          const { admin } = subject()
          const node = (admin.client as Cluster).nodes("master")[0]!
          for (const key of [
            "foo",
            "{orders:0}",
            "{shardline:orders:billing}:lease",
            "shardline:{orders:0}",
            "shardline:group:{orders:billing}:lease",
            "a{}b",
            "{x}{y}",
          ])
            assert.strictEqual(
              keySlot(key),
              Number(yield* Effect.promise(() => node.call("CLUSTER", "KEYSLOT", key))),
              key,
            )
          // the prefix stands outside the tag: a shard's keys (its gate too) share the shard's slot
          const slotOf = (key: string) =>
            Effect.promise(() => node.call("CLUSTER", "KEYSLOT", key)).pipe(Effect.map(Number))
          const k = keySpace("tenant-a:")
          const shardSlot = yield* slotOf("{orders:0}")
          for (const key of [
            k.shardKey("orders", 0),
            k.gateKey("orders", 0),
            k.ownerTokenKey("orders", 0, "billing"),
            k.deadLetterKey("orders", 0),
            k.sealedKey("orders", 0),
            k.idempotencyKey("orders", 0, "p"),
          ])
            assert.strictEqual(yield* slotOf(key), shardSlot, key)
          const group = { stream: "orders", group: "billing" }
          const groupSlot = yield* slotOf(k.leaseKey(group))
          for (const key of [
            k.storeRevisionKey(group),
            k.auditKey(group),
            k.requestsKey(group),
            k.noticeChannel(group, "m0"),
          ])
            assert.strictEqual(yield* slotOf(key), groupSlot, key)
        }),
      )

    it.live("can do nothing to a key or channel outside its namespace, nor run RENAME", () =>
      Effect.gen(function* () {
        const { admin, connection } = subject()
        const outcome = (run: (c: RedisConnection.Client) => Promise<unknown>) =>
          Effect.promise(() =>
            run(connection.client).then(
              () => "allowed",
              (error: Error) => error.message,
            ),
          )
        const mine = defaultKeys.shardKey(unique("ns"), 0)
        // an application's hash-tagged key (the old pattern ~{*:*} matched it), a plain
        // key, another namespace's shard stream, and schema 1's keys of a group
        const outside = [
          "{user:42}",
          "user:42",
          keySpace("tenant-b:").shardKey("orders", 0),
          "{orders:0}:owner:billing",
          "{shardline:orders:billing}:lease",
        ]
        yield* Effect.promise(() => admin.client.set("{user:42}", "the application's"))
        for (const key of outside) {
          const attempts: ReadonlyArray<[string, (c: RedisConnection.Client) => Promise<unknown>]> =
            [
              ["GET", (c) => c.get(key)],
              ["SET", (c) => c.set(key, "x")],
              ["DEL", (c) => c.del(key)],
              ["XADD", (c) => c.xadd(key, "*", "f", "v")],
              ["RENAME", (c) => c.rename(key, `${key}:moved`)],
              ["RENAMENX", (c) => c.renamenx(mine, key)],
              ["EXISTS", (c) => c.exists(key)],
              ["EVAL", (c) => c.eval("return redis.call('GET', KEYS[1])", 1, key)],
            ]
          for (const [name, run] of attempts)
            assert.include(yield* outcome(run), "NOPERM", `${name} ${key}`)
        }
        assert.strictEqual(
          yield* Effect.promise(() => admin.client.get("{user:42}")),
          "the application's",
        )
        // pub/sub outside the namespace
        const channel = admin.isCluster ? "ssubscribe" : "subscribe"
        assert.include(
          yield* outcome((c) => c.call(admin.isCluster ? "SPUBLISH" : "PUBLISH", "{user:42}", "x")),
          "NOPERM",
        )
        const subscriber = connection.client.duplicate()
        subscriber.on("error", () => {})
        const subscribed = yield* Effect.promise(() =>
          (subscriber as unknown as Record<string, (c: string) => Promise<unknown>>)
            [channel]!.call(subscriber, "{user:42}")
            .then(
              () => "allowed",
              (error: Error) => error.message,
            ),
        )
        subscriber.disconnect()
        assert.include(subscribed, "NOPERM")
        // RENAME is not granted at all (the gated fence sends RENAMENX), inside the namespace too
        yield* Effect.promise(() => admin.client.set(`${mine}:probe-a`, "x"))
        assert.include(
          yield* outcome((c) => c.rename(`${mine}:probe-a`, `${mine}:probe-b`)),
          "NOPERM",
        )
        assert.include(yield* outcome((c) => c.call("FLUSHALL")), "NOPERM")
        assert.include(yield* outcome((c) => c.call("CONFIG", "GET", "maxmemory")), "NOPERM")
      }),
    )
  })
}

describe("the probe follows the rules (src/acl.ts): one list, the key builders of src/keys.ts", () => {
  const probed = (cluster: boolean, prefix = "shardline:") =>
    probeLines(
      keySpace(prefix),
      { stream: "orders", group: "billing", memberIds: ["m0"] },
      { xackdel: true, cluster, prefix },
    )
  it("every command of the rules is probed (MULTI and EXEC by the probe's own transaction)", () => {
    const commands = new Set(probed(true).map((l) => l.use.acl))
    for (const c of aclCommands({ xackdel: true, cluster: true }))
      if (c !== "multi" && c !== "exec") assert.isTrue(commands.has(c), c)
  })
  for (const prefix of ["shardline:", "tenant-a/orders:"])
    it(`every key and channel pattern matches a probed key, and every probed key a pattern (${prefix})`, () => {
      const lines = probed(false, prefix)
      const keys = new Set(lines.flatMap((l) => (l.target?.kind === "key" ? [l.target.name] : [])))
      const channels = new Set(
        lines.flatMap((l) => (l.target?.kind === "channel" ? [l.target.name] : [])),
      )
      // every builder of src/keys.ts the ports use, through probeKeys (and its two channels)
      assert.strictEqual(keys.size, Object.keys(probeKeys(keySpace(prefix), "s", "g")).length - 3)
      assert.strictEqual(channels.size, 2)
      for (const p of aclKeyPatterns(prefix))
        assert.isTrue(
          [...keys].some((k) => globMatches(p, k)),
          `no probed key matches ~${p}`,
        )
      for (const k of keys) {
        assert.isTrue(k.startsWith(prefix), k)
        assert.isTrue(
          aclKeyPatterns(prefix).some((p) => globMatches(p, k)),
          `${k} matches no key pattern`,
        )
      }
      for (const c of channels)
        assert.isTrue(
          aclChannelPatterns(prefix).some((p) => globMatches(p, c)),
          c,
        )
    })
  it("the rules name the namespace exactly, and grant no command nothing sends", () => {
    const rules = aclRules({ xackdel: true, prefix: "tenant-a:" })
    assert.deepStrictEqual(
      rules.filter((r) => r.startsWith("~") || r.startsWith("&")),
      ["~tenant-a:*", "&tenant-a:*"],
    )
    assert.notInclude(rules, "+rename")
    assert.include(rules, "+renamenx")
    // the default namespace
    assert.deepStrictEqual(
      aclRules({ xackdel: false }).filter((r) => r.startsWith("~") || r.startsWith("&")),
      ["~shardline:*", "&shardline:*"],
    )
    // one namespace's pattern matches none of another's keys, nor an application's
    for (const key of ["{user:42}", "user:42", "tenant-b:{orders:0}", "tenant-a{x}"])
      assert.isFalse(globMatches(aclKeyPatterns("tenant-a:")[0]!, key), key)
    assert.isTrue(globMatches(aclKeyPatterns("tenant-a:")[0]!, "tenant-a:{orders:0}"))
  })
  it("a producer's rules: a subset of the members', no channel, no consumer command, every one probed", () => {
    const producer = aclRules({ xackdel: true, cluster: true, role: "producer" })
    const member = aclRules({ xackdel: true, cluster: true })
    for (const r of producer) assert.include(member, r)
    assert.deepStrictEqual(
      producer.filter((r) => r.startsWith("~") || r.startsWith("&")),
      ["~shardline:*"],
    )
    for (const r of ["+xadd", "+evalsha", "+eval", "+hset", "+hmget", "+multi", "+exec"])
      assert.include(producer, r)
    for (const r of ["+xreadgroup", "+xack", "+xautoclaim", "+publish", "+subscribe", "+watch"])
      assert.notInclude(producer, r)
    const lines = probeLines(
      keySpace("shardline:"),
      { stream: "orders", group: "producer" },
      { xackdel: true, cluster: true, role: "producer" },
    )
    const commands = new Set(lines.map((l) => l.use.acl))
    for (const c of aclCommands({ xackdel: true, cluster: true, role: "producer" }))
      if (c !== "multi" && c !== "exec") assert.isTrue(commands.has(c), c)
    // only the producer's keys: the shard, its seal and window, the layout
    const k = probeKeys(keySpace("shardline:"), "orders", "producer")
    assert.sameMembers(
      [...new Set(lines.flatMap((l) => (l.target === undefined ? [] : [l.target.name])))],
      [k.shard, k.sealed, k.idempotency, k.layout],
    )
  })
  it('docs/redis.md\'s producer user is aclRules({ role: "producer" })', () => {
    const docs = readFileSync(new URL("../../../docs/redis.md", import.meta.url), "utf8")
    const block = /ACL SETUSER orders-producer on >secret ([^`]*)```/.exec(docs)?.[1]
    assert.isDefined(block)
    assert.deepStrictEqual(
      block!.trim().split(/\s+/),
      aclRules({ xackdel: true, role: "producer" }),
    )
  })
  it("Redis glob: *, ?, [..] and escapes", () => {
    assert.isTrue(globMatches("{*:*}:dlq", "{orders:3}:dlq"))
    assert.isFalse(globMatches("{*:*}:dlq", "{orders:3}:owner:g"))
    assert.isTrue(globMatches("a?c", "abc"))
    assert.isTrue(globMatches("a[bc]d", "acd"))
    assert.isFalse(globMatches("a[^bc]d", "acd"))
    assert.isTrue(globMatches("a\\*", "a*"))
    assert.isFalse(globMatches("a\\*", "ab"))
  })
})
