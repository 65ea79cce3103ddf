/**
 * Thin wrappers that give core's memory ports the shapes core is moving to
 * (per-group owner tokens, GroupKey, lease `check`, `waitForEntries`), so the
 * contract suites run unchanged on memory and on Redis. Once core changes,
 * these go away.
 *
 * Where core's memory semantics differ from Redis's, the wrapper follows
 * Redis and says so:
 * - `xackdel` deletes only the entries this call acknowledged (XACKDEL
 *   KEEPREF); core's memory also deletes ids that were not pending.
 */
import {
  CoordinatorLease,
  CoordinatorTransport,
  type LeaseGrant as CoreLeaseGrant,
  LeaseHeld,
  OwnerTokenRegression,
  ShardStreams,
  StaleOwner,
} from "@shardline/core"
import { Clock, Effect, Semaphore } from "effect"
import { ownerTokenKey } from "../../src/keys.js"
import type {
  CoordinatorLeaseShape,
  CoordinatorTransportShape,
  FencedAddress,
  GroupKey,
  LeaseGrant,
  ShardStreamsShape,
} from "../../src/ports.js"

const compareIds = (a: string, b: string): number => {
  const [am, as] = a.split("-").map(Number) as [number, number]
  const [bm, bs] = b.split("-").map(Number) as [number, number]
  return am !== bm ? am - bm : as - bs
}

export const memoryShardStreams: Effect.Effect<ShardStreamsShape> = Effect.gen(function* () {
  const inner = yield* ShardStreams.makeMemory
  const tokens = new Map<string, number>()
  // one fenced operation at a time: the token check and the change are one step
  const lock = yield* Semaphore.make(1)
  const current = (a: { stream: string; shard: number; group: string }) =>
    tokens.get(ownerTokenKey(a.stream, a.shard, a.group)) ?? 0

  const fenced = <A, E>(a: FencedAddress, body: Effect.Effect<A, E>) =>
    lock.withPermits(1)(
      Effect.suspend((): Effect.Effect<A, E | StaleOwner> => {
        const cur = current(a)
        return a.token < cur
          ? Effect.fail(
              new StaleOwner({
                stream: a.stream,
                shard: a.shard,
                token: a.token,
                currentToken: cur,
              }),
            )
          : body
      }),
    )

  const service: ShardStreamsShape = {
    append: inner.append,
    setOwnerToken: (o) =>
      lock.withPermits(1)(
        Effect.suspend(() => {
          const cur = current(o)
          if (o.token < cur)
            return Effect.fail(
              new OwnerTokenRegression({
                stream: o.stream,
                shard: o.shard,
                token: o.token,
                currentToken: cur,
              }),
            )
          tokens.set(ownerTokenKey(o.stream, o.shard, o.group), o.token)
          return Effect.void
        }),
      ),
    ownerToken: (o) => Effect.sync(() => current(o)),
    read: (o) =>
      fenced(
        o,
        Effect.gen(function* () {
          const plain = { ...o, token: 0 }
          if (o.claimIdleMs === undefined || o.from === "pending") return yield* inner.read(plain)
          const claimed = yield* Effect.orDie(
            inner.claimPending({ ...plain, minIdleMs: o.claimIdleMs }),
          )
          if (claimed.messages.length >= o.count || claimed.next !== "0-0") return claimed.messages
          const fresh = yield* inner.read({ ...plain, count: o.count - claimed.messages.length })
          return [...claimed.messages, ...fresh]
        }),
      ),
    ack: (o) =>
      fenced(
        o,
        Effect.gen(function* () {
          if (o.mode === "ack") return yield* inner.ack({ ...o, token: 0 })
          const pending = new Set((yield* inner.pending(o)).map((p) => p.id))
          const ids = o.ids.filter((id) => pending.has(id))
          // validate every id first, as the Redis script does
          yield* inner.ack({ ...o, token: 0, ids: o.ids, mode: "ack", group: "\u0000none" })
          return yield* inner.ack({ ...o, token: 0, ids })
        }),
      ),
    nack: (o) => fenced(o, inner.nack({ ...o, token: 0 })),
    claimPending: (o) => fenced(o, inner.claimPending({ ...o, token: 0 })),
    deadLetter: (o) => fenced(o, inner.deadLetter({ ...o, token: 0 })),
    pending: inner.pending,
    info: (stream, shard) =>
      Effect.map(inner.info(stream, shard), (info) => ({
        length: info.length,
        lastId: info.lastId,
        groups: info.groups.map((g) => ({
          ...g,
          ownerToken: current({ stream, shard, group: g.name }),
        })),
      })),
    range: inner.range,
    waitForEntries: (o) =>
      Effect.gen(function* () {
        const deadline = (yield* Clock.currentTimeMillis) + o.timeoutMs
        for (;;) {
          const info = yield* inner.info(o.stream, o.shard)
          const after =
            o.afterId ?? info.groups.find((g) => g.name === o.group)?.lastDeliveredId ?? "0-0"
          if (info.length > 0 && compareIds(info.lastId, after) > 0) return true
          if ((yield* Clock.currentTimeMillis) >= deadline) return false
          yield* Effect.sleep(5)
        }
      }),
  }
  return service
})

