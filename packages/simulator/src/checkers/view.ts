/**
 * The committed view: what the store holds, rebuilt by the checkers from the
 * committed record batches with their own small replay (not the core's), so
 * a bug in the coordinator's replay cannot hide itself. It is the checkers'
 * source for "who does the group believe holds what, since when, granted in
 * which revision", and for the lifecycle ends (left, expired, fenced,
 * replaced, rejoined) that other checkers judge.
 *
 * Records are read by tag and field name only (`CoordinatorRecord` is used
 * for typing): a record kind the view does not know is ignored.
 *
 * @module
 */
import type { CoordinatorRecord } from "@shardline/core"

export interface Lifecycle {
  readonly memberId: string
  readonly epoch: number
  readonly incarnation: number
  /** The process's random identity ("" if the record has none). */
  readonly instance: string
  readonly joinSeq: number
  state: string
  /** Commit time of the lifecycle's start. */
  readonly since: number
  /** Last time the serving leader answered this lifecycle NONE (its session restarts then). */
  lastTouch: number
}

export interface Owner {
  readonly memberId: string
  readonly epoch: number
  readonly token: number
  readonly confirmed: boolean
  /** Revision and time of the grant (of this token). */
  readonly rev: number
  readonly time: number
}

/** A shard held for a previous holder (docs/protocol.md rule 19), as the records say. */
export interface HeldFor {
  readonly memberId: string
  readonly incarnation: number
  readonly instance: string
  readonly joinSeq: number
  readonly token: number
  readonly reason: string
  /** Revision and time it was held. */
  readonly rev: number
  readonly time: number
}

export interface OpenRevocation {
  readonly memberId: string
  readonly epoch: number
  readonly time: number
}

/** How a lifecycle ended: the audit kind of its removal, or "Removed" if none says. */
export type EndKind =
  | "MemberLeft"
  | "MemberExpired"
  | "MemberFenced"
  | "MemberReplaced"
  | "MemberRejoined"
  | "Removed"

export interface LifecycleEnd {
  readonly kind: EndKind
  readonly rev: number
  readonly time: number
}

export interface ViewListener {
  /** A shard's owner was released in this commit (`why`: how). */
  released(
    shard: number,
    memberId: string,
    epoch: number,
    why: "revoked" | "left" | "removed",
    time: number,
  ): void
  /**
   * A lifecycle ended in this commit: `lifecycle` as it was, `revoking` the
   * grants still being revoked from it just before (what a revoke-timeout
   * fence blames it for).
   */
  ended(
    memberId: string,
    epoch: number,
    kind: EndKind,
    time: number,
    lifecycle: Lifecycle,
    revoking: ReadonlyArray<EndedRevocation>,
  ): void
}

/** A grant that was still being revoked from a lifecycle when it ended. */
export interface EndedRevocation {
  readonly shard: number
  /** The owner token of the grant being revoked. */
  readonly token: number
  /** Commit time of the revocation's start. */
  readonly since: number
}

const END_KINDS: ReadonlySet<string> = new Set([
  "MemberLeft",
  "MemberExpired",
  "MemberFenced",
  "MemberReplaced",
  "MemberRejoined",
])

const key = (memberId: string, epoch: number) => `${memberId}#${epoch}`

const GRANTS_KEPT = 8

export class CommittedView {
  rev = 0
  readonly members = new Map<string, Lifecycle>()
  readonly owner: Array<Owner | null>
  readonly revocation: Array<OpenRevocation | null>
  /** Per shard: held for a previous holder (rule 19), or null. */
  readonly held: Array<HeldFor | null>
  /** Per shard: the revision and time its last hold was released (0: never). */
  readonly heldReleasedRev: Array<number>
  /** Per shard, the last few grants: token -> revision. */
  private readonly grantTokens: Array<Array<number>>
  private readonly grantRevs: Array<Array<number>>
  private readonly ends = new Map<string, LifecycleEnd>()
  /** The last election: revision, time and lease token. */
  electedRev = 0
  /** The group's layout generation, and whether it is still draining earlier ones. */
  generation = 0
  migrating = false
  /** Shard ids the group knows: every id below the newest adopted layout's end. */
  shardSpace: number
  electedAt = 0
  leaseToken = 0
  /** Lifecycle ends by kind (for exact runs and the summary). */
  readonly endCounts: Record<EndKind, number> = {
    MemberLeft: 0,
    MemberExpired: 0,
    MemberFenced: 0,
    MemberReplaced: 0,
    MemberRejoined: 0,
    Removed: 0,
  }

