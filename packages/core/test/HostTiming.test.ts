/**
 * CoordinatorHost timing (issue 19): leases and deadlines on the monotonic
 * clock (docs/protocol.md rule 21), the short coordinator lease and the
 * standby's wake-up (rule 20), and a takeover after a metadata rewind
 * (rule 23), through the real host with effect's TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Exit, Fiber, Layer, Option, Scope } from "effect"
import { TestClock } from "effect/testing"
import {
  CoordinatorLease,
  defaultCoordinatorLeaseMs,
  defaultFenceWaitMs,
  FenceWriteFailed,
  makeCoordinatorHost,
  OwnerFence,
  ShardStreams,
  StreamLayouts,
} from "../src/index.js"
import { Store } from "../src/testing.js"
import { monotonicMillis } from "../src/time/Instant.js"
import { config, request, SimMember } from "./coordinator/harness.js"
import { hostPorts, steadyOf } from "./support/hostPorts.js"

const cfg = config()
const key = { stream: cfg.stream, group: cfg.groupId }

/** Effect's clock with a wall clock that can be stepped; monotonic time and sleeps unchanged. */
const steppable = (base: Clock.Clock) => {
  let offsetMs = 0
  const clock: Clock.Clock = {
    ...base,
    currentTimeMillisUnsafe: () => base.currentTimeMillisUnsafe() + offsetMs,
    currentTimeMillis: Effect.sync(() => base.currentTimeMillisUnsafe() + offsetMs),
    currentTimeNanosUnsafe: () => base.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n,
    currentTimeNanos: Effect.sync(
      () => base.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n,
    ),
    monotonicTimeNanosUnsafe: () => base.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: Effect.sync(() => base.monotonicTimeNanosUnsafe()),
    sleep: (d) => base.sleep(d),
  }
  return {
    clock,
    step: (ms: number) => {
      offsetMs += ms
    },
  }
}

const ports = hostPorts

describe("rule 21: durations on the monotonic clock", () => {
  it.effect(
    "a wall-clock step forward expires no live member; a step backward does not delay a silent member's expiry",
    () =>
      Effect.gen(function* () {
        const wall = steppable(yield* Clock.clockWith(Effect.succeed))
        yield* Effect.gen(function* () {
          const store = Store.makeMemoryUnsafe()
          const lease = yield* CoordinatorLease.makeMemory
          const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
            Effect.provide(ports(store, lease)),
          )
          const a = new SimMember("a")
          const b = new SimMember("b")
          const beat = (m: SimMember) =>
            Effect.map(host.heartbeat(request(m.request())), (r) => m.onResponse(r))
          for (let i = 0; i < 4; i++) {
            yield* beat(a)
            yield* beat(b) // b's last heartbeat (confirming its grants): t = 0
          }
          assert.deepStrictEqual([...a.owned.keys(), ...b.owned.keys()].length, 4)
          yield* TestClock.adjust(1_000)
          yield* beat(a)
          // NTP steps the coordinator's wall clock an hour forward: nobody expires
          wall.step(3_600_000)
          yield* TestClock.adjust(1_000)
          const state = Option.getOrThrow(yield* host.state)
          assert.deepStrictEqual([...state.members.keys()].sort(), ["a", "b"])
          assert.isTrue(yield* host.isCoordinator) // its lease did not lapse either
          // ... and back two hours: silent b still expires 30 s after its last heartbeat
          wall.step(-7_200_000)
          yield* TestClock.adjust(27_999)
          yield* beat(a)
          assert.isTrue(Option.getOrThrow(yield* host.state).members.has("b"))
          yield* TestClock.adjust(2)
          assert.isFalse(Option.getOrThrow(yield* host.state).members.has("b"))
          // tokens still increase although the wall clock went back (rule 16's floor is a floor)
          const tokens = [...Option.getOrThrow(yield* host.state).tokens]
          const before = new Set(a.owned.keys())
          yield* beat(a)
          const granted = [...a.owned].filter(([shard]) => !before.has(shard))
          assert.isAbove(granted.length, 0)
          for (const [shard, token] of granted) assert.isAbove(token, tokens[shard]!)
          // audit times are wall times: the expiry (on monotonic time) is stamped with the stepped wall clock
          const expired = store.auditLog(key).find((e) => e.kind === "MemberExpired")
          assert.isBelow(expired!.at, 0)
        }).pipe(Effect.provideService(Clock.Clock, wall.clock))
      }).pipe(Effect.scoped),
  )
})

