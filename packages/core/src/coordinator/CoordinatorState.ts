/**
 * In-memory coordinator state, `replay` (records -> state) and snapshot
 * conversion. Persisted fields mirror `Snapshot`; indexes are derived and
 * volatile fields (deadlines, progress) are rebuilt on load, never recorded.
 */
import type { MemberInfo, ShardLayout, ShardProgress } from "../protocol/Heartbeat.js"
import type { GroupConfig } from "./GroupConfig.js"
import type {
  CoordinatorEpoch,
  CoordinatorRecord,
  Held,
  MemberState,
  ReshardingState,
  Revocation,
  ShardOwner,
} from "./Records.js"
import type { Snapshot } from "./Snapshot.js"

export interface MemberEntry {
  readonly memberId: string
  readonly memberEpoch: number
  readonly incarnation: number
  /** The registered process's random identity ("" from earlier versions). */
  readonly instance?: string
  readonly joinSeq: number
  /** Newest request of this lifecycle that changed the state (docs/protocol.md rule 18). */
  readonly lastSeq?: number
  readonly state: MemberState
  readonly weight: number
  readonly memberInfo: MemberInfo
}

/**
 * A deadline the runtime must call back with `onTimer` once `at` has passed.
 * `Session`: the member's lease. `Rebalance`: the earliest deadline of the
 * member's open revocations and unconfirmed grants (each shard has its own,
 * in `shardDeadlines`; docs/protocol.md rules 4 and 10).
 */
export type TimerKey =
  | { readonly _tag: "Session"; readonly memberId: string }
  | { readonly _tag: "Rebalance"; readonly memberId: string }
  /** The earliest deadline of the held shards (`heldDeadlines`); one for the group, memberId "". */
  | { readonly _tag: "Release"; readonly memberId: "" }

/** The one timer key of held shards (docs/protocol.md rule 19). */
export const RELEASE_TIMER: TimerKey = { _tag: "Release", memberId: "" }

/**
 * A process that left the registry (fenced, expired, left, replaced) and the
 * newest request seq the coordinator handled from it: a join of that very
 * process with a seq not above it is older than its removal (volatile,
 * bounded; docs/protocol.md rule 18).
 */
export interface Departed {
  readonly incarnation: number
  readonly instance: string
  readonly seq: number
}

/** Most departed processes remembered (the oldest are forgotten first). */
export const MAX_DEPARTED = 4_096

export interface Timer {
  readonly key: TimerKey
  readonly at: number
}

export const timerId = (key: TimerKey): string => {
  // the same key object twice in a row: a step's timer is looked up by
  // `applyVolatile`, then by the shell's timer heap (keys are immutable)
  if (key === lastKey) return lastId
  const byMember =
    key._tag === "Session" ? sessionIds : key._tag === "Rebalance" ? rebalanceIds : releaseIds
  let id = byMember.get(key.memberId)
  if (id === undefined) {
    if (byMember.size >= MAX_INTERNED_TIMER_IDS) byMember.clear()
    id = `${key._tag}:${key.memberId}`
    byMember.set(key.memberId, id)
  }
  lastKey = key
  lastId = id
  return id
}

/**
 * Timer ids are interned per tag and member id: every heartbeat re-arms its
 * member's session deadline, and a fresh concatenated id costs a string and
 * its hash at each of the two map lookups (docs/simulator.md, Speed). Bounded:
 * past this many ids of one tag the cache starts over.
 */
const sessionIds = new Map<string, string>()
const rebalanceIds = new Map<string, string>()
const releaseIds = new Map<string, string>()
const MAX_INTERNED_TIMER_IDS = 65_536
let lastKey: TimerKey | undefined
let lastId = ""

/**
 * Handlers read this state and never mutate it; `replay` and `applyVolatile`
 * (called by the runtime) are the only writers.
 */