  constructor(
    shards: number,
    private readonly listener: ViewListener,
    /** The group's first layout's shard count (default: every id). */
    firstShards = shards,
  ) {
    this.shardSpace = firstShards
    this.owner = new Array<Owner | null>(shards).fill(null)
    this.revocation = new Array<OpenRevocation | null>(shards).fill(null)
    this.held = new Array<HeldFor | null>(shards).fill(null)
    this.heldReleasedRev = new Array<number>(shards).fill(0)
    this.grantTokens = Array.from({ length: shards }, () => [])
    this.grantRevs = Array.from({ length: shards }, () => [])
  }

  /**
   * The view as it is now; calling the result puts it back (a `store-rewind`
   * failover: the store went back to a replica's older state, and the view
   * is what the store holds). Lifecycle ends are kept: they happened.
   */
  save(): () => void {
    const rev = this.rev
    const members = [...this.members.values()].map((m) => ({ ...m }))
    const owner = [...this.owner]
    const revocation = [...this.revocation]
    const held = [...this.held]
    const heldReleasedRev = [...this.heldReleasedRev]
    const grantTokens = this.grantTokens.map((t) => [...t])
    const grantRevs = this.grantRevs.map((t) => [...t])
    const { electedRev, generation, migrating, shardSpace, electedAt, leaseToken } = this
    return () => {
      this.rev = rev
      this.members.clear()
      for (const m of members) this.members.set(m.memberId, { ...m })
      const put = <T>(to: Array<T>, from: ReadonlyArray<T>) => {
        for (let i = 0; i < from.length; i++) to[i] = from[i]!
      }
      put(this.owner, owner)
      put(this.revocation, revocation)
      put(this.held, held)
      put(this.heldReleasedRev, heldReleasedRev)
      put(this.grantTokens, grantTokens)
      put(this.grantRevs, grantRevs)
      Object.assign(this, { electedRev, generation, migrating, shardSpace, electedAt, leaseToken })
    }
  }

  /** The revision in which `token` was granted for `shard`, if still known. */
  grantRev(shard: number, token: number): number | undefined {
    const tokens = this.grantTokens[shard]!
    for (let i = tokens.length - 1; i >= 0; i--)
      if (tokens[i] === token) return this.grantRevs[shard]![i]
    return undefined
  }

  /** How (and in which revision) the lifecycle `memberId`/`epoch` ended, if it did. */
  ended(memberId: string, epoch: number): LifecycleEnd | undefined {
    return this.ends.get(key(memberId, epoch))
  }

  /** The serving leader answered `memberId` (lifecycle `epoch`) with NONE at `time`. */
  touch(memberId: string, epoch: number, time: number): void {
    const m = this.members.get(memberId)
    if (m !== undefined && m.epoch === epoch) m.lastTouch = time
  }

  /** The grants being revoked from lifecycle `m` (O(shards): at lifecycle ends only). */
  private revokingOf(m: Lifecycle): Array<EndedRevocation> {
    const out: Array<EndedRevocation> = []
    for (let s = 0; s < this.revocation.length; s++) {
      const r = this.revocation[s]
      const o = this.owner[s]
      if (r == null || o == null || r.memberId !== m.memberId || r.epoch !== m.epoch) continue
      out.push({ shard: s, token: o.token, since: r.time })
    }
    return out
  }

