/**
 * Conservation property of the memory data plane: under random appends,
 * reads, acks (ack and xackdel), nacks, claims, dead-letters and owner
 * changes (with stale tokens) by two groups consuming one stream (fan-out),
 * every appended entry is at every moment, for each group, exactly one of:
 * undelivered, pending (with one consumer), acknowledged, or dead-lettered.
 * Never lost, never both; and an entry some group has not acknowledged is
 * still in the stream, whatever the other group's xackdel did
 * (docs/runtime.md, "Ack policies and other groups").
 */
import { Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { ShardStreams } from "../src/index.js"
import { numRuns } from "./assignor/arbitraries.js"

const stream = "s"
const shard = 0
const groups = ["g", "h"] as const
const addressOf = (group: number) => ({ stream, shard, group: groups[group]! })

type Op = { readonly group: number } & (
  | { readonly k: "append" }
  | {
      readonly k: "read"
      readonly consumer: number
      readonly token: number
      readonly count: number
      readonly del: boolean
      readonly ackFirst: boolean
    }
  | { readonly k: "ack"; readonly pick: number; readonly token: number; readonly del: boolean }
  | { readonly k: "nack"; readonly pick: number; readonly token: number }
  | { readonly k: "claim"; readonly consumer: number; readonly token: number }
  | { readonly k: "dlq"; readonly pick: number; readonly token: number }
  | { readonly k: "owner"; readonly token: number }
)

const token = fc.integer({ min: 0, max: 4 })
const group = fc.integer({ min: 0, max: groups.length - 1 })
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ k: fc.constant("append" as const), group }),
  fc.record({
    k: fc.constant("read" as const),
    group,
    consumer: fc.integer({ min: 0, max: 2 }),
    token,
    count: fc.integer({ min: 1, max: 3 }),
    // the runtime's way: the previous batch (here: the group's pending entries) acked by the read
    ackFirst: fc.boolean(),
    del: fc.boolean(),
  }),
  fc.record({ k: fc.constant("ack" as const), group, pick: fc.nat(), token, del: fc.boolean() }),
  fc.record({ k: fc.constant("nack" as const), group, pick: fc.nat(), token }),
  fc.record({
    k: fc.constant("claim" as const),
    group,
    consumer: fc.integer({ min: 0, max: 2 }),
    token,
  }),
  fc.record({ k: fc.constant("dlq" as const), group, pick: fc.nat(), token }),
  fc.record({ k: fc.constant("owner" as const), group, token }),
)

const run = (ops: ReadonlyArray<Op>) =>
  Effect.gen(function* () {
    const s = yield* ShardStreams.ShardStreams
    const appended: Array<string> = []
    const acked = groups.map(() => new Set<string>())
    // every group is granted (its token written, which creates it at 0)
    // before the first append: a group created later never sees what was
    // deleted before it existed
    for (let g = 0; g < groups.length; g++) yield* s.setOwnerToken({ ...addressOf(g), token: 0 })
    for (const op of ops) {
      const at = addressOf(op.group)
      const pendingBefore = yield* s.pending(at)
      const pick = (n: number) =>
        pendingBefore.length === 0 ? "0-1" : pendingBefore[n % pendingBefore.length]!.id
      const current = yield* s.ownerToken(at)
      switch (op.k) {
        case "append":
          appended.push(yield* s.append(stream, shard, { n: String(appended.length) }))
          break
        case "read": {
          const ids = pendingBefore.map((p) => p.id)
          const result = yield* Effect.result(
            s.read({
              ...at,
              consumer: `c${op.consumer}`,
              token: op.token,
              count: op.count,
              ...(op.ackFirst ? { ack: { ids, mode: op.del ? "xackdel" : "ack" } } : {}),
            }),
          )
          if (result._tag === "Success" && op.ackFirst)
            for (const id of ids) acked[op.group]!.add(id)
          break
        }
        case "ack": {
          const id = pick(op.pick)
          const result = yield* Effect.result(
            s.ack({ ...at, token: op.token, ids: [id], mode: op.del ? "xackdel" : "ack" }),
          )
          expect(result._tag === "Success").toBe(op.token >= current)
          if (result._tag === "Success" && pendingBefore.some((p) => p.id === id))
            acked[op.group]!.add(id)
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

      // --- conservation, per group, after every operation ---
      const stored = new Set(
        (yield* s.range(ShardStreams.shardKey(stream, shard))).map((e) => e.id),
      )
      const dlq = (yield* s.range(ShardStreams.deadLetterKey(stream, shard))).map((e) => [
        e.fields[ShardStreams.DeadLetterFields.group]!,
        e.fields[ShardStreams.DeadLetterFields.originalId]!,
      ])
      const info = yield* s.info(stream, shard)
      for (let g = 0; g < groups.length; g++) {
        const name = groups[g]!
        const pending = new Map((yield* s.pending(addressOf(g))).map((p) => [p.id, p]))
        const lastDelivered = info.groups.find((x) => x.name === name)?.lastDeliveredId ?? "0-0"
        const undelivered = (id: string) => {
          const [a, b] = id.split("-").map(Number) as [number, number]
          const [c, d] = lastDelivered.split("-").map(Number) as [number, number]
          return a !== c ? a > c : b > d
        }
        for (const id of appended) {
          const states =
            Number(undelivered(id)) +
            Number(pending.has(id)) +
            Number(acked[g]!.has(id)) +
            dlq.filter(([dg, d]) => dg === name && d === id).length
          expect(states, `entry ${id} in group ${name}`).toBe(1)
          if (pending.has(id)) expect(pending.get(id)!.deliveryCount).toBeGreaterThanOrEqual(1)
          // what the group still has to handle is still there for it
          if (undelivered(id) || pending.has(id))
            expect(stored.has(id), `entry ${id} deleted before group ${name} acknowledged it`).toBe(
              true,
            )
        }
      }
    }
  }).pipe(Effect.provide(ShardStreams.layerMemory), Effect.runSync)

describe("ShardStreams (memory) conservation", () => {
  it("every entry is, for each of two groups, exactly one of undelivered, pending, acked or dead-lettered, and in the stream until that group acknowledged it", () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 60 }), (ops) => run(ops)),
      { numRuns: numRuns(300) },
    )
  })
})
