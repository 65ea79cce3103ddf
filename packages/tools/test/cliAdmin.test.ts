/**
 * The `shardline` dead-letter and group commands (src/Admin.ts, src/cli.ts;
 * docs/redis.md "Dead letters and groups"), built and run as a child process
 * against a real Redis 7.0: every new command, its JSON and its refusals,
 * and what it changed in Redis. Two groups consume one stream, so each
 * check also shows the other group's data is left alone.
 */
import { assert, it } from "@effect/vitest"
import {
  Coordinator,
  CoordinatorLease,
  Layout,
  ShardStreams,
  Store,
  StreamLayouts,
} from "@shardline/core"
import { Acl, Keys, RedisConnection } from "@shardline/redis-store"
import { Context, Effect, Option } from "effect"
import type { Redis } from "ioredis"
import { configFor } from "../../redis-store/test/contract/Store.js"
import { redisPorts } from "../../redis-store/test/support/driver.js"
import { describeTarget, redisTargets, unique } from "../../redis-store/test/support/targets.js"
import { KEY_FIELD } from "../src/Admin.js"
import { runCli } from "./support/cli.js"

const { groupBase: groupTag, ownerTokenKey, shardKey } = Keys.defaultKeys

/** The producer whose dedupe window (100 ids / 100 s) replays relied on before their marks. */
const REPLAY_PRODUCER = "shardline-replay"

interface Letter {
  shard: number
  id: string
  originalId: string
  group: string
  deliveries: number
  reason: string
  key: string
  fields: Record<string, string>
}