  /** Applies one committed batch (revision `rev`, at true time `time`). */
  ingest(records: ReadonlyArray<CoordinatorRecord>, rev: number, time: number): void {
    this.rev = rev
    const endedHere = new Map<string, Lifecycle>()
    const revokingHere = new Map<string, ReadonlyArray<EndedRevocation>>()
    // (a lifecycle's records come before its batch's revocation and owner
    // changes, so its open revocations are still in place here)
    const end = (prev: Lifecycle) => {
      endedHere.set(prev.memberId, prev)
      revokingHere.set(prev.memberId, this.revokingOf(prev))
    }
    const kinds = new Map<string, EndKind>()
    const releases: Array<{ shard: number; prev: Owner }> = []
    for (const r of records) {
      switch (r._tag) {
        case "MemberUpserted": {
          const m = r.member
          const prev = this.members.get(m.memberId)
          if (prev !== undefined && prev.epoch !== m.memberEpoch) end(prev)
          if (prev !== undefined && prev.epoch === m.memberEpoch) prev.state = m.state
          else
            this.members.set(m.memberId, {
              memberId: m.memberId,
              epoch: m.memberEpoch,
              incarnation: m.incarnation,
              instance: m.instance ?? "",
              joinSeq: m.joinSeq,
              state: m.state,
              since: time,
              lastTouch: time,
            })
          break
        }
        case "MemberRemoved": {
          const prev = this.members.get(r.memberId)
          if (prev !== undefined) {
            end(prev)
            this.members.delete(r.memberId)
          }
          break
        }
        case "ShardOwnersChanged":
          for (const { shard, owner } of r.shards) {
            const prev = this.owner[shard] ?? null
            if (owner === null) {
              if (prev !== null) {
                releases.push({ shard, prev })
                this.owner[shard] = null
              }
            } else if (prev !== null && prev.token === owner.token) {
              this.owner[shard] = { ...prev, confirmed: owner.confirmed }
            } else {
              this.owner[shard] = {
                memberId: owner.memberId,
                epoch: owner.memberEpoch,
                token: owner.token,
                confirmed: owner.confirmed,
                rev,
                time,
              }
              const tokens = this.grantTokens[shard]!
              const revs = this.grantRevs[shard]!
              tokens.push(owner.token)
              revs.push(rev)
              if (tokens.length > GRANTS_KEPT) {
                tokens.shift()
                revs.shift()
              }
            }
          }
          break
        case "HeldChanged":
          for (const { shard, held } of r.shards) {
            if (held === null) {
              if (this.held[shard] != null) this.heldReleasedRev[shard] = rev
              this.held[shard] = null
            } else
              this.held[shard] = {
                memberId: held.memberId,
                incarnation: held.incarnation,
                instance: held.instance,
                joinSeq: held.joinSeq,
                token: held.token,
                reason: held.reason,
                rev,
                time,
              }
          }
          break
        case "RevocationsChanged":
          for (const { shard, revocation } of r.shards)
            this.revocation[shard] =
              revocation === null
                ? null
                : { memberId: revocation.memberId, epoch: revocation.memberEpoch, time }
          break
        case "MigrationStarted":
          this.generation = r.layout.generation
          this.shardSpace = r.layout.firstShard + r.layout.shardCount
          this.migrating = true
          break
        case "MigrationCompleted":
          this.migrating = false
          break
        case "CoordinatorElected":
          this.electedRev = rev
          this.electedAt = time
          this.leaseToken = r.leaseToken
          break
        case "Audit": {
          const e = r.event
          if (e.memberId !== undefined && END_KINDS.has(e.kind) && !kinds.has(e.memberId))
            kinds.set(e.memberId, e.kind as EndKind)
          break
        }
        default:
          break
      }
    }
    for (const [memberId, m] of endedHere) {
      const kind = kinds.get(memberId) ?? "Removed"
      this.ends.set(key(memberId, m.epoch), { kind, rev, time })
      this.endCounts[kind]++
      this.listener.ended(memberId, m.epoch, kind, time, m, revokingHere.get(memberId) ?? [])
    }
    for (const { shard, prev } of releases) {
      // Released without its lifecycle ending: the member gave it up (REVOKED
      // accepted), which is only right once it stopped reading it.
      const end = endedHere.get(prev.memberId)
      const why =
        end !== undefined && end.epoch === prev.epoch
          ? kinds.get(prev.memberId) === "MemberLeft"
            ? "left"
            : "removed"
          : "revoked"
      this.listener.released(shard, prev.memberId, prev.epoch, why, time)
    }
  }
}
