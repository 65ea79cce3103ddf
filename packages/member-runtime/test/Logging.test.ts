/**
 * The runtime's log (src/Logging.ts, docs/runtime.md "Logging"): a
 * capturing logger sees what an operator must see, at the right level, once
 * per lost connection rather than per call; a standalone group without a
 * coordinator says so and how to start one; such members stop at once.
 * Runtimes on memory ports and the TestClock (support/world.ts); no
 * assertion depends on wall time.
 */
import { assert, describe, it } from "@effect/vitest"
import { BackendUnavailable, type HeartbeatResponse, TransportError } from "@shardline/core"
import { Cause, Clock, Effect } from "effect"
import { afterEach, vi } from "vitest"
import type { RuntimeEvent } from "../src/Events.js"
import {
  effectLoggerLayer,
  type LogFields,
  type Logger,
  makeEventLog,
  makeLevelLogger,
} from "../src/Logging.js"
import { group, makeWorld, stream, timing } from "./support/world.js"

interface Line {
  readonly level: "debug" | "info" | "warn" | "error"
  readonly fields: LogFields
  readonly message: string
}

const capture = () => {
  const lines: Array<Line> = []
  const at =
    (level: Line["level"]) =>
    (fields: LogFields, message: string): void => {
      lines.push({ level, fields, message })
    }
  const logger: Logger = {
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
  }
  return { logger, lines }
}

afterEach(() => {
  vi.restoreAllMocks()
})