for (const target of redisTargets())
  if (target.kind === "redis7")
    describeTarget(
      "shardline dlq and groups",
      target,
      redisPorts(target.options ?? {}),
      (ports) => {
        const url = `redis://${target.options?.host}:${target.options?.port}`
        const generation = { generation: 0, firstShard: 0, shardCount: 4 }

        /** A stream of 4 shards with groups billing and audit; billing dead-letters n = 1, 4, 7, audit n = 2. */
        const setup = Effect.gen(function* () {
          const ctx = ports()
          const streams = Context.get(ctx, ShardStreams.ShardStreams)
          const layouts = Context.get(ctx, StreamLayouts.StreamLayouts)
          const store = Context.get(ctx, Store.Store)
          const stream = unique("dlq")
          const record = Layout.StreamLayout.registerGroup(
            Layout.StreamLayout.registerGroup(Layout.StreamLayout.create(stream, 4), "billing"),
            "audit",
          )
          yield* layouts.save(stream, 0, record)
          const appended = new Map<number, { shard: number; id: string; key: string }>()
          for (let n = 0; n < 12; n++) {
            const key = `k${n}`
            const shard = Layout.shardOf(generation, key)
            const id = yield* streams.append(stream, shard, { [KEY_FIELD]: key, n: String(n) })
            appended.set(n, { shard, id, key })
          }
          for (const [group, dead] of [
            ["billing", [1, 4, 7]],
            ["audit", [2]],
          ] as const) {
            const key = { stream, group }
            yield* store.commit(key, 0, Coordinator.createGroup(configFor(key), 0))
            for (let shard = 0; shard < 4; shard++) {
              yield* streams.setOwnerToken({ stream, shard, group, token: 1 })
              yield* streams.read({ stream, shard, group, token: 1, consumer: "c1", count: 100 })
            }
            for (const n of dead) {
              const { shard, id } = appended.get(n)!
              yield* streams.deadLetter({ stream, shard, group, token: 1, id, reason: `boom ${n}` })
            }
          }
          return { stream, appended }
        })

        /** Run the bin with `--redis` after the command (and its subcommand). */
        const cli = (args: ReadonlyArray<string>, redis = url) => {
          const words = args[0] === "dlq" || args[0] === "groups" ? 2 : 1
          return runCli([...args.slice(0, words), "--redis", redis, ...args.slice(words)])
        }

        it.live(
          "dlq count, list, show, replay (idempotent when retried), purge; inspect of every group",
          () =>
            Effect.gen(function* () {
              const { stream, appended } = yield* setup
              const connection = Context.get(ports(), RedisConnection.RedisConnection)

              const count = yield* cli([
                "dlq",
                "count",
                "--stream",
                stream,
                "--group",
                "billing",
                "--json",
              ])
              assert.strictEqual(count.code, 0, count.stderr)
              const counted = JSON.parse(count.stdout) as {
                total: number
                byShard: Record<string, number>
              }
              assert.strictEqual(counted.total, 3)
              const expectedByShard: Record<string, number> = {}
              for (const n of [1, 4, 7]) {
                const s = String(appended.get(n)!.shard)
                expectedByShard[s] = (expectedByShard[s] ?? 0) + 1
              }
              assert.deepStrictEqual(counted.byShard, expectedByShard)
              const human = yield* cli(["dlq", "count", "--stream", stream, "--group", "audit"])
              assert.match(
                human.stdout,
                new RegExp(`^group audit of stream ${stream}: 1 dead letter`),
              )

              const list = yield* cli([
                "dlq",
                "list",
                "--stream",
                stream,
                "--group",
                "billing",
                "--json",
              ])
              assert.strictEqual(list.code, 0, list.stderr)
              const letters = JSON.parse(list.stdout) as Array<Letter>
              assert.deepStrictEqual(letters.map((l) => l.fields.n).sort(), ["1", "4", "7"])
              for (const l of letters) {
                const produced = appended.get(Number(l.fields.n))!
                assert.strictEqual(l.group, "billing")
                assert.strictEqual(l.key, produced.key)
                assert.strictEqual(l.originalId, produced.id)
                assert.strictEqual(l.shard, produced.shard)
                assert.strictEqual(l.reason, `boom ${l.fields.n}`)
                assert.deepStrictEqual(Object.keys(l.fields), ["n"])
              }
              const table = yield* cli(["dlq", "list", "--stream", stream, "--group", "billing"])
              assert.match(
                table.stdout,
                /^shard\s+dead-letter id\s+original id\s+key\s+deliveries\s+reason/,
              )

              const [first, second, third] = letters
              const show = yield* cli([
                "dlq",
                "show",
                "--stream",
                stream,
                "--shard",
                String(first!.shard),
                "--id",
                first!.id,
                "--json",
              ])
              assert.strictEqual(show.code, 0, show.stderr)
              assert.deepStrictEqual(JSON.parse(show.stdout), first)
              const missing = yield* cli([
                "dlq",
                "show",
                "--stream",
                stream,
                "--shard",
                "0",
                "--id",
                "1-1",
              ])
              assert.strictEqual(missing.code, 2)
              assert.match(missing.stderr, /^shardline: refused \(NotFound\): no dead letter 1-1/)
              // an id alone is ambiguous: every shard's dead-letter stream numbers its own
              const noShard = yield* cli([
                "dlq",
                "replay",
                "--stream",
                stream,
                "--group",
                "billing",
                "--id",
                first!.id,
              ])
              assert.strictEqual(noShard.code, 64)
              assert.include(noShard.stderr, "--id needs --shard")

              const inspectAll = yield* cli(["inspect", "--stream", stream, "--json"])
              assert.strictEqual(inspectAll.code, 0, inspectAll.stderr)
              assert.deepStrictEqual(
                (JSON.parse(inspectAll.stdout) as Array<{ group: string }>).map((r) => r.group),
                ["audit", "billing"],
              )

              // replay, cut after its append: a user that may not XDEL fails at the removal...
              const lengthOf = (shard: number) =>
                connection.command("xlen", (c) => c.xlen(shardKey(stream, shard)))
              const target = first!.shard // k<n> routes where it was: the layout did not change
              const before = yield* lengthOf(target)
              // a dry run says what would be replayed, where, and changes nothing
              const dlqLength = (shard: number) =>
                connection.command("xlen", (c) => c.xlen(ShardStreams.deadLetterKey(stream, shard)))
              const lettersBefore = yield* dlqLength(first!.shard)
              const dry = yield* cli([
                "dlq",
                "replay",
                "--stream",
                stream,
                "--group",
                "billing",
                "--dry-run",
                "--json",
              ])
              assert.strictEqual(dry.code, 0, dry.stderr)
              const plan = JSON.parse(dry.stdout) as {
                replayed: Array<unknown>
                planned: Array<{
                  from: { shard: number; id: string }
                  toShard: number
                  key: string
                  count: number
                }>
              }
              assert.deepStrictEqual(plan.replayed, [])
              assert.deepStrictEqual(plan.planned.map((p) => p.key).sort(), ["k1", "k4", "k7"])
              for (const p of plan.planned) {
                assert.strictEqual(p.toShard, Layout.shardOf(generation, p.key))
                assert.strictEqual(p.count, 1)
              }
              const dryText = yield* cli([
                "dlq",
                "replay",
                "--stream",
                stream,
                "--group",
                "billing",
                "--dry-run",
              ])
              assert.strictEqual(dryText.code, 0, dryText.stderr)
              assert.match(dryText.stdout, /^dry run: would replay 3 dead letter\(s\)/)
              assert.include(dryText.stdout, "nothing was changed")
              assert.strictEqual(yield* lengthOf(target), before)
              assert.strictEqual(yield* dlqLength(first!.shard), lettersBefore)
              const admin = connection.client as Redis
              yield* Effect.promise(() =>
                admin.call(
                  "ACL",
                  "SETUSER",
                  "no-xdel",
                  "reset",
                  "on",
                  ">pw",
                  ...Acl.aclRules({ xackdel: false }).filter((r) => r !== "+xdel"),
                ),
              )
              const cut = yield* cli(
                [
                  "dlq",
                  "replay",
                  "--stream",
                  stream,
                  "--group",
                  "billing",
                  "--shard",
                  String(first!.shard),
                  "--id",
                  first!.id,
                ],
                `redis://no-xdel:pw@${target_(url)}`,
              )
              assert.strictEqual(cut.code, 2)
              // refused by the ACL (in a script, Redis says the user "can't run this command")
              assert.match(cut.stderr, /NOPERM|can't run this command/)
              assert.strictEqual(yield* lengthOf(target), before + 1)
              // ...run again, the append is stored once, then the dead letter is removed
              const replay = yield* cli([
                "dlq",
                "replay",
                "--stream",
                stream,
                "--group",
                "billing",
                "--shard",
                String(first!.shard),
                "--id",
                first!.id,
                "--json",
              ])
              assert.strictEqual(replay.code, 0, replay.stderr)
              const replayed = JSON.parse(replay.stdout) as {
                replayed: Array<{
                  from: { shard: number; id: string }
                  to: { shard: number; id: string }
                }>
                otherGroups: Array<string>
              }
              assert.strictEqual(replayed.replayed.length, 1)
              assert.deepStrictEqual(replayed.replayed[0]!.from, {
                shard: first!.shard,
                id: first!.id,
              })
              assert.strictEqual(replayed.replayed[0]!.to.shard, target)
              assert.deepStrictEqual(replayed.otherGroups, ["audit"])
              assert.strictEqual(yield* lengthOf(target), before + 1)
              const back = yield* connection.command("xrange", (c) =>
                c.xrange(
                  shardKey(stream, target),
                  replayed.replayed[0]!.to.id,
                  replayed.replayed[0]!.to.id,
                ),
              )
              const entry = back[0]![1]
              assert.deepStrictEqual(
                Object.fromEntries(
                  entry.map((_, k) => [entry[k - (k % 2)], entry[k - (k % 2) + 1]]),
                ),
                {
                  [KEY_FIELD]: first!.key,
                  n: first!.fields.n,
                  // for billing alone, with where it came from and its replay count
                  [ShardStreams.ReplayFields.group]: "billing",
                  [ShardStreams.ReplayFields.originalShard]: String(first!.shard),
                  [ShardStreams.ReplayFields.originalId]: first!.originalId,
                  [ShardStreams.ReplayFields.count]: "1",
                },
              )
              // the replayed message is read again by the group (it is after its position)
              const again = yield* cli([
                "dlq",
                "replay",
                "--stream",
                stream,
                "--group",
                "billing",
                "--shard",
                String(first!.shard),
                "--id",
                first!.id,
              ])
              assert.strictEqual(again.code, 0)
              assert.match(again.stdout, /^replayed 0 dead letter/)

              const noFilter = yield* cli([
                "dlq",
                "purge",
                "--stream",
                stream,
                "--group",
                "billing",
              ])
              assert.strictEqual(noFilter.code, 64)
              assert.include(noFilter.stderr, "dlq purge needs --all or --shard N")
              const one = yield* cli([
                "dlq",
                "purge",
                "--stream",
                stream,
                "--group",
                "billing",
                "--shard",
                String(second!.shard),
                "--id",
                second!.id,
              ])
              assert.strictEqual(one.code, 0, one.stderr)
              assert.match(one.stdout, /^purged 1 dead letter/)
              const left = yield* cli([
                "dlq",
                "list",
                "--stream",
                stream,
                "--group",
                "billing",
                "--json",
              ])
              assert.strictEqual(left.code, 0, left.stderr)
              assert.deepStrictEqual(
                (JSON.parse(left.stdout) as Array<Letter>).map((l) => l.id),
                [third!.id],
              )
              const all = yield* cli([
                "dlq",
                "purge",
                "--stream",
                stream,
                "--group",
                "billing",
                "--all",
              ])
              assert.match(all.stdout, /^purged 1 dead letter/)
              // the other group's dead letter, in the same dead-letter streams, is kept
              const audit = yield* cli([
                "dlq",
                "count",
                "--stream",
                stream,
                "--group",
                "audit",
                "--json",
              ])
              assert.strictEqual((JSON.parse(audit.stdout) as { total: number }).total, 1)
            }),
          // a dozen CLI processes: 120 s ran out at load 22
          300_000,
        )

        it.live(
          "dlq replay cut between its append and its removal, run again once the append's dedupe window forgot it (100 later ids; its 100 s passed and a reshard sealed the target): each letter is appended once",
          () =>
            Effect.gen(function* () {
              const { stream } = yield* setup
              const ctx = ports()
              const connection = Context.get(ctx, RedisConnection.RedisConnection)
              const streams = Context.get(ctx, ShardStreams.ShardStreams)
              const admin = connection.client as Redis
              yield* Effect.promise(() =>
                admin.call(
                  "ACL",
                  "SETUSER",
                  "no-xdel-2",
                  "reset",
                  "on",
                  ">pw",
                  ...Acl.aclRules({ xackdel: false }).filter((r) => r !== "+xdel"),
                ),
              )
              const list = yield* cli([
                "dlq",
                "list",
                "--stream",
                stream,
                "--group",
                "billing",
                "--json",
              ])
              const [first, second] = JSON.parse(list.stdout) as Array<Letter>
              /** The copies of dead letter `l` in the stream's shards 0..count-1. */
              const copies = (l: Letter, count: number) =>
                Effect.gen(function* () {
                  let n = 0
                  for (let shard = 0; shard < count; shard++)
                    for (const [, flat] of yield* connection.command("xrange", (c) =>
                      c.xrange(shardKey(stream, shard), "-", "+"),
                    ))
                      if (flat[flat.indexOf("n") + 1] === l.fields.n) n++
                  return n
                })
              const replayOne = (l: Letter, redis = url) =>
                cli(
                  [
                    "dlq",
                    "replay",
                    "--stream",
                    stream,
                    "--group",
                    "billing",
                    "--shard",
                    String(l.shard),
                    "--id",
                    l.id,
                  ],
                  redis,
                )
              const cutOff = `redis://no-xdel-2:pw@${target_(url)}`
              const windowKey = (shard: number) =>
                `${shardKey(stream, shard)}:idmp:${REPLAY_PRODUCER}`

              // the first: cut after its append, then 100 other replays on its shard
              assert.strictEqual(yield* copies(first!, 4), 1)
              const cut = yield* replayOne(first!, cutOff)
              assert.strictEqual(cut.code, 2)
              // refused by the ACL (in a script, Redis says the user "can't run this command")
              assert.match(cut.stderr, /NOPERM|can't run this command/)
              assert.strictEqual(yield* copies(first!, 4), 2)
              for (let i = 0; i < 100; i++)
                yield* streams.append(
                  stream,
                  first!.shard,
                  { other: String(i) },
                  {
                    idempotency: { producerId: REPLAY_PRODUCER, messageId: `other/${i}` },
                  },
                )
              const again = yield* replayOne(first!)
              assert.strictEqual(again.code, 0, again.stderr)
              assert.match(again.stdout, /^replayed 1 dead letter/)
              assert.strictEqual(yield* copies(first!, 4), 2)

              // the second: cut, then its window expired (100 s) and a reshard sealed
              // the shard it was appended to, so its key routes elsewhere now
              const cut2 = yield* replayOne(second!, cutOff)
              assert.strictEqual(cut2.code, 2)
              assert.strictEqual(yield* copies(second!, 4), 2)
              yield* connection.command("del", (c) => c.del(windowKey(second!.shard)))
              yield* Layout.Reshard.reshardStream(stream, 8).pipe(Effect.provide(ctx))
              const again2 = yield* replayOne(second!)
              assert.strictEqual(again2.code, 0, again2.stderr)
              assert.match(again2.stdout, /^replayed 1 dead letter/)
              assert.strictEqual(yield* copies(second!, 12), 2)

              // both left the dead-letter streams; run again, nothing is appended
              const left = yield* cli([
                "dlq",
                "list",
                "--stream",
                stream,
                "--group",
                "billing",
                "--json",
              ])
              assert.deepStrictEqual(
                (JSON.parse(left.stdout) as Array<Letter>).map((l) => l.id).sort(),
                (JSON.parse(list.stdout) as Array<Letter>)
                  .slice(2)
                  .map((l) => l.id)
                  .sort(),
              )
              for (const l of [first!, second!]) {
                const third = yield* replayOne(l)
                assert.match(third.stdout, /^replayed 0 dead letter/)
              }
              assert.strictEqual(yield* copies(first!, 12), 2)
              assert.strictEqual(yield* copies(second!, 12), 2)
              // their routes and marks went with them
              for (let shard = 0; shard < 12; shard++)
                for (const key of [
                  Keys.defaultKeys.replayRoutesKey(stream, shard),
                  Keys.defaultKeys.replayMarksKey(stream, shard),
                ])
                  assert.strictEqual(
                    yield* connection.command("exists", (c) => c.exists(key)),
                    0,
                    key,
                  )
            }),
          120_000,
        )

        it.live(
          "groups list; groups delete refuses a live group, says what it deletes, deletes it",
          () =>
            Effect.gen(function* () {
              const { stream } = yield* setup
              const ctx = ports()
              const connection = Context.get(ctx, RedisConnection.RedisConnection)
              const lease = Context.get(ctx, CoordinatorLease.CoordinatorLease)
              const layouts = Context.get(ctx, StreamLayouts.StreamLayouts)

              const list = yield* cli(["groups", "list", "--stream", stream, "--json"])
              assert.strictEqual(list.code, 0, list.stderr)
              const gs = JSON.parse(list.stdout) as Array<{
                group: string
                registered: boolean
                stored: boolean
                shards: number
                deadLetters: number
                live: boolean
                liveBecause: Array<string>
              }>
              assert.deepStrictEqual(
                gs.map((g) => [g.group, g.registered, g.stored, g.shards, g.deadLetters]),
                [
                  ["audit", true, true, 4, 1],
                  ["billing", true, true, 4, 3],
                ],
              )
              // their consumer c1 just read: both are live
              assert.isTrue(
                gs.every((g) => g.live && g.liveBecause[0]!.startsWith("a consumer read")),
              )
              const unknown = yield* cli(["groups", "list", "--stream", unique("none")])
              assert.strictEqual(unknown.code, 2)
              assert.match(unknown.stderr, /^shardline: refused \(UnknownStream\)/)

              const refused = yield* cli([
                "groups",
                "delete",
                "--stream",
                stream,
                "--group",
                "audit",
              ])
              assert.strictEqual(refused.code, 2)
              assert.match(
                refused.stderr,
                /^shardline: refused \(GroupLive\): group "audit" .* is live: a consumer read/,
              )
              assert.include(refused.stderr, "--force")
              // no consumer any more, but a coordinator holds the lease: still live
              for (let shard = 0; shard < 4; shard++)
                yield* connection.command("delconsumer", (c) =>
                  c.call("XGROUP", "DELCONSUMER", shardKey(stream, shard), "audit", "c1"),
                )
              const grant = yield* lease.acquire(
                { stream, group: "audit" },
                "coordinator-7",
                60_000,
              )
              const held = yield* cli(["groups", "delete", "--stream", stream, "--group", "audit"])
              assert.strictEqual(held.code, 2)
              assert.include(held.stderr, "its coordinator lease is held by coordinator-7")

              const dry = yield* cli([
                "groups",
                "delete",
                "--stream",
                stream,
                "--group",
                "audit",
                "--dry-run",
              ])
              assert.strictEqual(dry.code, 0, dry.stderr)
              assert.include(dry.stdout, `would delete group audit of stream ${stream}:`)
              assert.include(dry.stdout, "Redis consumer groups on shards: 0-3")
              assert.include(dry.stdout, ownerTokenKey(stream, 0, "audit"))
              assert.include(dry.stdout, "dead letters: 1")
              assert.include(dry.stdout, `${groupTag({ stream, group: "audit" })}:lease`)
              assert.include(dry.stdout, `${groupTag({ stream, group: "audit" })}:store:revision`)
              assert.include(dry.stdout, "its entry in the stream's layout: yes")
              assert.include(dry.stdout, "refused unless --force")

              yield* lease.release(grant)
              const deleted = yield* cli([
                "groups",
                "delete",
                "--stream",
                stream,
                "--group",
                "audit",
              ])
              assert.strictEqual(deleted.code, 0, deleted.stderr)
              assert.include(deleted.stdout, `deleted group audit of stream ${stream}:`)
              // gone: its consumer groups, owner tokens, keys, layout entry and dead letter
              for (let shard = 0; shard < 4; shard++) {
                const names = (yield* connection.command("xinfo", (c) =>
                  c.call("XINFO", "GROUPS", shardKey(stream, shard)),
                )) as Array<Array<unknown>>
                assert.deepStrictEqual(
                  names.map((g) => String(g[1])),
                  ["billing"],
                )
                assert.strictEqual(
                  yield* connection.command("exists", (c) =>
                    c.exists(ownerTokenKey(stream, shard, "audit")),
                  ),
                  0,
                )
              }
              const tagged = yield* connection.command("scan", (c) =>
                c.scan("0", "MATCH", `${groupTag({ stream, group: "audit" })}*`, "COUNT", 10_000),
              )
              assert.deepStrictEqual(tagged[1], [])
              const record = Option.getOrThrow(yield* layouts.load(stream)).record
              assert.deepStrictEqual(Object.keys(record.groups), ["billing"])
              const billing = yield* cli([
                "dlq",
                "count",
                "--stream",
                stream,
                "--group",
                "billing",
                "--json",
              ])
              assert.strictEqual((JSON.parse(billing.stdout) as { total: number }).total, 3)
              const auditLetters = yield* cli([
                "dlq",
                "count",
                "--stream",
                stream,
                "--group",
                "audit",
                "--json",
              ])
              assert.strictEqual((JSON.parse(auditLetters.stdout) as { total: number }).total, 0)

              // a live group with --force
              const forced = yield* cli([
                "groups",
                "delete",
                "--stream",
                stream,
                "--group",
                "billing",
                "--force",
              ])
              assert.strictEqual(forced.code, 0, forced.stderr)
              const none = yield* cli([
                "groups",
                "delete",
                "--stream",
                stream,
                "--group",
                "billing",
              ])
              assert.strictEqual(none.code, 2)
              assert.match(none.stderr, /refused \(UnknownGroup\)/)
            }),
          120_000,
        )
      },
    )

/** host:port of a redis:// URL. */
const target_ = (url: string) => url.replace(/^redis:\/\//, "")