describe("rule 20: the coordinator lease", () => {
  it("defaults to twice the heartbeat interval, at most a quarter of the session, at least 1 s", () => {
    assert.strictEqual(
      defaultCoordinatorLeaseMs({ heartbeatIntervalMs: 3_000, sessionTimeoutMs: 30_000 }),
      6_000,
    )
    assert.strictEqual(
      defaultCoordinatorLeaseMs({ heartbeatIntervalMs: 10_000, sessionTimeoutMs: 30_000 }),
      7_500,
    )
    assert.strictEqual(
      defaultCoordinatorLeaseMs({ heartbeatIntervalMs: 100, sessionTimeoutMs: 1_000 }),
      1_000,
    )
  })

  it.effect("a standby knows when the holder's lease runs out, and takes over right then", () =>
    Effect.gen(function* () {
      const store = Store.makeMemoryUnsafe()
      const real = yield* CoordinatorLease.makeMemory
      // c1 freezes after its election: its renewals never reach the lease
      const frozen: CoordinatorLease.CoordinatorLeaseShape = {
        ...real,
        renew: (grant) => Effect.succeed(grant),
      }
      const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
        Effect.provide(ports(store, frozen)),
      )
      assert.isTrue(yield* h1.elect)
      const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
        Effect.provide(ports(store, real)),
      )
      assert.isFalse(yield* h2.elect)
      assert.strictEqual(Option.getOrThrow(yield* h2.standbyUntil), 6_000) // the 6 s default
      yield* TestClock.adjust(5_999)
      assert.isFalse(yield* h2.elect)
      yield* TestClock.adjust(1)
      assert.isTrue(yield* h2.elect)
      assert.isTrue(Option.isNone(yield* h2.standbyUntil))
      // the frozen ex-leader's lease ran out by its own (monotonic) clock: it answers nothing
      const r = yield* h1.heartbeat(request({ memberId: "a" }))
      assert.strictEqual(r.errorCode, "NOT_COORDINATOR")
    }).pipe(Effect.scoped),
  )

  // The join above would be refused anyway (its commit fails the lease
  // check); a plain heartbeat writes nothing, so only the host's own check of
  // its lease's end stands between it and an answer from stale memory.
  it.effect(
    "an ex-leader whose lease ended does not answer even a heartbeat that writes nothing",
    () =>
      Effect.gen(function* () {
        const store = Store.makeMemoryUnsafe()
        const real = yield* CoordinatorLease.makeMemory
        // c1's renewals never reach the lease
        const frozen: CoordinatorLease.CoordinatorLeaseShape = {
          ...real,
          renew: (grant) => Effect.succeed(grant),
        }
        const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(ports(store, frozen)),
        )
        const a = new SimMember("a")
        for (let i = 0; i < 3; i++) a.onResponse(yield* h1.heartbeat(request(a.request())))
        assert.strictEqual(a.owned.size, cfg.shardCount)
        // a plain heartbeat: no records, answered from memory with nothing committed
        const revision = store.revision(key)
        const steady = yield* h1.heartbeat(request(a.request()))
        assert.strictEqual(steady.errorCode, "NONE")
        assert.strictEqual(store.revision(key), revision)
        a.onResponse(steady)
        // c1's lease ends by its own monotonic clock (6 s default); c2 takes over
        yield* TestClock.adjust(6_000)
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
          Effect.provide(ports(store, real)),
        )
        assert.isTrue(yield* h2.elect)
        const r = yield* h1.heartbeat(request(a.request()))
        assert.strictEqual(r.errorCode, "NOT_COORDINATOR")
        assert.isFalse(yield* h1.isCoordinator)
        // the same member's next heartbeat is answered by c2, with what it owns
        const again = yield* h2.heartbeat(request(a.request()))
        assert.strictEqual(again.errorCode, "NONE")
        assert.strictEqual(again.memberEpoch, steady.memberEpoch)
      }).pipe(Effect.scoped),
  )
})

