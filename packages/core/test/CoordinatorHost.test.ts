import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import { TestClock } from "effect/testing"
import {
  Coordinator,
  type CoordinatorLease,
  type Fence,
  FenceWriteFailed,
  Layout,
  LeaseLost,
  makeCoordinatorHost,
  makeCoordinatorHostAsync,
  type OwnerFence,
  ShardStreams,
  StreamLayouts,
} from "../src/index.js"
import { Store, CoordinatorTransport as TestingTransport } from "../src/testing.js"
import { config, info, request } from "./coordinator/harness.js"
import { hostPorts, makeLease, steadyOf } from "./support/hostPorts.js"
import { pausableStore } from "./support/pausableStore.js"

const cfg = config()
const key = { stream: cfg.stream, group: cfg.groupId }

const makeStore = Store.makeMemoryUnsafe
const ports = hostPorts

const env = (store: Store.StoreShape, lease?: CoordinatorLease.CoordinatorLeaseShape) =>
  ports(store, lease)

/** A memory lease that can be lost on demand: renew and check fail from then on. */
const losableLease = () => {
  const real = makeLease()
  let lost = false
  const fail = (g: CoordinatorLease.LeaseGrant) =>
    Effect.fail(
      new LeaseLost({ stream: g.key.stream, group: g.key.group, holder: g.holder, token: g.token }),
    )
  const lease: CoordinatorLease.CoordinatorLeaseShape = {
    ...real,
    renew: (g, ttl) => (lost ? fail(g) : real.renew(g, ttl)),
    check: (g) => (lost ? fail(g) : real.check(g)),
  }
  return {
    lease,
    lose: () => {
      lost = true
    },
  }
}

const join = (memberId: string) => request({ memberId })

/**
 * c1 leads with a 2 s lease over a store whose commits can be held (a
 * process paused inside a commit); `freeze` stops its renewals too (paused,
 * it renews nothing: its renewals run on a fiber of their own, never behind
 * its lock, docs/protocol.md rule 20). Member a has joined.
 */
const pausableLeader = (store: Store.StoreShape, lease: CoordinatorLease.CoordinatorLeaseShape) =>
  Effect.gen(function* () {
    const paused = pausableStore(store)
    let frozen = false
    const c1Lease: CoordinatorLease.CoordinatorLeaseShape = {
      ...lease,
      renew: (grant, ttl) => (frozen ? Effect.succeed(grant) : lease.renew(grant, ttl)),
    }
    const h1 = yield* makeCoordinatorHost({
      config: cfg,
      holder: "c1",
      leaseTtlMs: 2_000,
    }).pipe(Effect.provide(env(paused.store, c1Lease)))
    const a = yield* h1.heartbeat(join("a"))
    return {
      paused,
      freeze: () => {
        frozen = true
      },
      h1,
      a,
    }
  })

