/**
 * Idle waits sharing blocking connections (docs/redis.md, "Idle shards":
 * "Many idle shards, a few connections"; src/internal/idleWaits.ts): many
 * shards' `waitForEntries` in a few multi-key XREAD BLOCK calls; each wait
 * still wakes on its own shard's append and only then, a timeout still
 * comes at its own deadline, an error reply or an interruption touches no
 * other wait. On every single node (a cluster waits one shard per
 * connection: a multi-key XREAD needs one slot).
 */
import { assert, it } from "@effect/vitest"
import type { ShardStreams } from "@shardline/core"
import { Effect } from "effect"
import type { Redis } from "ioredis"
import { describe } from "vitest"
import { makeIdleWaits } from "../src/internal/idleWaits.js"
import { compare } from "../src/internal/streamId.js"
import { defaultKeys } from "../src/keys.js"
import * as RedisConnection from "../src/RedisConnection.js"
import * as RedisShardStreams from "../src/RedisShardStreams.js"
import {
  connect,
  describeTarget,
  type RedisTarget,
  redisTargets,
  unique,
} from "./support/targets.js"

const { shardKey } = defaultKeys
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe("stream id order", () => {
  it("orders by milliseconds, then sequence, numerically", () => {
    assert.isBelow(compare("9-0", "10-0"), 0)
    assert.isBelow(compare("5-9", "5-10"), 0)
    assert.strictEqual(compare("5-10", "5-10"), 0)
    assert.isAbove(compare("18446744073709551615-0", "18446744073709551614-99"), 0)
  })
})

/**
 * A ShardStreams on a connection of its own ACL user (`rules` after
 * `+@all`), the admin connection, and that user's connections as CLIENT
 * LIST shows them.
 */
const ownUser = (target: RedisTarget, rules: ReadonlyArray<string> = []) =>
  Effect.gen(function* () {
    const user = unique("idle-user")
    const admin = yield* connect(target)
    const raw = admin.client as Redis
    yield* Effect.promise(() =>
      raw.call("ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all", ...rules),
    )
    const connection = yield* RedisConnection.make({ ...target.options, username: user })
    const clients = () =>
      raw.client("LIST").then((list) =>
        String(list)
          .split("\n")
          .filter((line) => line.includes(` user=${user} `)),
      )
    return {
      user,
      raw,
      streams: RedisShardStreams.makeWith(connection),
      clients,
      /** The user's connections blocked in XREAD. */
      blocked: () =>
        clients().then((l) => l.filter((c) => / cmd=xread /.test(c) && / flags=\S*b/.test(c))),
    }
  })

type Subject = Effect.Success<ReturnType<typeof ownUser>>

/** Polls until `check` holds (no timing assertion: a generous bound, then a clear failure). */
const until = async (what: string, check: () => Promise<boolean>) => {
  for (let i = 0; i < 400; i++) {
    if (await check()) return
    await sleep(25)
  }
  throw new Error(`never happened: ${what}`)
}