describe("rule 30: a token written again is best effort", () => {
  it.effect(
    "a failed restore of a missing token is no step-down: the owner is answered, the host serves on",
    () =>
      Effect.gen(function* () {
        const store = Store.makeMemoryUnsafe()
        const restores: Array<number> = []
        // storage refuses restores (its node down, say) and takes every grant's fence
        const fence: OwnerFence.OwnerFenceShape = {
          ...OwnerFence.noop,
          write: (k, fences) =>
            fences.some((f) => f.restore === true)
              ? Effect.suspend(() => {
                  restores.push(...fences.map((f) => f.shard))
                  return Effect.fail(
                    new FenceWriteFailed({
                      stream: k.stream,
                      group: k.group,
                      message: "node down",
                    }),
                  )
                })
              : Effect.void,
        }
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(ports(store, yield* CoordinatorLease.makeMemory, fence)),
        )
        const a = new SimMember("a")
        for (let i = 0; i < 3; i++) a.onResponse(yield* host.heartbeat(request(a.request())))
        assert.strictEqual(a.owned.size, cfg.shardCount)
        const token = a.owned.get(1)!
        const r = yield* host.heartbeat({
          ...request(a.request()),
          missingTokens: [{ shard: 1, token }],
        })
        assert.deepStrictEqual(restores, [1], "the restore was tried")
        assert.strictEqual(r.errorCode, "NONE")
        assert.isTrue(yield* host.isCoordinator)
        assert.strictEqual(r.assigned.find((g) => g.shard === 1)?.token, token)
      }).pipe(Effect.scoped),
  )
})

describe("rule 20: a closed host holds no lease", () => {
  // The host's close released its lease while the renewal loop still ran: a
  // renewal due during the release's round trip found no term and took the
  // lease again, for a host that would serve nobody until the lease ran out
  // (seen on Redis at load 19: a successor was refused "lease held by coord").
  it.effect("a renewal due while the close releases the lease does not take it again", () =>
    Effect.gen(function* () {
      const store = Store.makeMemoryUnsafe()
      const real = yield* CoordinatorLease.makeMemory
      // the release's reply takes 1 s: the renewal due at 2 s comes in between
      const slowRelease: CoordinatorLease.CoordinatorLeaseShape = {
        ...real,
        release: (grant) => Effect.andThen(real.release(grant), Effect.sleep(1_000)),
      }
      const scope = yield* Scope.make()
      const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
        Effect.provide(ports(store, slowRelease)),
        Scope.provide(scope),
      )
      assert.isTrue(yield* h1.elect)
      yield* TestClock.adjust(1_500)
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* TestClock.adjust(1_000) // past the renewal at 2 s and the release's reply
      yield* Fiber.join(closing)
      assert.isFalse(yield* h1.isCoordinator)
      const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
        Effect.provide(ports(store, real)),
      )
      assert.isTrue(yield* h2.elect, "the closed host's lease is free")
      // and the closed host answers nobody, nor takes the lease from a heartbeat
      const r = yield* h1.heartbeat(request({ memberId: "a" }))
      assert.strictEqual(r.errorCode, "NOT_COORDINATOR")
    }).pipe(Effect.scoped),
  )
})

/**
 * Every call to the lease, the store and the stream layouts takes `rttMs`
 * (half each way), as from a pod with added network latency; a renewal's
 * grant runs from its send, as on Redis (RedisCoordinatorLease).
 */
const slowLink = (
  rttMs: number,
  store: Store.StoreShape,
  lease: CoordinatorLease.CoordinatorLeaseShape,
  layouts: StreamLayouts.StreamLayoutsShape,
) => {
  const half = Effect.sleep(rttMs / 2)
  const slow = <A, E>(call: Effect.Effect<A, E>) =>
    Effect.andThen(
      half,
      Effect.tap(call, () => half),
    )
  const fromSend = <E>(call: (sentAt: number) => Effect.Effect<CoordinatorLease.LeaseGrant, E>) =>
    Effect.flatMap(monotonicMillis, (sentAt) => slow(call(sentAt)))
  const slowLease: CoordinatorLease.CoordinatorLeaseShape = {
    acquire: (key, holder, ttlMs) =>
      fromSend((sentAt) =>
        Effect.map(lease.acquire(key, holder, ttlMs), (g) => ({ ...g, expiresAt: sentAt + ttlMs })),
      ),
    renew: (grant, ttlMs) =>
      fromSend((sentAt) =>
        Effect.map(lease.renew(grant, ttlMs), (g) => ({ ...g, expiresAt: sentAt + ttlMs })),
      ),
    check: (grant) => slow(lease.check(grant)),
    // not slowed: the host's scope closes at the test's end, when nothing moves the TestClock
    release: lease.release,
  }
  const slowStore: Store.StoreShape = {
    load: (k) => slow(store.load(k)),
    commit: (k, revision, records) => slow(store.commit(k, revision, records)),
  }
  const slowLayouts: StreamLayouts.StreamLayoutsShape = {
    load: (stream) => slow(layouts.load(stream)),
    save: (stream, record, expected) => slow(layouts.save(stream, record, expected)),
  }
  return Layer.mergeAll(
    ports(slowStore, slowLease),
    Layer.succeed(StreamLayouts.StreamLayouts, slowLayouts),
  )
}

