/**
 * The wire (src/internal/wire.ts): a dedicated connection taken over from
 * ioredis and spoken to directly, on which the gated fence's bursts rely.
 * Concurrent bursts never interleave and get their own replies; arguments
 * and replies keep their bytes (multi-byte text, replies split over many
 * TCP reads); error replies are Error elements; a closed connection fails
 * what is in flight and everything after, and never comes back.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Redis } from "ioredis"
import { adopt, type Wire } from "../src/internal/wire.js"
import { connectAsOwnUser, describeTarget, redisTargets, unique } from "./support/targets.js"

for (const target of redisTargets().filter((t) => t.kind !== "cluster7")) {
  describeTarget("wire", target, connectAsOwnUser(target), (subject) => {
    /** A wire over a fresh dedicated connection, closed with the test's scope. */
    const wire = Effect.acquireRelease(
      Effect.promise(async () => {
        const lease = subject().connection.lease()
        const c = lease.client as Redis
        if (c.status !== "ready") await new Promise((resolve) => c.once("ready", resolve))
        return { wire: adopt(c), lease }
      }),
      ({ wire, lease }) =>
        Effect.sync(() => {
          wire.close()
          lease.release(false)
        }),
    ).pipe(Effect.map(({ wire }) => wire))

    const send = (w: Wire, commands: Parameters<Wire["send"]>[0]) =>
      Effect.promise(() => w.send(commands))

    it.live("concurrent bursts never interleave: each gets its own replies, in order", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const w = yield* wire
          const key = unique("wire-list")
          // 64 bursts sent at once, of 1 to 8 commands each, every command naming its burst
          const bursts = Array.from({ length: 64 }, (_, b) =>
            Array.from({ length: 1 + (b % 8) }, (_, i) => ["ECHO", `${b}:${i}`] as const),
          )
          const replies = yield* Effect.all(
            bursts.map((commands) => send(w, commands)),
            { concurrency: "unbounded" },
          )
          for (const [b, got] of replies.entries())
            assert.deepStrictEqual(
              got,
              bursts[b]!.map(([, text]) => text),
            )
          // a MULTI of one burst is never entered by another burst's commands
          const transactions = yield* Effect.all(
            Array.from({ length: 16 }, (_, b) =>
              send(w, [["MULTI"], ["RPUSH", key, `${b}a`], ["RPUSH", key, `${b}b`], ["EXEC"]]),
            ),
            { concurrency: "unbounded" },
          )
          for (const t of transactions)
            assert.deepStrictEqual(t.slice(0, 3), ["OK", "QUEUED", "QUEUED"])
          const [list] = yield* send(w, [["LRANGE", key, 0, -1]])
          const pairs = (list as Array<string>).join(" ")
          for (let b = 0; b < 16; b++) assert.include(pairs, `${b}a ${b}b`)
          yield* send(w, [["DEL", key]])
        }),
      ),
    )

    it.live("multi-byte text and a reply split over many reads keep their bytes", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const w = yield* wire
          const key = unique("wire-ü€")
          const text = "zählt € 𝄞 ".repeat(3)
          const big = "x".repeat(2_000_000) // far more than one socket read
          const replies = yield* send(w, [
            ["SET", key, text],
            ["GET", key],
            ["STRLEN", key],
            ["SET", `${key}:big`, big],
            ["GET", `${key}:big`],
            ["DEL", key, `${key}:big`],
          ])
          assert.deepStrictEqual(replies.slice(0, 3), ["OK", text, Buffer.byteLength(text)])
          assert.strictEqual((replies[4] as string).length, big.length)
          assert.strictEqual(replies[5], 2)
        }),
      ),
    )

    it.live("an error reply is an Error element, in its place; the wire goes on", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const w = yield* wire
          const key = unique("wire-err")
          const replies = yield* send(w, [
            ["SET", key, "not a number"],
            ["INCR", key],
            ["MULTI"],
            ["INCR", key],
            ["EXEC"],
            ["DEL", key],
          ])
          assert.strictEqual(replies[0], "OK")
          assert.instanceOf(replies[1], Error)
          assert.match((replies[1] as Error).message, /not an integer/)
          // inside EXEC's array too
          const exec = replies[4] as Array<unknown>
          assert.instanceOf(exec[0], Error)
          assert.strictEqual(replies[5], 1)
          assert.isFalse(w.closed())
          assert.deepStrictEqual(yield* send(w, [["ECHO", "still here"]]), ["still here"])
        }),
      ),
    )

    it.live("a dropped connection fails the burst in flight and every later one, for good", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const w = yield* wire
          const key = unique("wire-drop")
          // in flight while the server drops the connection: BLPOP holds it
          const blocked = w.send([["BLPOP", key, 5]]).then(
            () => "answered",
            (error: Error) => error.message,
          )
          yield* Effect.sleep(100)
          yield* subject().killAll
          const outcome = yield* Effect.promise(() => blocked)
          assert.match(outcome, /closed|ECONNRESET|EPIPE/)
          assert.isTrue(w.closed())
          const later = yield* Effect.promise(() =>
            w.send([["ECHO", "x"]]).then(
              () => "answered",
              () => "refused",
            ),
          )
          assert.strictEqual(later, "refused")
        }),
      ),
    )

    it.live("a connection that is not ready cannot be taken over", () =>
      Effect.sync(() => {
        const lease = subject().connection.lease()
        const c = lease.client as Redis
        try {
          if (c.status === "ready") c.disconnect()
          assert.throws(() => adopt(c), /wire: the connection is/)
        } finally {
          lease.release(false)
        }
      }),
    )
  })
}
