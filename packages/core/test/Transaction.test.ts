/**
 * The transaction contract's pure parts (docs/exactly-once.md): the
 * allow-list's argument rules, reserved keys, and the memory key space's
 * all-or-nothing writes. The commit itself (fence, pending check, sends) is
 * the ShardStreams transaction contract, run on the memory port and every
 * Redis target by redis-store (test/contract/Transactions.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Transaction, TransactionRefused } from "../src/index.js"
import { MemoryKeyspace } from "../src/ports/internal/memoryKeyspace.js"

const { validateWrite, isReservedKey } = Transaction

const reasonOf = (command: string, args: ReadonlyArray<unknown>) => {
  const r = validateWrite(command, args)
  return r instanceof TransactionRefused ? r.reason : "ok"
}

describe("Transaction.sizeOf", () => {
  it("counts UTF-8 bytes, as Buffer.byteLength (what Redis receives), not UTF-16 code units", () => {
    const samples = [
      "",
      "plain ascii",
      "é",
      "€",
      "😀",
      "a€😀é",
      "€".repeat(1_000),
      // lone surrogates are sent as U+FFFD (3 bytes)
      "\ud83d",
      "\ude00",
      "x\ud83dy",
      "\ude00\ud83d",
    ]
    for (const s of samples) assert.strictEqual(Transaction.utf8Bytes(s), Buffer.byteLength(s), s)
    assert.strictEqual(Transaction.sizeOf(["k", "€€€", "😀"]), 1 + 9 + 4)
  })
})

describe("Transaction.validateWrite", () => {
  it("accepts every allow-listed command in its plain form, upper-casing the name", () => {
    const ok: ReadonlyArray<readonly [string, ReadonlyArray<unknown>]> = [
      ["set", ["k", "v"]],
      ["SET", ["k", "v", "PX", 1000]],
      ["SET", ["k", "v", "EX", "10"]],
      ["INCR", ["k"]],
      ["DECR", ["k"]],
      ["INCRBY", ["k", -5]],
      ["DECRBY", ["k", "9007199254740991"]],
      ["INCRBYFLOAT", ["k", "1.5e3"]],
      ["DEL", ["a", "b", "c"]],
      ["EXPIRE", ["k", 10]],
      ["PEXPIRE", ["k", "100"]],
      ["HSET", ["h", "f", "v", "g", "w"]],
      ["HDEL", ["h", "f"]],
      ["HINCRBY", ["h", "f", 1]],
      ["HINCRBYFLOAT", ["h", "f", "-0.25"]],
      ["SADD", ["s", "m"]],
      ["SREM", ["s", "m", "n"]],
      ["ZADD", ["z", 1, "a", "+inf", "b", "-inf", "c"]],
      ["ZINCRBY", ["z", "2.5", "a"]],
      ["ZREM", ["z", "a"]],
      ["LPUSH", ["l", "x"]],
      ["RPUSH", ["l", "x", "y"]],
    ]
    for (const [command, args] of ok) assert.strictEqual(reasonOf(command, args), "ok", command)
    const w = validateWrite("hincrby", ["h", "f", 3]) as Transaction.Write
    assert.deepStrictEqual(w, { command: "HINCRBY", args: ["h", "f", "3"] })
    assert.deepStrictEqual(
      Transaction.keysOf(validateWrite("DEL", ["a", "b"]) as Transaction.Write),
      ["a", "b"],
    )
    // a first-key command's key alone, from a validated (frozen) write and a plain one
    assert.deepStrictEqual(Transaction.keysOf(w), ["h"])
    assert.deepStrictEqual(Transaction.keysOf({ command: "SET", args: ["k", "v", "PX", "5"] }), [
      "k",
    ])
  })

  it("refuses a command outside the allow-list, naming the allowed ones", () => {
    for (const command of ["EVAL", "FLUSHALL", "GET", "XADD", "SETNX", "RENAME", "__proto__", ""]) {
      const r = validateWrite(command, ["k"])
      assert.instanceOf(r, TransactionRefused)
      assert.strictEqual((r as TransactionRefused).reason, "CommandNotAllowed")
    }
    assert.match((validateWrite("GET", ["k"]) as Error).message, /allowed: SET, INCR/)
    // arguments that are not an array (a write built by hand): refused, not thrown
    for (const args of ["k", undefined, { 0: "k", length: 1 }])
      assert.strictEqual(
        (validateWrite("INCR", args as unknown as ReadonlyArray<unknown>) as TransactionRefused)
          .reason,
        "InvalidArguments",
        String(args),
      )
  })

  it("refuses arguments that do not fit, before anything commits", () => {
    const bad: ReadonlyArray<readonly [string, ReadonlyArray<unknown>]> = [
      ["SET", []],
      ["SET", ["", "v"]],
      ["SET", ["k"]],
      ["SET", ["k", "v", "NX"]],
      ["SET", ["k", "v", "PX", 0]],
      ["SET", ["k", "v", "PX", "1.5"]],
      ["INCR", ["k", 1]],
      ["INCRBY", ["k", 1.5]],
      ["INCRBY", ["k", "01"]],
      ["INCRBY", ["k", "-0"]],
      ["INCRBY", ["k", "9007199254740992"]],
      ["INCRBY", ["k", " 1"]],
      ["INCRBYFLOAT", ["k", "nan"]],
      ["INCRBYFLOAT", ["k", "inf"]],
      ["INCRBYFLOAT", ["k", "0x10"]],
      ["EXPIRE", ["k", -1]],
      ["EXPIRE", ["k", 0]],
      ["HSET", ["h", "f"]],
      ["HINCRBY", ["h", 1]],
      ["HINCRBY", ["h", "f", "x"]],
      ["SADD", ["s"]],
      ["ZADD", ["z", "a", "b"]],
      ["ZADD", ["z", "nan", "b"]],
      ["ZADD", ["z", 1, "a", 2]],
      ["ZINCRBY", ["z", "a"]],
      ["RPUSH", ["l"]],
      ["SET", ["k", {}]],
      ["SET", ["k", Number.NaN]],
      ["SET", ["k", undefined]],
    ]
    for (const [command, args] of bad)
      assert.strictEqual(
        reasonOf(command, args),
        "InvalidArguments",
        `${command} ${JSON.stringify(args)}`,
      )
  })
})

describe("Transaction.checkPart", () => {
  const part = (writes: ReadonlyArray<Transaction.Write>) => ({ ids: ["1-0"], writes, sends: [] })

  it("takes the writes validateWrite made as they are: the part itself comes back", () => {
    const given = part([validateWrite("incr", ["n"]) as Transaction.Write])
    assert.strictEqual(Transaction.checkPart(given), given)
  })

  it("checks again a write built otherwise: made canonical, or refused", () => {
    const made = Transaction.checkPart(part([{ command: "incrby", args: ["n", "2"] }]))
    assert.deepStrictEqual((made as ReturnType<typeof part>).writes, [
      { command: "INCRBY", args: ["n", "2"] },
    ])
    const refused = Transaction.checkPart(part([{ command: "INCRBY", args: ["n", "x"] }]))
    assert.instanceOf(refused, TransactionRefused)
    assert.strictEqual((refused as TransactionRefused).reason, "InvalidArguments")
    // a copy of a validated write is not the validated write: checked again
    const copy = { ...(validateWrite("INCR", ["n"]) as Transaction.Write), command: "EVAL" }
    assert.strictEqual(
      (Transaction.checkPart(part([copy])) as TransactionRefused).reason,
      "CommandNotAllowed",
    )
  })

  it("checks again a write forged from a validated one's prototype", () => {
    const real = validateWrite("INCR", ["n"]) as Transaction.Write
    const forged = Object.create(Object.getPrototypeOf(real), {
      command: { value: "EVAL", enumerable: true },
      args: { value: ["n"], enumerable: true },
    }) as Transaction.Write
    assert.strictEqual(
      (Transaction.checkPart(part([forged])) as TransactionRefused).reason,
      "CommandNotAllowed",
    )
  })

  it("a validated write cannot be changed after its check (frozen)", () => {
    const w = validateWrite("INCRBY", ["n", 2]) as Transaction.Write
    assert.throws(() => {
      ;(w as { command: string }).command = "EVAL"
    })
    assert.throws(() => {
      ;(w.args as Array<string>)[1] = "x"
    })
    assert.deepStrictEqual(w, { command: "INCRBY", args: ["n", "2"] })
  })

  it("refuses a reserved key after a run of writes to one key that passed", () => {
    const n = validateWrite("INCR", ["n"]) as Transaction.Write
    for (const last of [
      validateWrite("SET", ["{s:0}:owner:g", "9"]),
      validateWrite("DEL", ["n", "n", "{s:0}:gate"]),
      { command: "INCR", args: ["{s:0}"] },
    ] as ReadonlyArray<Transaction.Write>) {
      const refused = Transaction.checkPart(part([n, n, n, last]))
      assert.strictEqual((refused as TransactionRefused).reason, "ReservedKey", last.args.join(" "))
    }
  })

  it("still refuses a validated write to one of Shardline's keys", () => {
    const w = validateWrite("SET", ["{s:0}:owner:g", "9"]) as Transaction.Write
    assert.strictEqual(
      (Transaction.checkPart(part([w])) as TransactionRefused).reason,
      "ReservedKey",
    )
  })
})

describe("Transaction.isReservedKey", () => {
  it("protects Shardline's own keys and leaves the application's alone", () => {
    for (const key of [
      "{orders:3}",
      "{orders:3}:owner:g",
      "{orders:3}:dlq",
      "{orders:3}:sealed",
      "{orders:3}:idmp:p1",
      "{orders:3}:gate",
      "{orders:3}:outbox:g",
      "{orders:3}:relayed:x",
      "{shardline:orders:g}:lease",
      "{shardline:orders}:layout",
    ])
      assert.isTrue(isReservedKey(key), key)
    for (const key of [
      "{orders:3}:data:counter",
      "{orders:3}:totals",
      "counter",
      "{user}:1",
      "user:{orders:3}",
      "{orders}:owner:g",
    ])
      assert.isFalse(isReservedKey(key), key)
    assert.strictEqual(Transaction.dataKey("orders", 3, "n"), "{orders:3}:data:n")
    assert.isDefined(Transaction.anyKey("orders", 3).check("{orders:3}:owner:g"))
    assert.isUndefined(Transaction.anyKey("orders", 3).check("anything"))
  })
})

describe("the memory key space", () => {
  const w = (command: string, ...args: Array<string | number>) =>
    validateWrite(command, args) as Transaction.Write

  it("applies writes in order, with Redis' semantics", () => {
    const ks = new MemoryKeyspace()
    assert.isUndefined(
      ks.apply(
        [
          w("INCRBY", "n", 5),
          w("DECR", "n"),
          w("HSET", "h", "a", "1"),
          w("HINCRBY", "h", "a", 2),
          w("HINCRBYFLOAT", "h", "b", "0.5"),
          w("SADD", "s", "x", "y"),
          w("SREM", "s", "x"),
          w("ZADD", "z", 2, "b", 1, "a"),
          w("ZINCRBY", "z", 5, "a"),
          w("LPUSH", "l", "1", "2"),
          w("RPUSH", "l", "3"),
          w("SET", "str", "v"),
          w("INCRBYFLOAT", "f", "1.5"),
          w("INCRBYFLOAT", "f", "1.5"),
        ],
        0,
      ),
    )
    assert.deepStrictEqual(ks.read("n", 0), { type: "string", value: "4" })
    assert.deepStrictEqual(ks.read("h", 0), { type: "hash", value: { a: "3", b: "0.5" } })
    assert.deepStrictEqual(ks.read("s", 0), { type: "set", value: ["y"] })
    assert.deepStrictEqual(ks.read("z", 0), {
      type: "zset",
      value: [
        ["b", 2],
        ["a", 6],
      ],
    })
    assert.deepStrictEqual(ks.read("l", 0), { type: "list", value: ["2", "1", "3"] })
    assert.deepStrictEqual(ks.read("f", 0), { type: "string", value: "3" })
    // removing the last member removes the key
    assert.isUndefined(ks.apply([w("SREM", "s", "y"), w("HDEL", "h", "a", "b")], 0))
    assert.isUndefined(ks.read("s", 0))
    assert.isUndefined(ks.read("h", 0))
  })

  it("all or nothing: a refused write leaves every earlier write of the transaction undone", () => {
    const ks = new MemoryKeyspace()
    ks.apply([w("SET", "str", "abc"), w("INCRBY", "n", 1)], 0)
    const cases: ReadonlyArray<readonly [Transaction.Write, string]> = [
      [w("HSET", "str", "f", "v"), "WrongType"],
      [w("INCR", "str"), "NotANumber"],
      [w("INCRBY", "n", Number.MAX_SAFE_INTEGER), "OutOfRange"],
      [w("INCRBYFLOAT", "str", "1"), "NotANumber"],
      [w("ZADD", "z", "+inf", "m"), "ok"],
    ]
    for (const [bad, reason] of cases) {
      const before = [ks.read("n", 0), ks.read("other", 0)]
      const refused = ks.apply([w("INCRBY", "n", 10), w("SET", "other", "x"), bad], 0)
      if (reason === "ok") {
        assert.isUndefined(refused)
        continue
      }
      assert.instanceOf(refused, TransactionRefused)
      assert.strictEqual(refused!.reason, reason)
      assert.strictEqual(refused!.index, 2)
      assert.deepStrictEqual([ks.read("n", 0), ks.read("other", 0)], before)
    }
    // a write that changes a key's type is seen by the writes after it
    const typed = ks.apply([w("DEL", "q"), w("SET", "q", "1"), w("HSET", "q", "f", "v")], 0)
    assert.strictEqual(typed?.reason, "WrongType")
    assert.isUndefined(ks.read("q", 0))
    // increments are finite (validateWrite), so a score never becomes NaN
    assert.isUndefined(ks.apply([w("ZINCRBY", "z", "-1e300", "m")], 0))
    assert.deepStrictEqual(ks.read("z", 0), {
      type: "zset",
      value: [["m", Number.POSITIVE_INFINITY]],
    })
  })

  it("expiry: SET EX / PX and EXPIRE end the key at the given time", () => {
    const ks = new MemoryKeyspace()
    ks.apply([w("SET", "a", "1", "PX", 100), w("SADD", "s", "m"), w("PEXPIRE", "s", 50)], 1_000)
    assert.isDefined(ks.read("a", 1_099))
    assert.isUndefined(ks.read("a", 1_100))
    assert.isUndefined(ks.read("s", 1_050))
  })
})
