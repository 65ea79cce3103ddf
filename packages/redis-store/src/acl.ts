/**
 * The least-privilege ACL rules of a Shardline user (docs/redis.md, "ACL"):
 * every command the ports send, directly or from their Lua scripts (Redis
 * checks a script's commands against the caller's ACL), and the one key
 * pattern and one channel pattern of the namespace (`~<prefix>*`,
 * `&<prefix>*`: src/keys.ts puts every key and channel under the prefix);
 * and the probe that checks a connection's user against them before
 * anything runs (`checkPermissions`), built from the same list
 * (`commandUses`) and the key builders of src/keys.ts, so the two never
 * disagree.
 *
 *   ACL SETUSER shardline on >secret resetkeys resetchannels -@all <rules...>
 */
import { BackendUnavailable } from "@shardline/core"
import { Effect } from "effect"
import { Cluster, Redis, type RedisOptions } from "ioredis"
import { type MissingPermission, PermissionDenied } from "./Errors.js"
import * as Keys from "./keys.js"
import { type RedisConnectionShape, userOf } from "./RedisConnection.js"

export interface AclOptions {
  /** The server has XACKDEL (Redis >= 8.2): older servers refuse the rule. */
  readonly xackdel: boolean
  /** Add what a Redis Cluster client needs (CLUSTER SLOTS, and CLUSTER INFO for its ready check). */
  readonly cluster?: boolean
  /** The namespace (`keyPrefix` of the connection; default `shardline:`). */
  readonly prefix?: string
  /**
   * Whose rules: a member runtime's (default: everything the ports send) or
   * a producer of its own's (`createProducer`: its connection, the append
   * script and the stream layouts, on the shard, seal, idempotency window
   * and layout keys; no channel).
   */
  readonly role?: "member" | "producer"
}

/**
 * The key patterns: the namespace, every key in it and nothing else (shard
 * streams, owner tokens, dead letters, seals, idempotency windows, gate
 * keys, group control keys, layouts, the schema version).
 */
export const aclKeyPatterns = (prefix: string = Keys.DEFAULT_PREFIX): ReadonlyArray<string> => [
  `${Keys.globEscape(prefix)}*`,
]

/** The channel patterns: the namespace's (notices and handovers of every group). */
export const aclChannelPatterns = (prefix: string = Keys.DEFAULT_PREFIX): ReadonlyArray<string> => [
  `${Keys.globEscape(prefix)}*`,
]

/**
 * The keys and channels the ports use for one group of one stream, built by
 * src/keys.ts (shard 0, a probe producer and request): what the ACL probe
 * (`checkPermissions`) touches, so it follows any change of the key layout.
 */
export interface ProbeKeys {
  readonly group: string
  readonly schema: string
  readonly shard: string
  readonly owner: string
  readonly dlq: string
  readonly sealed: string
  readonly idempotency: string
  readonly gate: string
  readonly lease: string
  readonly leaseCounter: string
  readonly requests: string
  readonly serving: string
  readonly lastHeartbeat: string
  readonly inbox: string
  readonly reply: string
  readonly storeRevision: string
  readonly storeSnapshot: string
  readonly storeBatches: string
  readonly audit: string
  readonly layout: string
  readonly notice: string
  readonly handover: string
}

const PROBE_ID = "00000000-0000-4000-8000-000000000000"

/**
 * Every key and channel of a group in a namespace, for the probe
 * (`memberId` names the notice channel).
 */
export const probeKeys = (
  keys: Keys.KeySpace,
  stream: string,
  group: string,
  memberId = "probe",
): ProbeKeys => {
  const key = { stream, group }
  return {
    group,
    schema: keys.schema,
    shard: keys.shardKey(stream, 0),
    owner: keys.ownerTokenKey(stream, 0, group),
    dlq: keys.deadLetterKey(stream, 0),
    sealed: keys.sealedKey(stream, 0),
    idempotency: keys.idempotencyKey(stream, 0, PROBE_ID),
    gate: keys.gateKey(stream, 0),
    lease: keys.leaseKey(key),
    leaseCounter: keys.leaseCounterKey(key),
    requests: keys.requestsKey(key),
    serving: keys.servingKey(key),
    lastHeartbeat: keys.lastHeartbeatKey(key),
    inbox: keys.inboxKey(key, PROBE_ID),
    reply: keys.replyKey(key, PROBE_ID),
    storeRevision: keys.storeRevisionKey(key),
    storeSnapshot: keys.storeSnapshotKey(key),
    storeBatches: keys.storeBatchesKey(key),
    audit: keys.auditKey(key),
    layout: keys.layoutKey(stream),
    notice: keys.noticeChannel(key, memberId),
    handover: keys.handoverChannel(key),
  }
}