describe("rule 20: lease renewal against latency (issue 32, item 5)", () => {
  // 300 ms: what issue 32 measured; 450 ms: still below two thirds of the
  // lease, where renewals paced from each one's end would let it lapse
  for (const rttMs of [300, 450])
    it.effect(
      `at +${rttMs} ms a round trip, with joins committing and the layout followed, the leader keeps one term and answers every heartbeat`,
      () =>
        Effect.gen(function* () {
          // session 4 s, heartbeats 300 ms: a 1 s lease, renewed every 333 ms
          const fast = config({ sessionTimeoutMs: 4_000, heartbeatIntervalMs: 300 })
          assert.strictEqual(defaultCoordinatorLeaseMs(fast), 1_000)
          const store = Store.makeMemoryUnsafe()
          const lease = yield* CoordinatorLease.makeMemory
          const layouts = yield* StreamLayouts.makeMemory
          const host = yield* makeCoordinatorHost({ config: fast, holder: "c1" }).pipe(
            Effect.provide(slowLink(rttMs, store, lease, layouts)),
          )
          const elected = yield* Effect.forkChild(host.elect)
          for (let t = 0; t < 5_000; t += 50) yield* TestClock.adjust(50)
          assert.isTrue(yield* Fiber.join(elected))
          const term = Option.getOrThrow(yield* host.leaseToken)
          const answers: Array<string> = []
          /** How long heartbeats waited (virtual ms) once the group settled. */
          const waits: Array<number> = []
          let quietFrom = Number.POSITIVE_INFINITY
          /** A member heartbeating every 300 ms from now on. */
          const member = (id: string) =>
            Effect.forkChild(
              Effect.forever(
                Effect.gen(function* () {
                  const m = members.get(id)!
                  const sentAt = yield* monotonicMillis
                  const r = yield* host.heartbeat(request(m.request()))
                  const answeredAt = yield* monotonicMillis
                  m.onResponse(r)
                  answers.push(`${id} ${r.errorCode}`)
                  if (sentAt >= quietFrom) waits.push(answeredAt - sentAt)
                  yield* Effect.sleep(300)
                }),
              ),
            )
          const members = new Map<string, SimMember>()
          // a member joins every 2 s (each join commits: a lease check and a
          // commit, two round trips under the host's lock), 4 in all
          for (const id of ["a", "b", "c", "d"]) {
            members.set(id, new SimMember(id))
            yield* member(id)
            for (let t = 0; t < 2_000; t += 50) yield* TestClock.adjust(50)
          }
          for (let t = 0; t < 5_000; t += 50) yield* TestClock.adjust(50)
          quietFrom = yield* monotonicMillis
          for (let t = 0; t < 5_000; t += 50) yield* TestClock.adjust(50)
          assert.deepStrictEqual(
            answers.filter((a) => !a.endsWith(" NONE")),
            [],
            "heartbeats not answered NONE",
          )
          assert.isAbove(answers.length, 40)
          assert.isTrue(yield* host.isCoordinator)
          assert.strictEqual(
            Option.getOrThrow(yield* host.leaseToken),
            term,
            "one term: the lease was never lost and taken again",
          )
          assert.strictEqual([...members.values()].flatMap((m) => [...m.owned.keys()]).length, 4)
          // a settled group's heartbeats commit nothing: answered at once, never
          // behind a round trip under the host's lock (the layout follow-up
          // reads outside it)
          assert.isAbove(waits.length, 40)
          assert.deepStrictEqual(
            waits.filter((ms) => ms > 0),
            [],
            "heartbeats that waited once the group settled",
          )
        }).pipe(Effect.scoped),
    )
})

