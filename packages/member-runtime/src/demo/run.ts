/**
 * The demo's group (README "Quick start"): three processes' worth of
 * runtimes in this process on one set of memory ports, as pods would share
 * one Redis, each an embedded coordinator candidate.
 *
 * - pod-a: a `@StreamListener` with `concurrency: 2` (pod-a-m0, pod-a-m1);
 * - pod-b: an explicit member with `runtimeMaxConcurrency: 2`;
 * - pod-c: a listener with `concurrency: 1`, started mid-run;
 * - pod-b is stopped gracefully a third of the way through.
 *
 * Every handled message is recorded; the summary verifies that every
 * produced message was handled exactly once, that per-key order held, that
 * each membership change moved exactly as many shards as the sticky
 * assignor's lower bound (`movementLowerBound`), and reports the longest
 * handoff (revoke of the old owner to assignment of the new one).
 */
import { randomUUID } from "node:crypto"
import { movementLowerBound } from "@shardline/core"
import { Keys, RedisConnection } from "@shardline/redis-store"
import { Result } from "effect"
import { Cluster } from "ioredis"
import { consumer } from "../Consumer.js"
import { makeEventHub, type RuntimeEvent } from "../Events.js"
import type { Message, MessageContext } from "../Message.js"
import { memoryPorts } from "../Ports.js"
import { decodeRedisOptions, type RedisOptions } from "../Redis.js"
import { type ShardlineRuntime, start } from "../Runtime.js"
import { StreamListener } from "../StreamListener.js"

export interface DemoOptions {
  readonly messages: number
  readonly keys: number
  readonly shards: number
  /** Called with a progress line while the demo runs (about every 200 ms). */
  readonly onProgress?: (line: string) => void
  /** Called with each phase as it starts ("pod-b stops", ...). */
  readonly onPhase?: (line: string) => void
  /**
   * Run on Redis instead of in memory: each pod is a runtime with its own
   * connection, on a stream named `orders-<run id>`; its keys are deleted at
   * the end (`keep` leaves them for `shardline inspect`).
   */
  readonly redis?: RedisOptions
  readonly keep?: boolean
}

export interface MembershipChange {
  readonly label: string
  readonly members: ReadonlyArray<string>
  readonly moved: number
  readonly lowerBound: number
}

export interface DemoSummary {
  readonly stream: string
  /** Keys deleted from Redis at the end (0 in memory). */
  readonly keysDeleted: number
  readonly produced: number
  readonly handled: number
  readonly distinctHandled: number
  readonly duplicates: number
  readonly missing: number
  readonly keys: number
  readonly orderViolations: number
  readonly changes: ReadonlyArray<MembershipChange>
  readonly handoffs: number
  readonly longestHandoffMs: number
  readonly wallMs: number
  readonly messagesPerSecond: number
  readonly ok: boolean
}

const group = "billing"
const timing = {
  sessionTimeoutMs: 3_000,
  rebalanceTimeoutMs: 6_000,
  heartbeatIntervalMs: 200,
} as const

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Owner of each shard, from the members' assigned / revoked / lost events. */
class Ownership {
  readonly owner = new Map<number, string>()
  readonly revokingAt = new Map<number, { readonly member: string; readonly at: number }>()
  readonly handoffs: Array<number> = []
  lastChange = Date.now()

  apply(e: RuntimeEvent): void {
    const now = Date.now()
    switch (e.type) {
      case "revoking":
        this.revokingAt.set(e.shard, { member: e.memberId, at: now })
        break
      case "assigned": {
        const revoke = this.revokingAt.get(e.shard)
        if (revoke !== undefined && revoke.member !== e.memberId)
          this.handoffs.push(now - revoke.at)
        this.revokingAt.delete(e.shard)
        this.owner.set(e.shard, e.memberId)
        this.lastChange = now
        break
      }
      case "revoked":
        if (this.owner.get(e.shard) === e.memberId) this.owner.delete(e.shard)
        this.lastChange = now
        break
      case "lost":
        for (const shard of e.shards)
          if (this.owner.get(shard) === e.memberId) this.owner.delete(shard)
        this.lastChange = now
        break
      default:
        break
    }
  }

  owners(shards: number): Array<string | null> {
    return Array.from({ length: shards }, (_, s) => this.owner.get(s) ?? null)
  }
}

/**
 * Deletes every key of the demo's stream in its namespace (src/keys.ts of
 * redis-store): its shard streams, owner tokens, dead-letter streams
 * (`<prefix>{<stream>:<shard>}...`), its groups' control-plane keys
 * (`<prefix>group:{<stream>:...}`) and its layout (`<prefix>stream:{<stream>}:layout`),
 * on every master of a cluster; and the namespace's key schema record when
 * nothing else is left in the namespace.
 */
/** SCAN patterns of every key of `stream` in the namespace `prefix` (default `shardline:`). */
const streamKeyPatterns = (prefix: string | undefined, stream: string): Array<string> => {
  const keys = Keys.make(prefix)
  const glob = Keys.globEscape
  return [
    `${glob(keys.shardKey(stream, 0).slice(0, -"0}".length))}*`,
    `${glob(keys.groupBase({ stream, group: "" }).slice(0, -"}".length))}*`,
    glob(keys.layoutKey(stream)),
  ]
}

