/**
 * Administration of a stream's groups and dead letters on Redis
 * (docs/redis.md, "Dead letters and groups"; the `shardline dlq` and
 * `shardline groups` commands run these):
 *
 * - dead letters: `listDeadLetters`, `countDeadLetters`, `showDeadLetter`,
 *   `replayDeadLetters`, `purgeDeadLetters`. A shard's dead-letter stream
 *   `<prefix>{<stream>:<shard>}:dlq` holds every group's dead letters (the group is
 *   the entry's `shardline-dlq-group` field), so a group's are found by
 *   reading each shard's stream and are removed entry by entry (XDEL),
 *   never by deleting a stream another group shares.
 * - replay goes through the producer's path: the key is routed by the
 *   stream's current layout (`Layout.shardOf`, as `runtime.producer` does;
 *   a shard sealed meanwhile is routed again), the entry appended with its
 *   original fields and key, then removed from the dead-letter stream. Each
 *   letter is appended once however often the replay runs: its target is
 *   recorded beside it before the append (`<shard>:dlq:replays`), and the
 *   target keeps a mark of it (`<target>:dlq:replayed`), checked in the
 *   append's script, until the letter is removed (redis-store src/lua/dlq-replay-*.lua).
 * - groups: `listGroups` (every group the stream's layout registers or its
 *   shards know), `planGroupDeletion` / `deleteGroup` (the group's Redis
 *   consumer groups, owner tokens, dead letters, every key under its tag,
 *   and its entry in the stream's layout, which would otherwise hold back
 *   the retirement of earlier generations). A live group (its coordinator
 *   lease held, a coordinator serving, a member that heartbeated or a
 *   consumer that read within the session timeout) is refused unless `force`.
 *
 * Everything is read from Redis alone, through the ports of `RedisPorts`.
 *
 * @example
 * const letters = yield* Admin.listDeadLetters({ stream: "orders", group: "billing" })
 * yield* Admin.replayDeadLetters({ stream: "orders", group: "billing", ids: [letters[0]!.id] })
 */
import {
  BackendUnavailable,
  type GroupKey,
  Layout,
  ShardStreams,
  Store,
  StreamLayouts,
} from "@shardline/core"
import { Acl, AdminRefused, Keys, RedisConnection } from "@shardline/redis-store"
import { Code, evalScript, type Script, Scripts } from "@shardline/redis-store/internal"
import { Effect, Option } from "effect"
import { Cluster } from "ioredis"

/** The field the producer keeps the routing key in (member-runtime's `KEY_FIELD`). */
export const KEY_FIELD = "shardline-key"

const { DeadLetterFields } = ShardStreams

/** The connection's namespace (src/keys.ts). */
const keySpace = RedisConnection.RedisConnection.useSync((c) => c.keys)

export type AdminError = AdminRefused | BackendUnavailable

export type Services =
  | RedisConnection.RedisConnection
  | ShardStreams.ShardStreams
  | StreamLayouts.StreamLayouts
  | Store.Store

export interface DeadLetter {
  readonly shard: number
  /** The dead-letter entry's id (in `<prefix>{<stream>:<shard>}:dlq`). */
  readonly id: string
  /** The entry's id in the shard stream, before it was dead-lettered. */
  readonly originalId: string
  readonly group: string
  readonly deliveries: number
  readonly reason: string
  /** The producer's routing key (undefined for entries written without one). */
  readonly key: string | undefined
  /** The entry's fields, without the key and the dead-letter fields. */
  readonly fields: Readonly<Record<string, string>>
}

export interface DeadLetterFilter {
  readonly stream: string
  readonly group: string
  /** Only this shard's. */
  readonly shard?: number
  /**
   * Only these dead-letter ids of `shard` (required with them: each shard's
   * dead-letter stream numbers its entries on its own, so two shards can
   * hold the same id).
   */
  readonly ids?: ReadonlyArray<string>
  /** At most this many, in shard and id order. */
  readonly limit?: number
}

const describe = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