describe("logging through a runtime", () => {
  it.effect(
    "a dead letter is a warning (shard, member, message id); handler failures only at info",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const quiet = capture()
        const verbose = capture()
        const failing = {
          maxDeliveries: 1,
          handle: (m: { fields: Record<string, string> }) => {
            if (m.fields.n === "0") throw new Error("cannot bill")
          },
        }
        yield* w.startRuntime("pod-a", {
          logger: quiet.logger,
          consumers: [w.recordingConsumer(failing)],
        })
        yield* w.produce(5)
        yield* w.runUntil("handled", w.allHandled)
        yield* w.runUntil("dead-lettered", () => w.eventsOf("deadLettered").length === 1)
        const dead = quiet.lines.filter((l) => l.fields.event === "deadLettered")
        assert.strictEqual(dead.length, 1)
        const [line] = dead
        assert.strictEqual(line!.level, "warn")
        const event = w.eventsOf("deadLettered")[0]!
        assert.include(line!.message, `message ${event.messageId} of shard ${event.shard}`)
        assert.include(line!.message, "Error: cannot bill")
        assert.deepInclude(line!.fields, { stream, group, memberId: "pod-a", shard: event.shard })
        // the default level is warn: nothing below it
        assert.deepStrictEqual(
          quiet.lines.filter((l) => l.level === "debug" || l.level === "info"),
          [],
        )

        // logLevel info: the failure itself is told too
        const w2 = yield* makeWorld()
        yield* w2.startRuntime("pod-b", {
          logger: verbose.logger,
          logLevel: "info",
          consumers: [w2.recordingConsumer(failing)],
        })
        yield* w2.produce(5)
        yield* w2.runUntil("dead-lettered", () => w2.eventsOf("deadLettered").length === 1)
        const failure = verbose.lines.find((l) => l.fields.event === "handlerError")!
        assert.strictEqual(failure.level, "info")
        assert.include(failure.message, "handler failed on message")
        assert.include(failure.message, "cannot bill")
        assert.isTrue(verbose.lines.some((l) => l.fields.event === "joined" && l.level === "info"))
      }),
  )

  it.effect(
    "a lost coordinator: one warning when heartbeats start failing, an error when the lease is lost, one info when they are answered again",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld({ transportTimeoutMs: 200 })
        const { logger, lines } = capture()
        const r = yield* w.startRuntime("pod-a", {
          logger,
          logLevel: "info",
          consumers: [w.recordingConsumer({})],
        })
        yield* w.runUntil("owns all", () => r.runtime.members()[0]!.owned.length > 0)
        yield* w.faults.dropRequests(1_000_000)
        yield* w.runUntil("lease lost", () => w.eventsOf("leaseLost").length > 0)
        const failures = w
          .eventsOf("heartbeat")
          .filter((e) => e.errorCode === "TRANSPORT_ERROR" && e.memberId === "pod-a")
        assert.isAtLeast(failures.length, 3)
        // every failed heartbeat carries its cause
        assert.isTrue(failures.every((e) => e.error?._tag === "TransportError"))
        assert.strictEqual(r.runtime.members()[0]!.lastError?._tag, "TransportError")
        const warned = lines.filter((l) => l.message.startsWith("heartbeat failed"))
        assert.strictEqual(warned.length, 1)
        assert.strictEqual(warned[0]!.level, "warn")
        assert.include(warned[0]!.message, "TransportError")
        const lost = lines.filter((l) => l.fields.event === "leaseLost")
        assert.strictEqual(lost.length, 1)
        assert.strictEqual(lost[0]!.level, "error")
        assert.include(lost[0]!.message, "lost its lease")
        assert.include(lost[0]!.message, "keeps its epoch")
        // the lost lease's `lost` event is not told twice
        assert.isFalse(lines.some((l) => l.fields.event === "lost"))
        yield* w.faults.dropRequests(0)
        yield* w.runUntil("answered again", () =>
          lines.some((l) => l.message.startsWith("heartbeats answered again")),
        )
        const back = lines.find((l) => l.message.startsWith("heartbeats answered again"))!
        assert.strictEqual(back.level, "info")
        assert.match(back.message, /after \d+ failure/)
        // it resumed with its epoch: the regained lease is said, no rejoin
        yield* w.runUntil("lease regained", () =>
          lines.some((l) => l.fields.event === "leaseRegained"),
        )
        assert.strictEqual(w.eventsOf("joined").length, 1)
      }),
  )

  it.effect("superseded and fenced members are warnings naming why", () =>
    Effect.gen(function* () {
      let fenceNext = false
      const w = yield* makeWorld({
        rewrite: (request, response): HeartbeatResponse => {
          if (!fenceNext || request.memberEpoch <= 0 || request.memberId !== "pod-b")
            return response
          fenceNext = false
          return { ...response, errorCode: "UNKNOWN_MEMBER_ID", assigned: [], pending: [] }
        },
      })
      const a = capture()
      const b = capture()
      const old = yield* w.startRuntime("pod-a", {
        logger: a.logger,
        consumers: [w.recordingConsumer({})],
      })
      yield* w.runUntil("owns", () => old.runtime.members()[0]!.owned.length > 0)
      yield* w.startRuntime("pod-a", {
        coordinator: "standalone",
        logLevel: "silent",
        consumers: [w.recordingConsumer({})],
      })
      yield* w.runUntil("superseded", () => a.lines.some((l) => l.fields.event === "superseded"))
      const superseded = a.lines.find((l) => l.fields.event === "superseded")!
      assert.strictEqual(superseded.level, "warn")
      assert.match(superseded.message, /^superseded: MemberSuperseded: /)
      assert.include(superseded.message, "this process waits as a standby")

      const other = yield* w.startRuntime("pod-b", {
        logger: b.logger,
        consumers: [w.recordingConsumer({})],
      })
      yield* w.runUntil("b owns", () => other.runtime.members()[0]!.owned.length > 0)
      fenceNext = true
      yield* w.runUntil("b fenced", () => b.lines.some((l) => l.fields.event === "lost"))
      const lost = b.lines.find((l) => l.fields.event === "lost")!
      assert.strictEqual(lost.level, "warn")
      assert.include(lost.message, "the coordinator no longer knew it")
    }),
  )

  it.effect(
    "a handler that outlives its drain budget is an error naming the shard; the stop still ends at its deadline",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const { logger, lines } = capture()
        const a = yield* w.startRuntime("pod-a", {
          logger,
          shutdownTimeoutMs: 2_000,
          consumers: [
            w.recordingConsumer({
              drainTimeoutMs: 500,
              handle: () => new Promise<void>(() => {}),
            }),
          ],
        })
        yield* w.produce(5)
        yield* w.runUntil("in flight", () => w.handles().length > 0)
        // the graceful stop revokes every shard; the hung handler's signal fires
        // at the drain budget and its shard is held (not REVOKED) while it runs
        yield* w.stopRuntime(a)
        const stuck = w.eventsOf("handlerStuck")
        assert.strictEqual(stuck.length, 1)
        assert.strictEqual(stuck[0]!.why, "revoked")
        assert.isFalse(w.eventsOf("revoked").some((e) => e.shard === stuck[0]!.shard))
        const logged = lines.filter((l) => l.fields.event === "handlerStuck")
        assert.strictEqual(logged.length, 1)
        assert.strictEqual(logged[0]!.level, "error")
        assert.include(logged[0]!.message, `shard ${stuck[0]!.shard}`)
        assert.include(logged[0]!.message, "its signal")
      }),
  )

  it.effect(
    "logger: console writes one line per entry; a throwing logger never breaks a member",
    () =>
      Effect.gen(function* () {
        const warn = vi.spyOn(console, "warn").mockImplementation(() => {})
        const w = yield* makeWorld()
        yield* w.startRuntime("pod-a", {
          logger: console,
          consumers: [
            w.recordingConsumer({
              maxDeliveries: 1,
              handle: (m) => {
                if (m.fields.n === "1") throw new Error("boom")
              },
            }),
          ],
        })
        yield* w.produce(3)
        yield* w.runUntil("dead-lettered", () => w.eventsOf("deadLettered").length === 1)
        const written = warn.mock.calls.map((c) => String(c[0]))
        const line = written.find((l) => l.includes("dead-lettered"))!
        assert.match(line, /^shardline \[warn\] message \d+-\d+ of shard \d+ dead-lettered/)
        assert.include(line, "(stream=orders group=g memberId=pod-a shard=")
        assert.strictEqual(warn.mock.calls[0]!.length, 1)

        const throwing: Logger = {
          debug: () => {
            throw new Error("logger down")
          },
          info: () => {
            throw new Error("logger down")
          },
          warn: () => {
            throw new Error("logger down")
          },
          error: () => {
            throw new Error("logger down")
          },
        }
        const w2 = yield* makeWorld()
        yield* w2.startRuntime("pod-b", {
          logger: throwing,
          logLevel: "debug",
          consumers: [
            w2.recordingConsumer({
              maxDeliveries: 1,
              handle: (m) => {
                if (m.fields.n === "1") throw new Error("boom")
              },
            }),
          ],
        })
        yield* w2.produce(10)
        yield* w2.runUntil("all handled", w2.allHandled)
        yield* w2.runUntil("dead-lettered", () => w2.eventsOf("deadLettered").length === 1)
      }),
  )
})