export const deleteStreamKeys = async (redis: RedisOptions, stream: string): Promise<number> => {
  const decoded = decodeRedisOptions(redis)
  if (Result.isFailure(decoded)) throw decoded.failure
  const client = RedisConnection.makeClient(decoded.success)
  client.on("error", () => {})
  try {
    // a cluster client knows its masters once it has loaded the slots
    if (client instanceof Cluster && client.status !== "ready")
      await new Promise<void>((resolve, reject) => {
        client.once("ready", () => resolve())
        setTimeout(
          () => reject(new Error("the cluster did not become ready in 10 s")),
          10_000,
        ).unref()
      })
    const nodes = client instanceof Cluster ? client.nodes("master") : [client]
    let deleted = 0
    for (const node of nodes)
      for (const pattern of streamKeyPatterns(decoded.success.keyPrefix, stream)) {
        let cursor = "0"
        do {
          const [next, keys] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1000)
          cursor = next
          // one key per call: keys of different hash slots cannot share a DEL in a cluster
          for (const key of keys) deleted += await node.del(key)
        } while (cursor !== "0")
      }
    // the namespace's key schema record too, when nothing else is left in it (the demo
    // recorded it on a server that held no Shardline keys)
    const namespace = Keys.make(decoded.success.keyPrefix)
    const left = new Set<string>()
    for (const node of nodes) {
      let cursor = "0"
      do {
        const [next, keys] = await node.scan(
          cursor,
          "MATCH",
          `${Keys.globEscape(namespace.prefix)}*`,
          "COUNT",
          1000,
        )
        cursor = next
        for (const key of keys) left.add(key)
      } while (cursor !== "0" && left.size < 2)
    }
    if (left.size === 1 && left.has(namespace.schema)) deleted += await client.del(namespace.schema)
    return deleted
  } finally {
    client.disconnect()
  }
}

