/**
 * The opt-in circuit breaker and rate limit (docs/runtime.md, "Circuit
 * breaker and rate limit"), on one member's polling adapter over the memory
 * data plane and the TestClock (support/pollerHarness.ts): every check
 * counts messages, reads and events, or compares virtual times; none
 * depends on wall time.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { TestClock } from "effect/testing"
import type { RuntimeEvent } from "../src/Events.js"
import { CircuitBreaker } from "../src/internal/CircuitBreaker.js"
import { RateLimiter } from "../src/internal/RateLimiter.js"
import { group, makeHarness, stream } from "./support/pollerHarness.js"
import { makeWorld } from "./support/world.js"

const eventsOf = <T extends RuntimeEvent["type"]>(events: ReadonlyArray<RuntimeEvent>, type: T) =>
  events.filter((e): e is Extract<RuntimeEvent, { type: T }> => e.type === type)

/** Entries of the shards not yet acknowledged: pending plus never delivered. */
const notAcked = (h: Effect.Success<ReturnType<typeof makeHarness>>, shards: number) =>
  Effect.gen(function* () {
    let n = 0
    for (let s = 0; s < shards; s++) {
      const state = yield* h.streams.drainState({ stream, shard: s, group })
      n += state.pending + state.undelivered
    }
    return n
  })