describe("CoordinatorHost", () => {
  it.effect("commits records before answering and writes fences before the response", () =>
    Effect.gen(function* () {
      const store = makeStore()
      const log: Array<string> = []
      const fence: OwnerFence.OwnerFenceShape = {
        read: () => Effect.succeed([]),
        write: (k, fences: ReadonlyArray<Fence>) =>
          Effect.sync(() => log.push(`fence ${fences.length} at revision ${store.revision(k)}`)),
      }
      const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
        Effect.provide(ports(store, makeLease(), fence)),
      )
      const r = yield* host.heartbeat(join("a"))
      log.push("response")
      assert.strictEqual(r.errorCode, "NONE")
      // one write per shard (rule 31: each with its own deadline), all before the answer
      assert.deepStrictEqual(log, [...Array(4).fill("fence 1 at revision 2"), "response"])
      assert.strictEqual(store.revision(key), 2) // GroupCreated, then the join
    }),
  )

  it.effect(
    "untrusted input is decoded: garbage and out-of-range requests get INVALID_REQUEST",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store)),
        )
        yield* host.heartbeat(join("a"))
        const rev = store.revision(key)
        for (const bad of [
          null,
          42,
          { memberId: "a" },
          { ...join("a"), ownedShards: [-1] },
          { ...join("b"), memberEpoch: -2 },
        ]) {
          const r = yield* host.heartbeat(bad)
          assert.strictEqual(r.errorCode, "INVALID_REQUEST")
        }
        const range = yield* host.heartbeat({
          ...request({ memberId: "a", memberEpoch: 1 }),
          ownedShards: [17],
        })
        assert.strictEqual(range.errorCode, "INVALID_REQUEST")
        assert.strictEqual(store.revision(key), rev)
      }),
  )

  it.effect("runs session deadlines on effect's Clock: a silent member expires", () =>
    Effect.gen(function* () {
      const store = makeStore()
      const notices: Array<string> = []
      const host = yield* makeCoordinatorHost({
        config: cfg,
        holder: "c1",
        onNotice: (id) => Effect.sync(() => notices.push(id)),
      }).pipe(Effect.provide(env(store)))
      const a = yield* host.heartbeat(join("a"))
      const b = yield* host.heartbeat(join("b"))
      let last = b
      for (let t = 0; t < 10; t++) {
        yield* TestClock.adjust(3_000)
        last = yield* host.heartbeat(steadyOf("b", last))
      }
      yield* TestClock.adjust(1_000)
      const state = Option.getOrThrow(yield* host.state)
      assert.isFalse(state.members.has("a"))
      assert.isTrue(state.members.has("b"))
      assert.include(notices, "b")
      assert.strictEqual(a.memberEpoch, 1)
      assert.strictEqual(last.errorCode, "NONE")
    }),
  )

  it.effect(
    "runs revoke deadlines on effect's Clock: a member that never reports REVOKED is fenced",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store)),
        )
        yield* host.heartbeat(join("a"))
        const b = yield* host.heartbeat(join("b"))
        // sticky assignor: a keeps [0, 1] and must revoke [2, 3] for b
        assert.deepStrictEqual([...b.pending], [2, 3])
        yield* TestClock.adjust(9_999)
        assert.strictEqual(
          Option.getOrThrow(yield* host.state).members.get("a")?.state,
          "UNREVOKED_SHARDS",
        )
        yield* TestClock.adjust(2)
        // fenced: removed, all its shards targeted to b, but held until a's
        // lease has provably ended (its session deadline, t=30s; rule 19)
        assert.isFalse(Option.getOrThrow(yield* host.state).members.has("a"))
        const heartbeatB = () =>
          host.heartbeat(
            request({
              memberId: "b",
              memberEpoch: b.memberEpoch,
              assignmentEpoch: b.assignmentEpoch,
            }),
          )
        const held = yield* heartbeatB()
        assert.deepStrictEqual(held.assigned, [])
        assert.deepStrictEqual([...held.pending], [0, 1, 2, 3])
        yield* TestClock.adjust(29_000 - 10_001)
        yield* heartbeatB()
        yield* TestClock.adjust(1_000)
        const rb = yield* heartbeatB()
        assert.deepStrictEqual(
          rb.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
      }),
  )

  it.effect(
    "one sleeping timer serves every deadline: staggered silent members expire each at its own deadline",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const host = yield* makeCoordinatorHost({
          // revoke/confirm deadlines far away: only session deadlines fire here
          config: config({ shardCount: 8, rebalanceTimeoutMs: 600_000 }),
          holder: "c1",
          leaseTtlMs: 600_000,
        }).pipe(Effect.provide(env(store)))
        const ids = ["a", "b", "c", "d", "e"]
        for (const id of ids) {
          yield* host.heartbeat(join(id)) // joins at 0, 1000, 2000, ...: deadlines 30 s later
          yield* TestClock.adjust(1_000)
        }
        const members = () =>
          Effect.map(host.state, (s) => [...Option.getOrThrow(s).members.keys()].sort())
        yield* TestClock.adjust(30_000 - 5_000 - 1) // t = 29_999
        for (let k = 0; k < ids.length; k++) {
          assert.deepStrictEqual(yield* members(), ids.slice(k), `before ${ids[k]}'s deadline`)
          yield* TestClock.adjust(2) // just past member k's deadline
          assert.deepStrictEqual(yield* members(), ids.slice(k + 1), `after ${ids[k]}'s deadline`)
          yield* TestClock.adjust(998)
        }
      }),
  )

  it.effect("publishes 'look again' notices on the notices stream", () =>
    Effect.gen(function* () {
      const store = makeStore()
      const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
        Effect.provide(env(store)),
      )
      yield* host.heartbeat(join("a"))
      const b = yield* host.heartbeat(join("b"))
      const fiber = yield* Effect.forkChild(Stream.runCollect(Stream.take(host.notices, 1)))
      yield* TestClock.adjust(1)
      yield* host.heartbeat(request({ memberId: "a", memberEpoch: -1 }))
      const got = yield* Fiber.join(fiber)
      assert.deepStrictEqual([...got], ["b"])
      assert.strictEqual(b.errorCode, "NONE")
    }),
  )

  it.effect(
    "StaleRevision: a host whose snapshot went stale reloads and retries while it holds the lease",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store)),
        )
        yield* host.heartbeat(join("a"))
        // someone else commits behind the host's back
        yield* store.commit(key, store.revision(key), [
          { _tag: "GroupEpochBumped", groupEpoch: 50 },
        ])
        const r = yield* host.heartbeat(join("b"))
        assert.strictEqual(r.errorCode, "NONE")
        const state = Option.getOrThrow(yield* host.state)
        assert.strictEqual(state.groupEpoch, 51)
        assert.strictEqual(state.storeRevision, store.revision(key))
      }),
  )

  it.effect(
    "StaleRevision with the lease lost: the host steps down and answers NOT_COORDINATOR",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const { lease, lose } = losableLease()
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store, lease)),
        )
        yield* host.heartbeat(join("a"))
        lose()
        yield* store.commit(key, store.revision(key), [
          { _tag: "GroupEpochBumped", groupEpoch: 50 },
        ])
        const rev = store.revision(key)
        const r = yield* host.heartbeat(join("b"))
        assert.strictEqual(r.errorCode, "NOT_COORDINATOR")
        assert.isFalse(yield* host.isCoordinator)
        assert.strictEqual(store.revision(key), rev) // the stale commit was rejected
      }),
  )

  it.effect(
    "failover: a second host waits for the lease, then loads the snapshot with fresh session deadlines",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const lease = makeLease()
        const scope1 = yield* Scope.make()
        const h1 = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store, lease)),
          Scope.provide(scope1),
        )
        const a = yield* h1.heartbeat(join("a"))
        assert.deepStrictEqual(
          a.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
        yield* h1.heartbeat(steadyOf("a", a)) // confirms its grants
        const h2 = yield* makeCoordinatorHost({ config: cfg, holder: "c2" }).pipe(
          Effect.provide(env(store, lease)),
        )
        const refused = yield* h2.heartbeat(join("b"))
        assert.strictEqual(refused.errorCode, "NOT_COORDINATOR")
        yield* TestClock.adjust(20_000)
        yield* Scope.close(scope1, Exit.void) // h1 stops (releases the lease)
        // h2's renew loop (a third of its 6 s lease) elects it: a's deadline is now +30s
        yield* TestClock.adjust(2_000)
        assert.isTrue(yield* h2.isCoordinator)
        yield* TestClock.adjust(25_000) // 47s since a's last heartbeat, 25s since the load
        const steady = yield* h2.heartbeat(steadyOf("a", a))
        assert.strictEqual(steady.errorCode, "NONE")
        assert.strictEqual(steady.memberEpoch, a.memberEpoch)
      }),
  )

  it.effect(
    "takeover: a paused ex-leader's commit fails even when the new leader has handled no heartbeat yet (the election commit alone is enough)",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const lease = makeLease()
        const { paused, freeze, h1, a } = yield* pausableLeader(store, lease)
        assert.deepStrictEqual(
          a.assigned.map((g) => g.shard),
          [0, 1, 2, 3],
        )
        const rev = store.revision(key)
        yield* paused.pause
        freeze()
        // c1 checked its lease, then pauses inside the commit of b's join (holding its lock)
        const zombie = yield* Effect.forkChild(h1.heartbeat(join("b")))
        yield* TestClock.adjust(2_001) // c1's lease expires: it could not renew
        const h2 = yield* makeCoordinatorHost({
          config: cfg,
          holder: "c2",
          leaseTtlMs: 2_000,
        }).pipe(Effect.provide(env(store, lease)))
        assert.isTrue(yield* h2.elect)
        // the takeover committed exactly one batch: the election
        assert.strictEqual(store.revision(key), rev + 1)
        assert.strictEqual(store.auditLog(key).at(-1)?.kind, "CoordinatorElected")
        const elected = Option.getOrThrow(yield* h2.state)
        assert.deepStrictEqual(elected.coordinator, { holder: "c2", leaseToken: 2 })
        // c1 wakes up: its commit (expected revision `rev`) fails the CAS, it steps down
        yield* paused.resume
        const answer = yield* Fiber.join(zombie)
        assert.strictEqual(answer.errorCode, "NOT_COORDINATOR")
        assert.isFalse(yield* h1.isCoordinator)
        assert.strictEqual(store.revision(key), rev + 1)
        // the new leader's memory is the store's state: b never joined, a is served as before
        const s2 = Option.getOrThrow(yield* h2.state)
        assert.isFalse(s2.members.has("b"))
        assert.strictEqual(s2.storeRevision, store.revision(key))
        const steady = yield* h2.heartbeat(steadyOf("a", a))
        assert.strictEqual(steady.errorCode, "NONE")
        assert.deepStrictEqual(steady.assigned, a.assigned)
      }),
  )

  it.effect(
    "rule 32: a host whose lease was taken over commits nothing, even at the store's revision (the Store rewound to it)",
    () =>
      Effect.gen(function* () {
        const lease = makeLease()
        // the store checks each commit's lease fence against the lease table
        const store = Store.makeMemoryUnsafe({ lease })
        const { paused, freeze, h1, a } = yield* pausableLeader(store, lease)
        assert.strictEqual(a.errorCode, "NONE")
        const rev = store.revision(key)
        yield* paused.pause
        freeze()
        // c1 checked its lease, then pauses inside the commit of b's join
        const zombie = yield* Effect.forkChild(h1.heartbeat(join("b")))
        yield* TestClock.adjust(2_001) // c1's lease expires: it could not renew
        // c2 takes the lease; its election commit is lost with a Store
        // failover, so the store's revision is c1's again (docs/protocol.md rule 23)
        const c2 = yield* lease.acquire(key, "c2", 2_000)
        assert.strictEqual(store.revision(key), rev)
        // c1 wakes: its commit is at the right revision, but not under the lease
        yield* paused.resume
        const answer = yield* Fiber.join(zombie)
        assert.strictEqual(answer.errorCode, "NOT_COORDINATOR")
        assert.isFalse(yield* h1.isCoordinator)
        assert.strictEqual(store.revision(key), rev)
        // the lease is c2's still: c1's step-down released nothing of it
        yield* lease.check(c2)
      }),
  )

  it.effect(
    "a deadline firing on a host that lost its lease does nothing and the host steps down",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const { lease, lose } = losableLease()
        // a long lease: the renew loop (every TTL/3) does not run before a's session deadline
        const host = yield* makeCoordinatorHost({
          config: cfg,
          holder: "c1",
          leaseTtlMs: 600_000,
        }).pipe(Effect.provide(env(store, lease)))
        yield* host.heartbeat(join("a"))
        const rev = store.revision(key)
        lose()
        yield* TestClock.adjust(30_001) // a's session deadline passes
        assert.isFalse(yield* host.isCoordinator)
        assert.include(Option.getOrThrow(yield* host.lastError), "lease lost before a deadline")
        assert.strictEqual(store.revision(key), rev) // a was not expired by a host without the lease
        assert.notInclude(
          store.auditLog(key).map((e) => e.kind),
          "MemberExpired",
        )
      }),
  )

  it.effect(
    "election with a lower lease token is refused: the host does not serve and commits nothing",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        // the store already records an election by lease token 5; this host's lease hands out 1
        yield* store.commit(
          key,
          0,
          Coordinator.createGroup(cfg, 0, { holder: "c9", leaseToken: 5 }),
        )
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store)),
        )
        const r = yield* host.heartbeat(join("a"))
        assert.strictEqual(r.errorCode, "NOT_COORDINATOR")
        assert.include(r.errorMessage ?? "", "ElectionRefused")
        assert.isFalse(yield* host.isCoordinator)
        assert.strictEqual(store.revision(key), 1)
      }),
  )

  it.effect(
    "a corrupt stored snapshot: NOT_COORDINATOR with CorruptSnapshot, bytes untouched",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        yield* store.commit(key, 0, Coordinator.createGroup(cfg, 0))
        store.corrupt(key, "not json at all")
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store)),
        )
        const r = yield* host.heartbeat(join("a"))
        assert.strictEqual(r.errorCode, "NOT_COORDINATOR")
        assert.include(r.errorMessage ?? "", "CorruptSnapshot")
        assert.strictEqual(store.raw(key)?.snapshot, "not json at all")
        assert.isFalse(yield* host.isCoordinator)
      }),
  )

  it.effect(
    "a commit checks the lease (a read) and never renews it; the renew loop extends it",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const real = makeLease()
        const calls = { check: 0, renew: 0 }
        const lease: CoordinatorLease.CoordinatorLeaseShape = {
          ...real,
          renew: (g, ttl) =>
            Effect.andThen(
              Effect.sync(() => calls.renew++),
              real.renew(g, ttl),
            ),
          check: (g) =>
            Effect.andThen(
              Effect.sync(() => calls.check++),
              real.check(g),
            ),
        }
        const host = yield* makeCoordinatorHost({ config: cfg, holder: "c1" }).pipe(
          Effect.provide(env(store, lease)),
        )
        const a = yield* host.heartbeat(join("a")) // takeover (renew before the election) + join
        assert.deepStrictEqual(calls, { check: 1, renew: 1 })
        yield* host.heartbeat(steadyOf("a", a)) // confirms a's shards (a commit): a check, no renew
        assert.deepStrictEqual(calls, { check: 2, renew: 1 })
        yield* host.heartbeat(steadyOf("a", a)) // commits nothing: no lease call at all
        assert.deepStrictEqual(calls, { check: 2, renew: 1 })
        // the default lease (twice the 3 s heartbeat interval): renewed every 2 s
        assert.strictEqual(host.leaseTtlMs, 6_000)
        yield* TestClock.adjust(2_000)
        assert.deepStrictEqual(calls, { check: 2, renew: 2 })
      }),
  )

  it.effect(
    "rule 31: a failed grant fence write withholds the grant (pending), the host serves on; the write is retried and its owner noticed",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        let failing = false
        const written: Array<string> = []
        const fence: OwnerFence.OwnerFenceShape = {
          read: () => Effect.succeed([]),
          write: (k, fences) =>
            failing
              ? Effect.fail(
                  new FenceWriteFailed({
                    stream: k.stream,
                    group: k.group,
                    message: "storage down",
                  }),
                )
              : Effect.sync(() => written.push(...fences.map((f) => `${f.shard}:${f.token}`))),
        }
        const notices: Array<string> = []
        const host = yield* makeCoordinatorHost({
          config: cfg,
          holder: "c1",
          onNotice: (id) => Effect.sync(() => notices.push(id)),
        }).pipe(Effect.provide(ports(store, makeLease(), fence)))
        yield* host.heartbeat(join("a"))
        failing = true
        written.length = 0
        const r = yield* host.heartbeat(join("b")) // b's join moves shards: a revoke, no grant yet
        assert.strictEqual(r.errorCode, "NONE")
        const leave = yield* host.heartbeat(request({ memberId: "a", memberEpoch: -1 }))
        assert.strictEqual(leave.errorCode, "NONE") // a leave grants nothing, so fences nothing
        const beat = () =>
          host.heartbeat(
            request({
              memberId: "b",
              memberEpoch: r.memberEpoch,
              assignmentEpoch: r.assignmentEpoch,
            }),
          )
        const grant = yield* beat()
        // every grant's write failed: none reaches b, all are pending; the host still serves
        assert.strictEqual(grant.errorCode, "NONE")
        assert.deepStrictEqual(grant.assigned, [])
        assert.deepStrictEqual(grant.pending, [0, 1, 2, 3])
        assert.isTrue(yield* host.isCoordinator)
        const granted = Option.getOrThrow(yield* host.state).current
        assert.isTrue(granted.every((o) => o?.memberId === "b" && !o.confirmed))
        // while storage still fails, b's answers keep withholding them
        const again = yield* beat()
        assert.deepStrictEqual(again.assigned, [])
        assert.deepStrictEqual(again.pending, [0, 1, 2, 3])
        // storage is back: b's next answer still withholds them and retries the writes
        failing = false
        notices.length = 0
        const retried = yield* beat()
        assert.deepStrictEqual(retried.assigned, [])
        for (let i = 0; i < 100 && notices.length === 0; i++) yield* Effect.yieldNow
        assert.deepStrictEqual(notices, ["b"], "the owner is noticed once its grants are written")
        assert.deepStrictEqual(
          written.sort(),
          granted.map((o, shard) => `${shard}:${o!.token}`).sort(),
        )
        // only now are they b's to read, with the tokens written
        const told = yield* beat()
        assert.deepStrictEqual(
          told.assigned.map((g) => `${g.shard}:${g.token}`).sort(),
          written.sort(),
        )
        assert.deepStrictEqual(told.pending, [])
      }),
  )

  it.effect(
    "groups are (stream, group): the same group name on two streams has its own lease, store entry, host and transport route",
    () =>
      Effect.gen(function* () {
        const store = makeStore()
        const lease = makeLease()
        const { transport } = yield* TestingTransport.makeMemory({ timeoutMs: 1_000 })
        const payments = { ...cfg, stream: "payments" }
        const hostOf = (config: typeof cfg, holder: string) =>
          makeCoordinatorHost({ config, holder }).pipe(Effect.provide(env(store, lease)))
        const hOrders = yield* hostOf(cfg, "c1")
        const hPayments = yield* hostOf(payments, "c2") // another holder: not blocked by c1's lease
        yield* transport.serve(hOrders.key, hOrders.heartbeat)
        yield* transport.serve(hPayments.key, hPayments.heartbeat)
        assert.deepStrictEqual(hPayments.key, { stream: "payments", group: "g" })
        const onOrders = yield* transport.heartbeat(join("a"))
        const onPayments = yield* transport.heartbeat({ ...join("z"), stream: "payments" })
        yield* transport.heartbeat({ ...join("y"), stream: "payments" })
        assert.strictEqual(onOrders.errorCode, "NONE")
        assert.strictEqual(onPayments.errorCode, "NONE")
        assert.isTrue(yield* hOrders.isCoordinator)
        assert.isTrue(yield* hPayments.isCoordinator)
        const sOrders = Option.getOrThrow(yield* hOrders.state)
        const sPayments = Option.getOrThrow(yield* hPayments.state)
        assert.deepStrictEqual([...sOrders.members.keys()], ["a"])
        assert.deepStrictEqual([...sPayments.members.keys()].sort(), ["y", "z"])
        // one store, two entries with their own revisions; two leases, each with token 1
        assert.strictEqual(store.revision(key), 2)
        assert.strictEqual(store.revision(hPayments.key), 3)
        assert.deepStrictEqual(sOrders.coordinator, { holder: "c1", leaseToken: 1 })
        assert.deepStrictEqual(sPayments.coordinator, { holder: "c2", leaseToken: 1 })
        // a request for one group never reaches the other's host
        const wrong = yield* hOrders.heartbeat({ ...join("q"), stream: "payments" })
        assert.strictEqual(wrong.errorCode, "INVALID_REQUEST")
        assert.strictEqual(store.revision(key), 2)
      }),
  )

  it.effect("bad GroupConfig is a typed error", () =>
    Effect.gen(function* () {
      const err = yield* Effect.flip(
        makeCoordinatorHost({ config: { ...cfg, heartbeatIntervalMs: 60_000 }, holder: "c1" }).pipe(
          Effect.provide(env(makeStore())),
        ),
      )
      assert.strictEqual(err._tag, "InvalidGroupConfig")
    }),
  )
})

