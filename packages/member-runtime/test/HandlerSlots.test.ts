/**
 * The handler slots of the polling adapter (docs/runtime.md, "The polling
 * adapter"): at most `size` held at once, handed out first come, first
 * served, and an interrupted wait never keeps (or loses) a slot.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { makeHandlerSlots } from "../src/internal/HandlerSlots.js"

describe("handler slots", () => {
  it.effect("at most `size` held; a freed slot goes to the longest waiter", () =>
    Effect.gen(function* () {
      const slots = makeHandlerSlots(2)
      yield* slots.acquire
      yield* slots.acquire
      assert.strictEqual(slots.free(), 0)
      const order: Array<number> = []
      const waiters = yield* Effect.forEach([1, 2, 3], (i) =>
        Effect.forkChild(Effect.map(slots.acquire, () => order.push(i))),
      )
      yield* Effect.yieldNow
      assert.deepStrictEqual(order, [], "no slot beyond the size")
      slots.release()
      yield* Fiber.join(waiters[0]!)
      assert.deepStrictEqual(order, [1])
      // a slot freed while others wait is theirs, not a newcomer's
      const late = yield* Effect.forkChild(Effect.map(slots.acquire, () => order.push(4)))
      slots.release()
      yield* Fiber.join(waiters[1]!)
      slots.release()
      yield* Fiber.join(waiters[2]!)
      slots.release()
      yield* Fiber.join(late)
      assert.deepStrictEqual(order, [1, 2, 3, 4])
      assert.strictEqual(slots.free(), 0)
    }),
  )

  it.effect(
    "an interrupted wait takes no slot; one handed over as it was interrupted passes on",
    () =>
      Effect.gen(function* () {
        const slots = makeHandlerSlots(1)
        yield* slots.acquire
        const gone = yield* Effect.forkChild(slots.acquire)
        const next = yield* Effect.forkChild(slots.acquire)
        yield* Effect.yieldNow
        yield* Fiber.interrupt(gone)
        // the waiter behind the interrupted one gets the slot
        slots.release()
        yield* Fiber.join(next)
        assert.strictEqual(slots.free(), 0)
        // handed to a waiter interrupted just then: it either took the slot (and
        // holds it) or was interrupted and the slot is free again, never lost
        const handed = yield* Effect.forkChild(slots.acquire)
        yield* Effect.yieldNow
        slots.release()
        yield* Fiber.interrupt(handed)
        const exit = yield* Fiber.await(handed)
        const held = exit._tag === "Success" ? 1 : 0
        assert.strictEqual(slots.free() + held, 1)
        if (held === 1) slots.release()
        yield* slots.acquire
        assert.strictEqual(slots.free(), 0)
      }),
  )
})