describe("circuit breaker", () => {
  it.effect(
    "a bad deploy (every message throws): the breaker opens, nothing is dead-lettered nor lost, trials back off; fixed, a trial closes it and everything is handled",
    () =>
      Effect.gen(function* () {
        let broken = true
        const h = yield* makeHarness({
          workers: 2,
          settings: {
            batchSize: 4,
            maxDeliveries: 2,
            retryBackoff: { initialMs: 10, maxMs: 10 },
            circuitBreaker: { failures: 3, resetMs: 1_000, maxResetMs: 4_000 },
          },
          eachMessage: () => {
            if (broken) throw new Error("bad deploy")
          },
        })
        for (let s = 0; s < 4; s++) yield* h.produce(s, 5)
        for (let s = 0; s < 4; s++) yield* h.start(s)
        yield* h.runUntil("opened", () => eventsOf(h.events, "circuitOpened").length === 1, 5_000)
        const opened = eventsOf(h.events, "circuitOpened")[0]!
        assert.strictEqual(opened.scope, "member")
        assert.strictEqual(opened.failures, 3)
        assert.strictEqual(opened.retryInMs, 1_000)
        assert.include(String(opened.error), "bad deploy")
        // 3 failed trials: the open period doubles up to maxResetMs
        yield* h.runUntil(
          "three trials failed",
          () => eventsOf(h.events, "circuitOpened").length === 4,
          20_000,
        )
        assert.deepStrictEqual(
          eventsOf(h.events, "circuitOpened").map((e) => e.retryInMs),
          [1_000, 2_000, 4_000, 4_000],
        )
        // each trial read one message; nothing else was read while open
        const handles = h.log.filter((e) => e.kind === "handle")
        assert.strictEqual(handles.length, 3 + 3)
        // with the breaker open no message was dead-lettered, though maxDeliveries is 2
        assert.strictEqual(h.log.filter((e) => e.kind === "deadLetter").length, 0)
        assert.strictEqual(yield* notAcked(h, 4), 20)
        assert.strictEqual(h.poller.circuits()[0]!.state, "open")
        broken = false
        yield* h.runUntil("closed", () => eventsOf(h.events, "circuitClosed").length === 1, 20_000)
        assert.strictEqual(eventsOf(h.events, "circuitClosed")[0]!.reason, "a trial succeeded")
        yield* h.runUntil("all acked", () => h.acked().length === 20, 20_000)
        assert.strictEqual(yield* notAcked(h, 4), 0)
        assert.strictEqual(h.log.filter((e) => e.kind === "deadLetter").length, 0)
        assert.strictEqual(h.poller.circuits()[0]!.state, "closed")
      }),
  )

  it.effect("scope shard: a failing shard opens its own breaker; the others go on", () =>
    Effect.gen(function* () {
      const h = yield* makeHarness({
        workers: 1,
        settings: {
          maxDeliveries: 10,
          retryBackoff: { initialMs: 10, maxMs: 10 },
          circuitBreaker: { failures: 2, scope: "shard", resetMs: 60_000 },
        },
        eachMessage: (m) => {
          if (m.shard === 0) throw new Error("poison shard")
        },
      })
      yield* h.produce(0, 3)
      for (let s = 1; s < 3; s++) yield* h.produce(s, 10)
      for (let s = 0; s < 3; s++) yield* h.start(s)
      yield* h.runUntil("others handled", () => h.handled().length === 20, 10_000)
      yield* h.runUntil("shard 0 opened", () => eventsOf(h.events, "circuitOpened").length > 0)
      const opened = eventsOf(h.events, "circuitOpened")
      assert.strictEqual(opened.length, 1)
      assert.strictEqual(opened[0]!.scope, "shard")
      assert.strictEqual(opened[0]!.shard, 0)
      assert.deepStrictEqual(
        h.poller.circuits().map((c) => [c.shard, c.state]),
        [
          [0, "open"],
          [1, "closed"],
          [2, "closed"],
        ],
      )
      // more messages on the healthy shards are still read; shard 0 is not
      yield* h.produce(1, 5)
      yield* h.runUntil("the new ones handled", () => h.handled().length === 25, 10_000)
      const shard0Handles = h.log.filter((e) => e.kind === "handle" && e.shard === 0).length
      yield* TestClock.adjust(10_000)
      assert.strictEqual(
        h.log.filter((e) => e.kind === "handle" && e.shard === 0).length,
        shard0Handles,
      )
    }),
  )

  it.effect("failures above maxDeliveries: a lone poison message is still dead-lettered", () =>
    Effect.gen(function* () {
      const h = yield* makeHarness({
        settings: {
          batchSize: 1,
          maxDeliveries: 2,
          retryBackoff: { initialMs: 10, maxMs: 10 },
          circuitBreaker: { failures: 5 },
        },
        eachMessage: (m) => {
          if (m.fields.n === "1") throw new Error("poison")
        },
      })
      yield* h.produce(0, 4)
      yield* h.start(0)
      yield* h.runUntil("three handled", () => h.handled().length === 3, 10_000)
      yield* h.runUntil("dead-lettered", () => h.log.some((e) => e.kind === "deadLetter"), 10_000)
      assert.strictEqual(eventsOf(h.events, "circuitOpened").length, 0)
      assert.strictEqual(h.poller.circuits()[0]!.state, "closed")
    }),
  )

  it.effect(
    "resetCircuit closes an open breaker by hand: reading resumes before its retry time",
    () =>
      Effect.gen(function* () {
        let broken = true
        const h = yield* makeHarness({
          settings: {
            retryBackoff: { initialMs: 10, maxMs: 10 },
            circuitBreaker: { failures: 1, resetMs: 600_000 },
          },
          eachMessage: () => {
            if (broken) throw new Error("down")
          },
        })
        yield* h.produce(0, 5)
        yield* h.start(0)
        yield* h.runUntil("opened", () => eventsOf(h.events, "circuitOpened").length === 1)
        yield* TestClock.adjust(5_000)
        assert.strictEqual(h.handled().length, 0)
        broken = false
        assert.isTrue(h.poller.resetCircuit())
        assert.isFalse(h.poller.resetCircuit())
        assert.strictEqual(eventsOf(h.events, "circuitClosed")[0]!.reason, "reset by hand")
        const before = yield* Clock.currentTimeMillis
        yield* h.runUntil("handled", () => h.handled().length === 5)
        assert.isBelow((yield* Clock.currentTimeMillis) - before, 1_000)
      }),
  )

  it("unit: trials, doubling, a trial that ends unsettled frees the next one", () => {
    const b = new CircuitBreaker(
      { failures: 2, scope: "member", resetMs: 100, maxResetMs: 300 },
      undefined,
    )
    assert.strictEqual(b.admit(0)._tag, "Read")
    assert.strictEqual(b.failure(0), "closed")
    assert.isFalse(b.success())
    assert.strictEqual(b.failure(1), "closed")
    assert.strictEqual(b.failure(2), "opened")
    assert.deepStrictEqual(b.admit(50), { _tag: "Wait", ms: 52 })
    const trial = b.admit(102)
    assert.strictEqual(trial._tag, "Trial")
    // one trial at a time
    assert.strictEqual(b.admit(103)._tag, "Wait")
    // its read found nothing: another may try
    if (trial._tag === "Trial") b.endTrial(trial.id)
    const second = b.admit(104)
    assert.strictEqual(second._tag, "Trial")
    assert.strictEqual(b.failure(104), "opened")
    assert.strictEqual(b.view().retryAt, 304)
    if (second._tag === "Trial") b.endTrial(second.id) // a late end changes nothing
    assert.strictEqual(b.admit(200)._tag, "Wait")
    assert.strictEqual(b.admit(304)._tag, "Trial")
    assert.strictEqual(b.failure(304), "opened")
    assert.strictEqual(b.view().retryAt, 604) // capped at maxResetMs
    assert.strictEqual(b.admit(604)._tag, "Trial")
    assert.isTrue(b.success())
    assert.strictEqual(b.state, "closed")
    assert.strictEqual(b.failure(605), "closed") // the count restarted
  })
})

