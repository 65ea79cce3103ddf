/**
 * The key space of the memory `ShardStreams`' transactions (docs/exactly-once.md):
 * strings, hashes, sets, sorted sets and lists, written only by commits.
 * `apply` runs a transaction's writes all or none: they run on copies of the
 * keys they touch and replace the originals only when every one succeeded,
 * with the same refusals as redis-store's commit script (a wrong type, a
 * counter that is not a number or leaves ±(2^53 - 1)).
 */
import { TransactionRefused } from "../../Errors.js"
import {
  COMMANDS,
  isFiniteDecimal,
  isInteger,
  type KeyValue,
  MAX_COUNTER,
  type Write,
} from "../Transaction.js"

type Value =
  | { readonly type: "string"; value: string }
  | { readonly type: "hash"; readonly value: Map<string, string> }
  | { readonly type: "set"; readonly value: Set<string> }
  | { readonly type: "zset"; readonly value: Map<string, number> }
  | { readonly type: "list"; readonly value: Array<string> }

interface Slot {
  v: Value
  /** Absolute ms, or undefined: no expiry. */
  expiresAt: number | undefined
}

const clone = (s: Slot): Slot => {
  const v = s.v
  const copy: Value =
    v.type === "string"
      ? { type: "string", value: v.value }
      : v.type === "hash"
        ? { type: "hash", value: new Map(v.value) }
        : v.type === "set"
          ? { type: "set", value: new Set(v.value) }
          : v.type === "zset"
            ? { type: "zset", value: new Map(v.value) }
            : { type: "list", value: [...v.value] }
  return { v: copy, expiresAt: s.expiresAt }
}

class Refusal {
  constructor(
    readonly reason: "WrongType" | "NotANumber" | "OutOfRange",
    readonly message: string,
  ) {}
}

/** A float as Redis prints a counter (no exponent for ordinary values, no trailing zeros). */
const formatFloat = (x: number): string => (Number.isInteger(x) ? x.toFixed(0) : String(x))

const parseScore = (s: string): number =>
  s === "+inf" ? Number.POSITIVE_INFINITY : s === "-inf" ? Number.NEGATIVE_INFINITY : Number(s)

export class MemoryKeyspace {
  private readonly keys = new Map<string, Slot>()

  private live(key: string, now: number): Slot | undefined {
    const s = this.keys.get(key)
    if (s !== undefined && s.expiresAt !== undefined && s.expiresAt <= now) {
      this.keys.delete(key)
      return undefined
    }
    return s
  }

  /**
   * Apply `writes` in order, all or none: the refusal of the first write that
   * cannot apply (nothing changed then), or undefined.
   */
  apply(
    writes: ReadonlyArray<Write>,
    now: number,
    // keys a removal emptied in this transaction keep their type for the
    // writes after it, as redis-store's commit script sees them (it cannot
    // know a key emptied before it writes anything); a group commit passes
    // one map for all its parts, as the script simulates them in one pass
    ghosts: Map<string, Value["type"]> = new Map(),
  ): TransactionRefused | undefined {
    const scratch = new Map<string, Slot | undefined>()
    const get = (key: string): Slot | undefined => {
      if (!scratch.has(key)) {
        const s = this.live(key, now)
        scratch.set(key, s === undefined ? undefined : clone(s))
      }
      return scratch.get(key)
    }
    for (let index = 0; index < writes.length; index++) {
      const w = writes[index]!
      const outcome = this.one(w, now, get, ghosts, (key, s) => scratch.set(key, s))
      if (outcome instanceof Refusal)
        return new TransactionRefused({
          reason: outcome.reason,
          message: `${w.command} ${w.args[0]}: ${outcome.message}`,
          command: w.command,
          key: w.args[0]!,
          index,
        })
    }
    for (const [key, s] of scratch) {
      if (s === undefined) this.keys.delete(key)
      else this.keys.set(key, s)
    }
    return undefined
  }

