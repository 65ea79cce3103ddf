/**
 * The standalone coordinator (`shardline coordinator`, the CLI built by
 * test/support/buildCli.ts) as real processes on Redis 7.0: the process
 * killed, and a process paused past its lease (SIGSTOP / SIGCONT). Members
 * are core's MemberMachine driven by redis-store's test driver; every test
 * checks the event log for two owners. The in-process coordinator faults are
 * redis-store's test/faults.test.ts.
 */
import { assert, it } from "@effect/vitest"
import { Store } from "@shardline/core"
import { Context, Effect, Option } from "effect"
import {
  makeGroup,
  makeLog,
  makeProducer,
  overlappingOwnership,
  redisPorts,
  runUntil,
} from "../../redis-store/test/support/driver.js"
import { describeTarget, redisTargets, unique } from "../../redis-store/test/support/targets.js"
import { exited, spawnCoordinator } from "./support/cli.js"

const keys = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `k${(from + i) % 30}`)

/** Lines of a coordinator process matching `event`. */
const linesOf = (lines: ReadonlyArray<Record<string, unknown>>, event: string) =>
  lines.filter((l) => l.event === event)

const coordinatorArgs = (url: string, stream: string, holder: string) => [
  "--redis",
  url,
  "--stream",
  stream,
  "--group",
  "workers",
  "--shards",
  "4",
  "--session-timeout",
  "6000",
  "--heartbeat-interval",
  "300",
  "--lease-ttl",
  "1500",
  "--holder",
  holder,
]

for (const target of redisTargets())
  if (target.kind === "redis7")
    describeTarget(
      "coordinator processes on real Redis",
      target,
      redisPorts(target.options ?? {}),
      (ports) => {
        const url = `redis://${target.options?.host}:${target.options?.port}`

        it.live(
          "the coordinator process is killed: a second process takes over, members keep their shards",
          () =>
            Effect.gen(function* () {
              const stream = unique("kill")
              const a = yield* spawnCoordinator(coordinatorArgs(url, stream, "coord-a"))
              yield* runUntil(
                [],
                "a is coordinator",
                () => linesOf(a.lines, "coordinator").length > 0,
              )
              const b = yield* spawnCoordinator(coordinatorArgs(url, stream, "coord-b"))
              yield* runUntil([], "b is standing by", () => linesOf(b.lines, "standby").length > 0)
              const log = makeLog()
              const group = yield* makeGroup(ports(), log, {
                stream,
                group: "workers",
                shardCount: 4,
                sessionTimeoutMs: 6_000,
              })
              for (const id of ["m1", "m2"]) yield* group.addMember(id)
              yield* runUntil([group], "balanced", group.balanced)
              const producer = makeProducer(ports(), stream, 4)
              yield* producer.produce(keys(40))
              const before = group.ownership()
              const eventsBefore = log.events.length
              a.child.kill("SIGKILL")
              yield* runUntil(
                [group],
                "b took over",
                () => linesOf(b.lines, "coordinator").length > 0,
                {
                  each: producer.produce(keys(2)),
                },
              )
              yield* producer.produce(keys(40, 5))
              yield* runUntil([group], "every message acked after the takeover", () =>
                producer.produced.every((k) => group.acked.has(k)),
              )
              // members kept their shards: no shard was stopped or restarted
              assert.deepStrictEqual(group.ownership(), before)
              assert.deepStrictEqual(
                log.events
                  .slice(eventsBefore)
                  .filter((e) => ["start", "stopAll", "drained", "staleOwner"].includes(e.kind)),
                [],
              )
              assert.deepStrictEqual(overlappingOwnership(log.events), [])
              b.child.kill("SIGTERM")
              assert.strictEqual(yield* exited(b.child), 0)
            }),
          60_000,
        )

        it.live(
          "a coordinator paused past its lease (SIGSTOP) then resumed (SIGCONT) steps down; the other keeps serving",
          () =>
            Effect.gen(function* () {
              const stream = unique("pause")
              const a = yield* spawnCoordinator(coordinatorArgs(url, stream, "coord-a"))
              yield* runUntil(
                [],
                "a is coordinator",
                () => linesOf(a.lines, "coordinator").length > 0,
              )
              const b = yield* spawnCoordinator(coordinatorArgs(url, stream, "coord-b"))
              const log = makeLog()
              const group = yield* makeGroup(ports(), log, {
                stream,
                group: "workers",
                shardCount: 4,
                sessionTimeoutMs: 6_000,
              })
              for (const id of ["m1", "m2"]) yield* group.addMember(id)
              yield* runUntil([group], "settled", group.settled)
              a.child.kill("SIGSTOP")
              yield* runUntil(
                [group],
                "b took over while a is paused",
                () => linesOf(b.lines, "coordinator").length > 0,
              )
              // a third member joins through b while a sleeps: b commits
              yield* group.addMember("m3")
              yield* runUntil([group], "settled under b", group.settled)
              const standbyBefore = linesOf(a.lines, "standby").length
              a.child.kill("SIGCONT")
              yield* runUntil(
                [group],
                "a steps down after waking",
                () => linesOf(a.lines, "standby").length > standbyBefore,
              )
              const down = linesOf(a.lines, "standby").at(-1)!
              assert.match(String(down.reason), /lease|commit|coordinator/)
              // a never serves again; b does, and the group goes on
              yield* group.addMember("m4")
              yield* runUntil([group], "settled with m4 under b", group.settled)
              const snapshot = Option.getOrThrow(
                yield* Context.get(ports(), Store.Store).load({ stream, group: "workers" }),
              )
              assert.strictEqual(snapshot.coordinator?.holder, "coord-b")
              assert.strictEqual(snapshot.members.length, 4)
              assert.deepStrictEqual(linesOf(a.lines, "coordinator").length, 1)
              assert.deepStrictEqual(overlappingOwnership(log.events), [])
            }),
          60_000,
        )
      },
    )