describe("rate limit", () => {
  /** Handle times (virtual ms), in order. */
  const timed = (times: Array<number>) => () =>
    Effect.map(Clock.currentTimeMillis, (t) => {
      times.push(t)
    })

  /** The most handled in any window of `windowMs`. */
  const mostInWindow = (times: ReadonlyArray<number>, windowMs: number) => {
    let most = 0
    for (let i = 0, j = 0; j < times.length; j++) {
      while (times[j]! - times[i]! >= windowMs) i++
      most = Math.max(most, j - i + 1)
    }
    return most
  }

  it.effect("scope member: at most N per interval in any window, across workers and shards", () =>
    Effect.gen(function* () {
      const times: Array<number> = []
      const h = yield* makeHarness({
        workers: 3,
        settings: { batchSize: 8, rateLimit: { messages: 10, intervalMs: 1_000 } },
        eachMessage: timed(times),
      })
      for (let s = 0; s < 4; s++) yield* h.produce(s, 25)
      for (let s = 0; s < 4; s++) yield* h.start(s)
      yield* h.runUntil("all handled", () => times.length === 100, 50_000)
      assert.strictEqual(mostInWindow(times, 1_000), 10)
      // and it does not idle: 100 messages at 10/s take 9 windows after the first burst
      assert.isAtMost(times[99]! - times[0]!, 9_100)
      assert.isAtLeast(times[99]! - times[0]!, 9_000)
    }),
  )

  it.effect("scope group: a member owning 4 of 16 shards takes a quarter of the limit", () =>
    Effect.gen(function* () {
      const times: Array<number> = []
      const h = yield* makeHarness({
        workers: 2,
        settings: {
          shardCount: 16,
          batchSize: 8,
          rateLimit: { messages: 40, intervalMs: 1_000, scope: "group" },
        },
        eachMessage: timed(times),
      })
      for (let s = 0; s < 4; s++) yield* h.produce(s, 10)
      for (let s = 0; s < 4; s++) yield* h.start(s)
      yield* h.runUntil("all handled", () => times.length === 40, 50_000)
      assert.strictEqual(mostInWindow(times, 1_000), 10)
    }),
  )

  it("unit: a share below one message per interval is one per longer window", () => {
    let share = 1 / 16
    const limiter = new RateLimiter({ messages: 8, intervalMs: 1_000, scope: "group" }, () => share)
    // 8 * 1/16 = half a message per second: one per 2 s
    assert.strictEqual(limiter.reserve(0, 5), 1)
    assert.strictEqual(limiter.reserve(1_999, 5), 0)
    assert.strictEqual(limiter.waitMs(1_999), 1)
    assert.strictEqual(limiter.reserve(2_000, 5), 1)
    // reserved but unread is given back
    limiter.release(1)
    assert.strictEqual(limiter.reserve(2_000, 5), 1)
    share = 0
    assert.strictEqual(limiter.reserve(1_000_000, 5), 0)
  })
})

describe("through the runtime", () => {
  it.effect("circuit events, members()[i].circuits and resetCircuit", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      let broken = true
      const r = yield* w.startRuntime("pod-a", {
        logLevel: "silent",
        consumers: [
          w.recordingConsumer({
            retryBackoff: { initialMs: 10, maxMs: 10 },
            circuitBreaker: { failures: 2, resetMs: 600_000 },
            handle: () => {
              if (broken) throw new Error("down")
            },
          }),
        ],
      })
      yield* w.produce(10)
      yield* w.runUntil("opened", () => w.eventsOf("circuitOpened").length === 1)
      assert.strictEqual(r.runtime.members()[0]!.circuits[0]!.state, "open")
      broken = false
      assert.isTrue(yield* r.runtime.resetCircuit("orders", "g"))
      assert.strictEqual(
        (yield* Effect.flip(r.runtime.resetCircuit("orders", "nope")))._tag,
        "UnknownGroup",
      )
      yield* w.runUntil("all handled", w.allHandled)
      assert.strictEqual(w.eventsOf("deadLettered").length, 0)
    }),
  )
})