  private one(
    w: Write,
    now: number,
    get: (key: string) => Slot | undefined,
    ghosts: Map<string, Value["type"]>,
    put: (key: string, s: Slot | undefined) => void,
  ): Refusal | undefined {
    const spec = COMMANDS[w.command]!
    const [key, ...rest] = w.args as [string, ...Array<string>]
    if (w.command === "DEL") {
      for (const k of w.args) {
        put(k, undefined)
        ghosts.delete(k)
      }
      return undefined
    }
    const slot = get(key)
    if (w.command === "EXPIRE" || w.command === "PEXPIRE") {
      if (slot !== undefined)
        slot.expiresAt = now + Number(rest[0]) * (w.command === "EXPIRE" ? 1_000 : 1)
      return undefined
    }
    if (w.command === "SET") {
      ghosts.delete(key)
      const ttl = rest.length === 3 ? Number(rest[2]) * (rest[1] === "EX" ? 1_000 : 1) : undefined
      put(key, {
        v: { type: "string", value: rest[0]! },
        expiresAt: ttl === undefined ? undefined : now + ttl,
      })
      return undefined
    }
    const type = spec.type as Value["type"]
    const held = slot?.v.type ?? ghosts.get(key)
    if (held !== undefined && held !== type)
      return new Refusal("WrongType", `holds a ${held}, the command works on a ${type}`)
    const make = (): Slot => {
      const v: Value =
        type === "string"
          ? { type, value: "0" }
          : type === "hash"
            ? { type, value: new Map() }
            : type === "set"
              ? { type, value: new Set() }
              : type === "zset"
                ? { type, value: new Map() }
                : { type, value: [] }
      const s = { v, expiresAt: undefined }
      put(key, s)
      return s
    }
    const s = slot ?? make()
    const v = s.v
    const emptied = (size: number) => {
      if (size !== 0) return
      put(key, undefined)
      ghosts.set(key, type)
    }
    switch (w.command) {
      case "INCR":
      case "DECR":
      case "INCRBY":
      case "DECRBY": {
        const cur = slot === undefined ? "0" : (v as { value: string }).value
        if (!isInteger(cur)) return new Refusal("NotANumber", "the value is not an integer")
        const by =
          w.command === "INCR"
            ? 1
            : w.command === "DECR"
              ? -1
              : w.command === "INCRBY"
                ? Number(rest[0])
                : -Number(rest[0])
        const next = Number(cur) + by
        if (Math.abs(next) > MAX_COUNTER)
          return new Refusal("OutOfRange", `the result leaves ±${MAX_COUNTER}`)
        ;(v as { value: string }).value = String(next)
        return undefined
      }
      case "INCRBYFLOAT": {
        const cur = slot === undefined ? "0" : (v as { value: string }).value
        if (!isFiniteDecimal(cur)) return new Refusal("NotANumber", "the value is not a number")
        const next = Number(cur) + Number(rest[0])
        if (!Number.isFinite(next)) return new Refusal("OutOfRange", "the result is not finite")
        ;(v as { value: string }).value = formatFloat(next)
        return undefined
      }
      case "HSET": {
        const h = (v as { value: Map<string, string> }).value
        for (let i = 0; i < rest.length; i += 2) h.set(rest[i]!, rest[i + 1]!)
        return undefined
      }
      case "HDEL": {
        const h = (v as { value: Map<string, string> }).value
        for (const f of rest) h.delete(f)
        emptied(h.size)
        return undefined
      }
      case "HINCRBY":
      case "HINCRBYFLOAT": {
        const h = (v as { value: Map<string, string> }).value
        const field = rest[0]!
        const cur = h.get(field) ?? "0"
        if (w.command === "HINCRBY") {
          if (!isInteger(cur)) return new Refusal("NotANumber", `field ${field} is not an integer`)
          const next = Number(cur) + Number(rest[1])
          if (Math.abs(next) > MAX_COUNTER)
            return new Refusal("OutOfRange", `the result leaves ±${MAX_COUNTER}`)
          h.set(field, String(next))
        } else {
          if (!isFiniteDecimal(cur))
            return new Refusal("NotANumber", `field ${field} is not a number`)
          const next = Number(cur) + Number(rest[1])
          if (!Number.isFinite(next)) return new Refusal("OutOfRange", "the result is not finite")
          h.set(field, formatFloat(next))
        }
        return undefined
      }
      case "SADD": {
        const set = (v as { value: Set<string> }).value
        for (const m of rest) set.add(m)
        return undefined
      }
      case "SREM": {
        const set = (v as { value: Set<string> }).value
        for (const m of rest) set.delete(m)
        emptied(set.size)
        return undefined
      }
      case "ZADD": {
        const z = (v as { value: Map<string, number> }).value
        for (let i = 0; i < rest.length; i += 2) z.set(rest[i + 1]!, parseScore(rest[i]!))
        return undefined
      }
      case "ZINCRBY": {
        const z = (v as { value: Map<string, number> }).value
        const next = (z.get(rest[1]!) ?? 0) + Number(rest[0])
        if (Number.isNaN(next)) return new Refusal("OutOfRange", "the resulting score is NaN")
        z.set(rest[1]!, next)
        return undefined
      }
      case "ZREM": {
        const z = (v as { value: Map<string, number> }).value
        for (const m of rest) z.delete(m)
        emptied(z.size)
        return undefined
      }
      case "LPUSH": {
        const l = (v as { value: Array<string> }).value
        for (const x of rest) l.unshift(x)
        return undefined
      }
      case "RPUSH": {
        const l = (v as { value: Array<string> }).value
        for (const x of rest) l.push(x)
        return undefined
      }
    }
    return undefined
  }

  read(key: string, now: number): KeyValue | undefined {
    const s = this.live(key, now)
    if (s === undefined) return undefined
    const v = s.v
    switch (v.type) {
      case "string":
        return { type: "string", value: v.value }
      case "hash":
        return { type: "hash", value: Object.fromEntries(v.value) }
      case "set":
        return { type: "set", value: [...v.value].sort() }
      case "zset":
        return {
          type: "zset",
          value: [...v.value].sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1)),
        }
      case "list":
        return { type: "list", value: [...v.value] }
    }
  }
}