type ChannelName = "notice" | "handover"
type KeyName = Exclude<keyof ProbeKeys, "group" | ChannelName>

/** The channels every channel command is probed on. */
const CHANNELS: ReadonlyArray<ChannelName> = ["notice", "handover"]

/**
 * One command the ports send (directly, or from a Lua script: Redis checks
 * a script's commands against the caller's ACL), and the keys or channels
 * they send it with. `argv` is one valid invocation on one key (the probe
 * queues it inside a MULTI that never executes).
 */
interface CommandUse {
  /** The ACL name: a command, or `command|subcommand`. */
  readonly acl: string
  readonly when?: (options: AclOptions) => boolean
  /** The keys it is sent with (none: a keyless command). */
  readonly keys?: ReadonlyArray<KeyName>
  /** A channel command: sent with the notice and handover channels. */
  readonly channel?: true
  readonly argv: (target: string, k: ProbeKeys) => ReadonlyArray<string>
  /**
   * Checked outside the transaction, where it is harmless: WATCH (Valkey
   * refuses it inside a MULTI before checking the ACL), undone by UNWATCH;
   * the subscribe commands, on a connection of their own (a subscriber
   * connection runs nothing else), subscribing to the member's own channel
   * for a moment.
   */
  readonly outside?: "watch" | "subscriber"
  /** MULTI and EXEC: the probe's own transaction checks them. */
  readonly transaction?: true
  /**
   * A producer of its own sends it too (on the `producerKeys` among `keys`):
   * `role: "producer"` keeps only these.
   */
  readonly producer?: true
}

/**
 * The keys a producer of its own touches: the shard stream, its seal marker
 * and idempotency window (the append script), the stream's layout (load,
 * and create with an explicit shard count).
 */
const producerKeys: ReadonlyArray<KeyName> = ["shard", "sealed", "idempotency", "layout"]

/** The uses of `options.role`, each with the keys that role sends it with. */
const usesOf = (options: AclOptions): ReadonlyArray<CommandUse> =>
  options.role !== "producer"
    ? commandUses
    : commandUses.flatMap((u) =>
        u.producer !== true
          ? []
          : u.keys === undefined
            ? [u]
            : [{ ...u, keys: u.keys.filter((k) => producerKeys.includes(k)) }],
      )

const SHA = "0000000000000000000000000000000000000000"
/** Every key a script is called with (EVALSHA / EVAL declare them). */
const scriptKeys: ReadonlyArray<KeyName> = [
  "shard",
  "owner",
  "dlq",
  "sealed",
  "idempotency",
  "gate",
  "lease",
  "leaseCounter",
  "requests",
  "serving",
  "lastHeartbeat",
  "inbox",
  "reply",
  "storeRevision",
  "storeSnapshot",
  "storeBatches",
  "audit",
  "layout",
]

