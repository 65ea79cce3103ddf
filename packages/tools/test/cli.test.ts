/**
 * The `shardline` CLI, built (test/support/buildCli.ts) and run as a child
 * process against a real Redis 7.0: inspect (table and JSON), reshard and
 * rollback with their refusals, a standalone coordinator serving members
 * until SIGTERM, one-line errors with exit code 2, `--prefix`,
 * `--command-timeout-ms` (bad values exit 64 on every command that
 * connects; a value is the commands' deadline), and an earlier version's
 * keys refused then moved by `migrate-keys`.
 */
import { assert, it } from "@effect/vitest"
import { RedisConnection } from "@shardline/redis-store"
import { freePort, startRedis } from "@shardline/redis-store/testing"
import { Context, Effect } from "effect"
import {
  makeGroup,
  makeLog,
  makeProducer,
  redisPorts,
  runUntil,
} from "../../redis-store/test/support/driver.js"
import { describeTarget, redisTargets, unique } from "../../redis-store/test/support/targets.js"
import { exited, runCli, spawnCoordinator } from "./support/cli.js"

for (const target of redisTargets())
  if (target.kind === "redis7")
    describeTarget("shardline CLI", target, redisPorts(target.options ?? {}), (ports) => {
      const url = `redis://${target.options?.host}:${target.options?.port}`

      it.live(
        "usage errors exit 64; a missing group and an unreachable Redis are one line, exit 2",
        () =>
          Effect.gen(function* () {
            const usage = yield* runCli(["inspect", "--redis", url])
            assert.strictEqual(usage.code, 64)
            assert.include(usage.stderr, "--stream is required")
            const missing = yield* runCli([
              "inspect",
              "--redis",
              url,
              "--stream",
              unique("none"),
              "--group",
              "g",
            ])
            assert.strictEqual(missing.code, 2)
            assert.match(missing.stderr, /^shardline: group g on stream none-\w+ does not exist/)
            assert.strictEqual(missing.stderr.trim().split("\n").length, 1)
            const port = yield* Effect.promise(() => freePort())
            const down = yield* runCli([
              "inspect",
              "--redis",
              `redis://127.0.0.1:${port}`,
              "--stream",
              "s",
              "--group",
              "g",
            ])
            assert.strictEqual(down.code, 2)
            assert.match(down.stderr, /^shardline: cannot reach Redis/)
            assert.strictEqual(down.stderr.trim().split("\n").length, 1)
            const reshardDown = yield* runCli([
              "reshard",
              "--redis",
              `redis://127.0.0.1:${port}`,
              "--stream",
              "s",
              "--shards",
              "8",
            ])
            assert.strictEqual(reshardDown.code, 2)
            assert.strictEqual(reshardDown.stderr.trim().split("\n").length, 1)
          }),
      )

      it.live(
        "--command-timeout-ms: a bad value exits 64 naming the flag on every command that connects; a value is every command's deadline",
        () =>
          Effect.gen(function* () {
            const commands: ReadonlyArray<ReadonlyArray<string>> = [
              ["inspect", "--stream", "s"],
              ["reshard", "--stream", "s", "--shards", "4"],
              ["coordinator", "--stream", "s", "--group", "g", "--shards", "2"],
              ["dlq", "list", "--stream", "s", "--group", "g"],
              ["dlq", "count", "--stream", "s", "--group", "g"],
              ["dlq", "show", "--stream", "s", "--shard", "0", "--id", "1-0"],
              ["dlq", "replay", "--stream", "s", "--group", "g"],
              ["dlq", "purge", "--stream", "s", "--group", "g", "--all"],
              ["groups", "list", "--stream", "s"],
              ["groups", "delete", "--stream", "s", "--group", "g"],
              ["dashboard"],
              ["migrate-keys", "--stream", "s"],
            ]
            const bad = ["0", "-5", "1.5", "abc", "5s", ""]
            const runs = yield* Effect.forEach(
              commands,
              (command, i) =>
                Effect.map(
                  runCli([
                    ...command,
                    "--redis",
                    url,
                    "--command-timeout-ms",
                    bad[i % bad.length]!,
                  ]),
                  (run) => ({ command, value: bad[i % bad.length]!, run }),
                ),
              { concurrency: 4 },
            )
            for (const { command, value, run } of runs) {
              assert.strictEqual(run.code, 64, `${command.join(" ")}: ${run.stderr}`)
              assert.include(
                run.stderr,
                `shardline: --command-timeout-ms must be a positive integer, got ${value}`,
              )
            }
            const help = yield* runCli(["--help"])
            assert.include(help.stdout, "--command-timeout-ms n")
            // a server that accepts connections and answers nothing (SIGSTOP):
            // the first command fails at the given deadline, not the default's
            const server = yield* Effect.acquireRelease(
              Effect.promise(() => startRedis()),
              (s) =>
                Effect.promise(() => {
                  s.resume()
                  return s.stop()
                }),
            )
            server.pause()
            const hung = yield* runCli([
              "inspect",
              "--redis",
              server.url,
              "--stream",
              "s",
              "--group",
              "g",
              "--command-timeout-ms",
              "200",
            ])
            assert.strictEqual(hung.code, 2)
            assert.match(hung.stderr, /within 200 ms \(commandTimeoutMs\)/)
            assert.strictEqual(hung.stderr.trim().split("\n").length, 1)
          }).pipe(Effect.scoped),
        // 15 CLI processes: the 60 s default ran out at load 15 on 2 cores
        180_000,
      )

      it.live(
        "an earlier version's keys: refused naming migrate-keys (exit 2); migrate-keys moves them; --prefix",
        () =>
          Effect.gen(function* () {
            const stream = unique("cli-schema1")
            const prefix = `${unique("cli-ns")}:`
            const raw = Context.get(ports(), RedisConnection.RedisConnection).client
            // schema 1's layout record and owner token
            yield* Effect.promise(() =>
              Promise.all([
                raw.hset(`{shardline:${stream}}:layout`, "record", "{}", "revision", "1"),
                raw.set(`{${stream}:0}:owner:workers`, "3"),
                raw.xadd(`{${stream}:0}`, "*", "n", "1"),
              ]),
            )
            const refused = yield* runCli([
              "groups",
              "list",
              "--redis",
              url,
              "--prefix",
              prefix,
              "--stream",
              stream,
            ])
            assert.strictEqual(refused.code, 2)
            assert.match(
              refused.stderr,
              /^shardline: KeySchemaMismatch: stream "cli-schema1-\w+" has keys/,
            )
            assert.include(
              refused.stderr,
              `shardline migrate-keys --redis <url> --stream ${stream} --prefix ${prefix}`,
            )
            const moved = yield* runCli([
              "migrate-keys",
              "--redis",
              url,
              "--prefix",
              prefix,
              "--stream",
              stream,
            ])
            assert.strictEqual(moved.code, 0, moved.stderr)
            assert.include(
              moved.stdout,
              `{${stream}:0}:owner:workers -> ${prefix}{${stream}:0}:owner:workers`,
            )
            assert.include(
              moved.stdout,
              `{shardline:${stream}}:layout -> ${prefix}stream:{${stream}}:layout`,
            )
            assert.include(moved.stdout, `recorded key schema in ${prefix}schema`)
            assert.strictEqual(yield* Effect.promise(() => raw.xlen(`${prefix}{${stream}:0}`)), 1)
            assert.strictEqual(yield* Effect.promise(() => raw.exists(`{${stream}:0}`)), 0)
            // a prefix that cannot name a namespace: one line, exit 2
            const bad = yield* runCli([
              "groups",
              "list",
              "--redis",
              url,
              "--prefix",
              "a*",
              "--stream",
              stream,
            ])
            assert.strictEqual(bad.code, 2)
            assert.match(bad.stderr, /^shardline: InvalidKeyPrefix: a key prefix is/)
          }),
      )

      it.live(
        "a standalone coordinator serves members until SIGTERM; inspect shows the group; reshard and rollback",
        () =>
          Effect.gen(function* () {
            const stream = unique("cli")
            const coord = yield* spawnCoordinator([
              "--redis",
              url,
              "--stream",
              stream,
              "--group",
              "workers",
              "--shards",
              "4",
              // members heartbeat only while runUntil drives them: a session
              // outlives the CLI runs in between (slow node starts under load)
              "--session-timeout",
              "60000",
              "--heartbeat-interval",
              "300",
              "--holder",
              "cli-coordinator",
            ])
            const log = makeLog()
            const group = yield* makeGroup(ports(), log, {
              stream,
              group: "workers",
              shardCount: 4,
            })
            yield* group.addMember("m1")
            yield* group.addMember("m2")
            yield* runUntil([group], "settled through the CLI's coordinator", group.settled)
            const producer = makeProducer(ports(), stream, 4)
            yield* producer.produce(Array.from({ length: 20 }, (_, i) => `k${i}`))
            yield* runUntil([group], "acked", () =>
              producer.produced.every((k) => group.acked.has(k)),
            )
            assert.isTrue(
              coord.lines.some((l) => l.event === "coordinator" && l.holder === "cli-coordinator"),
            )

            const inspectJson = runCli([
              "inspect",
              "--redis",
              url,
              "--stream",
              stream,
              "--group",
              "workers",
              "--json",
            ])
            // inspect shows a snapshot: the coordinator may still be one
            // heartbeat behind the members' view, so drive until it is stable
            let json = yield* inspectJson
            yield* runUntil([group], "inspect shows both members stable", () =>
              Effect.gen(function* () {
                json = yield* inspectJson
                if (json.code !== 0) return false
                const members = (JSON.parse(json.stdout) as { members: Array<{ state: string }> })
                  .members
                return members.length === 2 && members.every((m) => m.state === "STABLE")
              }),
            )
            assert.strictEqual(json.code, 0, json.stderr)
            const report = JSON.parse(json.stdout) as {
              members: Array<{
                memberId: string
                memberEpoch: number
                incarnation: number
                state: string
                owned: Array<number>
              }>
              coordinator: { holder: string }
              lease: { holder: string; ttlMs: number }
              shards: Array<{
                shard: number
                length: number
                pending: number
                lag: number
                ownerToken: number
              }>
              storeRevision: number
              imbalance: number
              audit: Array<{ kind: string }>
              resharding: { phase: string }
            }
            assert.deepStrictEqual(report.members.map((m) => m.memberId).sort(), ["m1", "m2"])
            assert.deepStrictEqual(report.members.flatMap((m) => m.owned).sort(), [0, 1, 2, 3])
            for (const m of report.members) {
              assert.isAbove(m.memberEpoch, 0)
              assert.strictEqual(m.incarnation, 1)
              assert.strictEqual(m.state, "STABLE")
            }
            assert.strictEqual(report.coordinator.holder, "cli-coordinator")
            assert.strictEqual(report.lease.holder, "cli-coordinator")
            assert.isAbove(report.lease.ttlMs, 0)
            assert.strictEqual(report.imbalance, 0)
            assert.strictEqual(
              report.shards.reduce((n, s) => n + s.length, 0),
              20,
            )
            assert.isTrue(
              report.shards.every((s) => s.pending === 0 && s.lag === 0 && s.ownerToken > 0),
            )
            assert.isAbove(report.storeRevision, 1)
            assert.isAtLeast(report.audit.length, 5)
            assert.strictEqual(report.resharding.phase, "idle")

            const human = yield* runCli([
              "inspect",
              "--redis",
              url,
              "--stream",
              stream,
              "--group",
              "workers",
            ])
            assert.strictEqual(human.code, 0)
            assert.include(human.stdout, `group workers on stream ${stream}`)
            assert.match(human.stdout, /member\s+epoch\s+incarnation\s+state\s+owned\s+target/)
            assert.include(human.stdout, "resharding: idle")
            assert.include(human.stdout, "audit events")

            const same = yield* runCli([
              "reshard",
              "--redis",
              url,
              "--stream",
              stream,
              "--shards",
              "4",
            ])
            assert.strictEqual(same.code, 2)
            assert.match(same.stderr, /^shardline: refused \(SameShardCount\)/)
            const noRollback = yield* runCli([
              "reshard",
              "--redis",
              url,
              "--stream",
              stream,
              "--rollback",
            ])
            assert.strictEqual(noRollback.code, 2)
            assert.match(noRollback.stderr, /^shardline: refused \(NoMigration\)/)
            const unknown = yield* runCli([
              "reshard",
              "--redis",
              url,
              "--stream",
              unique("nostream"),
              "--shards",
              "8",
            ])
            assert.strictEqual(unknown.code, 2)
            assert.match(unknown.stderr, /refused \(UnknownStream\)/)

            const resharded = yield* runCli([
              "reshard",
              "--redis",
              url,
              "--stream",
              stream,
              "--shards",
              "8",
            ])
            assert.strictEqual(resharded.code, 0, resharded.stderr)
            assert.include(resharded.stdout, "generation 1, 8 shards from 4")
            yield* runUntil([group], "the group follows the new layout", () =>
              Effect.map(
                runCli([
                  "inspect",
                  "--redis",
                  url,
                  "--stream",
                  stream,
                  "--group",
                  "workers",
                  "--json",
                ]),
                (r) => {
                  const rep = JSON.parse(r.stdout) as {
                    resharding: { phase: string; layout: { generation: number } }
                  }
                  return rep.resharding.layout.generation === 1
                },
              ),
            )
            const rolled = yield* runCli([
              "reshard",
              "--redis",
              url,
              "--stream",
              stream,
              "--rollback",
            ])
            assert.strictEqual(rolled.code, 0, rolled.stderr)
            assert.include(rolled.stdout, "generation 2, 4 shards from 12")

            coord.child.kill("SIGTERM")
            assert.strictEqual(yield* exited(coord.child), 0)
            assert.isTrue(coord.lines.some((l) => l.event === "stopping"))
          }),
        180_000,
      )
    })