const command = <A>(operation: string, run: (c: RedisConnection.Client) => Promise<A>) =>
  Effect.gen(function* () {
    const connection = yield* RedisConnection.RedisConnection
    return yield* connection.command(operation, run)
  })

/** A stream's stored layout; any failure but the transport's is reported as the layout's. */
const loadLayout = (layouts: StreamLayouts.StreamLayouts["Service"], stream: string) =>
  layouts
    .load(stream)
    .pipe(
      Effect.mapError((e) =>
        e._tag === "BackendUnavailable"
          ? e
          : new BackendUnavailable({ operation: "layout", message: e.message, cause: e }),
      ),
    )

const flatFields = (raw: ReadonlyArray<string>): Record<string, string> => {
  const out: Record<string, string> = {}
  for (let i = 0; i + 1 < raw.length; i += 2) out[raw[i]!] = raw[i + 1]!
  return out
}

const toDeadLetter = (shard: number, id: string, raw: Record<string, string>): DeadLetter => {
  const fields: Record<string, string> = {}
  for (const [k, v] of Object.entries(raw))
    if (
      k !== KEY_FIELD &&
      k !== DeadLetterFields.originalId &&
      k !== DeadLetterFields.reason &&
      k !== DeadLetterFields.group &&
      k !== DeadLetterFields.deliveryCount
    )
      fields[k] = v
  return {
    shard,
    id,
    originalId: raw[DeadLetterFields.originalId] ?? "",
    group: raw[DeadLetterFields.group] ?? "",
    deliveries: Number(raw[DeadLetterFields.deliveryCount] ?? 0),
    reason: raw[DeadLetterFields.reason] ?? "",
    key: raw[KEY_FIELD],
    fields,
  }
}

/**
 * Every shard the stream ever had (0 up to the end of its last generation):
 * retired shards keep their dead-letter streams. From the stream's layout,
 * else from the group's stored snapshot.
 */
export const streamShards = (
  stream: string,
  group?: string,
): Effect.Effect<ReadonlyArray<number>, AdminError, Services> =>
  Effect.gen(function* () {
    const layouts = yield* StreamLayouts.StreamLayouts
    const stored = yield* loadLayout(layouts, stream)
    let end = 0
    if (Option.isSome(stored))
      for (const g of stored.value.record.generations)
        end = Math.max(end, g.firstShard + g.shardCount)
    else if (group !== undefined) {
      const snapshot = yield* loadSnapshot({ stream, group })
      if (Option.isSome(snapshot))
        end = snapshot.value.layout.firstShard + snapshot.value.layout.shardCount
    }
    if (end === 0)
      return yield* new AdminRefused({
        reason: "UnknownStream",
        message: `stream ${JSON.stringify(stream)} has no stored layout${group === undefined ? "" : ` and group ${JSON.stringify(group)} no stored state`}: no group has run on it`,
      })
    return Array.from({ length: end }, (_, i) => i)
  })

const loadSnapshot = (key: GroupKey) =>
  Effect.gen(function* () {
    const store = yield* Store.Store
    return yield* store
      .load(key)
      .pipe(
        Effect.mapError(
          (e) => new BackendUnavailable({ operation: "store", message: e.message, cause: e }),
        ),
      )
  })

const PAGE = 1_000

/** Every entry of one shard's dead-letter stream, in id order (paged XRANGE). */
const readDlq = (stream: string, shard: number) =>
  Effect.gen(function* () {
    const key = (yield* keySpace).deadLetterKey(stream, shard)
    const out: Array<DeadLetter> = []
    let start = "-"
    for (;;) {
      const page = (yield* command("dead letters (XRANGE)", (c) =>
        c.xrange(key, start, "+", "COUNT", PAGE),
      )) as Array<[string, Array<string>]>
      for (const [id, raw] of page) out.push(toDeadLetter(shard, id, flatFields(raw)))
      if (page.length < PAGE) return out
      start = `(${page[page.length - 1]![0]}`
    }
  })

