/**
 * End-to-end (in-memory): CoordinatorHost + memory Store/Lease + memory
 * CoordinatorTransport + memory ShardStreams + N MemberMachines, driven by
 * `cluster.ts` on effect's TestClock. See docs/protocol.md, "End-to-end
 * (in-memory)".
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { type CoordinatorLease, MemberMachine, StaleOwner } from "../../src/index.js"
import { pausableStore } from "../support/pausableStore.js"
import {
  type Cluster,
  group,
  makeCluster,
  overlappingOwnership,
  revokeBeforeAssign,
  stream,
} from "./cluster.js"

const counts = (c: Cluster) =>
  [...c.ownership().values()].map((shards) => shards.length).sort((a, b) => a - b)

/** Every produced message acked exactly once and no entry left pending anywhere. */
const assertExactlyOnceAcked = (c: Cluster, shardCount: number) =>
  Effect.gen(function* () {
    assert.isTrue(c.produced.length > 0)
    const wrong = c.produced.filter((k) => c.acked.get(k) !== 1)
    assert.deepStrictEqual(wrong, [], "messages not acked exactly once")
    for (let shard = 0; shard < shardCount; shard++) {
      const pending = yield* c.streams.pending({ stream, shard, group })
      assert.deepStrictEqual(pending, [], `shard ${shard} has pending entries`)
    }
  })

const duplicates = (c: Cluster) =>
  [...c.handled.entries()].filter(([, list]) => list.length > 1).map(([k]) => k)

/** The end-to-end safety tail: one reader per shard at a time, nothing lost, nothing handled twice. */
const assertSafeAndComplete = (c: Cluster) =>
  Effect.gen(function* () {
    assert.deepStrictEqual(overlappingOwnership(c.events), [])
    yield* assertExactlyOnceAcked(c, 12)
    assert.deepStrictEqual(duplicates(c), [])
  })

/** Shard -> token, from each live member's machine. */
const tokens = (c: Cluster) => {
  const out = new Map<number, { member: string; token: number }>()
  for (const m of c.members.values()) {
    if (m.crashed || m.left) continue
    for (const shard of MemberMachine.ownedShards(m.machine))
      out.set(shard, { member: m.id, token: MemberMachine.tokenOf(m.machine, shard)! })
  }
  return out
}

const threeMembers = (shardCount = 12, extra: Partial<Parameters<typeof makeCluster>[0]> = {}) =>
  Effect.gen(function* () {
    const c = yield* makeCluster({ shardCount, ...extra })
    const { host } = yield* c.startHost("c1")
    yield* c.serve(host)
    for (const id of ["a", "b", "c"]) yield* c.addMember(id)
    yield* c.runUntilSettled(host)
    return { c, host }
  })

