/**
 * Test driver (test code, not a public API): one or more CoordinatorHosts
 * (memory Store + memory CoordinatorLease, `OwnerFence.make` writing owner
 * tokens with `ShardStreams.setOwnerToken`), the memory CoordinatorTransport
 * (the host serves the group, notices reach the members), the memory
 * ShardStreams, and N pure MemberMachines whose commands the driver executes.
 * Several clusters (groups) can share the ports (`SharedPorts`): fan-out of
 * one stream to several groups.
 *
 * Time is effect's TestClock. The driver runs in rounds: advance the clock by
 * one tick (host timers, transport timeouts and in-flight heartbeats run),
 * then, member by member in a fixed order, apply heartbeat results, notices
 * and a Tick, send a due heartbeat, then run one step of each read loop. A
 * read loop step either reads a batch (it is now in flight) or handles +
 * acks the batch read in the previous step, so "in flight" spans a round.
 *
 * Everything observable goes to an ordered event log, from which the tests
 * assert the end-to-end properties.
 */
import { Clock, Effect, Layer, Option, Result, Scope, Stream } from "effect"
import { TestClock } from "effect/testing"
import {
  type CoordinatorHost,
  CoordinatorLease,
  type CoordinatorState,
  type HeartbeatResponse,
  Layout,
  MemberMachine,
  makeCoordinatorHost,
  OwnerFence,
  ShardStreams,
  StreamLayouts,
  type TransportError,
} from "../../src/index.js"
import { Store, CoordinatorTransport as TestingTransport } from "../../src/testing.js"

/** The default group. */
export const group = "g"
export const stream = "orders"
const defaultGroup = group
const defaultStream = stream

/** Ports several clusters (groups) can share; `produced` is every message appended. */
export interface SharedPorts {
  readonly streams: ShardStreams.ShardStreamsShape
  readonly store: Store.MemoryStore
  readonly lease: CoordinatorLease.CoordinatorLeaseShape
  readonly transport: TestingTransport.CoordinatorTransportShape
  readonly faults: TestingTransport.TransportFaultsShape
  readonly layouts: StreamLayouts.StreamLayoutsShape
  readonly produced: Array<string>
}

export const makeSharedPorts = (transportTimeoutMs = 500) =>
  Effect.gen(function* () {
    const { transport, faults } = yield* TestingTransport.makeMemory({
      timeoutMs: transportTimeoutMs,
    })
    const ports: SharedPorts = {
      streams: yield* ShardStreams.makeMemory,
      store: Store.makeMemoryUnsafe(),
      lease: yield* CoordinatorLease.makeMemory,
      transport,
      faults,
      layouts: yield* StreamLayouts.makeMemory,
      produced: [],
    }
    return ports
  })

export type EventKind =
  | "start" // StartShard executed: a read loop exists for (member, shard)
  | "claim" // claimPending returned entries (takeover of a previous owner's pending entries)
  | "read" // read returned a batch
  | "handle" // one message handled
  | "drained" // a stopped loop finished its in-flight batch: ShardDrained
  | "stopAll" // StopAllShards closed this loop without acking
  | "crash" // the driver killed this loop (member crash)
  | "reportRevoked" // a heartbeat carrying REVOKED for this shard was sent
  | "staleOwner" // the data plane refused the member's token
  | "hbFailed" // a heartbeat failed (transport error)
  | "leaveSent" // a heartbeat with memberEpoch -1 was sent (gives every shard back)
  | "exhausted" // a read loop found its (sealed) shard drained for the group
  | "left"

