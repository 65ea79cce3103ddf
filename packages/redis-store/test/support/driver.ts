/**
 * Real-time test driver on real Redis (test code, adapted from the ideas of
 * core's in-memory integration driver): CoordinatorHosts over the Redis ports
 * (`RedisPorts`), members that are core's pure `MemberMachine`s whose commands
 * the driver executes, heartbeats and notices through the Redis transport,
 * reads and acks through the fenced Redis `ShardStreams`.
 *
 * Time is the real clock (Redis TTLs are real): the driver runs in rounds of
 * `tickMs`; each round applies heartbeat results, notices and a Tick to every
 * member, sends due heartbeats, then runs one step of each read loop (read a
 * batch, or handle + ack the batch read in the previous step). Everything
 * observable goes to an ordered event log that the checks below read.
 */
import {
  type CoordinatorLease,
  CoordinatorTransport,
  type HeartbeatResponse,
  Layout,
  MemberMachine,
  makeCoordinatorHost,
  type OwnerFence,
  ShardStreams,
  type Store,
  StreamLayouts,
  type TransportError,
} from "@shardline/core"
import { Context, Effect, Exit, Layer, Option, Result, Scope, Stream } from "effect"
import type * as RedisConnection from "../../src/RedisConnection.js"
import * as RedisPorts from "../../src/RedisPorts.js"

export type PortServices =
  | Store.Store
  | CoordinatorLease.CoordinatorLease
  | OwnerFence.OwnerFence
  | CoordinatorTransport.CoordinatorTransport
  | ShardStreams.ShardStreams
  | StreamLayouts.StreamLayouts

export type Ports = Context.Context<PortServices>

/** Every Redis port on a connection of its own, for the scope. */
export const redisPorts = (
  options: RedisConnection.RedisConnectionOptions,
  transport: RedisPorts.RedisPortsOptions["transport"] = {
    timeoutMs: 1_000,
    servingTtlMs: 900,
    popBlockMs: 300,
  },
): Effect.Effect<
  Context.Context<PortServices | RedisConnection.RedisConnection>,
  unknown,
  Scope.Scope
> => Layer.build(RedisPorts.layer({ ...options, transport }))

export type EventKind =
  | "start"
  | "claim"
  | "read"
  | "handle"
  | "drained"
  | "stopAll"
  | "crash"
  | "reportRevoked"
  | "staleOwner"
  | "hbFailed"
  | "exhausted"
  | "left"

export interface Event {
  readonly seq: number
  readonly at: number
  readonly group: string
  readonly member: string
  readonly kind: EventKind
  readonly shard?: number
  readonly token?: number
  readonly id?: string
  readonly msgKey?: string
  readonly n?: number
  readonly error?: string
}

interface Loop {
  readonly shard: number
  readonly token: number
  stopping: boolean
  claiming: boolean
  exhausted: boolean
  cursor: string
  inflight: ReadonlyArray<ShardStreams.StreamMessage> | undefined
}

interface Member {
  readonly id: string
  readonly machine: MemberMachine.MemberState
  readonly loops: Map<number, Loop>
  inbox: Array<{ seq: number; result: Result.Result<HeartbeatResponse, TransportError> }>
  inFlight: boolean
  wantSend: boolean
  noticed: boolean
  crashed: boolean
  left: boolean
}

export interface GroupOptions {
  readonly stream: string
  readonly group: string
  readonly shardCount: number
  readonly heartbeatIntervalMs?: number
  readonly sessionTimeoutMs?: number
  readonly rebalanceTimeoutMs?: number
  readonly batch?: number
}

/** One ordered event log shared by every group of a test (fan-out checks read it whole). */
export const makeLog = () => {
  const events: Array<Event> = []
  return {
    events,
    add: (e: Omit<Event, "seq" | "at">) =>
      events.push({ ...e, seq: events.length, at: Date.now() }),
  }
}
export type Log = ReturnType<typeof makeLog>

/**
 * One group on real Redis: members driven here; coordinators started with
 * `startHost` (in this process) or elsewhere (another process serving the
 * same group through Redis).
 */
