/**
 * End to end in memory: several runtimes (as several processes) share one
 * set of memory ports, each an embedded coordinator candidate, on the
 * TestClock. Every handled message is checked for per-key order, and the
 * event log for ownership (never two members on one shard at once; no
 * handling outside an ownership interval).
 */
import { assert, describe, it } from "@effect/vitest"
import { type HeartbeatResponse, Layout, ShardStreams, StreamLayouts } from "@shardline/core"
import { Clock, Deferred, Effect } from "effect"
import { TestClock } from "effect/testing"
import { consumer } from "../src/Consumer.js"
import type { RuntimeEvent } from "../src/Events.js"
import type { Message, MessageContext } from "../src/Message.js"
import { StreamListener } from "../src/StreamListener.js"
import {
  group,
  makeWorld,
  orderProblems,
  ownershipProblems,
  stream,
  timing,
  type World,
} from "./support/world.js"

const ownedBy = (events: ReadonlyArray<RuntimeEvent>) => {
  const owner = new Map<number, string>()
  for (const e of events) {
    if (e.type === "assigned") owner.set(e.shard, e.memberId)
    if (e.type === "revoked" && owner.get(e.shard) === e.memberId) owner.delete(e.shard)
    if (e.type === "lost")
      for (const s of e.shards) if (owner.get(s) === e.memberId) owner.delete(s)
  }
  return owner
}

const countsByMember = (owner: ReadonlyMap<number, string>) => {
  const counts = new Map<string, number>()
  for (const m of owner.values()) counts.set(m, (counts.get(m) ?? 0) + 1)
  return counts
}