/** The group's dead letters, in shard and id order, filtered. */
export const listDeadLetters = (
  filter: DeadLetterFilter,
): Effect.Effect<ReadonlyArray<DeadLetter>, AdminError, Services> =>
  Effect.gen(function* () {
    if (filter.ids !== undefined && filter.shard === undefined)
      return yield* new AdminRefused({
        reason: "InvalidRequest",
        message:
          "dead-letter ids need their shard: each shard's dead-letter stream numbers its entries on its own",
      })
    const shards =
      filter.shard !== undefined ? [filter.shard] : yield* streamShards(filter.stream, filter.group)
    const ids = filter.ids === undefined ? undefined : new Set(filter.ids)
    const limit = filter.limit ?? Number.POSITIVE_INFINITY
    const out: Array<DeadLetter> = []
    for (const shard of shards) {
      for (const letter of yield* readDlq(filter.stream, shard)) {
        if (letter.group !== filter.group) continue
        if (ids !== undefined && !ids.has(letter.id)) continue
        out.push(letter)
        if (out.length >= limit) return out
      }
    }
    return out
  })

export interface DeadLetterCount {
  readonly total: number
  /** Shards that hold any of the group's dead letters. */
  readonly byShard: Readonly<Record<number, number>>
}

export const countDeadLetters = (
  filter: Omit<DeadLetterFilter, "ids" | "limit">,
): Effect.Effect<DeadLetterCount, AdminError, Services> =>
  Effect.map(listDeadLetters(filter), (letters) => {
    const byShard: Record<number, number> = {}
    for (const l of letters) byShard[l.shard] = (byShard[l.shard] ?? 0) + 1
    return { total: letters.length, byShard }
  })

/** One dead letter by shard and id (any group's). */
export const showDeadLetter = (options: {
  readonly stream: string
  readonly shard: number
  readonly id: string
}): Effect.Effect<DeadLetter, AdminError, Services> =>
  Effect.gen(function* () {
    const key = (yield* keySpace).deadLetterKey(options.stream, options.shard)
    const found = (yield* command("dead letter (XRANGE)", (c) =>
      c.xrange(key, options.id, options.id),
    )) as Array<[string, Array<string>]>
    const entry = found[0]
    if (entry === undefined)
      return yield* new AdminRefused({
        reason: "NotFound",
        message: `no dead letter ${options.id} in ${key}`,
      })
    return toDeadLetter(options.shard, entry[0], flatFields(entry[1]))
  })

export interface Replayed {
  readonly from: { readonly shard: number; readonly id: string }
  /** Where it was appended (the shard its key routes to now). */
  readonly to: { readonly shard: number; readonly id: string }
}

/** A dead letter a dry run would replay (`replayDeadLetters({ dryRun: true })`). */
export interface PlannedReplay {
  readonly from: { readonly shard: number; readonly id: string }
  /** The shard it would be appended to (a run cut earlier recorded it, else its key's route now). */
  readonly toShard: number
  readonly key: string | undefined
  /** The replay count it would carry (1 the first time it is replayed). */
  readonly count: number
}

export interface ReplayResult {
  readonly replayed: ReadonlyArray<Replayed>
  /** With `dryRun`: what would be replayed (nothing was). */
  readonly planned: ReadonlyArray<PlannedReplay>
  /** Dead letters not replayed, with why (a keyless entry whose shard is no longer written to). */
  readonly skipped: ReadonlyArray<{
    readonly shard: number
    readonly id: string
    readonly why: string
  }>
  /**
   * Other groups that consume the stream: they do not receive the replayed
   * messages (their members acknowledge them unseen: docs/redis.md, "Dead
   * letters and groups").
   */
  readonly otherGroups: ReadonlyArray<string>
}

export interface ReplayOptions extends DeadLetterFilter {
  /** Say what would be replayed, change nothing. */
  readonly dryRun?: boolean
}

const { ReplayFields } = ShardStreams