export const makeGroup = Effect.fnUntraced(function* (
  ports: Ports,
  log: Log,
  options: GroupOptions,
) {
  const scope = yield* Scope.Scope
  const { stream, group } = options
  const key = { stream, group }
  const heartbeatIntervalMs = options.heartbeatIntervalMs ?? 300
  const sessionTimeoutMs = options.sessionTimeoutMs ?? 3_000
  const batch = options.batch ?? 10
  const config = {
    groupId: group,
    stream,
    shardCount: options.shardCount,
    sessionTimeoutMs,
    rebalanceTimeoutMs: options.rebalanceTimeoutMs ?? 3_000,
    heartbeatIntervalMs,
  }
  const streams = Context.get(ports, ShardStreams.ShardStreams)
  const transport = Context.get(ports, CoordinatorTransport.CoordinatorTransport)
  const layouts = Context.get(ports, StreamLayouts.StreamLayouts)

  /**
   * A coordinator candidate in its own scope, serving the group through the
   * Redis transport while it is the coordinator (a standby does not serve).
   */
  const startHostWith = (
    holder: string,
    hostPorts: Ports,
    extra: { readonly leaseTtlMs?: number } = {},
  ) =>
    Effect.gen(function* () {
      const hostScope = yield* Scope.fork(scope)
      const hostTransport = Context.get(hostPorts, CoordinatorTransport.CoordinatorTransport)
      const host = yield* makeCoordinatorHost({
        config,
        holder,
        ...extra,
        onNotice: (memberId) => hostTransport.notify(key, memberId),
      }).pipe(Scope.provide(hostScope), Effect.provide(hostPorts), Effect.orDie)
      let serving: Scope.Closeable | undefined
      const follow = Effect.gen(function* () {
        const is = yield* host.isCoordinator
        if (is && serving === undefined) {
          serving = yield* Scope.fork(hostScope)
          yield* hostTransport.serve(key, host.heartbeat).pipe(Scope.provide(serving))
        } else if (!is && serving !== undefined) {
          yield* Scope.close(serving, Exit.void)
          serving = undefined
        }
      })
      yield* host.elect
      yield* follow
      yield* Effect.forkIn(Effect.forever(Effect.andThen(Effect.sleep(25), follow)), hostScope)
      return { host, close: Scope.close(hostScope, Exit.void) }
    })
  const startHost = (holder: string) => startHostWith(holder, ports)

  const members = new Map<string, Member>()
  const handled = new Map<string, number>()
  const acked = new Map<string, number>()
  const keyOf = (shard: number, id: string) => `${shard}/${id}`
  const note = (e: Omit<Event, "seq" | "at" | "group">) => log.add({ ...e, group })

  const addMember = (id: string, incarnation = 1) =>
    Effect.gen(function* () {
      const machine = MemberMachine.make(
        {
          group,
          stream,
          memberId: id,
          incarnation,
          memberInfo: { consumerName: id, host: "127.0.0.1" },
          safetyMarginMs: 500,
          heartbeatIntervalMs,
          retryBackoffInitialMs: 50,
          retryBackoffMaxMs: 500,
        },
        Date.now(),
      )
      const m: Member = {
        id,
        machine,
        loops: new Map(),
        inbox: [],
        inFlight: false,
        wantSend: true,
        noticed: false,
        crashed: false,
        left: false,
      }
      const notices = yield* transport.notices(key, id).pipe(Scope.provide(scope))
      yield* Effect.forkIn(
        Stream.runForEach(notices, () =>
          Effect.sync(() => {
            m.noticed = true
          }),
        ),
        scope,
      )
      members.set(id, m)
      return m
    })

  const exec = (m: Member, commands: ReadonlyArray<MemberMachine.MemberCommand>): void => {
    for (const c of commands) {
      switch (c._tag) {
        case "StartShard":
          m.loops.set(c.shard, {
            shard: c.shard,
            token: c.token,
            stopping: false,
            claiming: true,
            exhausted: false,
            cursor: "0-0",
            inflight: undefined,
          })
          note({ member: m.id, kind: "start", shard: c.shard, token: c.token })
          exec(m, MemberMachine.step(m.machine, { _tag: "ShardStarted", shard: c.shard }))
          break
        case "StopShard": {
          const loop = m.loops.get(c.shard)
          if (loop !== undefined) loop.stopping = true
          break
        }
        case "StopAllShards": {
          // the loops end at once (their batches dropped, unacked): each is
          // reported drained, as the machine requires (docs/member.md)
          const stopped = [...m.loops.values()]
          for (const loop of stopped)
            note({ member: m.id, kind: "stopAll", shard: loop.shard, token: loop.token })
          m.loops.clear()
          if (c.reason !== "left" && c.reason !== "leave-timeout")
            for (const loop of stopped)
              exec(m, MemberMachine.step(m.machine, { _tag: "ShardDrained", shard: loop.shard }))
          break
        }
        case "SendHeartbeat":
          m.wantSend = true
          break
        case "Left":
          m.left = true
          note({ member: m.id, kind: "left" })
          break
        default:
          break
      }
    }
  }

  const send = (m: Member) =>
    Effect.gen(function* () {
      const { seq, request } = MemberMachine.nextRequest(m.machine, Date.now())
      for (const r of request.revokingShards)
        if (r.state === "REVOKED") note({ member: m.id, kind: "reportRevoked", shard: r.shard })
      m.inFlight = true
      m.wantSend = false
      yield* Effect.forkIn(
        Effect.flatMap(Effect.result(transport.heartbeat(request)), (result) =>
          Effect.sync(() => {
            m.inbox.push({ seq, result })
          }),
        ),
        scope,
      )
    })

  const drain = (m: Member, loop: Loop) => {
    m.loops.delete(loop.shard)
    note({ member: m.id, kind: "drained", shard: loop.shard, token: loop.token })
    exec(m, MemberMachine.step(m.machine, { _tag: "ShardDrained", shard: loop.shard }))
  }

  const address = (loop: Loop) => ({ stream, shard: loop.shard, group, token: loop.token })
  const stale = (m: Member, loop: Loop, error: { readonly _tag: string }) =>
    note({
      member: m.id,
      kind: "staleOwner",
      shard: loop.shard,
      token: loop.token,
      error: error._tag,
    })

  const stepLoop = (m: Member, loop: Loop) =>
    Effect.gen(function* () {
      if (loop.inflight !== undefined) {
        for (const msg of loop.inflight) {
          const k = keyOf(loop.shard, msg.id)
          handled.set(k, (handled.get(k) ?? 0) + 1)
          note({
            member: m.id,
            kind: "handle",
            shard: loop.shard,
            token: loop.token,
            id: msg.id,
            ...(msg.fields.key !== undefined
              ? { msgKey: msg.fields.key, n: Number(msg.fields.n) }
              : {}),
          })
        }
        const ids = loop.inflight.map((msg) => msg.id)
        const n = yield* Effect.result(streams.ack({ ...address(loop), ids, mode: "ack" }))
        if (Result.isSuccess(n)) for (const id of ids) acked.set(keyOf(loop.shard, id), 1)
        else stale(m, loop, n.failure)
        loop.inflight = undefined
        if (loop.stopping) drain(m, loop)
        return
      }
      if (loop.stopping) return drain(m, loop)
      if (loop.claiming) {
        const r = yield* Effect.result(
          streams.claimPending({
            ...address(loop),
            consumer: m.id,
            minIdleMs: 0,
            count: batch,
            start: loop.cursor,
          }),
        )
        if (Result.isFailure(r)) return stale(m, loop, r.failure)
        loop.cursor = r.success.next
        if (loop.cursor === "0-0") loop.claiming = false
        if (r.success.messages.length > 0) {
          loop.inflight = r.success.messages
          note({ member: m.id, kind: "claim", shard: loop.shard, token: loop.token })
        }
        return
      }
      const r = yield* Effect.result(
        streams.read({ ...address(loop), consumer: m.id, count: batch }),
      )
      if (Result.isFailure(r)) return stale(m, loop, r.failure)
      if (r.success.length > 0) {
        loop.inflight = r.success
        note({ member: m.id, kind: "read", shard: loop.shard, token: loop.token })
      } else if (!loop.exhausted) {
        const state = yield* Effect.result(streams.drainState(address(loop)))
        if (Result.isSuccess(state) && state.success.drained) {
          loop.exhausted = true
          note({ member: m.id, kind: "exhausted", shard: loop.shard, token: loop.token })
          exec(m, MemberMachine.step(m.machine, { _tag: "ShardExhausted", shard: loop.shard }))
        }
      }
    })

  const live = () => [...members.values()].filter((m) => !m.crashed && !m.left)

  /** One round: heartbeat results, notices, a Tick, due heartbeats, one step of each loop. */
  const drive = Effect.gen(function* () {
    const now = Date.now()
    for (const m of live()) {
      const inbox = m.inbox
      m.inbox = []
      for (const { seq, result } of inbox) {
        m.inFlight = false
        if (Result.isSuccess(result))
          exec(
            m,
            MemberMachine.step(m.machine, {
              _tag: "ResponseReceived",
              seq,
              response: result.success,
              now,
            }),
          )
        else {
          note({ member: m.id, kind: "hbFailed", error: result.failure.reason })
          exec(m, MemberMachine.step(m.machine, { _tag: "HeartbeatFailed", seq, now }))
        }
        if (m.left) break
      }
      if (m.left) continue
      if (m.noticed) {
        m.noticed = false
        exec(m, MemberMachine.step(m.machine, { _tag: "NoticeReceived" }))
      }
      exec(m, MemberMachine.step(m.machine, { _tag: "Tick", now }))
      if (m.wantSend && !m.inFlight && !m.left) yield* send(m)
    }
    for (const m of live())
      for (const loop of [...m.loops.values()].sort((a, b) => a.shard - b.shard))
        if (m.loops.get(loop.shard) === loop) yield* stepLoop(m, loop)
  })

  const crash = (id: string) => {
    const m = members.get(id)!
    m.crashed = true
    for (const loop of m.loops.values())
      note({ member: id, kind: "crash", shard: loop.shard, token: loop.token })
    m.loops.clear()
  }

  /** Every live member is stable and reads every shard it was granted; `shards` all owned. */
  const settled = () => {
    const ms = live()
    const owned = new Set(ms.flatMap((m) => MemberMachine.ownedShards(m.machine)))
    return (
      ms.length > 0 &&
      ms.every(
        (m) =>
          MemberMachine.phase(m.machine) === "stable" && m.loops.size === m.machine.shards.size,
      ) &&
      currentShards().every((s) => owned.has(s))
    )
  }

  let shardsNow: ReadonlyArray<number> = Array.from({ length: options.shardCount }, (_, i) => i)
  const currentShards = () => shardsNow
  const refreshShards = Effect.gen(function* () {
    const stored = yield* Effect.orDie(layouts.load(stream))
    if (Option.isSome(stored)) {
      const g = Layout.StreamLayout.current(stored.value.record)
      shardsNow = Array.from({ length: g.shardCount }, (_, i) => g.firstShard + i)
    }
  })

  /** Settled, and no member owns more than one shard more than another. */
  const balanced = () => {
    if (!settled()) return false
    const counts = live().map((m) => MemberMachine.ownedShards(m.machine).length)
    return Math.max(...counts) - Math.min(...counts) <= 1
  }

  const ownership = () =>
    new Map(live().map((m) => [m.id, MemberMachine.ownedShards(m.machine)] as const))

  return {
    key,
    config,
    members,
    handled,
    acked,
    startHost,
    startHostWith,
    addMember,
    drive,
    crash,
    settled,
    balanced,
    refreshShards,
    ownership,
    keyOf,
    live,
  }
})