export interface Event {
  readonly seq: number
  readonly round: number
  readonly at: number
  readonly member: string
  readonly kind: EventKind
  readonly shard?: number
  readonly token?: number
  readonly id?: string
  readonly count?: number
  /** For "handle": the message's key and its produce order (keyed producer). */
  readonly msgKey?: string
  readonly n?: number
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

export interface Member {
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

export interface ClusterOptions {
  readonly shardCount: number
  readonly sessionTimeoutMs?: number
  readonly rebalanceTimeoutMs?: number
  readonly heartbeatIntervalMs?: number
  readonly leaseTtlMs?: number
  readonly tickMs?: number
  readonly batch?: number
  readonly transportTimeoutMs?: number
  /** This cluster's group and stream (default `g` on `orders`). */
  readonly group?: string
  readonly stream?: string
  /** Ports shared with other clusters (default: fresh ones). */
  readonly shared?: SharedPorts
}

export const makeCluster = Effect.fnUntraced(function* (options: ClusterOptions) {
  const scope = yield* Scope.Scope
  const sessionTimeoutMs = options.sessionTimeoutMs ?? 6_000
  const heartbeatIntervalMs = options.heartbeatIntervalMs ?? 1_000
  const tickMs = options.tickMs ?? 100
  const batch = options.batch ?? 3
  const group = options.group ?? defaultGroup
  const stream = options.stream ?? defaultStream
  const key = { stream, group }
  const config = {
    groupId: group,
    stream,
    shardCount: options.shardCount,
    sessionTimeoutMs,
    rebalanceTimeoutMs: options.rebalanceTimeoutMs ?? 10_000,
    heartbeatIntervalMs,
  }
  const shared = options.shared ?? (yield* makeSharedPorts(options.transportTimeoutMs))
  const { streams, store, lease, transport, faults, layouts, produced } = shared

  const events: Array<Event> = []
  let round = 0
  let now = yield* Clock.currentTimeMillis
  const log = (e: Omit<Event, "seq" | "round" | "at">) =>
    events.push({ ...e, seq: events.length, round, at: now })

  /** Message key `shard/id` -> handled by (member, round); ack count (`produced`: shared). */
  const handled = new Map<string, Array<{ member: string; round: number; deliveryCount: number }>>()
  const acked = new Map<string, number>()
  const keyOf = (shard: number, id: string) => `${shard}/${id}`

  // coordinator -------------------------------------------------------------
  const fence = yield* OwnerFence.make.pipe(
    Effect.provideService(ShardStreams.ShardStreams, streams),
  )

  /** Start a coordinator candidate in its own scope; `storeShape` may wrap the shared store. */
  const startHost = (
    holder: string,
    storeShape: Store.StoreShape = store,
    leaseShape: CoordinatorLease.CoordinatorLeaseShape = lease,
  ) =>
    Effect.gen(function* () {
      const hostScope = yield* Scope.fork(scope)
      const host = yield* makeCoordinatorHost({
        config,
        holder,
        ...(options.leaseTtlMs !== undefined ? { leaseTtlMs: options.leaseTtlMs } : {}),
        onNotice: (memberId) => transport.notify(key, memberId),
      }).pipe(
        Scope.provide(hostScope),
        Effect.provide(
          Layer.mergeAll(
            Layer.succeed(Store.Store, storeShape),
            Layer.succeed(CoordinatorLease.CoordinatorLease, leaseShape),
            Layer.succeed(OwnerFence.OwnerFence, fence),
            Layer.succeed(StreamLayouts.StreamLayouts, layouts),
            Layer.succeed(ShardStreams.ShardStreams, streams),
          ),
        ),
        Effect.orDie,
      )
      return { host, scope: hostScope }
    })

  /** Route the group's heartbeats to `host` (a newer serve replaces the older). */
  const serve = (host: CoordinatorHost) =>
    transport.serve(key, host.heartbeat).pipe(Scope.provide(scope))

  // members -----------------------------------------------------------------
  const members = new Map<string, Member>()

  const addMember = (id: string) =>
    Effect.gen(function* () {
      const machine = MemberMachine.make(
        {
          group,
          stream,
          memberId: id,
          incarnation: 1,
          memberInfo: { consumerName: id, host: "10.0.0.1" },
          safetyMarginMs: 1_000,
          heartbeatIntervalMs,
        },
        now,
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
          log({ member: m.id, kind: "start", shard: c.shard, token: c.token })
          exec(m, MemberMachine.step(m.machine, { _tag: "ShardStarted", shard: c.shard }))
          break
        case "StopShard": {
          const loop = m.loops.get(c.shard)
          if (loop !== undefined) loop.stopping = true
          break
        }
        case "StopAllShards": {
          // the loops end at once (their in-flight batches are dropped, not
          // acked): each is reported drained, as the machine requires
          const stopped = [...m.loops.values()]
          for (const loop of stopped)
            log({ member: m.id, kind: "stopAll", shard: loop.shard, token: loop.token })
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
          log({ member: m.id, kind: "left" })
          break
        case "LayoutChanged":
        case "RequestRejected":
        case "LeaseUnusable":
        case "Superseded":
          break
      }
    }
  }

  const send = (m: Member) =>
    Effect.gen(function* () {
      const { seq, request } = MemberMachine.nextRequest(m.machine, now)
      for (const r of request.revokingShards)
        if (r.state === "REVOKED") log({ member: m.id, kind: "reportRevoked", shard: r.shard })
      if (request.memberEpoch === -1) log({ member: m.id, kind: "leaveSent" })
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
    log({ member: m.id, kind: "drained", shard: loop.shard, token: loop.token })
    exec(m, MemberMachine.step(m.machine, { _tag: "ShardDrained", shard: loop.shard }))
  }

  const address = (loop: Loop) => ({ stream, shard: loop.shard, group, token: loop.token })

  const stepLoop = (m: Member, loop: Loop) =>
    Effect.gen(function* () {
      if (loop.inflight !== undefined) {
        for (const msg of loop.inflight) {
          const key = keyOf(loop.shard, msg.id)
          const list = handled.get(key) ?? []
          list.push({ member: m.id, round, deliveryCount: msg.deliveryCount })
          handled.set(key, list)
          log({
            member: m.id,
            kind: "handle",
            shard: loop.shard,
            token: loop.token,
            id: msg.id,
            ...(msg.fields.key !== undefined
              ? { msgKey: msg.fields.key, n: Number(msg.fields.n) }
              : {}),
          })
          const n = yield* Effect.result(
            streams.ack({ ...address(loop), ids: [msg.id], mode: "ack" }),
          )
          if (Result.isSuccess(n)) acked.set(key, (acked.get(key) ?? 0) + n.success)
          else log({ member: m.id, kind: "staleOwner", shard: loop.shard, token: loop.token })
        }
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
        if (Result.isFailure(r)) {
          log({ member: m.id, kind: "staleOwner", shard: loop.shard, token: loop.token })
          return
        }
        loop.cursor = r.success.next
        if (loop.cursor === "0-0") loop.claiming = false
        if (r.success.messages.length > 0) {
          loop.inflight = r.success.messages
          log({
            member: m.id,
            kind: "claim",
            shard: loop.shard,
            token: loop.token,
            count: r.success.messages.length,
          })
        }
        return
      }
      const r = yield* Effect.result(
        streams.read({ ...address(loop), consumer: m.id, count: batch }),
      )
      if (Result.isFailure(r)) {
        log({ member: m.id, kind: "staleOwner", shard: loop.shard, token: loop.token })
        return
      }
      if (r.success.length > 0) {
        loop.inflight = r.success
        log({
          member: m.id,
          kind: "read",
          shard: loop.shard,
          token: loop.token,
          count: r.success.length,
        })
      } else if (!loop.exhausted) {
        // nothing to read: a sealed shard of an earlier generation may be done for the group
        const state = yield* Effect.orDie(streams.drainState(address(loop)))
        if (state.drained) {
          loop.exhausted = true
          log({ member: m.id, kind: "exhausted", shard: loop.shard, token: loop.token })
          exec(m, MemberMachine.step(m.machine, { _tag: "ShardExhausted", shard: loop.shard }))
        }
      }
    })

  const live = () => [...members.values()].filter((m) => !m.crashed && !m.left)

  /** Drive every live member once at the current time (a round without moving the clock). */
  const drive = Effect.gen(function* () {
    round++
    now = yield* Clock.currentTimeMillis
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
          log({ member: m.id, kind: "hbFailed" })
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
    for (const m of live()) {
      const loops = [...m.loops.values()].sort((a, b) => a.shard - b.shard)
      for (const loop of loops) if (m.loops.get(loop.shard) === loop) yield* stepLoop(m, loop)
    }
  })

  /** One round: advance the clock one tick, then drive every live member. */
  const tick = Effect.andThen(TestClock.adjust(tickMs), drive)

  const runUntil = (what: string, done: () => boolean, maxRounds = 1_000) =>
    Effect.gen(function* () {
      for (let i = 0; i < maxRounds; i++) {
        if (done()) return i
        yield* tick
      }
      if (done()) return maxRounds
      return yield* Effect.die(new Error(`not reached after ${maxRounds} rounds: ${what}`))
    })

  const runRounds = (n: number, each?: (i: number) => Effect.Effect<void>) =>
    Effect.gen(function* () {
      for (let i = 0; i < n; i++) {
        if (each !== undefined) yield* each(i)
        yield* tick
      }
    })

  // producers and views ---------------------------------------------------------
  let nextMessage = 0
  const produce = (count: number) =>
    Effect.gen(function* () {
      for (let i = 0; i < count; i++) {
        const n = nextMessage++
        const shard = n % options.shardCount
        const id = yield* Effect.orDie(streams.append(stream, shard, { n: String(n) }))
        produced.push(keyOf(shard, id))
      }
    })

  /**
   * A keyed producer: routes each key with the stream's current layout
   * (`Layout.shardOf`), and on ShardSealed reloads the layout and routes again,
   * as member-runtime's producer does. Fields: the key and its produce order `n`.
   */
  const produceKeyed = (keys: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      for (const k of keys) {
        const n = nextMessage++
        for (let attempt = 0; ; attempt++) {
          const stored = yield* Effect.orDie(layouts.load(stream))
          const layout = Option.match(stored, {
            onNone: () => ({ generation: 0, firstShard: 0, shardCount: options.shardCount }),
            onSome: (l) => Layout.StreamLayout.current(l.record),
          })
          const shard = Layout.shardOf(layout, k)
          const id = yield* Effect.result(streams.append(stream, shard, { key: k, n: String(n) }))
          if (Result.isSuccess(id)) {
            produced.push(keyOf(shard, id.success))
            break
          }
          if (id.failure._tag !== "ShardSealed" || attempt > 3) return yield* Effect.die(id.failure)
        }
      }
    })

  /** Reshard the stream (the operator's command; the host follows at its next renewal). */
  const reshard = (shardCount: number) =>
    Layout.Reshard.reshardStream(stream, shardCount).pipe(
      Effect.provideService(StreamLayouts.StreamLayouts, layouts),
      Effect.provideService(ShardStreams.ShardStreams, streams),
    )

  const rollback = Layout.Reshard.rollbackStream(stream).pipe(
    Effect.provideService(StreamLayouts.StreamLayouts, layouts),
    Effect.provideService(ShardStreams.ShardStreams, streams),
  )

  const allAcked = () => produced.every((k) => (acked.get(k) ?? 0) >= 1)

  /** Every live member is stable and owns what the coordinator granted it. */
  const ownership = (): Map<string, Array<number>> => {
    const out = new Map<string, Array<number>>()
    for (const m of live()) out.set(m.id, MemberMachine.ownedShards(m.machine))
    return out
  }

  const settled = (host: CoordinatorHost) =>
    Effect.map(host.monitor, (mon) => {
      if (Option.isNone(mon)) return false
      const ms = live()
      return (
        !mon.value.rebalanceInProgress &&
        mon.value.unownedShards === 0 &&
        mon.value.pendingRevokes === 0 &&
        ms.every(
          (m) =>
            MemberMachine.phase(m.machine) === "stable" && m.loops.size === m.machine.shards.size,
        )
      )
    })

  const runUntilSettled = (host: CoordinatorHost, maxRounds = 1_000) =>
    Effect.gen(function* () {
      for (let i = 0; i < maxRounds; i++) {
        if (yield* settled(host)) return i
        yield* tick
      }
      return yield* Effect.die(new Error(`group not settled after ${maxRounds} rounds`))
    })

  /** Kill a member: no more heartbeats, its loops die without acking. */
  const crash = (id: string) => {
    const m = members.get(id)!
    m.crashed = true
    for (const loop of m.loops.values())
      log({ member: id, kind: "crash", shard: loop.shard, token: loop.token })
    const inflight = [...m.loops.values()].flatMap((l) =>
      (l.inflight ?? []).map((msg) => keyOf(l.shard, msg.id)),
    )
    const tokens = new Map([...m.loops.values()].map((l) => [l.shard, l.token] as const))
    m.loops.clear()
    return { inflight, tokens }
  }

  const leave = (id: string) => {
    const m = members.get(id)!
    exec(m, MemberMachine.step(m.machine, { _tag: "LeaveRequested", now }))
  }

  const coordinatorState = (host: CoordinatorHost) =>
    Effect.map(host.state, (s) => Option.getOrThrow(s) as CoordinatorState)

  return {
    key,
    shared,
    streams,
    store,
    lease,
    transport,
    faults,
    events,
    members,
    handled,
    acked,
    produced,
    startHost,
    serve,
    addMember,
    produce,
    produceKeyed,
    reshard,
    rollback,
    tick,
    drive,
    settled,
    runUntil,
    runRounds,
    runUntilSettled,
    allAcked,
    ownership,
    crash,
    leave,
    coordinatorState,
    keyOf,
    round: () => round,
  }
})

export type Cluster = Effect.Success<ReturnType<typeof makeCluster>>

// ---------------------------------------------------------------------------
// checks over the event log

/**
 * Per-key order (docs/resharding.md): for every key, messages are first
 * handled in the order they were produced. With one producer per key this is
 * the resharding guarantee: a message written under an older layout is
 * handled (and acked, the driver acks right after handling) before any later
 * message of the key, which a newer layout may have put on another shard.
 */
export const perKeyOrder = (events: ReadonlyArray<Event>): Array<string> => {
  const last = new Map<string, number>()
  const seen = new Set<string>()
  const problems: Array<string> = []
  for (const e of events) {
    if (e.kind !== "handle" || e.msgKey === undefined || e.n === undefined) continue
    const id = `${e.msgKey}/${e.n}`
    if (seen.has(id)) continue // a redelivery of a message handled before
    seen.add(id)
    const before = last.get(e.msgKey)
    if (before !== undefined && e.n < before)
      problems.push(`#${e.seq}: key ${e.msgKey} message ${e.n} handled after message ${before}`)
    last.set(e.msgKey, Math.max(before ?? -1, e.n))
  }
  return problems
}

/** No two members ever have an open read loop for the same shard at the same time. */
export const overlappingOwnership = (events: ReadonlyArray<Event>): Array<string> => {
  const open = new Map<number, string>()
  const problems: Array<string> = []
  for (const e of events) {
    if (e.shard === undefined) continue
    switch (e.kind) {
      case "start": {
        const other = open.get(e.shard)
        if (other !== undefined && other !== e.member)
          problems.push(`#${e.seq}: ${e.member} starts shard ${e.shard} while ${other} reads it`)
        open.set(e.shard, e.member)
        break
      }
      case "drained":
      case "stopAll":
      case "crash":
        if (open.get(e.shard) === e.member) open.delete(e.shard)
        break
      case "read":
      case "claim":
      case "handle":
        if (open.get(e.shard) !== e.member)
          problems.push(`#${e.seq}: ${e.member} ${e.kind}s shard ${e.shard} it has no loop for`)
        break
      default:
        break
    }
  }
  return problems
}

/**
 * Revoke-before-assign, end to end: whenever a shard's loop starts on member B
 * after member A's loop for it was stopped by a revocation (drained), A had
 * sent a heartbeat reporting the shard REVOKED (or its epoch -1 leave) after
 * draining and before B's start; B reads only inside its loop (checked by
 * `overlappingOwnership`). Returns the handoffs checked and any violation.
 */
export const revokeBeforeAssign = (events: ReadonlyArray<Event>) => {
  const lastClose = new Map<number, Event>()
  const sent = new Map<string, Array<number>>()
  const note = (key: string, seq: number) => sent.set(key, [...(sent.get(key) ?? []), seq])
  const handoffs: Array<{ seq: number; shard: number; from: string; to: string }> = []
  const problems: Array<string> = []
  for (const e of events) {
    if (e.kind === "leaveSent") note(e.member, e.seq)
    if (e.shard === undefined) continue
    if (e.kind === "drained" || e.kind === "stopAll" || e.kind === "crash")
      lastClose.set(e.shard, e)
    if (e.kind === "reportRevoked") note(`${e.member}/${e.shard}`, e.seq)
    if (e.kind === "start") {
      const prev = lastClose.get(e.shard)
      if (prev === undefined || prev.member === e.member || prev.kind !== "drained") continue
      handoffs.push({ seq: e.seq, shard: e.shard, from: prev.member, to: e.member })
      const reports = [
        ...(sent.get(`${prev.member}/${e.shard}`) ?? []),
        ...(sent.get(prev.member) ?? []),
      ]
      if (!reports.some((r) => r > prev.seq && r < e.seq))
        problems.push(
          `#${e.seq}: ${e.member} starts shard ${e.shard} without ${prev.member} reporting REVOKED after draining (#${prev.seq})`,
        )
    }
  }
  return { handoffs, problems }
}
