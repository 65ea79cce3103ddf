/**
 * `runtime.health()` on the memory ports and the TestClock (docs/runtime.md,
 * "Health"): ready once every member joined and while a coordinator answers
 * it; live while its heartbeat loop makes progress; a stopping runtime live
 * but not ready, a stopped one neither.
 */
import { assert, describe, it } from "@effect/vitest"
import type { HeartbeatResponse } from "@shardline/core"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { livenessBoundMs } from "../src/Health.js"
import { makeWorld, timing } from "./support/world.js"

describe("runtime.health()", () => {
  it.effect("ready once every member joined, with details per member", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      const r = yield* w.startRuntime("pod-a", {
        consumers: [w.recordingConsumer({ memberId: "pod-a-x" })],
      })
      const before = yield* r.runtime.health
      // not joined yet: live (its loop just started), not ready
      assert.isTrue(before.live)
      assert.isFalse(before.ready)
      assert.strictEqual(before.state, "running")
      assert.deepStrictEqual(before.details[0]!.reasons, ["not joined: joining"])
      yield* w.runUntil("joined", () => w.eventsOf("joined").length === 1)
      yield* w.runUntil("stable", () => r.runtime.members()[0]!.phase === "stable")
      const health = yield* r.runtime.health
      assert.isTrue(health.live)
      assert.isTrue(health.ready)
      const [member] = health.details
      assert.strictEqual(member!.memberId, "pod-a-x")
      assert.strictEqual(member!.stream, "orders")
      assert.strictEqual(member!.phase, "stable")
      assert.deepStrictEqual(member!.reasons, [])
      assert.strictEqual(member!.coordinatorUnavailableForMs, undefined)
      assert.isAtMost(member!.sinceHeartbeatMs, timing.heartbeatIntervalMs + 20)
      // heartbeats keep ending: still live long past the bound
      yield* TestClock.adjust(2 * member!.livenessBoundMs)
      const later = yield* r.runtime.health
      assert.isTrue(later.live)
      assert.isTrue(later.ready)
      assert.isAtMost(later.details[0]!.sinceHeartbeatMs, timing.heartbeatIntervalMs + 20)
    }),
  )

  it.effect(
    "no coordinator answers: not ready (while the member still holds its shards), live, and ready again once one answers",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld({ transportTimeoutMs: 200 })
        // a 6 s session: the member's lease (5.4 s) outlasts twice the coordinator lease
        // (2 s), as with the defaults (24 s and 12 s)
        const r = yield* w.startRuntime("pod-a", {
          consumers: [w.recordingConsumer({ sessionTimeoutMs: 6_000 })],
        })
        yield* w.runUntil("ready", () => Effect.runSync(r.runtime.health).ready)
        yield* w.faults.dropRequests(1_000_000)
        yield* w.runUntil("not ready", () => !Effect.runSync(r.runtime.health).ready)
        const health = yield* r.runtime.health
        const [member] = health.details
        assert.strictEqual(member!.phase, "stable")
        assert.isTrue(health.live)
        assert.strictEqual(member!.reasons.length, 1)
        assert.match(member!.reasons[0]!, /^no coordinator has answered it for \d+ ms$/)
        assert.isDefined(member!.coordinatorUnavailableForMs)
        // later its lease runs out too: suspended, still live (its heartbeats end, unanswered)
        yield* w.runUntil("suspended", () => r.runtime.members()[0]!.phase === "suspended")
        yield* TestClock.adjust(
          2 *
            livenessBoundMs({
              heartbeatIntervalMs: 300,
              heartbeatTimeoutMs: 2_000,
              sessionTimeoutMs: 6_000,
            }),
        )
        const cutOff = yield* r.runtime.health
        assert.isTrue(cutOff.live)
        assert.includeMembers([...cutOff.details[0]!.reasons], ["not joined: suspended"])
        yield* w.faults.dropRequests(0)
        yield* w.runUntil("ready again", () => Effect.runSync(r.runtime.health).ready)
        assert.strictEqual(
          (yield* r.runtime.health).details[0]!.coordinatorUnavailableForMs,
          undefined,
        )
      }),
  )

  it.effect(
    "a heartbeat loop that makes no progress (fenced, waiting for a handler that ignores its signal) is not live past its bound, and live again once it moves",
    () =>
      Effect.gen(function* () {
        let fence = false
        const w = yield* makeWorld({
          rewrite: (request, response): HeartbeatResponse => {
            if (!fence || request.memberEpoch <= 0) return response
            fence = false
            return { ...response, errorCode: "FENCED_MEMBER_EPOCH", assigned: [], pending: [] }
          },
        })
        let stuck = true
        const releases: Array<() => void> = []
        const r = yield* w.startRuntime("pod-a", {
          consumers: [
            w.recordingConsumer({
              // ignores its signal: returns only when the test releases it
              handle: () =>
                stuck ? new Promise<void>((resolve) => releases.push(resolve)) : undefined,
            }),
          ],
        })
        yield* w.produce(10)
        yield* w.runUntil("a handler runs", () => releases.length > 0)
        fence = true
        yield* w.runUntil("fenced", () => w.eventsOf("lost").length > 0)
        const bound = (yield* r.runtime.health).details[0]!.livenessBoundMs
        // timing: session 3 s, interval 300 ms, heartbeat timeout 1 s: the session is the bound
        assert.strictEqual(bound, timing.sessionTimeoutMs)
        yield* TestClock.adjust(bound / 2)
        assert.isTrue((yield* r.runtime.health).live)
        yield* TestClock.adjust(bound)
        const health = yield* r.runtime.health
        assert.isFalse(health.live)
        assert.isFalse(health.ready)
        assert.match(
          health.details[0]!.reasons[0]!,
          /^no heartbeat ended for \d+ ms \(bound 3000 ms\): its heartbeat loop makes no progress$/,
        )
        stuck = false
        for (const release of releases.splice(0)) release()
        yield* w.runUntil("rejoined", () => w.eventsOf("joined").length === 2)
        yield* w.runUntil("ready again", () => Effect.runSync(r.runtime.health).ready)
        assert.isTrue((yield* r.runtime.health).live)
      }),
  )

  it.effect("stopping: live, not ready; stopped: neither", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      let release: (() => void) | undefined
      const r = yield* w.startRuntime("pod-a", {
        consumers: [
          w.recordingConsumer({
            // holds the drain open until released
            handle: () => new Promise<void>((resolve) => (release = resolve)),
          }),
        ],
      })
      yield* w.produce(1)
      yield* w.runUntil("handling", () => release !== undefined)
      const stopping = yield* Effect.forkChild(r.runtime.stop)
      yield* TestClock.adjust(10)
      const during = yield* r.runtime.health
      assert.strictEqual(during.state, "stopping")
      assert.isTrue(during.live)
      assert.isFalse(during.ready)
      assert.include(during.details[0]!.reasons, "the runtime is stopping")
      release!()
      yield* w.runUntil("stopped", () => stopping.pollUnsafe() !== undefined)
      yield* Fiber.join(stopping)
      const after = yield* r.runtime.health
      assert.strictEqual(after.state, "stopped")
      assert.isFalse(after.live)
      assert.isFalse(after.ready)
      assert.include(after.details[0]!.reasons, "the runtime is stopped")
    }),
  )

  it.effect("a runtime without members is live and ready while it runs", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      const r = yield* w.startRuntime("producer-only", {})
      const health = yield* r.runtime.health
      assert.deepStrictEqual(health, { live: true, ready: true, state: "running", details: [] })
      yield* w.stopRuntime(r)
      assert.isFalse((yield* r.runtime.health).live)
    }),
  )
})