/** The one list of commands (and where they are used): the rules and the probe both come from it. */
export const commandUses: ReadonlyArray<CommandUse> = [
  // connection: ioredis's ready check, the feature probe, scripts
  { acl: "info", producer: true, argv: () => ["INFO", "server"] },
  { acl: "ping", producer: true, argv: () => ["PING"] },
  { acl: "select", producer: true, argv: () => ["SELECT", "0"] },
  {
    acl: "client|setname",
    producer: true,
    argv: () => ["CLIENT", "SETNAME", "shardline-acl-probe"],
  },
  // idle waits sharing blocking connections (internal/idleWaits.ts): a batch's connection
  // id, and the unblock that sends it again with more shards
  { acl: "client|id", argv: () => ["CLIENT", "ID"] },
  { acl: "client|unblock", argv: () => ["CLIENT", "UNBLOCK", "0"] },
  { acl: "command|docs", producer: true, argv: () => ["COMMAND", "DOCS", "XADD"] },
  { acl: "evalsha", producer: true, keys: scriptKeys, argv: (key) => ["EVALSHA", SHA, "1", key] },
  { acl: "eval", producer: true, keys: scriptKeys, argv: (key) => ["EVAL", "return 0", "1", key] },
  // the gated fence of ShardStreams.read (MULTI, the gate script's RENAMENX, XREADGROUP,
  // RENAMENX back, EXEC) and the optimistic one (WATCH, GET, MULTI, XREADGROUP, EXEC)
  { acl: "watch", keys: ["shard", "owner"], argv: (key) => ["WATCH", key], outside: "watch" },
  { acl: "unwatch", argv: () => ["UNWATCH"], outside: "watch" },
  // (a producer sends neither: the probe's own transaction needs them)
  { acl: "multi", producer: true, argv: () => ["MULTI"], transaction: true },
  { acl: "exec", producer: true, argv: () => ["EXEC"], transaction: true },
  { acl: "renamenx", keys: ["gate"], argv: (key, k) => ["RENAMENX", key, k.shard] },
  // ShardStreams (direct, and inside read/ack/nack/claim/dead-letter scripts), Store's audit
  {
    acl: "xadd",
    producer: true,
    keys: ["shard", "dlq", "audit"],
    argv: (key) => ["XADD", key, "*", "f", "v"],
  },
  { acl: "xrange", keys: ["shard", "dlq"], argv: (key) => ["XRANGE", key, "-", "+", "COUNT", "1"] },
  {
    acl: "xrevrange",
    keys: ["audit"],
    argv: (key) => ["XREVRANGE", key, "+", "-", "COUNT", "1"],
  },
  { acl: "xread", keys: ["shard"], argv: (key) => ["XREAD", "COUNT", "1", "STREAMS", key, "$"] },
  {
    acl: "xreadgroup",
    keys: ["shard", "gate"],
    argv: (key, k) => ["XREADGROUP", "GROUP", k.group, "probe", "COUNT", "1", "STREAMS", key, ">"],
  },
  {
    acl: "xgroup|create",
    keys: ["shard"],
    argv: (key, k) => ["XGROUP", "CREATE", key, k.group, "0", "MKSTREAM"],
  },
  {
    acl: "xgroup|createconsumer",
    keys: ["shard"],
    argv: (key, k) => ["XGROUP", "CREATECONSUMER", key, k.group, "probe"],
  },
  {
    acl: "xgroup|setid",
    keys: ["shard"],
    argv: (key, k) => ["XGROUP", "SETID", key, k.group, "0"],
  },
  { acl: "xack", keys: ["shard", "gate"], argv: (key, k) => ["XACK", key, k.group, "0-1"] },
  { acl: "xdel", keys: ["shard", "dlq"], argv: (key) => ["XDEL", key, "0-1"] },
  {
    acl: "xackdel",
    when: (o) => o.xackdel,
    keys: ["shard", "gate"],
    argv: (key, k) => ["XACKDEL", key, k.group, "IDS", "1", "0-1"],
  },
  {
    acl: "xclaim",
    keys: ["shard"],
    argv: (key, k) => ["XCLAIM", key, k.group, "probe", "0", "0-1"],
  },
  {
    acl: "xautoclaim",
    keys: ["shard"],
    argv: (key, k) => ["XAUTOCLAIM", key, k.group, "probe", "0", "0-0"],
  },
  { acl: "xpending", keys: ["shard"], argv: (key, k) => ["XPENDING", key, k.group] },
  { acl: "xinfo|stream", keys: ["shard"], argv: (key) => ["XINFO", "STREAM", key] },
  { acl: "xinfo|groups", keys: ["shard"], argv: (key) => ["XINFO", "GROUPS", key] },
  {
    acl: "xinfo|consumers",
    keys: ["shard"],
    argv: (key, k) => ["XINFO", "CONSUMERS", key, k.group],
  },
  // owner tokens, seal markers, the Store's revision and snapshot, the serving key, the
  // lease, the key schema's version
  {
    acl: "get",
    keys: [
      "owner",
      "sealed",
      "serving",
      "storeRevision",
      "storeSnapshot",
      "leaseCounter",
      "schema",
    ],
    argv: (key) => ["GET", key],
  },
  {
    acl: "set",
    keys: [
      "owner",
      "sealed",
      "serving",
      "lastHeartbeat",
      "storeRevision",
      "storeSnapshot",
      "leaseCounter",
      "schema",
    ],
    argv: (key) => ["SET", key, "0"],
  },
  {
    acl: "type",
    producer: true,
    keys: [
      "shard",
      "idempotency",
      "owner",
      "dlq",
      "storeRevision",
      "storeSnapshot",
      "storeBatches",
      "audit",
      "layout",
    ],
    argv: (key) => ["TYPE", key],
  },
  {
    acl: "exists",
    producer: true,
    keys: ["shard", "sealed", "idempotency", "requests", "serving", "lease"],
    argv: (key) => ["EXISTS", key],
  },
  {
    acl: "del",
    keys: ["shard", "owner", "serving", "lease", "storeBatches"],
    argv: (key) => ["DEL", key],
  },
  // idempotent appends: the producer's window (a hash, in the append script)
  { acl: "hgetall", producer: true, keys: ["idempotency"], argv: (key) => ["HGETALL", key] },
  { acl: "hdel", producer: true, keys: ["idempotency"], argv: (key) => ["HDEL", key, "f"] },
  {
    acl: "hincrby",
    producer: true,
    keys: ["idempotency"],
    argv: (key) => ["HINCRBY", key, "seq", "1"],
  },
  // CoordinatorLease, StreamLayouts (a hash), the idempotency window
  { acl: "hmget", producer: true, keys: ["lease", "layout"], argv: (key) => ["HMGET", key, "f"] },
  {
    acl: "hset",
    producer: true,
    keys: ["lease", "layout", "idempotency"],
    argv: (key) => ["HSET", key, "f", "v"],
  },
  { acl: "pttl", keys: ["lease"], argv: (key) => ["PTTL", key] },
  { acl: "incr", keys: ["leaseCounter"], argv: (key) => ["INCR", key] },
  {
    acl: "pexpire",
    producer: true,
    keys: ["lease", "idempotency", "inbox", "reply"],
    argv: (key) => ["PEXPIRE", key, "1000"],
  },
  // Store (revision, snapshot, batches, audit stream) and StreamLayouts
  { acl: "lrange", keys: ["storeBatches"], argv: (key) => ["LRANGE", key, "0", "-1"] },
  { acl: "hget", producer: true, keys: ["layout"], argv: (key) => ["HGET", key, "revision"] },
  // CoordinatorTransport
  { acl: "lpush", keys: ["requests"], argv: (key) => ["LPUSH", key, "x"] },
  { acl: "ltrim", keys: ["requests"], argv: (key) => ["LTRIM", key, "0", "9999"] },
  {
    acl: "rpush",
    keys: ["storeBatches", "inbox", "reply"],
    argv: (key) => ["RPUSH", key, "x"],
  },
  {
    acl: "blmpop",
    keys: ["requests", "inbox"],
    argv: (key) => ["BLMPOP", "0.01", "1", key, "LEFT"],
  },
  { acl: "publish", channel: true, argv: (channel) => ["PUBLISH", channel, "x"] },
  {
    acl: "subscribe",
    channel: true,
    argv: (channel) => ["SUBSCRIBE", channel],
    outside: "subscriber",
  },
  {
    acl: "unsubscribe",
    channel: true,
    argv: (channel) => ["UNSUBSCRIBE", channel],
    outside: "subscriber",
  },
  { acl: "spublish", channel: true, argv: (channel) => ["SPUBLISH", channel, "x"] },
  {
    acl: "ssubscribe",
    channel: true,
    argv: (channel) => ["SSUBSCRIBE", channel],
    outside: "subscriber",
  },
  {
    acl: "sunsubscribe",
    channel: true,
    argv: (channel) => ["SUNSUBSCRIBE", channel],
    outside: "subscriber",
  },
  {
    acl: "cluster|slots",
    producer: true,
    when: (o) => o.cluster === true,
    argv: () => ["CLUSTER", "SLOTS"],
  },
  {
    acl: "cluster|info",
    producer: true,
    when: (o) => o.cluster === true,
    argv: () => ["CLUSTER", "INFO"],
  },
]