export const runDemo = async (options: DemoOptions): Promise<DemoSummary> => {
  // on Redis: a stream of this run's own, so a reused server holds nothing of an earlier run
  const stream = options.redis === undefined ? "orders" : `orders-${randomUUID().slice(0, 8)}`
  const ports = options.redis === undefined ? memoryPorts() : undefined
  const ownership = new Ownership()
  // one hub for every runtime: one event stream in emission order
  const eventHub = makeEventHub()
  eventHub.on((e) => ownership.apply(e))
  const handledByKey = new Map<string, Array<number>>()
  let handled = 0
  const record = (message: Message) => {
    handled++
    const list = handledByKey.get(message.key!)
    if (list === undefined) handledByKey.set(message.key!, [Number(message.fields.n)])
    else list.push(Number(message.fields.n))
  }
  const shardCount = options.shards
  const declared = { stream, group, shardCount, ...timing }

  class Billing {
    @StreamListener({ ...declared, concurrency: 2 })
    async onOrder(message: Message, _context: MessageContext) {
      record(message)
    }
  }
  class Audit {
    @StreamListener({ ...declared, concurrency: 1 })
    async onOrder(message: Message) {
      record(message)
    }
  }

  const common = {
    ...(options.redis === undefined ? { ports } : { redis: options.redis }),
    eventHub,
    handleSignals: false,
    shutdownTimeoutMs: 10_000,
  } as const
  const startPod = (memberBase: string, rest: Parameters<typeof start>[0]) =>
    start({ ...common, memberBase, ...rest })

  const t0 = Date.now()
  const runtimes = new Map<string, ShardlineRuntime>()
  runtimes.set("pod-a", await startPod("pod-a", { listeners: [new Billing()] }))
  runtimes.set(
    "pod-b",
    await startPod("pod-b", {
      consumers: [
        consumer({
          ...declared,
          runtimeMaxConcurrency: 2,
          eachMessage: (message) => record(message),
        }),
      ],
    }),
  )

  const liveMembers = () =>
    [...runtimes.values()].flatMap((r) => r.members().map((m) => m.memberId)).sort()

  /** Wait until every shard has one owner among the live members, balanced, and quiet for a while. */
  const settled = async () => {
    for (;;) {
      const members = liveMembers()
      const counts = new Map(members.map((m) => [m, 0]))
      let complete = true
      for (let s = 0; s < shardCount; s++) {
        const o = ownership.owner.get(s)
        if (o === undefined || !counts.has(o)) complete = false
        else counts.set(o, counts.get(o)! + 1)
      }
      const values = [...counts.values()]
      const balanced = values.length > 0 && Math.max(...values) - Math.min(...values) <= 1
      if (complete && balanced && Date.now() - ownership.lastChange > 300) return
      await sleep(25)
    }
  }

  const changes: Array<MembershipChange> = []
  /** Run a membership change and measure it against the assignor's lower bound. */
  const change = async (label: string, act: () => Promise<void>) => {
    await settled()
    const previous = ownership.owners(shardCount)
    options.onPhase?.(label)
    await act()
    await settled()
    const members = liveMembers()
    const owners = ownership.owners(shardCount)
    const moved = owners.filter((o, s) => previous[s] !== null && previous[s] !== o).length
    changes.push({
      label,
      members,
      moved,
      lowerBound: movementLowerBound({
        shardCount,
        members: members.map((id) => ({ id })),
        previous,
      }),
    })
  }

  const progress = setInterval(() => {
    const owners = new Map<string, number>()
    for (const o of ownership.owner.values()) owners.set(o, (owners.get(o) ?? 0) + 1)
    const width = 24
    const done = Math.floor((handled / options.messages) * width)
    const bar = `${"#".repeat(Math.min(done, width))}${".".repeat(Math.max(0, width - done))}`
    const who = [...owners]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([m, n]) => `${m}:${n}`)
      .join(" ")
    options.onProgress?.(
      `[${bar}] ${handled.toLocaleString("en-US")}/${options.messages.toLocaleString("en-US")} handled  shards ${who}`,
    )
  }, 200)

  try {
    const producer = runtimes.get("pod-a")!.producer(stream)
    const chunks = 60
    const perChunk = Math.ceil(options.messages / chunks)
    let produced = 0
    const produce = async (upTo: number) => {
      while (produced < Math.min(upTo, options.messages)) {
        const n0 = produced
        const size = Math.min(perChunk, options.messages - produced)
        produced += size
        await producer.sendBatch(
          Array.from({ length: size }, (_, i) => ({
            key: `customer-${(n0 + i) % options.keys}`,
            fields: { n: String(n0 + i) },
          })),
        )
        await sleep(20)
      }
    }

    options.onPhase?.("pod-a (2 listener members) and pod-b (1 member, 2 workers) start")
    await settled()
    await produce(options.messages / 3)
    await change("pod-b stops gracefully (drains, leaves)", async () => {
      const b = runtimes.get("pod-b")!
      runtimes.delete("pod-b")
      await b.stop()
    })
    await produce((2 * options.messages) / 3)
    await change("pod-c joins (1 listener member)", async () => {
      runtimes.set("pod-c", await startPod("pod-c", { listeners: [new Audit()] }))
    })
    await produce(options.messages)
    await producer.flush()
    while (handled < options.messages) await sleep(20)
  } finally {
    clearInterval(progress)
    await Promise.all([...runtimes.values()].map((r) => r.stop()))
  }
  const wallMs = Date.now() - t0
  const keysDeleted =
    options.redis !== undefined && options.keep !== true
      ? await deleteStreamKeys(options.redis, stream)
      : 0

  let distinct = 0
  let orderViolations = 0
  for (const ns of handledByKey.values()) {
    distinct += new Set(ns).size
    for (let i = 1; i < ns.length; i++) if (ns[i]! <= ns[i - 1]!) orderViolations++
  }
  const duplicates = handled - distinct
  const missing = options.messages - distinct
  const ok =
    missing === 0 &&
    duplicates === 0 &&
    orderViolations === 0 &&
    changes.every((c) => c.moved === c.lowerBound)
  return {
    stream,
    keysDeleted,
    produced: options.messages,
    handled,
    distinctHandled: distinct,
    duplicates,
    missing,
    keys: handledByKey.size,
    orderViolations,
    changes,
    handoffs: ownership.handoffs.length,
    longestHandoffMs: Math.max(0, ...ownership.handoffs),
    wallMs,
    messagesPerSecond: Math.round(options.messages / (wallMs / 1000)),
    ok,
  }
}

/** The summary as printed by `pnpm demo`. */
export const renderSummary = (s: DemoSummary): string => {
  const check = (good: boolean) => (good ? "ok" : "FAILED")
  const lines = [
    "",
    `Stream "${s.stream}"${s.keysDeleted > 0 ? ` (its ${s.keysDeleted} Redis keys deleted at the end)` : ""}.`,
    `Produced ${s.produced.toLocaleString("en-US")} messages over ${s.keys} keys in ${(s.wallMs / 1000).toFixed(1)} s (${s.messagesPerSecond.toLocaleString("en-US")} msg/s end to end, paced producer).`,
    `  every message handled:   ${check(s.missing === 0)} (${s.distinctHandled.toLocaleString("en-US")} handled, ${s.missing} missing)`,
    `  handled exactly once:    ${check(s.duplicates === 0)} (${s.duplicates} re-deliveries: graceful moves drain before they hand off)`,
    `  per-key order held:      ${check(s.orderViolations === 0)} (${s.orderViolations} out-of-order deliveries)`,
    "  shards moved vs the sticky assignor's lower bound:",
    ...s.changes.map(
      (c) =>
        `    ${c.label.padEnd(58)} moved ${String(c.moved).padStart(2)} / bound ${String(c.lowerBound).padStart(2)}  ${check(c.moved === c.lowerBound)}`,
    ),
    `  handoffs: ${s.handoffs}, longest ${s.longestHandoffMs} ms (old owner told to revoke -> new owner assigned)`,
    "",
    s.ok ? "All checks passed." : "Some checks FAILED.",
  ]
  return lines.join("\n")
}