/** Memory ports and leader c1's host, in a scope of its own (`s1`) a test closes to fail it over. */
const firstLeader = Effect.gen(function* () {
  const streams = yield* ShardStreams.makeMemory
  const fence = yield* OwnerFence.make.pipe(
    Effect.provideService(ShardStreams.ShardStreams, streams),
  )
  const store = Store.makeMemoryUnsafe()
  const lease = yield* CoordinatorLease.makeMemory
  const s1 = yield* Scope.make()
  const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
    Effect.provide(ports(store, lease, fence)),
    Scope.provide(s1),
  )
  return { streams, fence, store, lease, s1, h1 }
})

describe("rule 23 through the host: a takeover after a metadata rewind", () => {
  it.effect(
    "issue 19 finding 5: storage tokens above the stored ones: the shards are held, the takeover is audited and the host serves",
    () =>
      Effect.gen(function* () {
        const { streams, fence, store, lease, s1, h1 } = yield* firstLeader
        const a = yield* h1.heartbeat(request({ memberId: "a" }))
        assert.deepStrictEqual(
          a.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
        yield* Scope.close(s1, Exit.void)
        // commits lost from the Store kept their grants in storage: shard 2 was
        // granted again, higher, by a coordinator whose commit is gone
        const t2 = a.assigned.find((g) => g.shard === 2)!.token
        yield* streams.setOwnerToken({ stream: "orders", shard: 2, group: "g", token: t2 + 100 })
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
          Effect.provide(ports(store, lease, fence)),
        )
        assert.isTrue(yield* h2.elect)
        const state = Option.getOrThrow(yield* h2.state)
        assert.strictEqual(state.held[2]?.reason, "rewind")
        assert.isFalse(state.members.has("a")) // its grant of 2 is refused by storage: fenced
        const audit = store.auditLog(key).find((e) => e.kind === "MetadataRewindDetected")
        assert.deepStrictEqual(audit?.shards, [2])
        // the group goes on: a rejoins and gets every shard but 2 (held one session)
        const rejoin = yield* h2.heartbeat(request({ memberId: "a" }))
        assert.strictEqual(rejoin.errorCode, "NONE")
        assert.deepStrictEqual(
          rejoin.assigned.map((g) => g.shard),
          [0, 1, 3],
        )
        const confirmed = yield* h2.heartbeat(steadyOf("a", rejoin))
        yield* TestClock.adjust(20_000)
        const mid = yield* h2.heartbeat(steadyOf("a", confirmed))
        assert.strictEqual(mid.errorCode, "NONE")
        assert.isUndefined(mid.assigned.find((g) => g.shard === 2))
        yield* TestClock.adjust(10_001) // one session after the takeover
        const later = yield* h2.heartbeat(steadyOf("a", mid))
        const g2 = later.assigned.find((g) => g.shard === 2)
        assert.isDefined(g2)
        assert.isAbove(g2!.token, t2 + 100)
        assert.strictEqual(
          yield* streams.ownerToken({ stream: "orders", shard: 2, group: "g" }),
          g2!.token,
        )
      }).pipe(Effect.scoped),
  )
})

/**
 * Member a owns every shard, confirmed, under c1 (owner tokens written to
 * storage), and c1 is closed: ready for a successor's takeover.
 */
const steadyThenClosed = Effect.gen(function* () {
  const { fence, store, lease, s1, h1 } = yield* firstLeader
  const a = yield* h1.heartbeat(request({ memberId: "a" }))
  const steady = yield* h1.heartbeat(steadyOf("a", a))
  yield* Scope.close(s1, Exit.void)
  return { fence, store, lease, steady }
})

describe("rule 27 through the host: a takeover while one shard's storage node is down", () => {
  it.effect(
    "issue 32 item 4: the owner tokens of a shard whose node fails are neither read nor re-fenced, and the election succeeds; the member keeps every shard",
    () =>
      Effect.gen(function* () {
        const { fence, store, lease, steady } = yield* steadyThenClosed
        // shard 1's node is down: every read or write of its token fails
        const down = (k: { stream: string; group: string }) =>
          Effect.fail(new FenceWriteFailed({ stream: k.stream, group: k.group, message: "down" }))
        const written: Array<number> = []
        const partial: OwnerFence.OwnerFenceShape = {
          read: (k, shards) => (shards.includes(1) ? down(k) : fence.read(k, shards)),
          write: (k, fences) =>
            fences.some((f) => f.shard === 1)
              ? down(k)
              : Effect.tap(fence.write(k, fences), () =>
                  Effect.sync(() => written.push(...fences.map((f) => f.shard))),
                ),
        }
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
          Effect.provide(ports(store, lease, partial)),
        )
        assert.isTrue(yield* h2.elect)
        assert.deepStrictEqual(
          written.sort((x, y) => x - y),
          [0, 2, 3],
        )
        const next = yield* h2.heartbeat(steadyOf("a", steady))
        assert.strictEqual(next.errorCode, "NONE")
        assert.strictEqual(next.memberEpoch, steady.memberEpoch)
        assert.deepStrictEqual(
          next.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
      }).pipe(Effect.scoped),
  )
})

