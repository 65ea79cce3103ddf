/**
 * A handler's transaction (docs/exactly-once.md): `context.transaction`,
 * given with every message (and every batch), in the Promise and the Effect
 * API alike. Writes to Redis and sends to Shardline streams are only
 * recorded while the handler runs; when it succeeds they commit together
 * with the message's acknowledgement in ONE fenced, atomic step. A handler
 * that fails, times out or is abandoned commits nothing, and its retry
 * starts from a fresh transaction; a commit whose reply was lost never
 * applies twice (the ack is in the same step, so a second commit finds the
 * message no longer pending and writes nothing).
 *
 * Every method records one operation and returns the transaction (chain
 * them). Nothing is sent to Redis before the commit. Bad use throws
 * `TransactionRefused` at the call, and the transaction then never commits
 * (the handler counts as failed, even if it caught the error): a command
 * outside the allow-list, arguments that do not fit, one of Shardline's own
 * keys, a key outside the shard's hash slot in a Redis Cluster, more than
 * the consumer's `transaction` limits, or any call after the handler returned.
 *
 * @example
 * consumer({
 *   stream: "orders",
 *   group: "billing",
 *   eachMessage: (m, { transaction: tx }) => {
 *     tx.hincrby(tx.key("totals"), m.key ?? "", Number(m.fields.amount))
 *     tx.send("invoices", m.key ?? "", { amount: m.fields.amount ?? "0" })
 *   },
 * })
 *
 * // Effect API: the same handle
 * effectConsumer({
 *   stream: "orders",
 *   group: "billing",
 *   eachMessage: (m, { transaction: tx }) => Effect.sync(() => tx.incr(tx.key("orders"))),
 * })
 */

type Arg = string | number

/** A handler's transaction, `context.transaction`: writes and sends that commit with the message's ack, exactly once (docs/exactly-once.md). */
export interface Transaction {
  /**
   * A key in the shard's hash slot for this transaction's writes:
   * `{<stream>:<shard>}:data:<name>`. In a Redis Cluster a transaction may
   * write only such keys (any key whose hash slot is the shard's), because
   * it commits in one script on one node. It belongs to the shard: a
   * reshard starts new shards with keys of their own.
   */
  readonly key: (name: string) => string
  /** SET key value, or SET key value PX ms. */
  readonly set: (key: string, value: Arg, options?: { readonly ttlMs?: number }) => Transaction
  /** INCR key. */
  readonly incr: (key: string) => Transaction
  /** DECR key. */
  readonly decr: (key: string) => Transaction
  /** INCRBY key by (an integer within ±(2^53 - 1)). */
  readonly incrby: (key: string, by: number) => Transaction
  /** DECRBY key by. */
  readonly decrby: (key: string, by: number) => Transaction
  /** INCRBYFLOAT key by (a finite number). */
  readonly incrbyfloat: (key: string, by: number) => Transaction
  /** DEL key ... */
  readonly del: (...keys: ReadonlyArray<string>) => Transaction
  /** EXPIRE key seconds (positive). */
  readonly expire: (key: string, seconds: number) => Transaction
  /** PEXPIRE key ms (positive). */
  readonly pexpire: (key: string, ms: number) => Transaction
  /** HSET key field value [field value ...], or HSET of a record's entries. */
  readonly hset: (
    key: string,
    fieldOrRecord: string | Readonly<Record<string, Arg>>,
    ...values: ReadonlyArray<Arg>
  ) => Transaction
  /** HDEL key field ... */
  readonly hdel: (key: string, ...fields: ReadonlyArray<string>) => Transaction
  /** HINCRBY key field by. */
  readonly hincrby: (key: string, field: string, by: number) => Transaction
  /** HINCRBYFLOAT key field by. */
  readonly hincrbyfloat: (key: string, field: string, by: number) => Transaction
  /** SADD key member ... */
  readonly sadd: (key: string, ...members: ReadonlyArray<Arg>) => Transaction
  /** SREM key member ... */
  readonly srem: (key: string, ...members: ReadonlyArray<Arg>) => Transaction
  /** ZADD key score member [score member ...] (scores: finite numbers, "+inf", "-inf"). */
  readonly zadd: (key: string, score: Arg, member: Arg, ...more: ReadonlyArray<Arg>) => Transaction
  /** ZINCRBY key by member. */
  readonly zincrby: (key: string, by: number, member: Arg) => Transaction
  /** ZREM key member ... */
  readonly zrem: (key: string, ...members: ReadonlyArray<Arg>) => Transaction
  /** LPUSH key value ... */
  readonly lpush: (key: string, ...values: ReadonlyArray<Arg>) => Transaction
  /** RPUSH key value ... */
  readonly rpush: (key: string, ...values: ReadonlyArray<Arg>) => Transaction
  /** Any allow-listed command by name, in its plain form (docs/exactly-once.md lists them). */
  readonly command: (name: string, ...args: ReadonlyArray<Arg>) => Transaction
  /**
   * Send to a Shardline stream, as its producer would (the routing key in
   * `shardline-key`, routed over the stream's layout at commit): it lands
   * only when the transaction commits, exactly once, after the sends of
   * earlier commits of this shard. One node: in the target shard, inside
   * the commit. A Redis Cluster: in the shard's outbox inside the commit,
   * then relayed by the runtime, exactly once.
   */
  readonly send: (
    stream: string,
    key: string,
    fields?: Readonly<Record<string, string>>,
  ) => Transaction
  /** Operations recorded so far (writes and sends). */
  readonly operations: number
}