const groupId = (key: GroupKey) => `${key.stream}\u0000${key.group}`

export const memoryLease: Effect.Effect<CoordinatorLeaseShape> = Effect.gen(function* () {
  const inner = yield* CoordinatorLease.makeMemory
  // every change goes through here, so the latest grant per group is known
  const grants = new Map<string, CoreLeaseGrant>()
  const toCore = (g: LeaseGrant): CoreLeaseGrant => ({
    group: groupId(g.key),
    holder: g.holder,
    token: g.token,
    expiresAt: g.expiresAt,
  })
  const fromCore = (key: GroupKey, g: CoreLeaseGrant): LeaseGrant => ({
    key,
    holder: g.holder,
    token: g.token,
    expiresAt: g.expiresAt,
  })
  return {
    acquire: (key, holder, ttlMs) =>
      inner.acquire(groupId(key), holder, ttlMs).pipe(
        Effect.tap((g) => Effect.sync(() => grants.set(g.group, g))),
        Effect.map((g) => fromCore(key, g)),
        Effect.mapError(
          (e) => new LeaseHeld({ group: key.group, holder: e.holder, expiresAt: e.expiresAt }),
        ),
      ),
    renew: (grant, ttlMs) =>
      inner.renew(toCore(grant), ttlMs).pipe(
        Effect.tap((g) => Effect.sync(() => grants.set(g.group, g))),
        Effect.map((g) => fromCore(grant.key, g)),
        Effect.mapError((e) => Object.assign(e, { group: grant.key.group })),
      ),
    release: (grant) =>
      inner.release(toCore(grant)).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            if (grants.get(groupId(grant.key))?.token === grant.token)
              grants.delete(groupId(grant.key))
          }),
        ),
      ),
    check: (grant) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const cur = grants.get(groupId(grant.key))
        return cur !== undefined && cur.token === grant.token && cur.expiresAt > now
      }),
  }
})

export const memoryTransport = (options: {
  readonly timeoutMs: number
}): Effect.Effect<CoordinatorTransportShape> =>
  Effect.map(CoordinatorTransport.makeMemory(options), ({ transport }) => ({
    heartbeat: (request) => transport.heartbeat({ ...request, group: groupId(request) }),
    notices: (key, memberId) => transport.notices(groupId(key), memberId),
    serve: (key, handler) =>
      transport.serve(groupId(key), (raw) =>
        handler({ ...(raw as object), stream: key.stream, group: key.group }),
      ),
    notify: (key, memberId) => transport.notify(groupId(key), memberId),
  }))