export type Group = Effect.Success<ReturnType<typeof makeGroup>>

/** Rounds of `tickMs` real milliseconds driving every group, until `done` (or die after `maxMs`). */
export const runUntil = (
  groups: ReadonlyArray<Group>,
  what: string,
  done: () => boolean | Effect.Effect<boolean, unknown>,
  options: {
    readonly maxMs?: number
    readonly tickMs?: number
    readonly each?: Effect.Effect<void>
  } = {},
) =>
  Effect.gen(function* () {
    const deadline = Date.now() + (options.maxMs ?? 20_000)
    for (;;) {
      const d = done()
      if (typeof d === "boolean" ? d : yield* Effect.orDie(d)) return
      if (Date.now() > deadline) return yield* Effect.die(new Error(`not reached in time: ${what}`))
      if (options.each !== undefined) yield* options.each
      for (const g of groups) yield* g.drive
      yield* Effect.sleep(options.tickMs ?? 20)
    }
  })

/** A keyed producer on the stream's current layout; on ShardSealed it reloads and routes again. */
export const makeProducer = (ports: Ports, stream: string, shardCount: number) => {
  const streams = Context.get(ports, ShardStreams.ShardStreams)
  const layouts = Context.get(ports, StreamLayouts.StreamLayouts)
  const produced: Array<string> = []
  let next = 0
  let layout: Layout.Generation | undefined
  const produce = (keys: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      for (const k of keys) {
        const n = next++
        for (let attempt = 0; ; attempt++) {
          if (layout === undefined || attempt > 0) {
            const stored = yield* Effect.orDie(layouts.load(stream))
            layout = Option.match(stored, {
              onNone: () => ({ generation: 0, firstShard: 0, shardCount }),
              onSome: (l) => Layout.StreamLayout.current(l.record),
            })
          }
          const shard = Layout.shardOf(layout, k)
          const id = yield* Effect.result(streams.append(stream, shard, { key: k, n: String(n) }))
          if (Result.isSuccess(id)) {
            produced.push(`${shard}/${id.success}`)
            break
          }
          if (id.failure._tag !== "ShardSealed" || attempt > 3) return yield* Effect.die(id.failure)
        }
      }
    })
  return { produced, produce }
}

