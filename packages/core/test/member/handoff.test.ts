/**
 * The member machine driven over the memory transport and data plane, with a
 * toy coordinator (the real one lives in the coordinator module): shard 0
 * moves from A to B by revoke-before-assign; B takes over A's pending entries;
 * A's late ack is refused; a lost response costs nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import type { HeartbeatResponse } from "../../src/index.js"
import { HeartbeatRequest, MemberMachine, ShardStreams } from "../../src/index.js"
import { CoordinatorTransport } from "../../src/testing.js"

const group = "g"
const stream = "orders"

/** Toy coordinator for one shard: first member owns it; a second member gets it after a REVOKED. */
const makeToyCoordinator = (streams: ShardStreams.ShardStreams["Service"]) => {
  const epochs = new Map<string, number>()
  let owner: string | undefined
  let target: string | undefined
  let token = 0
  let assignmentEpoch = 0
  const handler = (raw: unknown) =>
    Effect.gen(function* () {
      const req = yield* Schema.decodeUnknownEffect(HeartbeatRequest)(raw).pipe(Effect.orDie)
      if (req.memberEpoch === 0 && !epochs.has(req.memberId)) {
        epochs.set(req.memberId, 1)
        if (target === undefined) {
          target = req.memberId
        } else {
          target = req.memberId // rebalance: move the shard to the newest member
          assignmentEpoch++
        }
      }
      const revoked = req.revokingShards.some((r) => r.shard === 0 && r.state === "REVOKED")
      if (revoked && owner === req.memberId) owner = undefined
      if (owner === undefined && target !== undefined) {
        owner = target
        token++
        yield* streams.setOwnerToken({ stream, shard: 0, group, token }).pipe(Effect.orDie)
      }
      const mine = owner === req.memberId && target === req.memberId
      const response: HeartbeatResponse = {
        errorCode: "NONE",
        memberId: req.memberId,
        memberEpoch: epochs.get(req.memberId) ?? 1,
        assignmentEpoch,
        assigned: mine ? [{ shard: 0, token }] : [],
        pending: target === req.memberId && !mine ? [0] : [],
        heartbeatIntervalMs: 1_000,
        sessionTimeoutMs: 10_000,
        rebalanceTimeoutMs: 10_000,
      }
      return response
    })
  return { handler }
}

const config = (memberId: string): MemberMachine.MemberConfig => ({
  group,
  stream,
  memberId,
  incarnation: 1,
  memberInfo: { consumerName: memberId, host: "h" },
  safetyMarginMs: 2_000,
})

describe("member handoff over the memory ports", () => {
  it.effect("revoke-before-assign, takeover of pending entries, stale ack refused", () =>
    Effect.gen(function* () {
      const transport = yield* CoordinatorTransport.CoordinatorTransport
      const faults = yield* CoordinatorTransport.CoordinatorTransportFaults
      const streams = yield* ShardStreams.ShardStreams
      yield* transport.serve({ stream, group }, makeToyCoordinator(streams).handler)

      const reading = new Map<string, number>() // `${member}` -> token while reading shard 0
      const a = MemberMachine.make(config("a"), 0)
      const b = MemberMachine.make(config("b"), 0)
      const machines = { a, b } as const

      // A tiny runtime: executes commands; a stop drains at once (no in-flight work).
      const run = (
        id: "a" | "b",
        commands: ReadonlyArray<MemberMachine.MemberCommand>,
      ): Effect.Effect<void> =>
        Effect.gen(function* () {
          const state = machines[id]
          for (const command of commands) {
            switch (command._tag) {
              case "StartShard":
                reading.set(id, command.token)
                yield* run(id, MemberMachine.step(state, { _tag: "ShardStarted", shard: 0 }))
                break
              case "StopShard":
                reading.delete(id)
                yield* run(id, MemberMachine.step(state, { _tag: "ShardDrained", shard: 0 }))
                break
              case "StopAllShards":
                reading.delete(id)
                break
              case "SendHeartbeat":
                yield* heartbeat(id)
                break
              default:
                break
            }
          }
        })
      const heartbeat = (id: "a" | "b"): Effect.Effect<void> =>
        Effect.gen(function* () {
          const state = machines[id]
          const { seq, request } = MemberMachine.nextRequest(state, 0)
          const result = yield* Effect.result(transport.heartbeat(request))
          const event: MemberMachine.MemberEvent =
            result._tag === "Success"
              ? { _tag: "ResponseReceived", seq, response: result.success, now: 0 }
              : { _tag: "HeartbeatFailed", seq, now: 0 }
          yield* run(id, MemberMachine.step(state, event))
        })

      // A joins and reads shard 0 with token 1
      yield* heartbeat("a")
      assert.strictEqual(reading.get("a"), 1)
      for (const k of ["x", "y"]) yield* streams.append(stream, 0, { k })
      const [x] = yield* streams.read({
        stream,
        shard: 0,
        group,
        consumer: "a",
        token: 1,
        count: 1,
      })

      // B joins: shard 0 is pending for B; B must not read it yet
      yield* heartbeat("b")
      assert.isFalse(reading.has("b"))
      assert.deepStrictEqual(b.pending, [0])

      // A's next heartbeat is answered "shard removed", but the answer is lost:
      // A keeps reading (safely: B may not start yet) and just retries.
      yield* faults.dropResponses(1)
      yield* heartbeat("a")
      assert.strictEqual(a.failures, 1)
      assert.strictEqual(reading.get("a"), 1)
      assert.isFalse(reading.has("b"))
      // The retry: stop, drain, report REVOKED, accepted.
      yield* heartbeat("a")
      assert.isFalse(reading.has("a"))
      assert.deepStrictEqual(MemberMachine.buildRequest(a).revokingShards, [])
      yield* heartbeat("b") // B now gets it with token 2
      assert.strictEqual(reading.get("b"), 2)

      // A's late ack of "x" is refused; B takes "x" over, then reads "y"
      const stale = yield* Effect.flip(
        streams.ack({ stream, shard: 0, group, token: 1, ids: [x!.id], mode: "ack" }),
      )
      assert.strictEqual(stale._tag, "StaleOwner")
      const claimed = yield* streams.claimPending({
        stream,
        shard: 0,
        group,
        token: 2,
        consumer: "b",
        minIdleMs: 0,
        count: 10,
      })
      assert.deepStrictEqual(
        claimed.messages.map((m) => [m.fields.k, m.deliveryCount]),
        [["x", 2]],
      )
      const fresh = yield* streams.read({
        stream,
        shard: 0,
        group,
        consumer: "b",
        token: 2,
        count: 10,
      })
      assert.deepStrictEqual(
        fresh.map((m) => m.fields.k),
        ["y"],
      )
    }).pipe(
      Effect.provide(
        Layer.merge(
          CoordinatorTransport.layerMemoryWith({ timeoutMs: 0 }),
          ShardStreams.layerMemory,
        ),
      ),
    ),
  )
})