export interface CoordinatorState {
  config: GroupConfig
  layout: ShardLayout
  resharding: ReshardingState
  groupEpoch: number
  assignmentEpoch: number
  storeRevision: number
  maxMemberEpoch: number
  readonly members: Map<string, MemberEntry>
  target: Array<string | null>
  current: Array<ShardOwner | null>
  revocations: Array<Revocation | null>
  tokens: Array<number>
  /** shard -> the previous holder it is held for (docs/protocol.md rule 19). */
  held: Array<Held | null>
  /** The last elected coordinator (`CoordinatorElected`); null before the first election. */
  coordinator: CoordinatorEpoch | null
  // derived indexes: drained shards of earlier generations; memberId -> shards
  readonly drained: Set<number>
  readonly targetOf: Map<string, Set<number>>
  readonly ownedBy: Map<string, Set<number>>
  readonly revokingFrom: Map<string, Set<number>>
  /** memberId -> shards held for one of its processes. */
  readonly heldBy: Map<string, Set<number>>
  // volatile: timerId -> deadline, memberId -> last progress report
  readonly deadlines: Map<string, number>
  /**
   * Volatile: shard -> deadline of its open revocation, or of its grant's
   * confirmation (the new owner must report it owned). Cleared when the shard
   * is freed or confirmed; rebuilt (fresh) on load.
   */
  readonly shardDeadlines: Map<number, number>
  /**
   * Volatile: held shard -> when its holder's lease has provably ended (the
   * holder's session deadline when it was held; fresh on load).
   */
  readonly heldDeadlines: Map<number, number>
  /**
   * Volatile: memberId -> seq of the newest request of its registered
   * process the coordinator handled (acted on or answered from the current
   * state); seeded from `lastSeq` on load (docs/protocol.md rule 18).
   */
  readonly handledSeq: Map<string, number>
  /** Volatile: memberId -> its last departed process (see `Departed`). */
  readonly departed: Map<string, Departed>
  readonly progress: Map<string, ReadonlyArray<ShardProgress>>
}

const filled = <A>(n: number, a: A): Array<A> => new Array<A>(n).fill(a)

/** The state of a freshly created group (what `GroupCreated` produces). */
export const initialState = (config: GroupConfig): CoordinatorState => ({
  config,
  layout: { shardCount: config.shardCount, generation: 0, firstShard: 0 },
  resharding: { _tag: "Idle" },
  groupEpoch: 0,
  assignmentEpoch: 0,
  storeRevision: 0,
  maxMemberEpoch: 0,
  members: new Map(),
  target: filled(config.shardCount, null),
  current: filled(config.shardCount, null),
  revocations: filled(config.shardCount, null),
  tokens: filled(config.shardCount, 0),
  held: filled(config.shardCount, null),
  coordinator: null,
  drained: new Set(),
  targetOf: new Map(),
  ownedBy: new Map(),
  revokingFrom: new Map(),
  heldBy: new Map(),
  deadlines: new Map(),
  shardDeadlines: new Map(),
  heldDeadlines: new Map(),
  handledSeq: new Map(),
  departed: new Map(),
  progress: new Map(),
})

const indexMove = (
  index: Map<string, Set<number>>,
  shard: number,
  from: string | null | undefined,
  to: string | null | undefined,
): void => {
  if (from === to) return
  if (from != null) {
    const set = index.get(from)
    if (set !== undefined) {
      set.delete(shard)
      if (set.size === 0) index.delete(from)
    }
  }
  if (to != null) {
    let set = index.get(to)
    if (set === undefined) {
      set = new Set()
      index.set(to, set)
    }
    set.add(shard)
  }
}