const suites = (subject: () => Subject) => {
  const wait = (
    stream: string,
    shard: number,
    timeoutMs: number,
    afterId = "0-0",
    signal?: AbortSignal,
  ): Promise<boolean> =>
    Effect.runPromise(
      subject().streams.waitForEntries({ stream, shard, group: "g", timeoutMs, afterId }),
      signal === undefined ? undefined : { signal },
    )
  /** A 30 s wait from 0-0 as a Result: its typed error instead of a rejection. */
  const outcome = (stream: string, shard: number) =>
    Effect.runPromise(
      Effect.result(
        subject().streams.waitForEntries({
          stream,
          shard,
          group: "g",
          timeoutMs: 30_000,
          afterId: "0-0",
        }),
      ),
    )
  const append = (stream: string, shard: number) =>
    Effect.runPromise(subject().streams.append(stream, shard, { v: "1" }))

  it("300 shards waiting at once hold a few connections; an append wakes its own shard's wait and no other", async () => {
    const stream = unique("many")
    const controller = new AbortController()
    const results = new Map<number, boolean>()
    const waits = Array.from({ length: 300 }, (_, shard) =>
      wait(stream, shard, 60_000, "0-0", controller.signal).then(
        (woken) => void results.set(shard, woken),
        () => {},
      ),
    )
    await until(
      "every wait blocked",
      async () => (await subject().blocked()).length > 0 && results.size === 0,
    )
    // one connection per waiting shard before: 300
    const held = (await subject().clients()).length
    assert.isAtMost(held, 8, `connections of the user while 300 shards wait: ${held}`)
    await append(stream, 137)
    await until("the appended shard woke", async () => results.has(137))
    assert.isTrue(results.get(137))
    await append(stream, 299)
    await until("the second appended shard woke", async () => results.has(299))
    assert.deepStrictEqual(
      [...results.keys()].sort((a, b) => a - b),
      [137, 299],
    )
    controller.abort()
    await Promise.all(waits)
  })

  it("a wait whose shard already has entries wakes at once while every batch is in flight (the youngest is unblocked and sent again with it)", async () => {
    const stream = unique("merge")
    const controller = new AbortController()
    // six batches' worth of waits, one per turn: more than the four sent before merging starts
    const idle = []
    for (let shard = 0; shard < 6; shard++) {
      idle.push(wait(stream, shard, 60_000, "0-0", controller.signal).catch(() => false))
      await sleep(30)
    }
    await until("the batches blocked", async () => (await subject().blocked()).length >= 4)
    await append(stream, 10)
    // with a lost wake-up it would time out: false
    assert.isTrue(await wait(stream, 10, 30_000))
    // the merged and the unblocked ones still wait, and still wake
    await append(stream, 5)
    assert.isTrue(await idle[5])
    await append(stream, 0)
    assert.isTrue(await idle[0])
    controller.abort()
    assert.deepStrictEqual(await Promise.all(idle.slice(1, 5)), [false, false, false, false])
  })

  it("each wait times out at its own deadline, sharing a batch with a longer one", async () => {
    const stream = unique("deadlines")
    const long = wait(stream, 1, 30_000)
    const short = wait(stream, 0, 300)
    assert.isFalse(await short)
    await append(stream, 1)
    assert.isTrue(await long)
  })

  it("two waits on one shard from different ids (two groups): an entry between them wakes only the lower", async () => {
    const stream = unique("two-ids")
    const key = shardKey(stream, 0)
    await subject().raw.xadd(key, "1-1", "v", "1")
    await subject().raw.xadd(key, "2-2", "v", "2")
    const behind = wait(stream, 0, 30_000, "1-1")
    let early = false
    const caughtUp = wait(stream, 0, 30_000, "2-2").then((woken) => {
      early = true
      return woken
    })
    assert.isTrue(await behind)
    const alsoCaughtUp = wait(stream, 0, 400, "2-2")
    assert.isFalse(await alsoCaughtUp)
    assert.isFalse(early, "the wait from 2-2 woke with no entry after 2-2")
    await subject().raw.xadd(key, "3-3", "v", "3")
    assert.isTrue(await caughtUp)
  })

  it("a key of another type fails only its own wait (ForeignValue); the waits beside it wake", async () => {
    const stream = unique("wrongtype")
    await subject().raw.set(shardKey(stream, 2), "not a stream")
    const waits = [0, 1, 2, 3].map((shard) => outcome(stream, shard))
    const foreign = await waits[2]!
    assert.isTrue(
      foreign._tag === "Failure" && foreign.failure._tag === "ForeignValue",
      String(foreign),
    )
    for (const shard of [0, 1, 3]) await append(stream, shard)
    for (const shard of [0, 1, 3]) {
      const got = await waits[shard]!
      assert.isTrue(got._tag === "Success" && got.success, `shard ${shard}: ${String(got)}`)
    }
  })

  it("a timeout shorter than the round trip still answers what Redis says of a new key: entries, none, or WRONGTYPE", async () => {
    const stream = unique("short")
    await append(stream, 0)
    await subject().raw.set(shardKey(stream, 2), "not a stream")
    // 1 ms: the local timer fires before the batch's XREAD comes back
    assert.isTrue(await wait(stream, 0, 1))
    assert.isFalse(await wait(stream, 1, 1))
    const foreign = await Effect.runPromise(
      Effect.result(
        subject().streams.waitForEntries({
          stream,
          shard: 2,
          group: "g",
          timeoutMs: 1,
          afterId: "0-0",
        }),
      ),
    )
    assert.isTrue(
      foreign._tag === "Failure" && foreign.failure._tag === "ForeignValue",
      String(foreign),
    )
  })

  it("a CLIENT UNBLOCK from someone else ends no wait early: each wakes on its append or times out at its deadline", async () => {
    const stream = unique("spurious")
    const woken = wait(stream, 0, 30_000)
    const quiet = wait(stream, 1, 1_500)
    await until("the wait blocked", async () => (await subject().blocked()).length > 0)
    for (const line of await subject().blocked()) {
      const id = /^id=(\d+)/.exec(line)?.[1]
      if (id !== undefined) await subject().raw.client("UNBLOCK", id)
    }
    await until("sent again", async () => (await subject().blocked()).length > 0)
    await append(stream, 0)
    assert.isTrue(await woken)
    assert.isFalse(await quiet)
  })

  it("an interrupted wait leaves the others waiting on the same connection", async () => {
    const stream = unique("interrupt")
    const controller = new AbortController()
    const gone = wait(stream, 0, 30_000, "0-0", controller.signal).then(
      () => "resolved",
      () => "interrupted",
    )
    const stays = wait(stream, 1, 30_000)
    await until("blocked", async () => (await subject().blocked()).length > 0)
    const before = (await subject().clients()).length
    controller.abort()
    assert.strictEqual(await gone, "interrupted")
    assert.strictEqual((await subject().clients()).length, before)
    await append(stream, 1)
    assert.isTrue(await stays)
  })

  it("connections killed under the waits fail them (BackendUnavailable); the next waits work", async () => {
    const stream = unique("killed")
    const waits = [0, 1, 2].map((shard) => outcome(stream, shard))
    await until("blocked", async () => (await subject().blocked()).length > 0)
    for (const line of await subject().blocked()) {
      const id = /^id=(\d+)/.exec(line)?.[1]
      if (id !== undefined) await subject().raw.client("KILL", "ID", id)
    }
    for (const got of await Promise.all(waits))
      assert.isTrue(
        got._tag === "Failure" && got.failure._tag === "BackendUnavailable",
        String(got),
      )
    const again = wait(stream, 0, 30_000)
    await append(stream, 0)
    assert.isTrue(await again)
  })
  it("a connection closed while spare (nothing waiting) is not used for the next wait", async () => {
    const stream = unique("spare")
    const first = wait(stream, 0, 30_000)
    await append(stream, 0)
    assert.isTrue(await first)
    // the batch's connection is spare now; the server closes every connection of the user
    await subject().raw.client("KILL", "USER", subject().user)
    await until("the spare connection closed", async () => (await subject().blocked()).length === 0)
    await sleep(100)
    const next = outcome(stream, 1)
    await until("blocked again", async () => (await subject().blocked()).length > 0)
    await append(stream, 1)
    const got = await next
    assert.isTrue(got._tag === "Success" && got.success, String(got))
  })
}

