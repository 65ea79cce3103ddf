/**
 * Conservation property of the memory data plane: under random appends,
 * reads, acks, nacks, claims, dead-letters and owner changes (with stale
 * tokens), every appended entry is at every moment exactly one of:
 * undelivered, pending (with one consumer), acknowledged, or dead-lettered.
 * Never lost, never both.
 */
import { Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { ShardStreams } from "../src/index.js"

const stream = "s"
const shard = 0
const group = "g"
const at = { stream, shard, group }

type Op =
  | { readonly k: "append" }
  | {
      readonly k: "read"
      readonly consumer: number
      readonly token: number
      readonly count: number
    }
  | { readonly k: "ack"; readonly pick: number; readonly token: number; readonly del: boolean }
  | { readonly k: "nack"; readonly pick: number; readonly token: number }
  | { readonly k: "claim"; readonly consumer: number; readonly token: number }
  | { readonly k: "dlq"; readonly pick: number; readonly token: number }
  | { readonly k: "owner"; readonly token: number }

const token = fc.integer({ min: 0, max: 4 })
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.constant({ k: "append" as const }),
  fc.record({
    k: fc.constant("read" as const),
    consumer: fc.integer({ min: 0, max: 2 }),
    token,
    count: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({ k: fc.constant("ack" as const), pick: fc.nat(), token, del: fc.boolean() }),
  fc.record({ k: fc.constant("nack" as const), pick: fc.nat(), token }),
  fc.record({ k: fc.constant("claim" as const), consumer: fc.integer({ min: 0, max: 2 }), token }),
  fc.record({ k: fc.constant("dlq" as const), pick: fc.nat(), token }),
  fc.record({ k: fc.constant("owner" as const), token }),
)

const run = (ops: ReadonlyArray<Op>) =>
  Effect.gen(function* () {
    const s = yield* ShardStreams.ShardStreams
    const appended: Array<string> = []
    const acked = new Set<string>()
    for (const op of ops) {
      const pendingBefore = yield* s.pending(at)
      const pick = (n: number) =>
        pendingBefore.length === 0 ? "0-1" : pendingBefore[n % pendingBefore.length]!.id
      const current = yield* s.ownerToken(at)
      switch (op.k) {
        case "append":
          appended.push(yield* s.append(stream, shard, { n: String(appended.length) }))
          break
        case "read":
          yield* Effect.ignore(
            s.read({ ...at, consumer: `c${op.consumer}`, token: op.token, count: op.count }),
          )
          break
        case "ack": {
          const id = pick(op.pick)
          const result = yield* Effect.result(
            s.ack({ ...at, token: op.token, ids: [id], mode: op.del ? "xackdel" : "ack" }),
          )
          expect(result._tag === "Success").toBe(op.token >= current)
          if (result._tag === "Success" && pendingBefore.some((p) => p.id === id)) acked.add(id)
          break
        }
        case "nack":
          yield* Effect.ignore(s.nack({ ...at, token: op.token, id: pick(op.pick) }))
          break
        case "claim":
          yield* Effect.ignore(
            s.claimPending({
              ...at,
              token: op.token,
              consumer: `c${op.consumer}`,
              minIdleMs: 0,
              count: 2,
            }),
          )
          break
        case "dlq":
          yield* Effect.ignore(
            s.deadLetter({ ...at, token: op.token, id: pick(op.pick), reason: "r" }),
          )
          break
        case "owner":
          yield* Effect.ignore(s.setOwnerToken({ ...at, token: op.token }))
          break
      }

      // --- conservation, after every operation ---
      const pending = new Map((yield* s.pending(at)).map((p) => [p.id, p]))
      const dlq = (yield* s.range(ShardStreams.deadLetterKey(stream, shard))).map(
        (e) => e.fields[ShardStreams.DeadLetterFields.originalId]!,
      )
      const info = yield* s.info(stream, shard)
      const lastDelivered = info.groups.find((g) => g.name === group)?.lastDeliveredId ?? "0-0"
      const undelivered = (id: string) => {
        const [a, b] = id.split("-").map(Number) as [number, number]
        const [c, d] = lastDelivered.split("-").map(Number) as [number, number]
        return a !== c ? a > c : b > d
      }
      for (const id of appended) {
        const states =
          Number(undelivered(id)) +
          Number(pending.has(id)) +
          Number(acked.has(id)) +
          dlq.filter((d) => d === id).length
        expect(states, `entry ${id}`).toBe(1)
        if (pending.has(id)) expect(pending.get(id)!.deliveryCount).toBeGreaterThanOrEqual(1)
      }
    }
  }).pipe(Effect.provide(ShardStreams.layerMemory), Effect.runSync)

describe("ShardStreams (memory) conservation", () => {
  it("every entry is exactly one of undelivered, pending, acked or dead-lettered", () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 60 }), (ops) => run(ops)),
      { numRuns: 300 },
    )
  })
})