/**
 * The fields a dead letter is replayed with: its own (the key included),
 * marked for `group` alone, with the original shard and id (kept from an
 * earlier replay) and its replay count.
 */
const replayFields = (letter: DeadLetter, group: string) => {
  const previous = Number(letter.fields[ReplayFields.count] ?? 0)
  const count = (Number.isSafeInteger(previous) && previous > 0 ? previous : 0) + 1
  const fields: Record<string, string> = {
    ...letter.fields,
    ...(letter.key === undefined ? {} : { [KEY_FIELD]: letter.key }),
    [ReplayFields.group]: group,
    [ReplayFields.originalShard]: letter.fields[ReplayFields.originalShard] ?? String(letter.shard),
    [ReplayFields.originalId]: letter.fields[ReplayFields.originalId] ?? letter.originalId,
    [ReplayFields.count]: String(count),
  }
  return { fields, count }
}

/** One of the dead-letter scripts (redis-store src/lua/dlq-replay-*.lua); a foreign value is reported as unavailable. */
const script = (
  operation: string,
  s: Script,
  scriptKeys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
) =>
  Effect.gen(function* () {
    const connection = yield* RedisConnection.RedisConnection
    return yield* evalScript(connection, operation, s, scriptKeys, args).pipe(
      Effect.mapError((e) =>
        e._tag === "BackendUnavailable"
          ? e
          : new BackendUnavailable({ operation, message: e.message, cause: e }),
      ),
    )
  })

/** The shard of a replay's route (dlq-replay-route.lua): -1 the letter is gone, -2 no route. */
const replayShard = (reply: ReadonlyArray<unknown>) => Number(reply[1])

/**
 * Put the group's dead letters back into the stream through the producer's
 * path (routed by key over the current layout, a sealed shard routed again),
 * then remove them from the dead-letter streams. Each letter is appended at
 * most once however often the replay runs (cut between its append and its
 * removal and run again, at any later time, or two at once): its target
 * shard is recorded beside the letter before its append, and the target
 * keeps a mark of the letter, checked and set in the append's script
 * (docs/redis.md, "Dead letters and groups"). Only `filter.group` receives
 * them: each carries the replay marker (`ShardStreams.ReplayFields`: the
 * group, the original shard and id, the replay count), and the members of
 * every other group on the stream acknowledge it without handling it
 * (`otherGroups` names them). A replayed message comes after whatever was
 * appended since, so it is not back in its key's order relative to newer
 * messages. `dryRun`: the letters and where they would go (`planned`),
 * nothing changed.
 */
