/**
 * docs/protocol.md rule 25: a coordinator lease holder serves, or gives the
 * lease up within one renewal. The pure decision (`CandidateRole.decide`) and
 * the candidate that runs it, on the memory transport, through the stall the
 * production-Redis runs met: a serve replaced by another candidate's claim
 * while its host kept (or took again) the lease.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import { TestClock } from "effect/testing"
import * as fc from "fast-check"
import {
  CandidateRole,
  CoordinatorCandidate,
  type CoordinatorLease,
  type HeartbeatResponse,
  LeaseLost,
} from "../src/index.js"
import { Store, CoordinatorTransport as TestingTransport } from "../src/testing.js"
import { config, request } from "./coordinator/harness.js"
import { hostPorts, makeLease } from "./support/hostPorts.js"

// heartbeat 500 ms: the lease is 1,000 ms, renewed (and checked) every 333 ms
const cfg = config({ heartbeatIntervalMs: 500, sessionTimeoutMs: 10_000 })
const key = { stream: cfg.stream, group: cfg.groupId }

const notCoordinator = (memberId: string): HeartbeatResponse => ({
  errorCode: "NOT_COORDINATOR",
  memberId,
  memberEpoch: -1,
  assignmentEpoch: 0,
  assigned: [],
  pending: [],
  heartbeatIntervalMs: 500,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
})

describe("CandidateRole.decide (rule 25)", () => {
  const serving = (leaseToken: number, active: boolean, restarts = 0) => ({
    leaseToken,
    active,
    restarts,
  })
  it("a standby idles, and stops a serve it still runs", () => {
    assert.strictEqual(CandidateRole.decide({ leaseToken: undefined, serving: undefined }), "idle")
    assert.strictEqual(
      CandidateRole.decide({ leaseToken: undefined, serving: serving(3, true) }),
      "stop",
    )
  })
  it("a holder serves under its current term", () => {
    assert.strictEqual(CandidateRole.decide({ leaseToken: 3, serving: undefined }), "serve")
    assert.strictEqual(CandidateRole.decide({ leaseToken: 3, serving: serving(3, true) }), "keep")
  })
  it("a serve from an earlier term is restarted, even while it still answers", () => {
    assert.strictEqual(
      CandidateRole.decide({ leaseToken: 4, serving: serving(3, true, 1) }),
      "restart",
    )
  })
  it("a serve that stopped is restarted once per term, then the holder resigns", () => {
    assert.strictEqual(
      CandidateRole.decide({ leaseToken: 3, serving: serving(3, false, 0) }),
      "restart",
    )
    assert.strictEqual(
      CandidateRole.decide({ leaseToken: 3, serving: serving(3, false, 1) }),
      "resign",
    )
  })
  it("property: a holder never keeps a serve that does not answer or belongs to another term", () => {
    fc.assert(
      fc.property(
        fc.option(fc.nat(20), { nil: undefined }),
        fc.option(
          fc.record({ leaseToken: fc.nat(20), active: fc.boolean(), restarts: fc.nat(3) }),
          {
            nil: undefined,
          },
        ),
        (leaseToken, s) => {
          const action = CandidateRole.decide({ leaseToken, serving: s })
          const servesNow =
            leaseToken !== undefined && s?.active === true && s.leaseToken === leaseToken
          // "keep" exactly when the holder's serve answers under its term
          assert.strictEqual(action === "keep", servesNow)
          // without the lease nothing may run; with it, something always does or it resigns
          if (leaseToken === undefined) assert.include(["idle", "stop"], action)
          else assert.include(["serve", "keep", "restart", "resign"], action)
        },
      ),
    )
  })
})

/** A memory lease whose holder can lose its lease once (a pause past its TTL, seen from outside). */
const lapsingLease = () => {
  const real = makeLease()
  let lapse = false
  const lease: CoordinatorLease.CoordinatorLeaseShape = {
    ...real,
    renew: (g, ttl) => {
      if (!lapse) return real.renew(g, ttl)
      lapse = false
      return Effect.andThen(
        real.release(g),
        Effect.fail(
          new LeaseLost({
            stream: g.key.stream,
            group: g.key.group,
            holder: g.holder,
            token: g.token,
          }),
        ),
      )
    },
  }
  return {
    lease,
    lapse: () => {
      lapse = true
    },
  }
}