/** Apply one record to the state, in place. */
export const replay = (state: CoordinatorState, record: CoordinatorRecord): void => {
  switch (record._tag) {
    case "GroupCreated": {
      const fresh = initialState(record.config)
      const revision = state.storeRevision
      const elected = state.coordinator
      Object.assign(state, fresh, { layout: record.layout })
      state.storeRevision = revision
      // The coordinator epoch only moves forward, even across a re-creation.
      state.coordinator = elected
      state.members.clear()
      state.drained.clear()
      state.targetOf.clear()
      state.ownedBy.clear()
      state.revokingFrom.clear()
      state.heldBy.clear()
      state.deadlines.clear()
      state.shardDeadlines.clear()
      state.heldDeadlines.clear()
      state.handledSeq.clear()
      state.departed.clear()
      state.progress.clear()
      return
    }
    case "MemberUpserted": {
      const previous = state.members.get(record.member.memberId)
      // another process (or lifecycle) of the id: its handled requests do not order this one's
      if (
        previous !== undefined &&
        (previous.incarnation !== record.member.incarnation ||
          (previous.instance ?? "") !== (record.member.instance ?? "") ||
          previous.memberEpoch !== record.member.memberEpoch)
      )
        state.handledSeq.delete(record.member.memberId)
      state.members.set(record.member.memberId, record.member)
      const seq = record.member.lastSeq ?? record.member.joinSeq
      if (seq > (state.handledSeq.get(record.member.memberId) ?? 0))
        state.handledSeq.set(record.member.memberId, seq)
      if (record.member.memberEpoch > state.maxMemberEpoch)
        state.maxMemberEpoch = record.member.memberEpoch
      return
    }
    case "MemberRemoved": {
      const gone = state.members.get(record.memberId)
      if (gone !== undefined) {
        state.departed.delete(record.memberId)
        state.departed.set(record.memberId, {
          incarnation: gone.incarnation,
          instance: gone.instance ?? "",
          seq: Math.max(state.handledSeq.get(record.memberId) ?? 0, gone.lastSeq ?? gone.joinSeq),
        })
        if (state.departed.size > MAX_DEPARTED) {
          const oldest = state.departed.keys().next().value
          if (oldest !== undefined) state.departed.delete(oldest)
        }
      }
      state.handledSeq.delete(record.memberId)
      state.members.delete(record.memberId)
      state.deadlines.delete(timerId({ _tag: "Session", memberId: record.memberId }))
      state.deadlines.delete(timerId({ _tag: "Rebalance", memberId: record.memberId }))
      state.progress.delete(record.memberId)
      return
    }
    case "GroupEpochBumped": {
      state.groupEpoch = record.groupEpoch
      return
    }
    case "TargetAssignmentChanged": {
      for (const { shard, memberId } of record.shards) {
        indexMove(state.targetOf, shard, state.target[shard], memberId)
        state.target[shard] = memberId
      }
      state.assignmentEpoch = record.assignmentEpoch
      return
    }
    case "ShardOwnersChanged": {
      for (const { shard, owner } of record.shards) {
        indexMove(state.ownedBy, shard, state.current[shard]?.memberId, owner?.memberId)
        state.current[shard] = owner
        // A freed or confirmed shard has nothing left to finish by a deadline.
        if (owner === null || owner.confirmed) state.shardDeadlines.delete(shard)
        if (owner !== null && owner.token > (state.tokens[shard] ?? 0))
          state.tokens[shard] = owner.token
      }
      return
    }
    case "RevocationsChanged": {
      for (const { shard, revocation } of record.shards) {
        indexMove(
          state.revokingFrom,
          shard,
          state.revocations[shard]?.memberId,
          revocation?.memberId,
        )
        state.revocations[shard] = revocation
      }
      return
    }
    case "HeldChanged": {
      for (const { shard, held } of record.shards) {
        indexMove(state.heldBy, shard, state.held[shard]?.memberId, held?.memberId)
        state.held[shard] = held
        if (held === null) state.heldDeadlines.delete(shard)
        // a rewind's hold carries the token storage holds: the next grant must exceed it
        else if (held.token > (state.tokens[shard] ?? 0)) state.tokens[shard] = held.token
      }
      return
    }
    case "GroupConfigChanged": {
      state.config = record.config
      return
    }
    case "MigrationStarted": {
      const earlier = state.resharding._tag === "Migrating" ? state.resharding.generations : []
      state.resharding = {
        _tag: "Migrating",
        generations: [...earlier, state.layout],
        drained: state.resharding._tag === "Migrating" ? state.resharding.drained : [],
      }
      state.layout = record.layout
      // the new generation's shard ids come after every earlier one
      const n = record.layout.firstShard + record.layout.shardCount
      while (state.target.length < n) {
        state.target.push(null)
        state.current.push(null)
        state.revocations.push(null)
        state.tokens.push(0)
        state.held.push(null)
      }
      return
    }
    case "ShardsDrained": {
      if (state.resharding._tag !== "Migrating") return
      for (const shard of record.shards) state.drained.add(shard)
      state.resharding = { ...state.resharding, drained: [...state.drained].sort((a, b) => a - b) }
      return
    }
    case "MigrationCompleted": {
      state.resharding = { _tag: "Idle" }
      state.drained.clear()
      return
    }
    case "CoordinatorElected": {
      state.coordinator = { holder: record.holder, leaseToken: record.leaseToken }
      return
    }
    case "Audit":
      return
  }
}