for (const target of redisTargets().filter((t) => t.kind !== "cluster7")) {
  describeTarget("waitForEntries sharing connections", target, ownUser(target), suites)

  // a user without CLIENT ID / UNBLOCK: nothing merges, every wait still wakes
  describeTarget(
    "waitForEntries without CLIENT ID and UNBLOCK",
    target,
    ownUser(target, ["-client|id", "-client|unblock"]),
    (subject) => {
      it("waits beyond the first batches get batches of their own and wake on their appends", async () => {
        const stream = unique("no-unblock")
        const controller = new AbortController()
        const waits: Array<Promise<boolean>> = []
        for (let shard = 0; shard < 7; shard++) {
          waits.push(
            Effect.runPromise(
              subject().streams.waitForEntries({
                stream,
                shard,
                group: "g",
                timeoutMs: 60_000,
                afterId: "0-0",
              } satisfies ShardStreams.WaitOptions),
              { signal: controller.signal },
            ).catch(() => false),
          )
          await sleep(30)
        }
        for (const shard of [6, 0, 5])
          await Effect.runPromise(subject().streams.append(stream, shard, { v: "1" }))
        assert.isTrue(await waits[6])
        assert.isTrue(await waits[0])
        assert.isTrue(await waits[5])
        controller.abort()
      })
    },
  )
}