const setup = Effect.fnUntraced(function* (lease = makeLease()) {
  const store = Store.makeMemoryUnsafe()
  const { transport } = yield* TestingTransport.makeMemory({ timeoutMs: 50, handoverMs: 0 })
  const ports = hostPorts(store, lease)
  const candidate = (holder: string, over: Partial<CoordinatorCandidate.CandidateOptions> = {}) =>
    CoordinatorCandidate.run({ config: cfg, holder, transport, ...over }).pipe(
      Effect.provide(ports),
    )
  /** One member heartbeat through the transport: its error code, or the transport's failure. */
  const ask = Effect.map(Effect.result(transport.heartbeat(request({ memberId: "a" }))), (r) =>
    r._tag === "Success" ? r.success.errorCode : `${r.failure.reason}`,
  )
  /** Another candidate's serve claims the group and goes away again (it lost the lease). */
  const strayServe = Effect.gen(function* () {
    const s = yield* Scope.make()
    yield* transport
      .serve(key, (raw) => Effect.succeed(notCoordinator(String(raw))))
      .pipe(Scope.provide(s))
    return s
  })
  return { transport, candidate, ask, strayServe }
})

describe("CoordinatorCandidate (rule 25)", () => {
  it.effect("a serve replaced by another candidate's claim: the holder serves again at once", () =>
    Effect.gen(function* () {
      const { candidate, ask, strayServe } = yield* setup()
      const restarts: Array<number> = []
      const a = yield* candidate("a", {
        onRestart: (token) => Effect.sync(() => restarts.push(token)),
      })
      assert.isTrue(a.isServing())
      assert.strictEqual(yield* ask, "NONE")
      // a candidate that held the lease meanwhile claims the group, then stops
      const stray = yield* strayServe
      yield* TestClock.adjust(1)
      yield* Scope.close(stray, Exit.void)
      // the holder kept its lease all along; before rule 25 nobody answered from here on
      yield* TestClock.adjust(400)
      assert.isTrue(a.isServing())
      assert.strictEqual(yield* ask, "NONE")
      assert.strictEqual(restarts.length, 1)
      assert.strictEqual(Option.getOrUndefined(yield* a.host.leaseToken), restarts[0])
    }).pipe(Effect.scoped),
  )

  it.effect("a lease taken again under a new token is served under the new term", () =>
    Effect.gen(function* () {
      const { lease, lapse } = lapsingLease()
      const { candidate, ask } = yield* setup(lease)
      const restarts: Array<number> = []
      // checks far apart: the host's renewal loop takes the lease again in between
      const a = yield* candidate("a", {
        checkEveryMs: 5_000,
        onRestart: (token) => Effect.sync(() => restarts.push(token)),
      })
      const first = Option.getOrThrow(yield* a.host.leaseToken)
      lapse()
      yield* TestClock.adjust(1_000)
      const second = Option.getOrThrow(yield* a.host.leaseToken)
      assert.isAbove(second, first)
      assert.deepStrictEqual(restarts, [])
      yield* TestClock.adjust(5_000)
      assert.deepStrictEqual(restarts, [second])
      assert.strictEqual(yield* ask, "NONE")
    }).pipe(Effect.scoped),
  )

  it.effect(
    "a holder whose serve is gone again within its term resigns, and a standby takes over",
    () =>
      Effect.gen(function* () {
        const { candidate, ask, strayServe } = yield* setup()
        const roles: Array<string> = []
        const a = yield* candidate("a", {
          onRole: (r) => Effect.sync(() => roles.push(`a:${r}`)),
        })
        const b = yield* candidate("b", {
          onRole: (r) => Effect.sync(() => roles.push(`b:${r}`)),
        })
        assert.isTrue(a.isServing())
        assert.isFalse(b.isServing())
        yield* strayServe // replaced once: a serves again
        yield* TestClock.adjust(1)
        assert.isTrue(a.isServing())
        yield* strayServe // and again in the same term: a resigns
        yield* TestClock.adjust(1)
        assert.isFalse(a.isServing())
        assert.isTrue(Option.isNone(yield* a.host.leaseToken))
        yield* TestClock.adjust(1_000)
        assert.isTrue(b.isServing())
        assert.strictEqual(yield* ask, "NONE")
        assert.deepStrictEqual(roles, ["a:coordinator", "a:standby", "b:coordinator"])
      }).pipe(Effect.scoped),
  )
})