describe("following the stream's layout", () => {
  // sessionTimeoutMs 30 s: the lease renews every 10 s
  const withLayouts = (store: Store.StoreShape, layouts: StreamLayouts.StreamLayoutsShape) =>
    Layer.merge(env(store), Layer.succeed(StreamLayouts.StreamLayouts, layouts))
  const generationAfter = (layoutPollMs: number | undefined, waitMs: number) =>
    Effect.gen(function* () {
      const store = makeStore()
      const layouts = yield* StreamLayouts.makeMemory
      const host = yield* makeCoordinatorHost({
        config: cfg,
        holder: "c1",
        ...(layoutPollMs === undefined ? {} : { layoutPollMs }),
      }).pipe(Effect.provide(withLayouts(store, layouts)))
      assert.strictEqual((yield* host.heartbeat(join("a"))).errorCode, "NONE")
      yield* Layout.Reshard.reshardStream(cfg.stream, 8).pipe(
        Effect.provideService(StreamLayouts.StreamLayouts, layouts),
        Effect.provideService(ShardStreams.ShardStreams, yield* ShardStreams.makeMemory),
      )
      yield* TestClock.adjust(waitMs)
      return Option.getOrThrow(yield* host.state).layout.generation
    })

  it.effect(
    "a reshard is followed within layoutPollMs (1 s by default), not at the next renewal",
    () =>
      Effect.gen(function* () {
        assert.strictEqual(yield* generationAfter(undefined, 999), 0)
        assert.strictEqual(yield* generationAfter(undefined, 1_000), 1)
        assert.strictEqual(yield* generationAfter(250, 250), 1)
      }).pipe(Effect.scoped),
  )

  it.effect("a poll period above the renewal period leaves it to the renewals", () =>
    Effect.gen(function* () {
      // renewals every 2 s (a third of the default 6 s lease)
      assert.strictEqual(yield* generationAfter(60_000, 1_999), 0)
      assert.strictEqual(yield* generationAfter(60_000, 2_000), 1)
    }).pipe(Effect.scoped),
  )
})

describe("makeCoordinatorHostAsync", () => {
  it("serves heartbeats with promises", async () => {
    const fenced: Array<number> = []
    const host = await makeCoordinatorHostAsync({
      config: cfg,
      holder: "c1",
      fence: async (fences) => {
        fenced.push(...fences.map((f) => f.shard))
      },
    })
    try {
      const r = await host.heartbeat({ ...join("a"), memberInfo: info("a") })
      assert.strictEqual(r.errorCode, "NONE")
      assert.deepStrictEqual(fenced, [0, 1, 2, 3])
      assert.strictEqual((await host.monitor())?.memberCount, 1)
    } finally {
      await host.close()
    }
  })
})