describe("runtime: several processes sharing the memory ports", () => {
  it.effect(
    "listeners, explicit members and a producer: every message handled once, per-key order, one owner per shard, balanced",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        yield* w.produce(200)
        // pod-a: a @StreamListener with concurrency 2 (pod-a-m0, pod-a-m1)
        class Orders {
          @StreamListener({ stream, group, ...timing, concurrency: 2 })
          async onOrder(m: Message, ctx: MessageContext) {
            w.log.push({
              kind: "handle",
              memberId: ctx.memberId,
              shard: m.shard,
              id: m.id,
              key: m.key,
              n: Number(m.fields.n),
              deliveryCount: m.deliveryCount,
            })
          }
        }
        const a = yield* w.startRuntime("pod-a", { listeners: [new Orders()] })
        const b = yield* w.startRuntime("pod-b", {
          consumers: [w.recordingConsumer({ runtimeMaxConcurrency: 3 })],
        })
        const c = yield* w.startRuntime("pod-c", { consumers: [w.recordingConsumer({})] })
        for (let i = 0; i < 10; i++) {
          yield* w.produce(40)
          yield* TestClock.adjust(100)
        }
        yield* w.runUntil("all handled", w.allHandled)
        yield* w.runUntil("balanced", () => {
          const counts = [...countsByMember(ownedBy(w.events())).values()]
          return counts.length === 4 && Math.max(...counts) - Math.min(...counts) <= 1
        })
        assert.deepStrictEqual(ownershipProblems(w.log), [])
        assert.deepStrictEqual(orderProblems(w.log, w.producedByKey), [])
        assert.strictEqual(w.handles().length, w.produced())
        assert.deepStrictEqual(
          a.runtime.members().map((m) => m.memberId),
          ["pod-a-m0", "pod-a-m1"],
        )
        assert.deepStrictEqual([...countsByMember(ownedBy(w.events())).keys()].sort(), [
          "pod-a-m0",
          "pod-a-m1",
          "pod-b",
          "pod-c",
        ])
        // exactly one coordinator was elected and serves
        assert.strictEqual(w.eventsOf("coordinatorElected").length, 1)
        for (let shard = 0; shard < w.shardCount; shard++)
          assert.strictEqual((yield* w.streams.pending({ stream, shard, group })).length, 0)
        void [a, b, c]
      }),
  )

  it.effect(
    "scale in and out while messages flow: a graceful stop re-delivers nothing, every handoff is revoke-before-assign",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const slow = { handle: () => Effect.runPromise(Effect.void) }
        const a = yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer(slow)] })
        const b = yield* w.startRuntime("pod-b", { consumers: [w.recordingConsumer(slow)] })
        yield* w.runUntil("both own shards", () => countsByMember(ownedBy(w.events())).size === 2)
        for (let i = 0; i < 5; i++) {
          yield* w.produce(30)
          yield* TestClock.adjust(100)
        }
        // stop b mid-run while a third process joins
        const stopping = yield* Effect.forkChild(w.stopRuntime(b))
        const c = yield* w.startRuntime("pod-c", { consumers: [w.recordingConsumer(slow)] })
        for (let i = 0; i < 5; i++) {
          yield* w.produce(30)
          yield* TestClock.adjust(100)
        }
        yield* w.runUntil("b stopped", () => stopping.pollUnsafe() !== undefined)
        yield* w.runUntil("all handled", w.allHandled)
        assert.deepStrictEqual(ownershipProblems(w.log), [])
        assert.deepStrictEqual(orderProblems(w.log, w.producedByKey), [])
        // no re-delivery: each message handled exactly once, first delivery
        assert.strictEqual(w.handles().length, w.produced())
        assert.isTrue(w.handles().every((h) => h.deliveryCount === 1))
        // b left: leaving heartbeats then epoch -1
        const bRequests = w.requests.filter((r) => r.memberId === "pod-b")
        assert.isTrue(bRequests.some((r) => r.leaving === true))
        assert.strictEqual(bRequests[bRequests.length - 1]!.memberEpoch, -1)
        assert.isTrue(w.eventsOf("left").some((e) => e.memberId === "pod-b"))
        // its shards were revoked (drained) before they moved
        assert.isAbove(w.eventsOf("revoked").filter((e) => e.memberId === "pod-b").length, 0)
        void [a, c]
      }),
  )

  it.effect(
    "listener concurrency makes logical members <base>-m0.., an explicit member owns more shards than its workers",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const r = yield* w.startRuntime("10.0.0.7", {
          consumers: [
            consumer({
              stream: "payments",
              group: "solo",
              ...timing,
              runtimeMaxConcurrency: 2,
              eachMessage: () => {},
            }),
          ],
        })
        yield* w.runUntil("solo owns all", () =>
          r.runtime.members().some((m) => m.owned.length === timing.shardCount),
        )
        const [solo] = r.runtime.members()
        assert.strictEqual(solo!.memberId, "10.0.0.7")
        assert.strictEqual(solo!.workers, 2)
        assert.strictEqual(r.runtime.members().length, 1)
      }),
  )

  it.effect("the embedded coordinator fails over when the process holding the lease stops", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      const a = yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
      const b = yield* w.startRuntime("pod-b", { consumers: [w.recordingConsumer({})] })
      yield* w.runUntil("two owners", () => countsByMember(ownedBy(w.events())).size === 2)
      assert.isTrue(w.eventsOf("coordinatorElected")[0]!.holder.startsWith("pod-a#"))
      yield* w.stopRuntime(a)
      yield* w.runUntil("b elected", () =>
        w.eventsOf("coordinatorElected").some((e) => e.holder.startsWith("pod-b#")),
      )
      yield* w.runUntil("b owns all", () =>
        b.runtime.members().some((m) => m.owned.length === timing.shardCount),
      )
      yield* w.produce(50)
      yield* w.runUntil("all handled", w.allHandled)
      assert.deepStrictEqual(ownershipProblems(w.log), [])
    }),
  )

  it.effect(
    "rule 20: a leading coordinator that stops grants its members' released shards before it hands over",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const a = yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
        const b = yield* w.startRuntime("pod-b", { consumers: [w.recordingConsumer({})] })
        yield* w.runUntil("two owners", () => countsByMember(ownedBy(w.events())).size === 2)
        assert.isTrue(w.eventsOf("coordinatorElected")[0]!.holder.startsWith("pod-a#"))
        yield* w.stopRuntime(a)
        // pod-b was granted every shard by the coordinator it heartbeats to
        // (pod-a's, before it handed over), not after its own candidate took
        // the lease: the handoff does not wait for a coordinator failover
        const events = w.events()
        const elected = events.findIndex(
          (e) => e.type === "coordinatorElected" && e.holder.startsWith("pod-b#"),
        )
        const grantedBefore = ownedBy(elected === -1 ? events : events.slice(0, elected))
        assert.strictEqual(grantedBefore.size, timing.shardCount)
        assert.deepStrictEqual([...countsByMember(grantedBefore).keys()], ["pod-b"])
        yield* w.produce(50)
        yield* w.runUntil("all handled", w.allHandled)
        assert.deepStrictEqual(ownershipProblems(w.log), [])
        void b
      }),
  )
})