/**
 * a owns every shard, b joins, and two of a's shards are revoked and free
 * for b; the fence write of the first of them (`hung`) hangs until
 * `release`. Ready for b's heartbeat that grants them (docs/protocol.md
 * rule 31).
 */
const hungGrant = (options: { readonly fenceWaitMs: number }) =>
  Effect.gen(function* () {
    const store = Store.makeMemoryUnsafe()
    let hung = -1
    const started = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const written: Array<number> = []
    const notices: Array<string> = []
    const fence: OwnerFence.OwnerFenceShape = {
      ...OwnerFence.noop,
      write: (_k, fences) =>
        Effect.andThen(
          fences.some((f) => f.shard === hung)
            ? Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(release))
            : Effect.void,
          Effect.sync(() => written.push(...fences.map((f) => f.shard))),
        ),
    }
    const host = yield* makeCoordinatorHost({
      config: cfg,
      holder: "c1",
      fenceWaitMs: options.fenceWaitMs,
      onNotice: (id) => Effect.sync(() => notices.push(id)),
    }).pipe(Effect.provide(ports(store, yield* CoordinatorLease.makeMemory, fence)))
    const a = new SimMember("a")
    const b = new SimMember("b")
    const beat = (m: SimMember) =>
      Effect.map(host.heartbeat(request(m.request())), (r) => {
        m.onResponse(r)
        return r
      })
    for (let i = 0; i < 3; i++) yield* beat(a)
    assert.strictEqual(a.owned.size, cfg.shardCount)
    yield* beat(b) // b joins: two of a's shards are to move to b
    yield* beat(a) // a's answer drops them: a drains them
    const moving = [...a.revoking.keys()]
    assert.strictEqual(moving.length, 2)
    hung = moving[0]!
    yield* beat(a) // a reports them REVOKED: they are free for b (b is noticed of that)
    written.length = 0
    notices.length = 0
    return { host, a, b, beat, hung, other: moving[1]!, started, release, written, notices }
  })

describe("rule 31: a grant's fence write runs outside the coordinator's lock (issue 32, item 4)", () => {
  it.effect(
    "while one shard's fence write hangs (its storage node down), other members' heartbeats and joins are answered; the grant reaches its member only once written",
    () =>
      Effect.gen(function* () {
        // the grantee's own answer waits for its write (up to fenceWaitMs)
        const { host, a, b, beat, hung, started, release, written } = yield* hungGrant({
          fenceWaitMs: 10_000,
        })
        const toB = b.request()
        const grant = yield* Effect.forkChild(host.heartbeat(request(toB)))
        yield* Deferred.await(started) // b's grant: the write of `hung` hangs
        // a's steady heartbeat and c's join are answered meanwhile
        const other = yield* Effect.forkChild(beat(a))
        const join = yield* Effect.forkChild(host.heartbeat(request({ memberId: "c" })))
        yield* TestClock.adjust(1_000)
        const answered = other.pollUnsafe()
        assert.isDefined(answered, "a's heartbeat waited behind b's fence write")
        assert.strictEqual(Exit.isSuccess(answered!) && answered.value.errorCode, "NONE")
        const joined = join.pollUnsafe()
        assert.isDefined(joined, "c's join waited behind b's fence write")
        assert.strictEqual(Exit.isSuccess(joined!) && joined.value.errorCode, "NONE")
        // b's own answer waits for its fence; a resend of b's meanwhile gets `hung` as pending
        assert.isUndefined(grant.pollUnsafe())
        const resend = yield* host.heartbeat(request({ ...toB, seq: toB.seq! + 1 }))
        assert.strictEqual(resend.errorCode, "NONE")
        assert.notInclude(
          resend.assigned.map((g) => g.shard),
          hung,
        )
        assert.include(resend.pending, hung)
        assert.notInclude(written, hung)
        // the write ends: b's answer grants `hung`, written before it
        yield* Deferred.succeed(release, undefined)
        const granted = yield* Fiber.join(grant)
        assert.include(written, hung)
        assert.include(
          granted.assigned.map((g) => g.shard),
          hung,
        )
        assert.isTrue(yield* host.isCoordinator)
      }).pipe(Effect.scoped),
  )
})