export const aclCommands = (options: AclOptions): ReadonlyArray<string> =>
  usesOf(options)
    .filter((u) => u.when?.(options) ?? true)
    .map((u) => u.acl)

/**
 * The arguments after `ACL SETUSER <name> on ><password>`; with `role:
 * "producer"`, a producer of its own's (no channel, no consumer command).
 *
 * @example
 * Acl.aclRules({ xackdel: true, prefix: "tenant-a:" })
 * // ["resetkeys", "resetchannels", "-@all", "~tenant-a:*", "&tenant-a:*", "+info", ...]
 * Acl.aclRules({ xackdel: true, role: "producer" })
 * // ["resetkeys", "resetchannels", "-@all", "~shardline:*", "+info", ..., "+xadd", ...]
 */
export const aclRules = (options: AclOptions): ReadonlyArray<string> => [
  "resetkeys",
  "resetchannels",
  "-@all",
  ...aclKeyPatterns(options.prefix).map((p) => `~${p}`),
  ...(options.role === "producer" ? [] : aclChannelPatterns(options.prefix).map((p) => `&${p}`)),
  ...aclCommands(options).map((c) => `+${c}`),
]

// ---------------------------------------------------------------------------
// the probe

/** A group whose keys the probe checks; `memberIds` name its notice channels (the first is used). */
export interface ProbeTarget {
  readonly stream: string
  readonly group: string
  readonly memberIds?: ReadonlyArray<string>
}