/**
 * The merge's answers, on a real server with the unblock in the test's hands:
 * an unblock that finds nothing blocked (its batch's XREAD not there yet) or
 * that the server refuses must not leave the pending waits behind.
 */
const target7 = redisTargets().find((t) => t.kind === "redis7") as RedisTarget
describeTarget("idle waits' merge", target7, connect(target7), (connection) => {
  const waits = (unblock: (id: number) => Promise<unknown>) => {
    const calls: Array<number> = []
    const w = makeIdleWaits({
      open: () => {
        const { client, release } = connection().lease()
        return { client: client as Redis, release }
      },
      unblock: (id) => {
        calls.push(id)
        return unblock(id)
      },
      check: (key, from) =>
        raw()
          .xread("COUNT", 1, "STREAMS", key, from)
          .then((reply) => reply !== null && reply.length > 0),
      minBatches: 2,
    })
    return { w, calls }
  }
  const raw = () => connection().client as Redis
  /** Three waits in three turns on keys 0..2 of `stream`: the third goes to a merge. */
  const three = async (
    w: ReturnType<typeof makeIdleWaits>,
    stream: string,
    signal: AbortSignal,
  ) => {
    const out: Array<Promise<boolean>> = []
    for (let i = 0; i < 3; i++) {
      out.push(w.wait(`${stream}:${i}`, "0-0", 60_000, signal).catch(() => false))
      await sleep(50)
    }
    return out
  }

  it("the third wait unblocks the younger batch and goes out with it: two batches, one unblock", async () => {
    const stream = unique("merge-real")
    const controller = new AbortController()
    const { w, calls } = waits((id) => raw().client("UNBLOCK", id))
    const [first, , third] = await three(w, stream, controller.signal)
    await until("merged", async () => calls.length === 1 && w.stats().batches === 2)
    await raw().xadd(`${stream}:2`, "*", "v", "1")
    assert.isTrue(await third)
    await raw().xadd(`${stream}:0`, "*", "v", "1")
    assert.isTrue(await first)
    assert.strictEqual(calls.length, 1)
    controller.abort()
  })

  it("an unblock that found nothing blocked sends the pending wait in a batch of its own", async () => {
    const stream = unique("merge-zero")
    const controller = new AbortController()
    const { w, calls } = waits(() => Promise.resolve(0))
    const [, , third] = await three(w, stream, controller.signal)
    await until("tried", async () => calls.length === 1)
    await raw().xadd(`${stream}:2`, "*", "v", "1")
    assert.isTrue(await third)
    controller.abort()
  })

  it("an unblock the server refuses sends the pending wait in a batch of its own, and merges no more", async () => {
    const stream = unique("merge-refused")
    const controller = new AbortController()
    const { w, calls } = waits(() => Promise.reject(new Error("NOPERM")))
    const all = await three(w, stream, controller.signal)
    all.push(w.wait(`${stream}:3`, "0-0", 60_000, controller.signal).catch(() => false))
    await raw().xadd(`${stream}:2`, "*", "v", "1")
    await raw().xadd(`${stream}:3`, "*", "v", "1")
    assert.isTrue(await all[2])
    assert.isTrue(await all[3])
    assert.strictEqual(calls.length, 1)
    controller.abort()
  })
})