export const replayAll = (
  state: CoordinatorState,
  records: ReadonlyArray<CoordinatorRecord>,
): void => {
  for (const r of records) replay(state, r)
}

/** A per-shard deadline (revocation or grant confirmation), see `shardDeadlines`. */
export interface ShardDeadline {
  readonly shard: number
  readonly at: number
}

/** Volatile updates a handler asks for: deadlines and the latest progress report. */
export interface VolatileUpdate {
  readonly timers: ReadonlyArray<Timer>
  readonly shardDeadlines?: ReadonlyArray<ShardDeadline>
  /** Deadlines of shards held by this step (docs/protocol.md rule 19). */
  readonly heldDeadlines?: ReadonlyArray<ShardDeadline>
  /** The request this step handled: memberId and seq (docs/protocol.md rule 18). */
  readonly handled?: { readonly memberId: string; readonly seq: number }
  readonly progress?: { readonly memberId: string; readonly shards: ReadonlyArray<ShardProgress> }
}

/** Apply a handler's volatile updates (after its records were committed and replayed). */
export const applyVolatile = (state: CoordinatorState, update: VolatileUpdate): void => {
  // A heartbeat's timers, handled seq and progress are all of the member it
  // answered: its registry entry is looked up once (a lookup in a map of
  // every member is a cache miss in a large group; docs/simulator.md, Speed).
  let knownId: string | undefined
  for (const t of update.timers) {
    const id = t.key.memberId
    if (t.key._tag === "Release" || id === knownId || state.members.has(id)) {
      if (t.key._tag !== "Release") knownId = id
      state.deadlines.set(timerId(t.key), t.at)
    }
  }
  if (update.heldDeadlines !== undefined)
    for (const d of update.heldDeadlines)
      if (state.held[d.shard] != null) state.heldDeadlines.set(d.shard, d.at)
  const h = update.handled
  if (h !== undefined && (h.memberId === knownId || state.members.has(h.memberId))) {
    knownId = h.memberId
    if (h.seq > (state.handledSeq.get(h.memberId) ?? 0)) state.handledSeq.set(h.memberId, h.seq)
  }
  if (update.shardDeadlines !== undefined)
    for (const d of update.shardDeadlines) {
      // Only a shard still owned, and being revoked or not yet confirmed, has a deadline.
      const owner = state.current[d.shard]
      if (owner != null && (!owner.confirmed || state.revocations[d.shard] != null))
        state.shardDeadlines.set(d.shard, d.at)
    }
  const p = update.progress
  if (p !== undefined && (p.memberId === knownId || state.members.has(p.memberId)))
    state.progress.set(p.memberId, p.shards)
}

/** The persisted view of the state. */
export const toSnapshot = (state: CoordinatorState): Snapshot => ({
  version: 3,
  config: state.config,
  layout: state.layout,
  resharding: state.resharding,
  groupEpoch: state.groupEpoch,
  assignmentEpoch: state.assignmentEpoch,
  storeRevision: state.storeRevision,
  maxMemberEpoch: state.maxMemberEpoch,
  members: [...state.members.values()].sort((a, b) => (a.memberId < b.memberId ? -1 : 1)),
  target: [...state.target],
  current: [...state.current],
  revocations: [...state.revocations],
  tokens: [...state.tokens],
  held: [...state.held],
  ...(state.coordinator !== null ? { coordinator: state.coordinator } : {}),
})

