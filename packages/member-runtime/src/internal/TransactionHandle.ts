/**
 * The transaction handle a handler gets (`context.transaction`;
 * docs/exactly-once.md): records writes and sends, checks each at the call
 * (core's allow-list, the port's key rules, the consumer's limits) and
 * refuses bad use with `TransactionRefused`. A refusal sticks: the
 * transaction then never commits, even if the handler caught the error.
 * Closed when the handler's message ends: a later call is refused.
 *
 * Made only when a handler reads `context.transaction`: a message whose
 * handler never does costs nothing more (docs/exactly-once.md, "Cost").
 */
import { TransactionRefused, Transaction as Tx } from "@shardline/core"
import { KEY_FIELD } from "../Message.js"
import type { Transaction } from "../Transaction.js"

type Arg = string | number

/** A send as the handler made it; routed to a shard at commit. */
export interface PendingSend {
  readonly stream: string
  readonly key: string
  readonly fields: Readonly<Record<string, string>>
}

/** What a handle needs from its runner. */
export interface HandleEnv {
  /** The port's transactions, or undefined: every operation is refused (`Unsupported`). */
  readonly rules: Tx.KeyRules | undefined
  readonly maxOperations: number
  readonly maxBytes: number
}

export const DEFAULT_LIMITS = { maxOperations: 1_000, maxBytes: 1_048_576 } as const

/**
 * The lists of a handle that recorded none yet (and a group part's without
 * a handle): one shared array, not two per message. Read-only by its type;
 * nothing writes to it: a handle replaces it at its first write or send.
 */
export const NONE: ReadonlyArray<never> = []

export class TransactionHandle implements Transaction {
  /** What the handler wrote, in order (an array of its own from the first write). */
  writes: ReadonlyArray<Tx.Write> = NONE
  /** What the handler sent, in order (an array of its own from the first send). */
  sends: ReadonlyArray<PendingSend> = NONE
  private bytes = 0
  private closed = false
  /** The first refusal: the transaction never commits. */
  refusal: TransactionRefused | undefined = undefined

  constructor(private readonly env: HandleEnv) {}

  get operations(): number {
    return this.writes.length + this.sends.length
  }

  /** Anything to commit (or a refusal to report)? */
  get used(): boolean {
    return this.refusal !== undefined || this.writes.length + this.sends.length > 0
  }

  close(): void {
    this.closed = true
  }

  private refuse(error: TransactionRefused): never {
    if (this.refusal === undefined) this.refusal = error
    throw error
  }

  /** The checks every operation passes first. */
  private admit(size: number): void {
    if (this.closed)
      this.refuse(
        new TransactionRefused({
          reason: "Closed",
          message:
            "the handler already returned (or failed, or was abandoned): its transaction is closed",
        }),
      )
    if (this.env.rules === undefined)
      this.refuse(
        new TransactionRefused({
          reason: "Unsupported",
          message: "these ports have no transactions (ShardStreams.transactions)",
        }),
      )
    if (this.operations + 1 > this.env.maxOperations)
      this.refuse(
        new TransactionRefused({
          reason: "TooLarge",
          message: `more than ${this.env.maxOperations} operations (the consumer's transaction.maxOperations)`,
        }),
      )
    if (this.bytes + size > this.env.maxBytes)
      this.refuse(
        new TransactionRefused({
          reason: "TooLarge",
          message: `more than ${this.env.maxBytes} bytes (the consumer's transaction.maxBytes)`,
        }),
      )
  }

  key(name: string): string {
    if (this.env.rules === undefined)
      this.refuse(
        new TransactionRefused({
          reason: "Unsupported",
          message: "these ports have no transactions (ShardStreams.transactions)",
        }),
      )
    if (typeof name !== "string" || name === "")
      this.refuse(
        new TransactionRefused({
          reason: "InvalidArguments",
          message: "key(name): a name is a non-empty string",
        }),
      )
    return this.env.rules.key(name)
  }

  command(name: string, ...args: Array<Arg>): Transaction {
    // the rest parameter is this call's own array: the write keeps it
    const write = Tx.validateOwnWrite(name, args)
    if (write instanceof TransactionRefused) this.refuse(write)
    const size = Tx.sizeOf(write.args)
    this.admit(size)
    for (let k = 0, n = Tx.keyCount(write); k < n; k++) {
      const key = write.args[k]!
      const refusal = this.env.rules!.check(key)
      if (refusal !== undefined)
        this.refuse(
          new TransactionRefused({
            reason: refusal.reason,
            message: `${write.command}: ${refusal.message}`,
            command: write.command,
            key,
          }),
        )
    }
    // one slot at the first write (a push into [] reserves 17): most handles write once
    if (this.writes === NONE) this.writes = [write]
    else (this.writes as Array<Tx.Write>).push(write)
    this.bytes += size
    return this
  }