describe("end-to-end (in-memory)", () => {
  it.effect(
    "3 members, 12 shards, 300 messages: every message acked exactly once, one reader per shard, 4/4/4",
    () =>
      Effect.gen(function* () {
        const { c, host } = yield* threeMembers()
        assert.deepStrictEqual(counts(c), [4, 4, 4])
        yield* c.produce(300)
        yield* c.runUntil("all acked", c.allAcked)
        yield* c.runRounds(5)
        yield* assertExactlyOnceAcked(c, 12)
        assert.deepStrictEqual(duplicates(c), [])
        assert.deepStrictEqual(overlappingOwnership(c.events), [])
        assert.deepStrictEqual(counts(c), [4, 4, 4])
        // members and coordinator agree on the owners
        const state = yield* c.coordinatorState(host)
        for (const [shard, { member, token }] of tokens(c)) {
          assert.strictEqual(state.current[shard]?.memberId, member)
          assert.strictEqual(state.current[shard]?.token, token)
          assert.strictEqual(yield* c.streams.ownerToken({ stream, shard, group }), token)
        }
      }),
  )

  it.effect(
    "scale out while messages flow: revoke-before-assign holds end to end, nothing lost, no duplicates",
    () =>
      Effect.gen(function* () {
        const { c, host } = yield* threeMembers()
        const before = tokens(c)
        const mark = c.events.length
        yield* c.runRounds(10, () => c.produce(12))
        yield* c.addMember("d")
        yield* c.runRounds(40, () => c.produce(12))
        yield* c.runUntilSettled(host)
        yield* c.runUntil("all acked", c.allAcked)
        assert.deepStrictEqual(counts(c), [3, 3, 3, 3])
        const { handoffs: all, problems } = revokeBeforeAssign(c.events)
        assert.deepStrictEqual(problems, [])
        const handoffs = all.filter((h) => h.seq >= mark)
        // exactly the 3 shards d got moved, each after its old owner drained and reported REVOKED
        assert.strictEqual(handoffs.length, 3)
        for (const h of handoffs) {
          assert.strictEqual(h.to, "d")
          assert.strictEqual(before.get(h.shard)?.member, h.from)
        }
        // d's tokens are new (higher) fences
        for (const [shard, { member, token }] of tokens(c))
          if (member === "d") assert.isAbove(token, before.get(shard)!.token)
        yield* assertSafeAndComplete(c)
      }),
  )

  it.effect(
    "crash: the silent member expires, the new owner claims its pending entries first, its stale token is refused",
    () =>
      Effect.gen(function* () {
        const { c, host } = yield* threeMembers()
        yield* c.produce(120)
        const hasInflight = () =>
          [...c.members.get("c")!.loops.values()].some((l) => l.inflight !== undefined)
        yield* c.runUntil("c has a batch in flight", hasInflight)
        const crashedAt = c.events.length
        const { inflight, tokens: stale } = c.crash("c")
        assert.isAbove(inflight.length, 0)
        yield* c.runRounds(20, () => c.produce(6))
        // not expired before the session timeout (6 s; 2 s passed)
        const early = yield* c.coordinatorState(host)
        assert.isTrue(early.members.has("c"))
        yield* c.runUntilSettled(host)
        yield* c.runUntil("all acked", c.allAcked)
        const state = yield* c.coordinatorState(host)
        assert.isFalse(state.members.has("c"))
        assert.deepStrictEqual(counts(c), [6, 6])
        // the crashed member's in-flight entries: handled once, by the new owner, redelivered by a claim
        for (const key of inflight) {
          const list = c.handled.get(key)!
          assert.strictEqual(list.length, 1, key)
          assert.notStrictEqual(list[0]!.member, "c")
          assert.isAtLeast(list[0]!.deliveryCount, 2)
        }
        // on each of c's shards, the new owner's first data access is a claim when c left entries pending
        const pendingShards = new Set(inflight.map((k) => Number(k.split("/")[0])))
        for (const shard of stale.keys()) {
          const first = c.events.find(
            (e) =>
              e.seq > crashedAt &&
              e.shard === shard &&
              e.member !== "c" &&
              (e.kind === "read" || e.kind === "claim"),
          )
          assert.isDefined(first)
          if (pendingShards.has(shard)) assert.strictEqual(first!.kind, "claim")
        }
        // late ack and read with c's stale token are refused by the data plane
        const [shard, token] = [...stale.entries()][0]!
        const id = inflight.find((k) => k.startsWith(`${shard}/`))?.split("/")[1] ?? "0-1"
        const lateAck = yield* Effect.flip(
          c.streams.ack({ stream, shard, group, token, ids: [id], mode: "ack" }),
        )
        assert.instanceOf(lateAck, StaleOwner)
        const lateRead = yield* Effect.flip(
          c.streams.read({ stream, shard, group, token, consumer: "c", count: 10 }),
        )
        assert.instanceOf(lateRead, StaleOwner)
        assert.deepStrictEqual(overlappingOwnership(c.events), [])
        yield* assertExactlyOnceAcked(c, 12)
      }),
  )

  it.effect(
    "a lost heartbeat response triggers no rebalance: epochs, owners and tokens unchanged",
    () =>
      Effect.gen(function* () {
        const { c, host } = yield* threeMembers()
        const before = tokens(c)
        const s0 = yield* c.coordinatorState(host)
        const epochs = { group: s0.groupEpoch, assignment: s0.assignmentEpoch }
        const mark = c.events.length
        yield* c.faults.dropResponses(1)
        yield* c.runRounds(30, () => c.produce(4))
        yield* c.runUntil("all acked", c.allAcked)
        const after = c.events.slice(mark)
        assert.strictEqual(after.filter((e) => e.kind === "hbFailed").length, 1)
        assert.deepStrictEqual(
          after.filter((e) => ["start", "drained", "stopAll"].includes(e.kind)),
          [],
        )
        const s1 = yield* c.coordinatorState(host)
        assert.deepStrictEqual({ group: s1.groupEpoch, assignment: s1.assignmentEpoch }, epochs)
        assert.deepStrictEqual(tokens(c), before)
        yield* assertExactlyOnceAcked(c, 12)
        assert.deepStrictEqual(duplicates(c), [])
      }),
  )

  it.effect(
    "graceful leave: the leaver drains, sends epoch -1, its shards move with no duplicates",
    () =>
      Effect.gen(function* () {
        const { c, host } = yield* threeMembers()
        const before = tokens(c)
        const mark = c.events.length
        yield* c.runRounds(10, () => c.produce(12))
        c.leave("c")
        yield* c.runRounds(30, () => c.produce(12))
        yield* c.runUntilSettled(host)
        yield* c.runUntil("all acked", c.allAcked)
        assert.isTrue(c.members.get("c")!.left)
        assert.isTrue(c.events.some((e) => e.member === "c" && e.kind === "leaveSent"))
        // c closed its loops by draining, never by dropping them
        assert.isFalse(
          c.events.some((e) => e.member === "c" && e.kind === "stopAll" && e.shard !== undefined),
        )
        const state = yield* c.coordinatorState(host)
        assert.isFalse(state.members.has("c"))
        assert.deepStrictEqual(counts(c), [6, 6])
        const { handoffs, problems } = revokeBeforeAssign(c.events)
        assert.deepStrictEqual(problems, [])
        assert.deepStrictEqual(
          handoffs
            .filter((h) => h.seq >= mark)
            .map((h) => h.shard)
            .sort((a, b) => a - b),
          [...before].filter(([, o]) => o.member === "c").map(([s]) => s),
        )
        yield* assertSafeAndComplete(c)
      }),
  )

  it.effect(
    "coordinator failover: the standby takes the lease and commits only its election, members keep shards and tokens, the paused ex-leader's stale commit fails before the new leader committed anything else",
    () =>
      Effect.gen(function* () {
        const c = yield* makeCluster({ shardCount: 12, leaseTtlMs: 2_000 })
        // c1's store: the shared memory store, with commits that can be held (a paused
        // process); paused, it renews nothing either (its renewals run on a fiber of
        // their own, never behind its lock: docs/protocol.md rule 20)
        const paused = pausableStore(c.store)
        let frozen = false
        const c1Lease: CoordinatorLease.CoordinatorLeaseShape = {
          ...c.lease,
          renew: (grant, ttl) => (frozen ? Effect.succeed(grant) : c.lease.renew(grant, ttl)),
        }
        const { host: h1 } = yield* c.startHost("c1", paused.store, c1Lease)
        yield* c.serve(h1)
        for (const id of ["a", "b", "c"]) yield* c.addMember(id)
        yield* c.runUntilSettled(h1)
        const { host: h2 } = yield* c.startHost("c2")
        yield* c.runRounds(10, () => c.produce(12))
        assert.isTrue(yield* h1.isCoordinator)
        assert.isFalse(yield* h2.isCoordinator)
        const before = tokens(c)
        const mark = c.events.length

        // c1 pauses inside a commit (it checked its lease, holds its lock: no renewals);
        // requests now reach c2
        const revision = c.store.revision(c.key)
        yield* paused.pause
        frozen = true
        const zombie = yield* Effect.forkChild(
          h1.heartbeat({
            group,
            stream,
            memberId: "zombie",
            incarnation: 1,
            seq: 1,
            memberEpoch: 0,
            assignmentEpoch: 0,
            metadataVersion: 0,
            ownedShards: [],
            revokingShards: [],
            memberInfo: { consumerName: "zombie", host: "10.0.0.9" },
          }),
        )
        yield* c.serve(h2)
        yield* c.runRounds(5, () => c.produce(12))
        yield* c.runUntilSettled(h2)
        assert.isTrue(yield* h2.isCoordinator)
        // members kept their shards with the same tokens; nobody dropped or moved a shard
        assert.deepStrictEqual(tokens(c), before)
        assert.deepStrictEqual(
          c.events.slice(mark).filter((e) => ["start", "drained", "stopAll"].includes(e.kind)),
          [],
        )
        // c2 committed exactly one batch, its election: steady heartbeats commit nothing
        assert.strictEqual(c.store.revision(c.key), revision + 1)
        assert.deepStrictEqual(
          c.store
            .auditLog(c.key)
            .slice(-1)
            .map((e) => e.kind),
          ["CoordinatorElected"],
        )
        // c1 wakes up before c2 committed anything else: the election alone makes its
        // commit from the stale snapshot fail; it answers NOT_COORDINATOR
        yield* paused.resume
        const answer = yield* Fiber.join(zombie)
        assert.strictEqual(answer.errorCode, "NOT_COORDINATOR")
        assert.isFalse(yield* h1.isCoordinator)
        assert.isTrue(Option.isNone(yield* h1.state))
        assert.strictEqual(c.store.revision(c.key), revision + 1)
        const s2 = yield* c.coordinatorState(h2)
        assert.isFalse(s2.members.has("zombie"))
        assert.strictEqual(s2.storeRevision, revision + 1)
        // c2 goes on serving from memory that matches the store (a new member joins through it)
        yield* c.addMember("d")
        yield* c.runRounds(20, () => c.produce(12))
        yield* c.runUntilSettled(h2)
        // processing continued: nothing lost, no duplicates
        yield* c.runUntil("all acked", c.allAcked)
        assert.deepStrictEqual(counts(c), [3, 3, 3, 3])
        assert.deepStrictEqual(revokeBeforeAssign(c.events).problems, [])
        yield* assertSafeAndComplete(c)
      }),
  )
})