export const replayDeadLetters = (
  filter: ReplayOptions,
): Effect.Effect<ReplayResult, AdminError, Services> =>
  Effect.gen(function* () {
    const keys = yield* keySpace
    const layouts = yield* StreamLayouts.StreamLayouts
    const letters = yield* listDeadLetters(filter)
    const current = Effect.gen(function* () {
      const stored = yield* loadLayout(layouts, filter.stream)
      if (Option.isSome(stored)) return Layout.StreamLayout.current(stored.value.record)
      const snapshot = yield* loadSnapshot({ stream: filter.stream, group: filter.group })
      if (Option.isSome(snapshot)) return snapshot.value.layout
      return yield* new AdminRefused({
        reason: "UnknownStream",
        message: `stream ${JSON.stringify(filter.stream)} has no layout to route by`,
      })
    })
    let generation = yield* current
    const replayed: Array<Replayed> = []
    const planned: Array<PlannedReplay> = []
    const skipped: Array<{ shard: number; id: string; why: string }> = []
    const groups = yield* listGroups(filter.stream).pipe(
      Effect.catchTag("AdminRefused", () => Effect.succeed([] as ReadonlyArray<GroupSummary>)),
    )
    const otherGroups = groups.map((g) => g.group).filter((g) => g !== filter.group)
    for (const letter of letters) {
      const { fields, count } = replayFields(letter, filter.group)
      const dlq = keys.deadLetterKey(filter.stream, letter.shard)
      const routes = keys.replayRoutesKey(filter.stream, letter.shard)
      const mark = `${filter.group}/${letter.shard}/${letter.id}`
      const routeNow = () =>
        letter.key !== undefined
          ? Layout.shardOf(generation, letter.key)
          : letter.shard >= generation.firstShard &&
              letter.shard < generation.firstShard + generation.shardCount
            ? letter.shard
            : undefined
      if (filter.dryRun === true) {
        // read only: the route a cut run recorded, else the key's route now
        const recorded = yield* command("replay (route)", (c) => c.hget(routes, letter.id))
        const toShard = recorded !== null ? Number(recorded) : routeNow()
        if (toShard === undefined)
          skipped.push({
            shard: letter.shard,
            id: letter.id,
            why: `it has no routing key and shard ${letter.shard} is no longer written to (generation ${generation.generation})`,
          })
        else
          planned.push({
            from: { shard: letter.shard, id: letter.id },
            toShard,
            key: letter.key,
            count,
          })
        continue
      }
      // the route a run of this replay recorded first, else the key's route now
      let shard = replayShard(
        yield* script(
          "replay (route)",
          Scripts.dlqReplayRoute,
          [dlq, routes],
          [letter.id, String(routeNow() ?? ""), ""],
        ),
      )
      let appended: { shard: number; id: string } | undefined
      for (let attempt = 1; appended === undefined && shard >= 0; attempt++) {
        const reply = yield* script(
          "replay (append)",
          Scripts.dlqReplayAppend,
          [
            keys.shardKey(filter.stream, shard),
            keys.sealedKey(filter.stream, shard),
            keys.replayMarksKey(filter.stream, shard),
          ],
          [mark, ...Object.entries(fields).flat()],
        )
        if (reply[0] === Code.Ok) appended = { shard, id: String(reply[1]) }
        else if (reply[0] === Code.Sealed && attempt < 3) {
          // it did not land there before the seal: route it again, unless another run did
          generation = yield* current
          shard = replayShard(
            yield* script(
              "replay (route)",
              Scripts.dlqReplayRoute,
              [dlq, routes],
              [letter.id, String(routeNow() ?? ""), String(shard)],
            ),
          )
        } else
          return yield* new BackendUnavailable({
            operation: "replay (append)",
            message: `${reply[0] === Code.Sealed ? `ShardSealed: shard ${shard} of ${filter.stream} is sealed` : `unexpected reply ${JSON.stringify(reply)}`} (dead letter ${letter.id} of shard ${letter.shard}; ${replayed.length} replayed before it)`,
          })
      }
      if (shard === -2)
        skipped.push({
          shard: letter.shard,
          id: letter.id,
          why: `it has no routing key and shard ${letter.shard} is no longer written to (generation ${generation.generation})`,
        })
      // -1: gone meanwhile (another replay or a purge removed it)
      if (appended === undefined) continue
      yield* script("replay (XDEL)", Scripts.dlqReplayRemove, [dlq, routes], [letter.id])
      // the letter is gone: nobody reads its mark again
      const marks = keys.replayMarksKey(filter.stream, appended.shard)
      yield* command("replay (mark)", (c) => c.hdel(marks, mark))
      replayed.push({ from: { shard: letter.shard, id: letter.id }, to: appended })
    }
    return { replayed, planned, skipped, otherGroups }
  })

/** Remove the group's dead letters (XDEL, entry by entry: other groups' stay); how many. */
export const purgeDeadLetters = (
  filter: DeadLetterFilter,
): Effect.Effect<number, AdminError, Services> =>
  Effect.gen(function* () {
    const letters = yield* listDeadLetters(filter)
    const byShard = new Map<number, Array<string>>()
    for (const l of letters) byShard.set(l.shard, [...(byShard.get(l.shard) ?? []), l.id])
    let purged = 0
    for (const [shard, ids] of byShard) {
      const key = (yield* keySpace).deadLetterKey(filter.stream, shard)
      const routes = (yield* keySpace).replayRoutesKey(filter.stream, shard)
      for (let i = 0; i < ids.length; i += PAGE) {
        const chunk = ids.slice(i, i + PAGE)
        // with their replay routes, if a replay was cut (src/lua/dlq-replay-remove.lua)
        const reply = yield* script("purge (XDEL)", Scripts.dlqReplayRemove, [key, routes], chunk)
        purged += Number(reply[1])
      }
    }
    return purged
  })