const { Reshard } = Layout

describe("runtime: resharding", () => {
  it.effect(
    "a reshard 4 -> 8 while a producer writes: old shards drain and are reported exhausted, new ones are read; per-key order, nothing lost",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld({ shardCount: 4 })
        const consumerOf = () => w.recordingConsumer({ shardCount: 4 })
        const a = yield* w.startRuntime("pod-a", { consumers: [consumerOf()] })
        yield* w.startRuntime("pod-b", { consumers: [consumerOf()] })
        yield* w.runUntil("layout created", () => w.eventsOf("assigned").length >= 4)
        const producer = yield* a.runtime.producer(stream)
        for (let i = 0; i < 5; i++) {
          yield* w.produceVia(producer, 20)
          yield* TestClock.adjust(100)
        }
        yield* Reshard.reshardStream(stream, 8).pipe(
          Effect.provideService(StreamLayouts.StreamLayouts, w.layouts),
          Effect.provideService(ShardStreams.ShardStreams, w.streams),
        )
        for (let i = 0; i < 30; i++) {
          yield* w.produceVia(producer, 10)
          yield* TestClock.adjust(100)
        }
        yield* w.runUntil("all handled", w.allHandled)
        yield* w.runUntil("old shards exhausted and new ones owned", () => {
          const exhausted = new Set(w.eventsOf("exhausted").map((e) => e.shard))
          const owned = new Set(w.eventsOf("assigned").map((e) => e.shard))
          return (
            [0, 1, 2, 3].every((s) => exhausted.has(s)) &&
            [4, 5, 6, 7, 8, 9, 10, 11].every((s) => owned.has(s))
          )
        })
        assert.deepStrictEqual(orderProblems(w.log, w.producedByKey), [])
        assert.deepStrictEqual(ownershipProblems(w.log), [])
        assert.strictEqual(w.handles().length, w.produced())
        // messages after the reshard went to generation 1's shards
        assert.isTrue(w.handles().some((h) => h.shard >= 4))
      }),
  )
})