/** One command line the probe queues, and what it checks. */
interface ProbeLine {
  readonly use: CommandUse
  readonly argv: ReadonlyArray<string>
  /** The key (or channel) it checks, if any. */
  readonly target?: { readonly kind: "key" | "channel"; readonly name: string }
}

/** Redis' glob (`*`, `?`, `[...]`, `\x`) as a RegExp. */
const globRegExp = (glob: string): RegExp => {
  let out = ""
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!
    if (c === "*") out += ".*"
    else if (c === "?") out += "."
    else if (c === "\\" && i + 1 < glob.length) out += `\\${glob[++i]}`
    else if (c === "[") {
      const end = glob.indexOf("]", i + 1)
      if (end < 0) out += "\\["
      else {
        const body = glob.slice(i + 1, end)
        out += `[${body.startsWith("^") ? `^${body.slice(1)}` : body}]`
        i = end
      }
    } else out += c.replace(/[.+^${}()|\\]/g, "\\$&")
  }
  return new RegExp(`^${out}$`, "s")
}

/** Whether Redis' glob `pattern` matches `name` (an ACL key or channel pattern). */
export const globMatches = (pattern: string, name: string): boolean =>
  globRegExp(pattern).test(name)

/** Every command line the probe queues for `target` (each command on each key it is used with). */
export const probeLines = (
  keys: Keys.KeySpace,
  target: ProbeTarget,
  options: AclOptions,
): ReadonlyArray<ProbeLine> => {
  const k = probeKeys(keys, target.stream, target.group, target.memberIds?.[0])
  const lines: Array<ProbeLine> = []
  for (const use of usesOf(options)) {
    if (!(use.when?.(options) ?? true) || use.transaction) continue
    if (use.channel)
      for (const channel of CHANNELS)
        lines.push({
          use,
          argv: use.argv(k[channel], k),
          target: { kind: "channel", name: k[channel] },
        })
    else if (use.keys === undefined) lines.push({ use, argv: use.argv("", k) })
    else
      for (const name of use.keys)
        lines.push({ use, argv: use.argv(k[name], k), target: { kind: "key", name: k[name] } })
  }
  return lines
}