/** Checks a decoded snapshot for internal consistency; returns a problem or undefined. */
export const checkSnapshot = (s: Snapshot): string | undefined => {
  const n = s.layout.firstShard + s.layout.shardCount
  for (const [name, arr] of [
    ["target", s.target],
    ["current", s.current],
    ["revocations", s.revocations],
    ["tokens", s.tokens],
    ["held", s.held ?? new Array<null>(n).fill(null)],
  ] as const) {
    if (arr.length !== n) return `${name} has ${arr.length} entries, the layout has ${n} shard ids`
  }
  if (s.resharding._tag === "Migrating") {
    const chain = [...s.resharding.generations, s.layout]
    for (let i = 1; i < chain.length; i++) {
      const prev = chain[i - 1]!
      const g = chain[i]!
      if (g.generation <= prev.generation || g.firstShard < prev.firstShard + prev.shardCount)
        return `layout generation ${g.generation} does not follow generation ${prev.generation}`
    }
    const earlier = (shard: number) =>
      s.resharding._tag === "Migrating" &&
      s.resharding.generations.some(
        (g) => shard >= g.firstShard && shard < g.firstShard + g.shardCount,
      )
    for (const d of s.resharding.drained)
      if (!earlier(d)) return `drained shard ${d} is not a shard of an earlier generation`
  }
  const ids = new Set<string>()
  for (const m of s.members) {
    if (ids.has(m.memberId)) return `duplicate member ${m.memberId}`
    if (m.memberEpoch > s.maxMemberEpoch) return `member ${m.memberId} epoch above maxMemberEpoch`
    ids.add(m.memberId)
  }
  for (let i = 0; i < n; i++) {
    const t = s.target[i]
    if (t != null && !ids.has(t)) return `shard ${i} targets unknown member ${t}`
    const c = s.current[i]
    if (c != null) {
      if (!ids.has(c.memberId)) return `shard ${i} owned by unknown member ${c.memberId}`
      if (c.token > (s.tokens[i] ?? 0)) return `shard ${i} owner token above the shard's counter`
    }
    const r = s.revocations[i]
    if (r != null && c?.memberId !== r.memberId)
      return `shard ${i} revoked from a member that does not own it`
    const h = s.held?.[i]
    if (h != null) {
      if (c != null) return `shard ${i} is both owned and held`
      if (h.token > (s.tokens[i] ?? 0)) return `shard ${i} held token above the shard's counter`
    }
  }
  return undefined
}

/** Rebuild a state (with indexes, without volatile fields) from a snapshot. */
export const fromSnapshot = (s: Snapshot): CoordinatorState => {
  const state = initialState(s.config)
  state.layout = s.layout
  state.resharding = s.resharding
  state.groupEpoch = s.groupEpoch
  state.assignmentEpoch = s.assignmentEpoch
  state.storeRevision = s.storeRevision
  state.maxMemberEpoch = s.maxMemberEpoch
  for (const m of s.members) state.members.set(m.memberId, m)
  state.target = [...s.target]
  state.current = [...s.current]
  state.revocations = [...s.revocations]
  state.tokens = [...s.tokens]
  state.held = s.held !== undefined ? [...s.held] : state.target.map(() => null)
  state.coordinator = s.coordinator ?? null
  if (s.resharding._tag === "Migrating") for (const d of s.resharding.drained) state.drained.add(d)
  for (let i = 0; i < s.layout.firstShard + s.layout.shardCount; i++) {
    indexMove(state.targetOf, i, null, s.target[i])
    indexMove(state.ownedBy, i, null, s.current[i]?.memberId)
    indexMove(state.revokingFrom, i, null, s.revocations[i]?.memberId)
    indexMove(state.heldBy, i, null, state.held[i]?.memberId)
  }
  for (const m of s.members) state.handledSeq.set(m.memberId, m.lastSeq ?? m.joinSeq)
  return state
}