// ---------------------------------------------------------------------------
// checks over the event log (one group's events)

/** Per key, messages are first handled in produce order. */
export const perKeyOrder = (events: ReadonlyArray<Event>): Array<string> => {
  const last = new Map<string, number>()
  const seen = new Set<string>()
  const problems: Array<string> = []
  for (const e of events) {
    if (e.kind !== "handle" || e.msgKey === undefined || e.n === undefined) continue
    const id = `${e.msgKey}/${e.n}`
    if (seen.has(id)) continue
    seen.add(id)
    const before = last.get(e.msgKey)
    if (before !== undefined && e.n < before)
      problems.push(`#${e.seq}: key ${e.msgKey} message ${e.n} handled after message ${before}`)
    last.set(e.msgKey, Math.max(before ?? -1, e.n))
  }
  return problems
}

/** No two members of a group ever have an open read loop for one shard at once. */
export const overlappingOwnership = (events: ReadonlyArray<Event>): Array<string> => {
  const open = new Map<string, string>()
  const problems: Array<string> = []
  for (const e of events) {
    if (e.shard === undefined) continue
    const k = `${e.group}/${e.shard}`
    switch (e.kind) {
      case "start": {
        const other = open.get(k)
        if (other !== undefined && other !== e.member)
          problems.push(`#${e.seq}: ${e.member} starts ${k} while ${other} reads it`)
        open.set(k, e.member)
        break
      }
      case "drained":
      case "stopAll":
      case "crash":
        if (open.get(k) === e.member) open.delete(k)
        break
      case "read":
      case "claim":
      case "handle":
        if (open.get(k) !== e.member)
          problems.push(`#${e.seq}: ${e.member} ${e.kind}s ${k} it has no loop for`)
        break
      default:
        break
    }
  }
  return problems
}