// CRC16 (XMODEM) of Redis Cluster's key slots, with hash tags
const crc16 = (data: Buffer): number => {
  let crc = 0
  for (const byte of data) {
    crc ^= byte << 8
    for (let i = 0; i < 8; i++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc
}

/** The cluster slot of a key (or a sharded channel): CRC16 of its hash tag, mod 16384. */
export const keySlot = (key: string): number => {
  const open = key.indexOf("{")
  if (open >= 0) {
    const close = key.indexOf("}", open + 1)
    if (close > open + 1) return crc16(Buffer.from(key.slice(open + 1, close))) % 16_384
  }
  return crc16(Buffer.from(key)) % 16_384
}

/** What kind of refusal a NOPERM reply is (Redis 7.0 and 7.2+ / Valkey word them differently). */
const refusalOf = (message: string): "command" | "key" | "channel" | undefined => {
  if (!/\bNOPERM\b/.test(message)) return undefined
  if (/\bkey/i.test(message)) return "key"
  if (/\bchannel/i.test(message)) return "channel"
  return "command"
}

/** The rule of `patterns` that grants `name`, or a rule for the name itself. */
const grantFor = (prefix: "~" | "&", patterns: ReadonlyArray<string>, name: string): string => {
  const pattern = patterns.find((p) => globMatches(p, name))
  return `${prefix}${pattern ?? name}`
}

/**
 * Connection options that make the probe's connection safe: no reconnection
 * and no resending (a transaction never survives a new connection, so a
 * command queued for it must never run on another), no offline queue, no
 * auto-pipelining (it could reorder the MULTI), no ready check (INFO).
 */
const SAFE: RedisOptions = {
  lazyConnect: true,
  enableAutoPipelining: false,
  autoResendUnfulfilledCommands: false,
  enableOfflineQueue: false,
  enableReadyCheck: false,
  retryStrategy: () => null,
  maxRetriesPerRequest: 0,
}

/** Queued after the probe's lines: each is refused at queue time, so EXEC aborts. */
const ABORT_GUARDS: ReadonlyArray<ReadonlyArray<string>> = [["SHARDLINE.ACL-PROBE.ABORT"], ["GET"]]

/** Run `lines` inside one MULTI that never executes; the NOPERM of each line, by index. */
const runProbe = async (
  client: Redis,
  lines: ReadonlyArray<ProbeLine>,
): Promise<{ readonly refused: Map<ProbeLine, string>; readonly transaction: Array<string> }> => {
  const refused = new Map<ProbeLine, string>()
  const transaction: Array<string> = []
  const errorOf = (r: [Error | null, unknown] | undefined) => r?.[0]?.message
  // the subscribe commands, one at a time on a connection of their own
  const subscriber = lines.filter((l) => l.use.outside === "subscriber")
  if (subscriber.length > 0) {
    const sub = client.duplicate()
    sub.on("error", () => {})
    await sub.connect()
    try {
      for (const l of subscriber) {
        const [name, ...args] = l.argv as [string, ...Array<string>]
        const call = (sub as unknown as Record<string, (...a: Array<string>) => Promise<unknown>>)[
          name.toLowerCase()
        ]!
        const e = await call.apply(sub, args).then(
          () => undefined,
          (error: Error) => error.message,
        )
        if (e !== undefined && refusalOf(e) !== undefined) refused.set(l, e)
      }
    } finally {
      sub.disconnect()
    }
  }
  await client.connect()
  try {
    // WATCH cannot be queued: checked before the transaction, undone at once
    const outside = lines.filter((l) => l.use.outside === "watch")
    if (outside.length > 0) {
      const p = client.pipeline()
      for (const l of outside) p.call(l.argv[0]!, ...l.argv.slice(1))
      p.call("UNWATCH")
      const replies = (await p.exec()) ?? []
      outside.forEach((l, i) => {
        const e = errorOf(replies[i] as [Error | null, unknown])
        if (e !== undefined && refusalOf(e) !== undefined) refused.set(l, e)
      })
    }
    // MULTI alone first: queued commands are sent only once it is confirmed,
    // so that a refused MULTI never lets one of them run
    const multi = await client.call("MULTI").then(
      () => undefined,
      (e: Error) => e.message,
    )
    if (multi !== undefined) {
      transaction.push(refusalOf(multi) !== undefined ? "multi" : `MULTI failed: ${multi}`)
      return { refused, transaction }
    }
    const inside = lines.filter((l) => !l.use.outside)
    const p = client.pipeline()
    for (const l of inside) p.call(l.argv[0]!, ...l.argv.slice(1))
    // two commands Redis refuses while queueing them (an unknown command, and
    // GET without its key: a fixed arity is checked at queue time, unlike
    // PING's, whose arity Redis 7.0 checks only when it runs), so EXEC always
    // discards the transaction whatever the lines above did
    for (const guard of ABORT_GUARDS) p.call(guard[0]!, ...guard.slice(1))
    p.call("EXEC")
    const replies = (await p.exec()) ?? []
    inside.forEach((l, i) => {
      const e = errorOf(replies[i] as [Error | null, unknown])
      if (e !== undefined && refusalOf(e) !== undefined) refused.set(l, e)
    })
    for (let g = 0; g < ABORT_GUARDS.length; g++)
      if (errorOf(replies[inside.length + g] as [Error | null, unknown]) === undefined)
        throw new Error(
          `the ACL probe's guard ${ABORT_GUARDS[g]!.join(" ")} was queued: the transaction is not discarded by it`,
        )
    const exec = replies[inside.length + ABORT_GUARDS.length] as [Error | null, unknown] | undefined
    const execError = errorOf(exec)
    if (execError === undefined)
      // cannot happen (the queued arity error aborts it), but never silently
      throw new Error("the ACL probe's transaction executed; it must always be discarded")
    if (refusalOf(execError) !== undefined) transaction.push("exec")
    return { refused, transaction }
  } finally {
    client.disconnect()
  }
}

/**
 * Check that the connection's ACL user may run every command, on every key
 * and channel, that the ports use for these groups (`commandUses`, with the
 * keys of src/keys.ts), before anything runs: each command is queued inside
 * a MULTI that is always discarded (a queued command is checked against the
 * ACL; a deliberate arity error makes EXEC abort), on a connection of its
 * own that never reconnects. Redis >= 7.0 and Valkey; no admin right (ACL
 * DRYRUN would need one) and nothing executed. In a cluster each slot's
 * lines go to the node that owns it.
 *
 * Fails `PermissionDenied` naming every command, key and channel refused,
 * with the rule that grants it.
 */
export const checkPermissions = (
  connection: RedisConnectionShape,
  targets: ReadonlyArray<ProbeTarget>,
): Effect.Effect<void, PermissionDenied | BackendUnavailable> =>
  probe(connection, targets, "member", targets.map((t) => `${t.group} of ${t.stream}`).join(", "))

/**
 * `checkPermissions` for a producer of its own (`createProducer`): the
 * connection's user may run what sending to `streams` needs (`aclRules({
 * role: "producer" })`: the append script, the stream layouts, the
 * connection's own commands, and MULTI / EXEC, which the probe's
 * transaction needs), and nothing a consumer needs is asked of it.
 *
 * With no stream (a runtime with producers only, at its start: their
 * streams are not known yet), the commands and the namespace's key pattern
 * are checked on a stand-in stream of the namespace.
 *
 * @example
 * yield* Acl.checkProducerPermissions(connection, ["orders"])
 * // PermissionDenied: the Redis user "app" may not do what Shardline needs to send to orders:
 * // command XADD (+xadd). Grant it: ACL SETUSER app +xadd (...)
 */
export const checkProducerPermissions = (
  connection: RedisConnectionShape,
  streams: ReadonlyArray<string>,
): Effect.Effect<void, PermissionDenied | BackendUnavailable> =>
  probe(
    connection,
    // the group names no key a producer touches (producerKeys)
    (streams.length === 0 ? [ANY_STREAM] : streams).map((stream) => ({
      stream,
      group: "producer",
    })),
    "producer",
    streams.length === 0
      ? `to send to the streams of namespace ${connection.keys.prefix}`
      : `to send to ${streams.join(", ")}`,
  )

/**
 * The stream `checkProducerPermissions` probes when given none: a runtime
 * with producers only knows their streams once they are made, after its
 * start, so its start checks the producer's commands on this stream's keys,
 * which the namespace's key pattern covers as it covers every stream's
 * (docs/redis.md, "ACL"). Nothing is created: the probe runs nothing.
 */
const ANY_STREAM = "shardline-acl-probe"

const probe = (
  connection: RedisConnectionShape,
  targets: ReadonlyArray<ProbeTarget>,
  role: "member" | "producer",
  /** What the permissions are for, in the message: "billing of orders", "to send to orders". */
  forWhat: string,
): Effect.Effect<void, PermissionDenied | BackendUnavailable> =>
  Effect.gen(function* () {
    const options: AclOptions = {
      xackdel: connection.features.xackdel,
      cluster: connection.isCluster,
      prefix: connection.keys.prefix,
      role,
    }
    // lines of every target, once each
    const seen = new Set<string>()
    const lines: Array<ProbeLine> = []
    for (const t of targets)
      for (const l of probeLines(connection.keys, t, options)) {
        const id = JSON.stringify(l.argv)
        if (seen.has(id)) continue
        seen.add(id)
        lines.push(l)
      }
    if (lines.length === 0) return
    const client = connection.client
    // one transaction per node: a single node takes them all; in a cluster,
    // one per slot, on the node that owns it (keyless lines go with the first)
    const groups = new Map<
      string,
      { readonly node: () => Redis; readonly lines: Array<ProbeLine> }
    >()
    if (client instanceof Cluster) {
      const bySlot = new Map<number, Array<ProbeLine>>()
      const keyless: Array<ProbeLine> = []
      for (const l of lines)
        if (l.target === undefined) keyless.push(l)
        else {
          const slot = keySlot(l.target.name)
          bySlot.set(slot, [...(bySlot.get(slot) ?? []), l])
        }
      const first = bySlot.values().next()
      if (!first.done) first.value.push(...keyless)
      else bySlot.set(0, keyless)
      for (const [slot, slotLines] of bySlot) {
        const owner = client.slots[slot]?.[0]
        if (owner === undefined)
          return yield* new BackendUnavailable({
            operation: "acl probe",
            message: `no cluster node serves slot ${slot}`,
          })
        const at = owner.lastIndexOf(":")
        groups.set(`${slot}`, {
          node: () =>
            new Redis({
              ...client.options.redisOptions,
              host: owner.slice(0, at),
              port: Number(owner.slice(at + 1)),
              ...SAFE,
            }),
          lines: slotLines,
        })
      }
    } else groups.set("node", { node: () => client.duplicate(SAFE), lines })

    const refused = new Map<ProbeLine, string>()
    const transaction = new Set<string>()
    for (const group of groups.values()) {
      const node = group.node()
      node.on("error", () => {})
      const result = yield* Effect.tryPromise({
        try: () => runProbe(node, group.lines),
        catch: (cause) =>
          new BackendUnavailable({
            operation: "acl probe",
            message: cause instanceof Error ? cause.message : String(cause),
            cause,
          }),
      })
      for (const [l, e] of result.refused) refused.set(l, e)
      for (const t of result.transaction) {
        if (t.startsWith("MULTI failed"))
          return yield* new BackendUnavailable({ operation: "acl probe", message: t })
        transaction.add(t)
      }
    }
    if (refused.size === 0 && transaction.size === 0) return

    const missing: Array<MissingPermission> = []
    const add = (m: MissingPermission) => {
      if (!missing.some((x) => x.rule === m.rule)) missing.push(m)
    }
    for (const t of transaction) add({ kind: "command", command: t, rule: `+${t}` })
    for (const [l, message] of refused) {
      const kind = refusalOf(message)!
      if (kind === "command") add({ kind, command: l.use.acl, rule: `+${l.use.acl}` })
      else if (l.target !== undefined) {
        const rule =
          kind === "key"
            ? grantFor("~", aclKeyPatterns(options.prefix), l.target.name)
            : grantFor("&", aclChannelPatterns(options.prefix), l.target.name)
        add({ kind, command: l.use.acl, target: l.target.name, rule })
      }
    }
    const user = userOf(client)
    const commandName = (acl: string) => acl.toUpperCase().replace("|", " ")
    const named = missing.map((m) => {
      if (m.kind === "command") return `command ${commandName(m.command)} (${m.rule})`
      const by = [...refused.keys()]
        .filter((l) => l.target?.name === m.target && refusalOf(refused.get(l)!) === m.kind)
        .map((l) => commandName(l.use.acl))
      return `${m.kind} ${m.target} (used by ${[...new Set(by)].join(", ")}; ${m.rule})`
    })
    return yield* new PermissionDenied({
      user,
      missing,
      message: `the Redis user ${JSON.stringify(user)} may not do what Shardline needs ${role === "member" ? "for " : ""}${forWhat}: ${named.join("; ")}. Grant it: ACL SETUSER ${user} ${missing.map((m) => m.rule).join(" ")} (docs/redis.md, "ACL", lists every rule: Acl.aclRules)`,
    })
  })

/**
 * The commands `shardline inspect` and `shardline dashboard` send (directly
 * and from the drainState script): reads only. A user with these rules can
 * watch every group and change nothing (docs/observability.md, "The
 * dashboard"; a script's commands are checked against the caller's ACL too,
 * so EVAL cannot write either).
 */
export const readOnlyCommands = (
  options: Pick<AclOptions, "cluster"> = {},
): ReadonlyArray<string> => [
  // connection: ioredis's ready check, the feature probe
  "info",
  "ping",
  "select",
  "client|setname",
  "command|docs",
  // drainState's script (XINFO GROUPS, EXISTS, TYPE, XRANGE inside)
  "evalsha",
  "eval",
  // the groups on the server, the snapshot, layouts, lease, audit log
  "scan",
  "get",
  "hget",
  "hmget",
  "hgetall",
  "lrange",
  "pttl",
  "type",
  "exists",
  // shards, their groups and dead-letter streams
  "xrange",
  "xrevrange",
  "xpending",
  "xinfo|stream",
  "xinfo|groups",
  "xinfo|consumers",
  ...(options.cluster ? ["cluster|slots", "cluster|info"] : []),
]

/**
 * The arguments after `ACL SETUSER <name> on ><password>` for a read-only
 * (dashboard) user of the namespace `prefix` (default `shardline:`).
 */
export const readOnlyRules = (
  options: Pick<AclOptions, "cluster" | "prefix"> = {},
): ReadonlyArray<string> => [
  "resetkeys",
  "resetchannels",
  "-@all",
  ...aclKeyPatterns(options.prefix).map((p) => `~${p}`),
  ...readOnlyCommands(options).map((c) => `+${c}`),
]