// ---------------------------------------------------------------------------
// groups

export interface GroupSummary {
  readonly group: string
  /** The stream's layout registers it (its coordinator ran with the layout). */
  readonly registered: boolean
  /** Its coordinator state is stored. */
  readonly stored: boolean
  /** Shards whose stream has a Redis consumer group of this name. */
  readonly shards: number
  /** Members in its stored state. */
  readonly members: number
  /** The coordinator lease's holder, if it is held now. */
  readonly coordinator: string | undefined
  readonly deadLetters: number
  readonly live: boolean
  /** Why it counts as live (the lease, the serving key, a member's heartbeat, an active consumer). */
  readonly liveBecause: ReadonlyArray<string>
}

interface GroupSeen {
  readonly shards: Set<number>
  /** The least idle time of any of its consumers, ms. */
  leastIdleMs: number
}

/** The Redis consumer groups of every shard, with their consumers' idle times. */
const consumerGroups = (stream: string, shards: ReadonlyArray<number>) =>
  Effect.gen(function* () {
    const seen = new Map<string, GroupSeen>()
    for (const shard of shards) {
      const key = (yield* keySpace).shardKey(stream, shard)
      const groups = (yield* command("groups (XINFO GROUPS)", (c) =>
        c.call("XINFO", "GROUPS", key).catch((e: unknown) => {
          if (/no such key/i.test(describe(e))) return []
          throw e
        }),
      )) as Array<Array<unknown>>
      for (const raw of groups) {
        const info = flatFields(raw.map(String))
        const name = info.name!
        let g = seen.get(name)
        if (g === undefined) {
          g = { shards: new Set(), leastIdleMs: Number.POSITIVE_INFINITY }
          seen.set(name, g)
        }
        g.shards.add(shard)
        const consumers = (yield* command("groups (XINFO CONSUMERS)", (c) =>
          c.call("XINFO", "CONSUMERS", key, name),
        )) as Array<Array<unknown>>
        for (const c of consumers) {
          const idle = Number(flatFields(c.map(String)).idle)
          if (Number.isFinite(idle)) g.leastIdleMs = Math.min(g.leastIdleMs, idle)
        }
      }
    }
    return seen
  })

/** Every group of the stream: registered in its layout, stored, or known to its shards. */
export const listGroups = (
  stream: string,
): Effect.Effect<ReadonlyArray<GroupSummary>, AdminError, Services> =>
  Effect.gen(function* () {
    const layouts = yield* StreamLayouts.StreamLayouts
    const stored = yield* loadLayout(layouts, stream)
    const shards = yield* streamShards(stream)
    const registered = Option.isSome(stored) ? Object.keys(stored.value.record.groups) : []
    const seen = yield* consumerGroups(stream, shards)
    const letters = new Map<string, number>()
    for (const shard of shards)
      for (const l of yield* readDlq(stream, shard))
        letters.set(l.group, (letters.get(l.group) ?? 0) + 1)
    const names = [...new Set([...registered, ...seen.keys()])].sort()
    const out: Array<GroupSummary> = []
    for (const group of names)
      out.push(
        yield* summarize({ stream, group }, registered.includes(group), seen.get(group), letters),
      )
    return out
  })