describe("runtime: fences, lease and identity", () => {
  it.effect(
    "UNKNOWN_MEMBER_ID: reads and acks stop at once, signals abort, the member rejoins with epoch 0 and the same id",
    () =>
      Effect.gen(function* () {
        let fenceNext = false
        const w = yield* makeWorld({
          rewrite: (request, response): HeartbeatResponse => {
            if (!fenceNext || request.memberEpoch <= 0) return response
            fenceNext = false
            return { ...response, errorCode: "UNKNOWN_MEMBER_ID", assigned: [], pending: [] }
          },
        })
        const signals: Array<AbortSignal> = []
        let hang = true
        const r = yield* w.startRuntime("pod-a", {
          consumers: [
            w.recordingConsumer({
              // a handler that honours its signal: it stops when the signal aborts
              handle: (_m, ctx) => {
                signals.push(ctx.signal)
                return hang
                  ? new Promise<void>((_, reject) =>
                      ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason)),
                    )
                  : undefined
              },
            }),
          ],
        })
        yield* w.produce(30)
        yield* w.runUntil("in flight", () => signals.length > 0)
        const joinsBefore = w.eventsOf("joined").length
        fenceNext = true
        yield* w.runUntil("fenced", () => w.eventsOf("lost").length > 0)
        const lost = w.eventsOf("lost")[0]!
        assert.strictEqual(lost.reason, "unknown-member")
        assert.isTrue(signals.every((s) => s.aborted))
        const at = w.requests.length
        hang = false
        yield* w.runUntil("rejoined", () => w.eventsOf("joined").length > joinsBefore)
        const rejoin = w.requests.slice(at).find((q) => q.memberEpoch === 0)!
        assert.strictEqual(rejoin.memberId, "pod-a")
        assert.isDefined(rejoin.memberInfo)
        assert.deepStrictEqual(rejoin.ownedShards, [])
        yield* w.runUntil("all handled", w.allHandled)
        assert.deepStrictEqual(orderProblems(w.log, w.producedByKey, { allowRedelivery: true }), [])
        void r
      }),
  )

  it.effect(
    "rule 22: a member that cannot reach its coordinator stops reading at its lease deadline, then resumes with the same epoch (no rejoin)",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld({ transportTimeoutMs: 200 })
        const r = yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
        yield* w.runUntil("owns all", () =>
          r.runtime.members().some((m) => m.owned.length === timing.shardCount),
        )
        const epoch = r.runtime.members()[0]!.memberEpoch
        yield* w.faults.dropRequests(1_000_000)
        const start = yield* Clock.currentTimeMillis
        yield* w.runUntil("lease lost", () => w.eventsOf("leaseLost").length > 0)
        const lostAt = w.eventsOf("leaseLost")[0]!.at
        // never later than the lease: session timeout minus the safety margin after the last success
        assert.isAtMost(lostAt - start, timing.sessionTimeoutMs - timing.safetyMarginMs)
        assert.strictEqual(w.eventsOf("lost")[0]!.reason, "lease-lost")
        assert.deepStrictEqual(r.runtime.members()[0]!.owned, [])
        assert.strictEqual(r.runtime.members()[0]!.phase, "suspended")
        yield* w.faults.dropRequests(0)
        yield* w.runUntil("resumed", () => w.eventsOf("leaseRegained").length > 0)
        yield* w.produce(20)
        yield* w.runUntil("handled", w.allHandled)
        assert.strictEqual(w.eventsOf("joined").length, 1)
        assert.strictEqual(r.runtime.members()[0]!.memberEpoch, epoch)
        assert.strictEqual(r.runtime.members()[0]!.owned.length, timing.shardCount)
      }),
  )

  it.effect(
    "a member cut off for longer than the session is expired by the coordinator: it rejoins",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld({ transportTimeoutMs: 200 })
        yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
        yield* w.runUntil("joined", () => w.eventsOf("joined").length === 1)
        yield* w.faults.dropRequests(1_000_000)
        yield* w.runUntil("lease lost", () => w.eventsOf("leaseLost").length > 0)
        yield* TestClock.adjust(timing.sessionTimeoutMs)
        yield* w.faults.dropRequests(0)
        yield* w.produce(20)
        yield* w.runUntil("rejoined and handled", w.allHandled)
        // the coordinator expired it meanwhile: its answer says so, and it rejoins
        assert.strictEqual(w.eventsOf("joined").length, 2)
        assert.strictEqual(w.eventsOf("leaseRegained").length, 0)
      }),
  )

  it.effect(
    "issue 19 finding 7: a handler that ignores its signal past its drain is reported, and its shard is not REVOKED (nor read by the next owner) until it returns",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        let stuck = true
        const running = new Map<number, number>() // shard -> handler calls of pod-a running
        const releases: Array<() => void> = []
        let overlaps = 0
        const a = yield* w.startRuntime("pod-a", {
          consumers: [
            w.recordingConsumer({
              runtimeMaxConcurrency: 12, // a handler in flight on every shard at once
              handle: (m) => {
                if (!stuck) return undefined
                running.set(m.shard, (running.get(m.shard) ?? 0) + 1)
                // ignores its signal; returns only when the test releases it
                return new Promise<void>((resolve) => {
                  releases.push(() => {
                    running.set(m.shard, (running.get(m.shard) ?? 1) - 1)
                    resolve()
                  })
                })
              },
            }),
          ],
        })
        yield* w.runUntil("a owns all", () => a.runtime.members()[0]!.owned.length === 12)
        yield* w.produce(240, 240) // 240 keys: every one of the 12 shards gets some
        yield* w.runUntil("a handler runs on every shard", () => running.size === 12)
        yield* w.startRuntime("pod-b", {
          coordinator: "standalone",
          consumers: [
            w.recordingConsumer({
              handle: (m) => {
                if ((running.get(m.shard) ?? 0) > 0) overlaps++
                return undefined
              },
            }),
          ],
        })
        // b's shards are revoked from a; a's handlers outlive the drain budget
        yield* w.runUntil("stuck reported", () => w.eventsOf("handlerStuck").length > 0)
        const reported = w.eventsOf("handlerStuck")
        assert.isTrue(reported.every((e) => e.why === "revoked" && e.memberId === "pod-a"))
        assert.strictEqual(a.runtime.members()[0]!.lastError?._tag, "HandlerStuck")
        // nothing REVOKED (b reads nothing of a's) while a's handlers run
        yield* TestClock.adjust(1_000)
        assert.strictEqual(w.eventsOf("revoked").length, 0)
        assert.strictEqual(overlaps, 0)
        // the handlers return: the shards are drained, REVOKED, and handed over
        stuck = false
        for (const release of releases.splice(0)) release()
        yield* w.runUntil("all handled", w.allHandled)
        assert.isAbove(w.eventsOf("revoked").length, 0)
        assert.strictEqual(overlaps, 0)
      }),
  )

  it.effect(
    "issue 33 item 9: a restart with a new member id is told which shards wait for its old self, why and until when, and the log points to memberBase",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const logged: Array<{ level: string; message: string }> = []
        const logger = {
          debug: () => {},
          info: (_: unknown, message: string) => logged.push({ level: "info", message }),
          warn: (_: unknown, message: string) => logged.push({ level: "warn", message }),
          error: () => {},
        }
        const c = yield* w.startRuntime("pod-c", { consumers: [w.recordingConsumer({})] })
        yield* w.runUntil("c joined", () => w.eventsOf("joined").length === 1)
        const a = yield* w.startRuntime("pod-a", {
          coordinator: "standalone",
          logLevel: "silent",
          consumers: [w.recordingConsumer({})],
        })
        yield* w.runUntil("a owns its half", () => a.runtime.members()[0]!.owned.length === 6)
        // pod-a crashes: the coordinator hears from it no more
        w.cut("pod-a")
        const crashedAt = yield* Clock.currentTimeMillis
        // restarted under a new id (outside Kubernetes: <host>-<pid>)
        const b = yield* w.startRuntime("pod-b", {
          coordinator: "standalone",
          logger,
          logLevel: "info",
          consumers: [w.recordingConsumer({})],
        })
        const waits = () => w.eventsOf("shardsWaiting").filter((e) => e.memberId === "pod-b")
        yield* w.runUntil("b told its holder is silent", () => waits().some((e) => e.holderSilent))
        // every wait that lasts is for pod-a (pod-c gives its shards up at once)
        const silent = waits().filter((e) => e.holderSilent)
        assert.isTrue(silent.every((e) => e.holder === "pod-a" && e.reason === "revoking"))
        const aShards = new Set(
          w
            .eventsOf("assigned")
            .filter((e) => e.memberId === "pod-a")
            .map((e) => e.shard),
        )
        assert.isTrue(silent[0]!.shards.length > 0)
        assert.isTrue(silent[0]!.shards.every((s) => aShards.has(s)))
        // until: pod-a's session end, its last answered heartbeat (at most an
        // interval before the crash) plus the session timeout
        const until = silent[0]!.until
        assert.isAtMost(until, crashedAt + timing.sessionTimeoutMs)
        assert.isAtLeast(
          until,
          crashedAt + timing.sessionTimeoutMs - 2 * timing.heartbeatIntervalMs,
        )
        // said once per change, not on every heartbeat
        assert.isAtMost(waits().length, 4)
        const warning = logged.find((l) => l.level === "warn" && l.message.includes("pod-a"))
        assert.isDefined(warning)
        assert.include(warning!.message, new Date(until).toISOString())
        assert.include(warning!.message, "memberBase")
        // and they come once pod-a's session ended
        yield* w.runUntil("b reads a waited shard", () =>
          b.runtime.members()[0]!.owned.some((s) => silent[0]!.shards.includes(s)),
        )
        assert.isAtLeast(yield* Clock.currentTimeMillis, until)
        for (const r of [a, b, c]) yield* w.stopRuntime(r)
      }),
  )

  it.effect(
    "a second process with the same member id supersedes the first (an event, no crash)",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        const old = yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
        yield* w.runUntil("owns", () => old.runtime.members()[0]!.owned.length > 0)
        const fresh = yield* w.startRuntime("pod-a", {
          coordinator: "standalone",
          consumers: [w.recordingConsumer({})],
        })
        yield* w.runUntil("superseded", () => w.eventsOf("superseded").length > 0)
        assert.strictEqual(old.runtime.members()[0]!.lastError?._tag, "MemberSuperseded")
        yield* w.runUntil(
          "the newer process owns everything",
          () => fresh.runtime.members()[0]!.owned.length === timing.shardCount,
        )
        yield* w.produce(20)
        yield* w.runUntil("handled", w.allHandled)
        assert.isTrue(w.handles().every((h) => h.deliveryCount === 1))
      }),
  )

  it.effect(
    "a group whose session leaves no lease for this member's margin: LeaseUnusable, the member leaves",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        // the group is created with a 3 s session by the first process
        yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
        yield* w.runUntil("a joined", () => w.eventsOf("joined").length === 1)
        // a member configured for a 30 s session with a 2.9 s margin: valid locally,
        // but the group's 3 s session leaves it 100 ms, below the 300 ms heartbeat
        yield* w.startRuntime("pod-b", {
          coordinator: "standalone",
          consumers: [
            w.recordingConsumer({
              sessionTimeoutMs: 30_000,
              safetyMarginMs: 2_900,
              rebalanceTimeoutMs: 4_000,
            }),
          ],
        })
        yield* w.runUntil("unusable", () => w.eventsOf("leaseUnusable").length > 0)
        assert.strictEqual(w.eventsOf("leaseUnusable")[0]!.error.reason, "MarginTooLarge")
        yield* w.runUntil("b left", () => w.eventsOf("left").some((e) => e.memberId === "pod-b"))
      }),
  )
})