describe("rules 27 and 31: nothing waits for a hung node longer than fenceWaitMs", () => {
  it("defaults to 1 s, at most a sixth of the session, at least 1 ms", () => {
    assert.strictEqual(defaultFenceWaitMs({ sessionTimeoutMs: 30_000 }), 1_000)
    assert.strictEqual(defaultFenceWaitMs({ sessionTimeoutMs: 4_000 }), 666)
    assert.strictEqual(defaultFenceWaitMs({ sessionTimeoutMs: 2 }), 1)
  })

  it.effect(
    "a grantee's answer waits for its hung fence write at most fenceWaitMs: the shard comes pending, its owner is noticed once written, and its next answer grants it",
    () =>
      Effect.gen(function* () {
        const { host, b, beat, hung, other, started, release, written, notices } = yield* hungGrant(
          { fenceWaitMs: 500 },
        )
        const grant = yield* Effect.forkChild(beat(b))
        yield* Deferred.await(started)
        yield* TestClock.adjust(499)
        assert.isUndefined(grant.pollUnsafe(), "answered before fenceWaitMs")
        yield* TestClock.adjust(1)
        const exit = grant.pollUnsafe()
        assert.isDefined(exit, "the grantee's answer waited past fenceWaitMs")
        const answered = yield* Fiber.join(grant)
        assert.strictEqual(answered.errorCode, "NONE")
        assert.notInclude(
          answered.assigned.map((g) => g.shard),
          hung,
        )
        assert.include(answered.pending, hung)
        assert.include(
          answered.assigned.map((g) => g.shard),
          other,
        )
        assert.notInclude(written, hung)
        assert.notInclude(notices, "b")
        // the write ends in the background: b is noticed, its next answer grants the shard
        yield* Deferred.succeed(release, undefined)
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow
        assert.include(written, hung)
        assert.include(notices, "b")
        const next = yield* beat(b)
        assert.include(
          next.assigned.map((g) => g.shard),
          hung,
        )
        assert.isTrue(yield* host.isCoordinator)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "a takeover while one shard's node hangs (reads and writes never answer) is elected after fenceWaitMs per phase, not the command deadline; the member keeps every shard",
    () =>
      Effect.gen(function* () {
        const { fence, store, lease, steady } = yield* steadyThenClosed
        const hanging: OwnerFence.OwnerFenceShape = {
          read: (k, shards) => (shards.includes(1) ? Effect.never : fence.read(k, shards)),
          write: (k, fences) =>
            fences.some((f) => f.shard === 1) ? Effect.never : fence.write(k, fences),
        }
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2", fenceWaitMs: 300 }).pipe(
          Effect.provide(ports(store, lease, hanging)),
        )
        const elect = yield* Effect.forkChild(h2.elect)
        yield* TestClock.adjust(300) // the token reads
        yield* TestClock.adjust(300) // the re-fences
        const elected = elect.pollUnsafe()
        assert.isDefined(elected, "the takeover waited for the hung node past fenceWaitMs")
        assert.isTrue(Exit.isSuccess(elected!) && elected.value)
        const next = yield* h2.heartbeat(steadyOf("a", steady))
        assert.strictEqual(next.errorCode, "NONE")
        assert.deepStrictEqual(
          next.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
      }).pipe(Effect.scoped),
  )
})

describe("rule 31: a withheld grant costs its member nothing else", () => {
  it.effect(
    "a grant withheld past the rebalance timeout (its node hung) does not fence its member: it keeps its other shards, and gets the grant once written",
    () =>
      Effect.gen(function* () {
        const { host, a, b, beat, hung, other, release } = yield* hungGrant({ fenceWaitMs: 500 })
        const grant = yield* Effect.forkChild(beat(b))
        yield* TestClock.adjust(500)
        const first = yield* Fiber.join(grant)
        assert.include(first.pending, hung)
        // three rebalance timeouts of heartbeats while the write hangs
        for (let t = 0; t < 3 * cfg.rebalanceTimeoutMs; t += cfg.heartbeatIntervalMs) {
          yield* TestClock.adjust(cfg.heartbeatIntervalMs)
          yield* beat(a)
          const r = yield* beat(b)
          assert.strictEqual(r.errorCode, "NONE", `b was fenced at +${t} ms: ${r.errorMessage}`)
          assert.include(
            r.assigned.map((g) => g.shard),
            other,
          )
          assert.include(r.pending, hung)
        }
        yield* Deferred.succeed(release, undefined)
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow
        const next = yield* beat(b)
        assert.include(
          next.assigned.map((g) => g.shard),
          hung,
        )
        // told only now: it has a whole rebalance timeout to confirm it
        yield* TestClock.adjust(cfg.rebalanceTimeoutMs - 1)
        const confirmed = yield* beat(b)
        assert.strictEqual(confirmed.errorCode, "NONE")
        assert.isTrue(yield* host.isCoordinator)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "at a takeover, a grant the previous leader wrote and told, whose re-fence fails, is listed once its member reports it owned (not pending: that would read as a revocation)",
    () =>
      Effect.gen(function* () {
        const store = Store.makeMemoryUnsafe()
        const lease = yield* CoordinatorLease.makeMemory
        const down = (k: { stream: string; group: string }) =>
          Effect.fail(new FenceWriteFailed({ stream: k.stream, group: k.group, message: "down" }))
        // c1 grants a every shard, written and told; a has not confirmed yet
        const s1 = yield* Scope.make()
        const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(ports(store, lease)),
          Scope.provide(s1),
        )
        const joined = yield* h1.heartbeat(request({ memberId: "a" }))
        assert.deepStrictEqual(
          joined.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
        yield* Scope.close(s1, Exit.void)
        // c2 takes over while shard 1's node is down: its re-fence fails
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
          Effect.provide(
            ports(store, lease, {
              read: (k, shards) => (shards.includes(1) ? down(k) : Effect.succeed([])),
              write: (k, fences) => (fences.some((f) => f.shard === 1) ? down(k) : Effect.void),
            }),
          ),
        )
        assert.isTrue(yield* h2.elect)
        // a reports every shard owned: it holds shard 1 under its written token
        const next = yield* h2.heartbeat(steadyOf("a", joined))
        assert.strictEqual(next.errorCode, "NONE")
        assert.deepStrictEqual(
          next.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
        assert.deepStrictEqual(next.pending, [])
      }).pipe(Effect.scoped),
  )
})

describe("rule 31 at a takeover: a grant never confirmed whose re-fence fails is withheld", () => {
  it.effect(
    "a successor that cannot write an unconfirmed grant's token answers it as pending, and grants it once written",
    () =>
      Effect.gen(function* () {
        const store = Store.makeMemoryUnsafe()
        const lease = yield* CoordinatorLease.makeMemory
        const down = (k: { stream: string; group: string }) =>
          Effect.fail(new FenceWriteFailed({ stream: k.stream, group: k.group, message: "down" }))
        // c1 grants a every shard and fails to write any of them: a is told none
        const s1 = yield* Scope.make()
        const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(
            ports(store, lease, { read: () => Effect.succeed([]), write: (k) => down(k) }),
          ),
          Scope.provide(s1),
        )
        const joined = yield* h1.heartbeat(request({ memberId: "a" }))
        assert.deepStrictEqual(joined.assigned, [])
        yield* Scope.close(s1, Exit.void)
        // c2 takes over; shard 1's node is still down
        let shard1Down = true
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
          Effect.provide(
            ports(store, lease, {
              read: (k, shards) =>
                shards.includes(1) && shard1Down ? down(k) : Effect.succeed([]),
              write: (k, fences) =>
                fences.some((f) => f.shard === 1) && shard1Down ? down(k) : Effect.void,
            }),
          ),
        )
        assert.isTrue(yield* h2.elect)
        const next = yield* h2.heartbeat(steadyOf("a", joined))
        assert.strictEqual(next.errorCode, "NONE")
        assert.deepStrictEqual(
          next.assigned.map((g) => g.shard),
          [0, 2, 3],
        )
        assert.deepStrictEqual(next.pending, [1])
        // the node is back: a's next answer retries the write; the one after grants it
        shard1Down = false
        yield* h2.heartbeat(steadyOf("a", next))
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow
        const last = yield* h2.heartbeat(steadyOf("a", next))
        assert.deepStrictEqual(
          last.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
      }).pipe(Effect.scoped),
  )
})
