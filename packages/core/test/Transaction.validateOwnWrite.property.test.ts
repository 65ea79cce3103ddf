/**
 * `Transaction.validateOwnWrite` keeps the caller's array (a rest
 * parameter's) as the write's arguments instead of copying it. It must
 * answer every call as `validateWrite` does: the same write or the same
 * refusal, for any command and arguments, at the edges the allow-list
 * checks (empty keys, numbers, non-finite numbers, other types).
 */
import fc from "fast-check"
import { assert, describe, it } from "vitest"
import { Transaction, TransactionRefused } from "../src/index.js"
import { numRuns } from "./assignor/arbitraries.js"

const { validateWrite, validateOwnWrite } = Transaction

const arg = fc.oneof(
  fc.constantFrom("k", "", "12", "-3", "1.5", "PX", "NX", "9007199254740992"),
  fc.constantFrom(0, 1, -7, 1.5, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY),
  fc.constantFrom(undefined, null, true, {}),
)
const command = fc.constantFrom(...Object.keys(Transaction.COMMANDS), "incr", "hIncrBy", "GET", "")

/** A write or a refusal, as plain data. */
const shape = (r: Transaction.Write | TransactionRefused) =>
  r instanceof TransactionRefused
    ? { refused: r.reason, message: r.message, command: r.command, key: r.key }
    : { command: r.command, args: [...r.args] }

describe("Transaction.validateOwnWrite", () => {
  it("answers as validateWrite, for any command and arguments", () => {
    fc.assert(
      fc.property(command, fc.array(arg, { maxLength: 6 }), (name, args) => {
        const copied = validateWrite(name, args)
        const own = validateOwnWrite(name, [...args])
        assert.deepStrictEqual(shape(own), shape(copied))
      }),
      { numRuns: numRuns(500) },
    )
  })

  it("keeps the caller's array, its numbers as strings, frozen", () => {
    const args: Array<unknown> = ["{s:1}:data:n", 5]
    const write = validateOwnWrite("INCRBY", args) as Transaction.Write
    assert.strictEqual(write.args as unknown, args)
    assert.deepStrictEqual([...write.args], ["{s:1}:data:n", "5"])
    assert.isTrue(Object.isFrozen(write.args))
    assert.isTrue(Object.isFrozen(write))
  })

  it("validateWrite copies: the caller's array stays as it was and its own", () => {
    const args: Array<unknown> = ["{s:1}:data:n", 5]
    const write = validateWrite("INCRBY", args) as Transaction.Write
    assert.notStrictEqual(write.args as unknown, args)
    assert.deepStrictEqual([...args], ["{s:1}:data:n", 5])
    assert.isFalse(Object.isFrozen(args))
  })
})