const summarize = (
  key: GroupKey,
  registered: boolean,
  seen: GroupSeen | undefined,
  letters: ReadonlyMap<string, number>,
) =>
  Effect.gen(function* () {
    const snapshot = yield* loadSnapshot(key)
    const lk = (yield* keySpace).leaseKey(key)
    const sk = (yield* keySpace).servingKey(key)
    const hk = (yield* keySpace).lastHeartbeatKey(key)
    const [[holder], ttl, serving, heartbeatTtl, heartbeatLeft] = yield* command(
      "group (lease, serving, last heartbeat)",
      (c) => Promise.all([c.hmget(lk, "holder"), c.pttl(lk), c.exists(sk), c.get(hk), c.pttl(hk)]),
    )
    const sessionTimeoutMs = Option.match(snapshot, {
      onNone: () => 30_000,
      onSome: (s) => s.config.sessionTimeoutMs,
    })
    const liveBecause: Array<string> = []
    if (holder !== null && holder !== undefined && ttl > 0)
      liveBecause.push(`its coordinator lease is held by ${holder} (${ttl} ms left)`)
    if (serving > 0) liveBecause.push("a coordinator serves its heartbeats")
    // its members heartbeat (hb-push.lua), also while their shards are idle
    // and no coordinator serves: the key holds its TTL, the age is that less PTTL
    const heartbeatAgeMs =
      heartbeatTtl !== null && /^\d+$/.test(heartbeatTtl) && heartbeatLeft > 0
        ? Math.max(0, Number(heartbeatTtl) - heartbeatLeft)
        : undefined
    if (heartbeatAgeMs !== undefined && heartbeatAgeMs < sessionTimeoutMs)
      liveBecause.push(
        `a member heartbeated ${heartbeatAgeMs} ms ago (within its ${sessionTimeoutMs} ms session)`,
      )
    if (seen !== undefined && seen.leastIdleMs < sessionTimeoutMs)
      liveBecause.push(
        `a consumer read ${seen.leastIdleMs} ms ago (within its ${sessionTimeoutMs} ms session)`,
      )
    return {
      group: key.group,
      registered,
      stored: Option.isSome(snapshot),
      shards: seen?.shards.size ?? 0,
      members: Option.match(snapshot, { onNone: () => 0, onSome: (s) => s.members.length }),
      coordinator: holder !== null && holder !== undefined && ttl > 0 ? holder : undefined,
      deadLetters: letters.get(key.group) ?? 0,
      live: liveBecause.length > 0,
      liveBecause,
    } satisfies GroupSummary
  })

export interface GroupDeletion {
  readonly stream: string
  readonly group: string
  /** Shards whose Redis consumer group of this name is destroyed (XGROUP DESTROY). */
  readonly consumerGroups: ReadonlyArray<number>
  /** The group's owner tokens, `<prefix>{<stream>:<shard>}:owner:<group>`. */
  readonly ownerTokens: ReadonlyArray<string>
  /** Its dead letters (entries of the shards' dead-letter streams). */
  readonly deadLetters: number
  /** Every key under `<prefix>group:{<stream>:<group>}`: lease, heartbeat lists, Store, audit. */
  readonly keys: ReadonlyArray<string>
  /** It is removed from the stream's layout record (its `groups`). */
  readonly layoutEntry: boolean
  readonly live: boolean
  readonly liveBecause: ReadonlyArray<string>
}

/** Every key whose name starts with `prefix` (SCAN on the node that holds its slot). */
const keysWithPrefix = (prefix: string) =>
  Effect.gen(function* () {
    const connection = yield* RedisConnection.RedisConnection
    const client = connection.client
    const node =
      client instanceof Cluster
        ? client.nodes("master").find((n) => {
            const owner = client.slots[Acl.keySlot(prefix)]?.[0]
            return owner === `${n.options.host}:${n.options.port}`
          })
        : client
    if (node === undefined)
      return yield* new BackendUnavailable({
        operation: "keys (SCAN)",
        message: `no cluster node serves the slot of ${prefix}`,
      })
    const keys: Array<string> = []
    let cursor = "0"
    do {
      const [next, batch] = yield* Effect.tryPromise({
        try: () => node.scan(cursor, "MATCH", `${Keys.globEscape(prefix)}*`, "COUNT", 1_000),
        catch: (cause) => RedisConnection.unavailable("keys (SCAN)", cause),
      })
      keys.push(...batch)
      cursor = next
    } while (cursor !== "0")
    return keys.sort()
  })

