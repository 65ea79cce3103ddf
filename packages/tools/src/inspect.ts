/**
 * What `shardline inspect` reports about a group, read from Redis through
 * the ports only (docs/redis.md, "The shardline CLI"): core's `inspectGroup`
 * (the stored snapshot and its monitoring view), each shard's stream, group
 * and dead-letter state, the stream's layouts, the coordinator lease and the
 * last audit events; and the groups stored on a server (`listGroups`). The
 * CLI prints it and the dashboard (src/dashboard/, docs/observability.md)
 * shows it live: one definition of the data. Nothing here writes.
 */
import {
  type GroupInspection,
  type GroupKey,
  inspectGroup,
  ShardStreams,
  StreamLayouts,
} from "@shardline/core"
import { RedisConnection, type RedisPorts, RedisStore } from "@shardline/redis-store"
import { Context, Data, Effect, Option } from "effect"
import type { Cluster, Redis } from "ioredis"

/** Inspection failed: the message names the operation and the error, one line. */
export class InspectFailed extends Data.TaggedError("InspectFailed")<{
  readonly message: string
}> {}

const oneLine = (e: { readonly _tag: string; readonly message?: string }) =>
  `${e._tag}: ${(e.message ?? "").split("\n")[0]}`

export interface ShardRow {
  readonly shard: number
  readonly generation: number
  readonly length: number
  readonly pending: number
  readonly lag: number
  readonly ownerToken: number
  readonly sealed: boolean
  /** The group's outbox on the shard holds committed sends not yet relayed (Redis Cluster transactions). */
  readonly relaying: boolean
  readonly drained: boolean
  /** This group's entries in the shard's dead-letter stream. */
  readonly deadLetters: number
  /** Entries delivered to the group so far (XINFO GROUPS entries-read); null when unknown. */
  readonly entriesRead: number | null
}

export interface InspectReport {
  readonly stream: string
  readonly group: string
  readonly storeRevision: number
  readonly groupEpoch: number
  readonly assignmentEpoch: number
  readonly coordinator: { readonly holder: string; readonly leaseToken: number } | undefined
  readonly lease: { readonly holder: string; readonly token: number; readonly ttlMs: number } | null
  /** A coordinator's serve presence is alive (`...:hb:serving`): one answers heartbeats now. */
  readonly serving: boolean
  /**
   * How long ago a member last sent a heartbeat (`...:hb:last`), or null when
   * none did within that key's TTL (none for a long while, or never).
   */
  readonly lastHeartbeatAgoMs: number | null
  /** The group's heartbeat interval and session timeout (its stored config). */
  readonly heartbeatIntervalMs: number
  readonly sessionTimeoutMs: number
  readonly members: ReadonlyArray<{
    readonly memberId: string
    readonly memberEpoch: number
    readonly incarnation: number
    readonly state: string
    readonly host: string
    readonly weight: number
    readonly owned: ReadonlyArray<number>
    readonly target: ReadonlyArray<number>
  }>
  readonly assignment: ReadonlyArray<{
    readonly shard: number
    readonly target: string | null
    readonly owner: string | null
    readonly token: number
    readonly confirmed: boolean
    readonly revokingFrom: string | null
  }>
  readonly pendingRevocations: ReadonlyArray<{ readonly shard: number; readonly from: string }>
  readonly imbalance: number
  readonly targetImbalance: number
  readonly rebalanceInProgress: boolean
  readonly resharding: {
    readonly phase: string
    readonly layout: {
      readonly generation: number
      readonly firstShard: number
      readonly shardCount: number
    }
    readonly draining: ReadonlyArray<{
      readonly generation: number
      readonly firstShard: number
      readonly shardCount: number
    }>
    readonly shardsDrained: number
    readonly shardsToDrain: number
    readonly backlogLeft: number
    readonly streamGenerations: ReadonlyArray<{
      readonly generation: number
      readonly firstShard: number
      readonly shardCount: number
    }>
    readonly groupsDrainedBelow: Readonly<Record<string, number>>
  }
  readonly shards: ReadonlyArray<ShardRow>
  /** This group's dead-lettered entries, over every shard. */
  readonly deadLetters: number
  /** The last audit events, oldest first: each the stored event with its stream entry `id`. */
  readonly audit: ReadonlyArray<unknown>
}