describe("runtime: shutdown, progress, pause and seek", () => {
  it.effect("stop finishes within its deadline even when a handler never returns", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      const signals: Array<AbortSignal> = []
      const r = yield* w.startRuntime("pod-a", {
        shutdownTimeoutMs: 2_000,
        consumers: [
          w.recordingConsumer({
            drainTimeoutMs: 1_000,
            handle: (_m, ctx) => {
              signals.push(ctx.signal)
              return new Promise<void>(() => {})
            },
          }),
        ],
      })
      yield* w.produce(5)
      yield* w.runUntil("in flight", () => signals.length > 0)
      const t0 = yield* Clock.currentTimeMillis
      yield* w.stopRuntime(r)
      const t1 = yield* Clock.currentTimeMillis
      assert.isAtMost(t1 - t0, 2_000)
      assert.isTrue(signals[0]!.aborted)
    }),
  )

  it.effect("heartbeats carry progress: last acked id, acked count and lag per shard", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      const r = yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
      yield* w.produce(60)
      yield* w.runUntil("handled", w.allHandled)
      // lag is read in the background (rule 27): a later heartbeat carries it
      const sent = w.requests.length
      yield* w.runUntil("a heartbeat after the lag reads", () =>
        w.requests.slice(sent).some((q) => q.progress?.every((p) => p.lag !== undefined)),
      )
      const last = [...w.requests].reverse().find((q) => q.progress !== undefined)!
      const acked = last.progress!.reduce((sum, p) => sum + p.acked, 0)
      assert.strictEqual(acked, 60)
      assert.isTrue(last.progress!.every((p) => p.lag === 0))
      assert.isTrue(last.progress!.some((p) => p.lastId !== undefined))
      const monitor = yield* r.runtime.monitor(stream, group)
      assert.isDefined(monitor)
    }),
  )

  it.effect(
    "a lag read that never returns (its shard's node hung) holds up no heartbeat: the member keeps its lease and its shards (docs/protocol.md rule 27)",
    () =>
      Effect.gen(function* () {
        let hung = false
        // the node comes back at the end (the runtime's stop then completes)
        const back = yield* Deferred.make<void>()
        const w = yield* makeWorld({
          streams: (memory) => ({
            ...memory,
            drainState: (o) =>
              hung && o.shard === 0
                ? Effect.andThen(Deferred.await(back), memory.drainState(o))
                : memory.drainState(o),
          }),
        })
        yield* w.startRuntime("pod-a", { consumers: [w.recordingConsumer({})] })
        yield* w.produce(60)
        yield* w.runUntil("handled", w.allHandled)
        hung = true
        yield* w.produce(20)
        const before = w.requests.length
        // three sessions: a member whose heartbeats stopped would have lost its lease twice over
        for (let i = 0; i < 30; i++) yield* TestClock.adjust(timing.sessionTimeoutMs / 10)
        assert.isAbove(w.requests.length, before + 10)
        const lost = w.log.filter(
          (e) => e.kind === "event" && (e.event.type === "leaseLost" || e.event.type === "lost"),
        )
        assert.deepStrictEqual(lost, [])
        yield* Deferred.succeed(back, undefined)
      }),
  )

  it.effect("pause keeps the shard (owner and fence) but reads nothing; resume and seek", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld({ shardCount: 1 })
      const r = yield* w.startRuntime("pod-a", {
        consumers: [w.recordingConsumer({ shardCount: 1 })],
      })
      yield* w.runUntil("owns", () => r.runtime.members()[0]!.owned.length === 1)
      yield* r.runtime.pause(stream, group, 0)
      yield* w.produce(10)
      yield* TestClock.adjust(5_000)
      assert.strictEqual(w.handles().length, 0)
      assert.deepStrictEqual(r.runtime.members()[0]!.owned, [0])
      yield* r.runtime.seek(stream, group, 0, "end")
      yield* r.runtime.resume(stream, group, 0)
      yield* TestClock.adjust(1_000)
      assert.strictEqual(w.handles().length, 0)
      yield* w.produce(3)
      yield* w.runUntil("after the seek", () => w.handles().length === 3)
      assert.deepStrictEqual(
        w.handles().map((h) => h.n),
        [10, 11, 12],
      )
      const notOwned = yield* Effect.flip(r.runtime.seek(stream, group, 5, "start"))
      assert.strictEqual(notOwned._tag, "ShardNotOwned")
      // a group this runtime does not consume: named, for pause, resume and seek alike
      for (const call of [
        r.runtime.pause(stream, "other-group", 0),
        r.runtime.resume(stream, "other-group", 0),
        r.runtime.seek(stream, "other-group", 0, "start"),
      ]) {
        const unknown = yield* Effect.flip(call)
        assert.strictEqual(unknown._tag, "UnknownGroup")
        assert.include(unknown.message, 'does not consume group "other-group" of stream "orders"')
        assert.include(unknown.message, `it consumes ${group} of ${stream}`)
      }
      // a position that is no entry id: refused before anything is queued, with what to give
      const bad = yield* Effect.flip(r.runtime.seek(stream, group, 0, "not-an-id"))
      assert.strictEqual(bad._tag, "SeekFailed")
      assert.include(bad.message, '"not-an-id" is no position')
      assert.include(bad.message, '"start", "end" or a stream entry id')
      assert.deepStrictEqual(
        w
          .events()
          .filter((e) => e.type === "paused" || e.type === "resumed" || e.type === "seeked")
          .map((e) => e.type),
        ["paused", "seeked", "resumed"],
      )
    }),
  )
})