/** What `deleteGroup` would delete, and whether the group is live. */
export const planGroupDeletion = (
  key: GroupKey,
): Effect.Effect<GroupDeletion, AdminError, Services> =>
  Effect.gen(function* () {
    const layouts = yield* StreamLayouts.StreamLayouts
    const shards = yield* streamShards(key.stream, key.group)
    const seen = (yield* consumerGroups(key.stream, shards)).get(key.group)
    const stored = yield* loadLayout(layouts, key.stream)
    const registered = Option.isSome(stored) && key.group in stored.value.record.groups
    const ownerTokens: Array<string> = []
    for (const shard of shards) {
      const owner = (yield* keySpace).ownerTokenKey(key.stream, shard, key.group)
      if ((yield* command("plan (EXISTS owner)", (c) => c.exists(owner))) > 0)
        ownerTokens.push(owner)
    }
    const letters = yield* listDeadLetters({ stream: key.stream, group: key.group })
    const keys = yield* keysWithPrefix((yield* keySpace).groupBase(key))
    if (!registered && seen === undefined && keys.length === 0 && ownerTokens.length === 0)
      return yield* new AdminRefused({
        reason: "UnknownGroup",
        message: `stream ${JSON.stringify(key.stream)} has no group ${JSON.stringify(key.group)}`,
      })
    const summary = yield* summarize(key, registered, seen, new Map())
    return {
      stream: key.stream,
      group: key.group,
      consumerGroups: [...(seen?.shards ?? [])].sort((a, b) => a - b),
      ownerTokens,
      deadLetters: letters.length,
      keys,
      layoutEntry: registered,
      live: summary.live,
      liveBecause: summary.liveBecause,
    }
  })

/**
 * Delete the group and all its keys (what `planGroupDeletion` lists). A live
 * group is refused (`AdminRefused` GroupLive, saying why) unless `force`:
 * its running members and coordinator would recreate what they use.
 */
export const deleteGroup = (
  key: GroupKey,
  options: { readonly force?: boolean } = {},
): Effect.Effect<GroupDeletion, AdminError, Services> =>
  Effect.gen(function* () {
    const plan = yield* planGroupDeletion(key)
    if (plan.live && options.force !== true)
      return yield* new AdminRefused({
        reason: "GroupLive",
        message: `group ${JSON.stringify(key.group)} of stream ${JSON.stringify(key.stream)} is live: ${plan.liveBecause.join("; ")}. Stop its members and coordinator first, or force it (they would recreate what they use)`,
      })
    for (const shard of plan.consumerGroups) {
      const k = (yield* keySpace).shardKey(key.stream, shard)
      yield* command("delete (XGROUP DESTROY)", (c) => c.call("XGROUP", "DESTROY", k, key.group))
    }
    for (const owner of plan.ownerTokens) yield* command("delete (owner)", (c) => c.del(owner))
    yield* purgeDeadLetters({ stream: key.stream, group: key.group })
    // one slot: every key under the group's tag at once
    if (plan.keys.length > 0) yield* command("delete (group keys)", (c) => c.del(...plan.keys))
    if (plan.layoutEntry) {
      const layouts = yield* StreamLayouts.StreamLayouts
      for (let attempt = 0; ; attempt++) {
        const stored = yield* loadLayout(layouts, key.stream)
        if (Option.isNone(stored) || !(key.group in stored.value.record.groups)) break
        const { [key.group]: _, ...groups } = stored.value.record.groups
        const saved = yield* Effect.result(
          layouts.save(key.stream, stored.value.revision, { ...stored.value.record, groups }),
        )
        if (saved._tag === "Success") break
        if (saved.failure._tag !== "StaleLayout" || attempt >= 5)
          return yield* new BackendUnavailable({
            operation: "delete (layout)",
            message: saved.failure.message,
            cause: saved.failure,
          })
      }
    }
    return plan
  })
