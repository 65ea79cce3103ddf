/**
 * `Transaction.rememberingLast` skips a key rules' work for the key it
 * built or passed last. It must answer every call as the rules it wraps
 * would: the same key for a name, the same refusal (or none) for a key, in
 * any order of calls, with refused keys between passed ones.
 */
import fc from "fast-check"
import { assert, describe, it } from "vitest"
import { Transaction, TransactionRefused } from "../src/index.js"
import { numRuns } from "./assignor/arbitraries.js"

/** Rules whose answers depend on the argument alone, counting the checks they run. */
const counted = () => {
  let checks = 0
  const rules: Transaction.KeyRules = {
    key: (name) => `{s:1}:data:${name}`,
    check: (key) => {
      checks++
      return key.includes("x")
        ? new TransactionRefused({ reason: "ReservedKey", message: `${key} refused`, key })
        : undefined
    },
  }
  return { rules, checks: () => checks }
}

const call = fc.oneof(
  // undefined: a caller outside the handle may pass anything
  fc.record({
    op: fc.constant("key" as const),
    arg: fc.constantFrom("a", "b", "x", "", undefined as unknown as string),
  }),
  fc.record({ op: fc.constant("check" as const), arg: fc.constantFrom("a", "b", "x", "ax", "") }),
)

describe("Transaction.rememberingLast", () => {
  it("answers every call as the rules it wraps", () => {
    fc.assert(
      fc.property(fc.array(call, { maxLength: 40 }), (calls) => {
        const plain = counted().rules
        const remembering = Transaction.rememberingLast(counted().rules)
        for (const { op, arg } of calls) {
          if (op === "key") assert.strictEqual(remembering.key(arg), plain.key(arg))
          else
            assert.deepStrictEqual(
              remembering.check(arg)?.message,
              plain.check(arg)?.message,
              `check(${JSON.stringify(arg)})`,
            )
        }
      }),
      { numRuns: numRuns(300) },
    )
  })

  it("checks a key written again in a row once, and a refused one every time", () => {
    const { rules, checks } = counted()
    const remembering = Transaction.rememberingLast(rules)
    const key = remembering.key("n")
    for (let i = 0; i < 32; i++) assert.isUndefined(remembering.check(key))
    assert.strictEqual(checks(), 1)
    for (let i = 0; i < 3; i++)
      assert.instanceOf(remembering.check("{s:1}:data:x"), TransactionRefused)
    assert.strictEqual(checks(), 4)
    // the last key built comes back as the same string
    assert.strictEqual(remembering.key("n"), key)
  })
})