/** Close a scope from outside (hosts, groups). */
export const closeScope = (scope: Scope.Closeable) =>
  Scope.close(scope, { _tag: "Success", value: undefined } as never)

/**
 * Two owners at once, from successful reads: a member reads a shard while
 * another member of the group still has an open loop on it that has read
 * since it opened. (A loop that never read, e.g. refused by the fence, is
 * not an owner.)
 */
export const concurrentReaders = (events: ReadonlyArray<Event>): Array<string> => {
  const open = new Map<string, Map<string, boolean>>() // key -> member -> has read
  const problems: Array<string> = []
  for (const e of events) {
    if (e.shard === undefined) continue
    const k = `${e.group}/${e.shard}`
    let loops = open.get(k)
    if (loops === undefined) {
      loops = new Map()
      open.set(k, loops)
    }
    switch (e.kind) {
      case "start":
        loops.set(e.member, false)
        break
      case "drained":
      case "stopAll":
      case "crash":
        loops.delete(e.member)
        break
      case "read":
      case "claim":
        for (const [other, read] of loops)
          if (other !== e.member && read)
            problems.push(`#${e.seq}: ${e.member} reads ${k} while ${other} reads it too`)
        loops.set(e.member, true)
        break
      default:
        break
    }
  }
  return problems
}