describe("end-to-end: several groups on one stream (fan-out)", () => {
  it.effect(
    "two groups consume one stream: each handles every message exactly once, neither is ever fenced by the other",
    () =>
      Effect.gen(function* () {
        const billing = yield* makeCluster({ shardCount: 12, group: "billing" })
        const search = yield* makeCluster({
          shardCount: 12,
          group: "search",
          shared: billing.shared,
        })
        // one process coordinates both groups: per-group leases, so the same holder wins both
        const { host: hBilling } = yield* billing.startHost("pod-1")
        const { host: hSearch } = yield* search.startHost("pod-1")
        yield* billing.serve(hBilling)
        yield* search.serve(hSearch)
        // the same member ids in both groups (one pod runs a member of each)
        for (const id of ["a", "b", "c"]) {
          yield* billing.addMember(id)
          yield* search.addMember(id)
        }
        const round = Effect.andThen(billing.tick, search.drive)
        const until = (what: string, done: Effect.Effect<boolean>) =>
          Effect.gen(function* () {
            for (let i = 0; i < 1_000; i++) {
              if (yield* done) return
              yield* round
            }
            return yield* Effect.die(new Error(`not reached: ${what}`))
          })
        const bothSettled = Effect.map(
          Effect.all([billing.settled(hBilling), search.settled(hSearch)]),
          ([x, y]) => x && y,
        )
        yield* until("both settled", bothSettled)
        for (let i = 0; i < 10; i++) yield* Effect.andThen(billing.produce(12), round)
        // billing scales out: its tokens move ahead of search's on the shards d takes
        yield* billing.addMember("d")
        for (let i = 0; i < 40; i++) yield* Effect.andThen(billing.produce(12), round)
        yield* until("both settled again", bothSettled)
        yield* until(
          "both groups acked everything",
          Effect.sync(() => billing.allAcked() && search.allAcked()),
        )
        assert.deepStrictEqual(counts(billing), [3, 3, 3, 3])
        assert.deepStrictEqual(counts(search), [4, 4, 4])
        for (const [c, host] of [
          [billing, hBilling],
          [search, hSearch],
        ] as const) {
          // every message handled and acked exactly once by this group; nothing pending
          assert.strictEqual(c.produced.length, 600)
          assert.deepStrictEqual(
            c.produced.filter((k) => c.acked.get(k) !== 1),
            [],
          )
          assert.deepStrictEqual(duplicates(c), [])
          for (let shard = 0; shard < 12; shard++)
            assert.deepStrictEqual(
              yield* c.streams.pending({ stream, shard, group: c.key.group }),
              [],
            )
          assert.deepStrictEqual(overlappingOwnership(c.events), [])
          assert.deepStrictEqual(revokeBeforeAssign(c.events).problems, [])
          // never refused by the data plane, never a failed fence write (no step-down)
          assert.deepStrictEqual(
            c.events.filter((e) => e.kind === "staleOwner"),
            [],
          )
          assert.isTrue(yield* host.isCoordinator)
          assert.isTrue(Option.isNone(yield* host.lastError))
          // storage tokens are this group's coordinator's tokens
          const state = yield* c.coordinatorState(host)
          for (const [shard, { token }] of tokens(c)) {
            assert.strictEqual(state.current[shard]?.token, token)
            assert.strictEqual(
              yield* c.streams.ownerToken({ stream, shard, group: c.key.group }),
              token,
            )
          }
        }
        // the groups' tokens did diverge (otherwise this proves little)
        const diverged = [...tokens(billing)].some(
          ([shard, { token }]) => tokens(search).get(shard)?.token !== token,
        )
        assert.isTrue(diverged)
      }),
  )
})