export const collect = (
  ports: Context.Context<RedisPorts.RedisPorts>,
  key: GroupKey,
  found: GroupInspection,
  auditCount: number,
) =>
  Effect.gen(function* () {
    const { snapshot, monitor } = found
    const connection = Context.get(ports, RedisConnection.RedisConnection)
    const streams = Context.get(ports, ShardStreams.ShardStreams)
    const layouts = Context.get(ports, StreamLayouts.StreamLayouts)
    const fail = (e: { readonly _tag: string; readonly message?: string }) =>
      new InspectFailed({ message: oneLine(e) })
    const stored = yield* Effect.mapError(layouts.load(key.stream), fail)
    const generations = Option.match(stored, {
      onNone: () => [snapshot.layout],
      onSome: (s) => s.record.generations,
    })
    const shards: Array<ShardRow> = []
    for (const g of generations)
      for (let shard = g.firstShard; shard < g.firstShard + g.shardCount; shard++) {
        const info = yield* Effect.mapError(streams.info(key.stream, shard), fail)
        const state = yield* Effect.mapError(streams.drainState({ ...key, shard }), fail)
        const mine = info.groups.find((x) => x.name === key.group)
        const dlq = yield* Effect.mapError(
          streams.range(ShardStreams.deadLetterKey(key.stream, shard)),
          fail,
        )
        shards.push({
          shard,
          generation: g.generation,
          length: info.length,
          pending: state.pending,
          lag: state.undelivered,
          ownerToken:
            mine?.ownerToken ??
            (yield* Effect.mapError(streams.ownerToken({ ...key, shard }), fail)),
          sealed: state.sealed,
          relaying: state.relaying ?? false,
          drained: state.drained,
          deadLetters: dlq.filter(
            (e) => e.fields[ShardStreams.DeadLetterFields.group] === key.group,
          ).length,
          entriesRead: mine?.entriesRead ?? null,
        })
      }
    const lk = connection.keys.leaseKey(key)
    const lease = yield* connection
      .command("inspect (lease)", (c) => Promise.all([c.hmget(lk, "holder", "token"), c.pttl(lk)]))
      .pipe(Effect.mapError(fail))
    // the serve presence and the last member heartbeat (its value is its TTL:
    // the time since is that TTL less what is left of it)
    const sk = connection.keys.servingKey(key)
    const hk = connection.keys.lastHeartbeatKey(key)
    const [servingTtl, lastValue, lastTtl] = yield* connection
      .command("inspect (heartbeats)", (c) => Promise.all([c.pttl(sk), c.get(hk), c.pttl(hk)]))
      .pipe(Effect.mapError(fail))
    const lastHeartbeatAgoMs =
      lastValue === null || lastTtl < 0 || !Number.isFinite(Number(lastValue))
        ? null
        : Math.max(0, Number(lastValue) - lastTtl)
    const audit = yield* Effect.mapError(RedisStore.auditEvents(connection, key, auditCount), fail)
    const owned = new Map<string, Array<number>>()
    const target = new Map<string, Array<number>>()
    snapshot.current.forEach((o, shard) => {
      if (o !== null) owned.set(o.memberId, [...(owned.get(o.memberId) ?? []), shard])
    })
    snapshot.target.forEach((m, shard) => {
      if (m !== null) target.set(m, [...(target.get(m) ?? []), shard])
    })
    const draining = new Set(
      monitor.resharding.draining.flatMap((g) =>
        Array.from({ length: g.shardCount }, (_, i) => g.firstShard + i),
      ),
    )
    const backlog = shards
      .filter((s) => draining.has(s.shard))
      .reduce((n, s) => n + s.pending + s.lag, 0)
    const report: InspectReport = {
      stream: key.stream,
      group: key.group,
      storeRevision: snapshot.storeRevision,
      groupEpoch: snapshot.groupEpoch,
      assignmentEpoch: snapshot.assignmentEpoch,
      coordinator: snapshot.coordinator,
      lease:
        lease[0][0] === null
          ? null
          : { holder: String(lease[0][0]), token: Number(lease[0][1]), ttlMs: Number(lease[1]) },
      serving: servingTtl > 0 || servingTtl === -1,
      lastHeartbeatAgoMs,
      heartbeatIntervalMs: snapshot.config.heartbeatIntervalMs,
      sessionTimeoutMs: snapshot.config.sessionTimeoutMs,
      members: snapshot.members.map((m) => ({
        memberId: m.memberId,
        memberEpoch: m.memberEpoch,
        incarnation: m.incarnation,
        state: m.state,
        host: m.memberInfo.host,
        weight: m.weight,
        owned: owned.get(m.memberId) ?? [],
        target: target.get(m.memberId) ?? [],
      })),
      assignment: snapshot.target.map((t, shard) => ({
        shard,
        target: t,
        owner: snapshot.current[shard]?.memberId ?? null,
        token: snapshot.tokens[shard] ?? 0,
        confirmed: snapshot.current[shard]?.confirmed ?? false,
        revokingFrom: snapshot.revocations[shard]?.memberId ?? null,
      })),
      pendingRevocations: snapshot.revocations.flatMap((r, shard) =>
        r === null ? [] : [{ shard, from: r.memberId }],
      ),
      imbalance: monitor.imbalance,
      targetImbalance: monitor.targetImbalance,
      rebalanceInProgress: monitor.rebalanceInProgress,
      resharding: {
        phase: monitor.resharding.phase,
        layout: monitor.resharding.layout,
        draining: monitor.resharding.draining,
        shardsDrained: monitor.resharding.shardsDrained,
        shardsToDrain: monitor.resharding.shardsToDrain,
        backlogLeft: backlog,
        streamGenerations: generations,
        groupsDrainedBelow: Option.match(stored, {
          onNone: () => ({}),
          onSome: (s) =>
            Object.fromEntries(
              Object.entries(s.record.groups).map(([g, v]) => [g, v.drainedBelow]),
            ),
        }),
      },
      shards,
      deadLetters: shards.reduce((n, s) => n + s.deadLetters, 0),
      audit: audit.map((a) => {
        try {
          const event = JSON.parse(a.event) as unknown
          return typeof event === "object" && event !== null
            ? { id: a.id, ...event }
            : { id: a.id, event }
        } catch {
          return { id: a.id, event: a.event }
        }
      }),
    }
    return report
  })