describe("a standalone group that no coordinator serves", () => {
  it.effect(
    "heartbeats fail with NoCoordinator naming how to start one (logged once, as an error, lastError); stop does not wait for a leave",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const { logger, lines } = capture()
        const r = yield* w.startRuntime("pod-a", {
          coordinator: "standalone",
          logger,
          consumers: [w.recordingConsumer({})],
        })
        yield* w.runUntil(
          "three failed heartbeats",
          () =>
            w.eventsOf("heartbeat").filter((e) => e.errorCode === "TRANSPORT_ERROR").length >= 3,
        )
        const heartbeat = w.eventsOf("heartbeat")[0]!
        assert.strictEqual(heartbeat.error?._tag, "NoCoordinator")
        const expected = `shardline coordinator --redis <url> --stream ${stream} --group ${group} --shards ${timing.shardCount} --session-timeout ${timing.sessionTimeoutMs} --heartbeat-interval ${timing.heartbeatIntervalMs} --rebalance-timeout ${timing.rebalanceTimeoutMs}`
        assert.include(heartbeat.error!.message, `no coordinator serves group "${group}"`)
        assert.include(heartbeat.error!.message, expected)
        assert.include(heartbeat.error!.message, "startCoordinator")
        const view = r.runtime.members()[0]!
        assert.strictEqual(view.phase, "joining")
        assert.strictEqual(view.lastError?._tag, "NoCoordinator")
        assert.isDefined(view.lastErrorAt)
        const told = lines.filter((l) => l.fields.event === "heartbeat")
        assert.strictEqual(told.length, 1)
        assert.strictEqual(told[0]!.level, "error")
        assert.include(told[0]!.message, expected)
        // the default shutdown timeout is 30 s; a member nobody can answer does not wait for it
        const t0 = yield* Clock.currentTimeMillis
        yield* w.stopRuntime(r)
        const t1 = yield* Clock.currentTimeMillis
        assert.isBelow(t1 - t0, 1_000)
      }),
  )

  it.effect("a member that never joined because its heartbeats fail stops at once", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld({ transportTimeoutMs: 200 })
      yield* w.faults.dropRequests(1_000_000)
      const r = yield* w.startRuntime("pod-a", {
        logLevel: "silent",
        consumers: [w.recordingConsumer({})],
      })
      yield* w.runUntil(
        "a failed heartbeat",
        () => w.eventsOf("heartbeat").filter((e) => e.errorCode === "TRANSPORT_ERROR").length >= 2,
      )
      assert.strictEqual(r.runtime.members()[0]!.phase, "joining")
      const t0 = yield* Clock.currentTimeMillis
      yield* w.stopRuntime(r)
      const t1 = yield* Clock.currentTimeMillis
      assert.isBelow(t1 - t0, 1_000)
    }),
  )

  it.effect("an embedded group's transient 'no coordinator' stays a TransportError", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      yield* w.startRuntime("pod-a", { logLevel: "silent", consumers: [w.recordingConsumer({})] })
      yield* w.runUntil("joined", () => w.eventsOf("joined").length === 1)
      assert.isFalse(w.eventsOf("heartbeat").some((e) => e.error?._tag === "NoCoordinator"))
    }),
  )
})