describe("runtime: hostile handler results", () => {
  /** A value whose `then` getter throws: reading it is user code that fails. */
  const hostile = (): Promise<void> =>
    // biome-ignore lint/suspicious/noThenProperty: a hostile thenable is what this tests
    Object.defineProperty({}, "then", {
      get: () => {
        throw new Error("hostile then")
      },
    }) as Promise<void>

  const expectDeadLettered = (w: World, n: string) =>
    Effect.gen(function* () {
      const letters: Array<{ readonly fields: Readonly<Record<string, string>> }> = []
      for (let shard = 0; shard < w.shardCount; shard++)
        letters.push(...(yield* w.streams.range(ShardStreams.deadLetterKey(stream, shard))))
      assert.deepStrictEqual(
        letters.map((l) => l.fields.n),
        [n],
      )
      assert.include(letters[0]!.fields[ShardStreams.DeadLetterFields.reason], "hostile then")
    })

  it.effect(
    "eachMessage: a returned value whose then getter throws is a failed call, retried then dead-lettered; the shard goes on",
    () =>
      Effect.gen(function* () {
        const w = yield* makeWorld()
        yield* w.produce(20)
        yield* w.startRuntime("pod-a", {
          consumers: [
            w.recordingConsumer({
              maxDeliveries: 2,
              handle: (m) => (m.fields.n === "3" ? hostile() : undefined),
            }),
          ],
        })
        yield* w.runUntil("all handled", w.allHandled)
        yield* w.runUntil("dead-lettered", () => w.eventsOf("deadLettered").length === 1)
        yield* expectDeadLettered(w, "3")
        assert.strictEqual(w.handles().filter((h) => h.n === 3).length, 2)
      }),
  )

  it.effect("eachBatch: the same for a batch handler's returned value", () =>
    Effect.gen(function* () {
      const w = yield* makeWorld()
      yield* w.produce(20)
      const handled: Array<string> = []
      yield* w.startRuntime("pod-a", {
        consumers: [
          consumer({
            stream,
            group,
            ...timing,
            shardCount: w.shardCount,
            batchSize: 1,
            maxDeliveries: 2,
            eachBatch: (b) => {
              for (const m of b.messages) handled.push(m.fields.n!)
              return b.messages.some((m) => m.fields.n === "3") ? hostile() : undefined
            },
          }),
        ],
      })
      yield* w.runUntil("dead-lettered", () => w.eventsOf("deadLettered").length === 1)
      yield* w.runUntil("all handled", () => new Set(handled).size === 20)
      yield* expectDeadLettered(w, "3")
      assert.strictEqual(handled.filter((n) => n === "3").length, 2)
    }),
  )
})