  set(key: string, value: Arg, options?: { readonly ttlMs?: number }): Transaction {
    return options?.ttlMs === undefined
      ? this.command("SET", key, value)
      : this.command("SET", key, value, "PX", options.ttlMs)
  }
  incr(key: string): Transaction {
    return this.command("INCR", key)
  }
  decr(key: string): Transaction {
    return this.command("DECR", key)
  }
  incrby(key: string, by: number): Transaction {
    return this.command("INCRBY", key, by)
  }
  decrby(key: string, by: number): Transaction {
    return this.command("DECRBY", key, by)
  }
  incrbyfloat(key: string, by: number): Transaction {
    return this.command("INCRBYFLOAT", key, by)
  }
  del(...keys: ReadonlyArray<string>): Transaction {
    return this.command("DEL", ...keys)
  }
  expire(key: string, seconds: number): Transaction {
    return this.command("EXPIRE", key, seconds)
  }
  pexpire(key: string, ms: number): Transaction {
    return this.command("PEXPIRE", key, ms)
  }
  hset(
    key: string,
    fieldOrRecord: string | Readonly<Record<string, Arg>>,
    ...values: ReadonlyArray<Arg>
  ): Transaction {
    if (typeof fieldOrRecord === "string")
      return this.command("HSET", key, fieldOrRecord, ...values)
    const flat: Array<Arg> = []
    if (typeof fieldOrRecord === "object" && fieldOrRecord !== null)
      for (const name of Object.keys(fieldOrRecord)) flat.push(name, fieldOrRecord[name]!)
    return this.command("HSET", key, ...flat)
  }
  hdel(key: string, ...fields: ReadonlyArray<string>): Transaction {
    return this.command("HDEL", key, ...fields)
  }
  hincrby(key: string, field: string, by: number): Transaction {
    return this.command("HINCRBY", key, field, by)
  }
  hincrbyfloat(key: string, field: string, by: number): Transaction {
    return this.command("HINCRBYFLOAT", key, field, by)
  }
  sadd(key: string, ...members: ReadonlyArray<Arg>): Transaction {
    return this.command("SADD", key, ...members)
  }
  srem(key: string, ...members: ReadonlyArray<Arg>): Transaction {
    return this.command("SREM", key, ...members)
  }
  zadd(key: string, score: Arg, member: Arg, ...more: ReadonlyArray<Arg>): Transaction {
    return this.command("ZADD", key, score, member, ...more)
  }
  zincrby(key: string, by: number, member: Arg): Transaction {
    return this.command("ZINCRBY", key, by, member)
  }
  zrem(key: string, ...members: ReadonlyArray<Arg>): Transaction {
    return this.command("ZREM", key, ...members)
  }
  lpush(key: string, ...values: ReadonlyArray<Arg>): Transaction {
    return this.command("LPUSH", key, ...values)
  }
  rpush(key: string, ...values: ReadonlyArray<Arg>): Transaction {
    return this.command("RPUSH", key, ...values)
  }

  send(stream: string, key: string, fields: Readonly<Record<string, string>> = {}): Transaction {
    const bad = (message: string): never =>
      this.refuse(
        new TransactionRefused({ reason: "InvalidArguments", message: `send: ${message}` }),
      )
    if (typeof stream !== "string" || stream === "") bad("the stream is a non-empty string")
    if (typeof key !== "string") bad("the key is a string")
    if (typeof fields !== "object" || fields === null) bad("fields are a record of strings")
    let size = Tx.utf8Bytes(stream) + Tx.utf8Bytes(key)
    const copy: Record<string, string> = {}
    for (const name of Object.keys(fields)) {
      const value = fields[name]
      if (name === KEY_FIELD) bad(`${KEY_FIELD} is reserved for the key`)
      if (typeof value !== "string") bad(`field ${name} is not a string`)
      size += Tx.utf8Bytes(name) + Tx.utf8Bytes(value as string)
      Object.defineProperty(copy, name, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      })
    }
    this.admit(size)
    const send: PendingSend = { stream, key, fields: copy }
    if (this.sends === NONE) this.sends = [send]
    else (this.sends as Array<PendingSend>).push(send)
    this.bytes += size
    return this
  }
}