describe("makeEventLog (unit)", () => {
  const base = { stream: "s", group: "g", memberId: "m", at: 0 }
  const run = (events: ReadonlyArray<RuntimeEvent>, level: "debug" | "info" | "warn" = "info") => {
    const { logger, lines } = capture()
    const log = makeEventLog(makeLevelLogger(logger, level))
    for (const e of events) log(e)
    return lines
  }

  it("a failing data plane is one warning per shard, and one info when it reads again", () => {
    const error = new BackendUnavailable({ operation: "read", message: "Connection is closed." })
    const lines = run([
      { ...base, type: "dataPlaneError", shard: 1, error },
      { ...base, type: "dataPlaneError", shard: 1, error },
      { ...base, type: "dataPlaneError", shard: 2, error },
      { ...base, type: "dataPlaneError", shard: 1, error },
      { ...base, type: "batchEnd", shard: 1, count: 3, acked: 3, failed: 0, durationMs: 1 },
      { ...base, type: "dataPlaneError", shard: 1, error },
    ])
    assert.deepStrictEqual(
      lines.map((l) => [l.level, l.fields.shard]),
      [
        ["warn", 1],
        ["warn", 2],
        ["info", 1],
        ["warn", 1],
      ],
    )
    assert.include(lines[0]!.message, "BackendUnavailable: Connection is closed.")
    assert.include(lines[2]!.message, "after 3 failed data-plane call(s)")
  })

  it("a NOPERM from Redis is an error naming the ACL, on the data plane and on heartbeats", () => {
    const noperm = "NOPERM this user has no permissions to run the 'xautoclaim' command"
    const lines = run([
      {
        ...base,
        type: "dataPlaneError",
        shard: 0,
        error: new BackendUnavailable({ operation: "claim", message: noperm }),
      },
      {
        ...base,
        type: "heartbeat",
        errorCode: "TRANSPORT_ERROR",
        latencyMs: 1,
        error: new TransportError({ reason: "Unavailable", message: noperm }),
      },
    ])
    assert.deepStrictEqual(
      lines.map((l) => l.level),
      ["error", "error"],
    )
    for (const l of lines) {
      assert.include(l.message, "xautoclaim")
      assert.include(l.message, 'docs/redis.md, "ACL"')
    }
  })

  it("a NOPERM that follows another heartbeat failure is still said with the ACL, once per outage", () => {
    // the embedded coordinator's own scripts are refused too, so a member's
    // first failure is often "no coordinator", and the refusal comes after it
    const noperm = "NOPERM this user has no permissions to run the 'evalsha' command"
    const failed = (message: string): RuntimeEvent => ({
      ...base,
      type: "heartbeat",
      errorCode: "TRANSPORT_ERROR",
      latencyMs: 1,
      error: new TransportError({ reason: "Unavailable", message }),
    })
    const answered: RuntimeEvent = { ...base, type: "heartbeat", errorCode: "NONE", latencyMs: 1 }
    const lines = run([
      failed("Connection is closed."),
      failed(noperm),
      failed(noperm),
      answered,
      failed(noperm),
    ])
    assert.deepStrictEqual(
      lines.map((l) => [l.level, l.message.includes('docs/redis.md, "ACL"')]),
      [
        ["warn", false],
        ["error", true],
        ["info", false],
        ["error", true],
      ],
    )
  })

  it("no coordinator for a while, last failing with a NOPERM: the error names the ACL", () => {
    const lines = run([
      {
        ...base,
        type: "coordinatorUnavailable",
        since: 0,
        forMs: 2_144,
        error: "NOPERM this user has no permissions to run the 'evalsha' command",
      },
      {
        ...base,
        type: "coordinatorUnavailable",
        since: 0,
        forMs: 2_144,
        error: "TransportError: Connection is closed.",
      },
    ])
    assert.deepStrictEqual(
      lines.map((l) => [l.level, l.message.includes('docs/redis.md, "ACL"')]),
      [
        ["error", true],
        ["error", false],
      ],
    )
  })

  it.effect("Effect's own logs (the ports') reach the logger at their level", () =>
    Effect.gen(function* () {
      const { logger, lines } = capture()
      yield* Effect.logWarning("serve: a heartbeat was not answered").pipe(
        Effect.andThen(Effect.logDebug("below the level")),
        Effect.andThen(
          Effect.logError(
            "boom",
            Cause.fail(new BackendUnavailable({ operation: "x", message: "down" })),
          ),
        ),
        Effect.provide(effectLoggerLayer(makeLevelLogger(logger, "warn"))),
      )
      assert.deepStrictEqual(
        lines.map((l) => [l.level, l.message]),
        [
          ["warn", "serve: a heartbeat was not answered"],
          ["error", "boom"],
        ],
      )
      assert.strictEqual(lines[1]!.fields.error, "BackendUnavailable: down")
    }),
  )

  it("debug shows batches; silent shows nothing", () => {
    const batch: RuntimeEvent = {
      ...base,
      type: "batchEnd",
      shard: 0,
      count: 2,
      acked: 2,
      failed: 0,
      durationMs: 3,
    }
    assert.strictEqual(run([batch], "debug").length, 1)
    assert.strictEqual(run([batch], "info").length, 0)
    const { logger, lines } = capture()
    const log = makeEventLog(makeLevelLogger(logger, "silent"))
    log({ ...base, type: "leaseLost", shards: [1] })
    assert.strictEqual(lines.length, 0)
  })
})