/** The group's report, or none when nothing is stored for it. */
export const inspectReport = (
  ports: Context.Context<RedisPorts.RedisPorts>,
  key: GroupKey,
  auditCount: number,
): Effect.Effect<Option.Option<InspectReport>, InspectFailed> =>
  Effect.gen(function* () {
    const found = yield* inspectGroup(key).pipe(
      Effect.provide(ports),
      Effect.mapError((e) => new InspectFailed({ message: oneLine(e) })),
    )
    if (Option.isNone(found)) return Option.none()
    return Option.some(yield* collect(ports, key, found.value, auditCount))
  })

const scanNode = async (node: Redis, pattern: string): Promise<Array<string>> => {
  const keys: Array<string> = []
  let cursor = "0"
  do {
    const [next, page] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1000)
    cursor = next
    keys.push(...page)
  } while (cursor !== "0")
  return keys
}

/**
 * Every group with stored coordinator state on the server (SCAN of every
 * master in a cluster), sorted by stream then group.
 */
export const listGroups = (
  connection: RedisConnection.RedisConnectionShape,
): Effect.Effect<ReadonlyArray<GroupKey>, InspectFailed> =>
  connection
    .command("listGroups (SCAN)", async (c) => {
      const pattern = connection.keys.revisionKeyPattern
      const nodes = connection.isCluster ? (c as Cluster).nodes("master") : [c as Redis]
      const keys = (await Promise.all(nodes.map((n) => scanNode(n, pattern)))).flat()
      return keys
    })
    .pipe(
      Effect.map((keys) => {
        const seen = new Map<string, GroupKey>()
        for (const k of keys) {
          const g = connection.keys.groupOfRevisionKey(k)
          if (g !== undefined) seen.set(JSON.stringify([g.stream, g.group]), g)
        }
        return [...seen.values()].sort((a, b) =>
          a.stream === b.stream ? (a.group < b.group ? -1 : 1) : a.stream < b.stream ? -1 : 1,
        )
      }),
      Effect.mapError((e) => new InspectFailed({ message: oneLine(e) })),
    )
