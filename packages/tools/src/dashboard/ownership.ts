/**
 * The dashboard's ownership-over-time strip (docs/observability.md, "The
 * dashboard"), rebuilt from the group's audit log: a shard is owned by a
 * member from its `ShardsGranted` until its `RevokeAccepted` or the member's
 * fence, expiry, replacement or leave (each audit event names the shards it
 * moves); before a shard's first event its owner is unknown, unless that
 * event ends a member's ownership (then that member owned it from the start
 * of the window). The snapshot's current owners close the strip, and win
 * where the audit log missed events (it is capped). Rebalances, fences,
 * coordinator changes and reshards are the strip's markers. Pure: no I/O,
 * no clock.
 */

/** An audit event as `shardline inspect` reports it (the stored event plus its entry id). */
export interface AuditEntry {
  readonly id: string
  readonly at: number
  readonly kind: string
  readonly memberId?: string
  readonly shards?: ReadonlyArray<number>
  readonly reason?: string
}

export interface Segment {
  readonly from: number
  readonly to: number
  /** The owner, or null while no member owned the shard. */
  readonly owner: string | null
}

export type MarkerKind = "rebalance" | "fence" | "coordinator" | "reshard"

export interface Marker {
  readonly at: number
  readonly kind: MarkerKind
  readonly label: string
}

export interface Strip {
  readonly from: number
  readonly to: number
  /** Segments per shard, in time order, covering [from, to] where the owner is known. */
  readonly shards: ReadonlyArray<{
    readonly shard: number
    readonly segments: ReadonlyArray<Segment>
  }>
  readonly markers: ReadonlyArray<Marker>
}

const RELEASES = new Set([
  "RevokeAccepted",
  "MemberFenced",
  "MemberExpired",
  "MemberReplaced",
  "MemberLeft",
])

const MARKERS: Readonly<Record<string, MarkerKind>> = {
  TargetAssignmentChanged: "rebalance",
  MemberFenced: "fence",
  MemberExpired: "fence",
  MemberReplaced: "fence",
  CoordinatorElected: "coordinator",
  ReshardStarted: "reshard",
  ReshardCompleted: "reshard",
}

/** Audit entries as a report lists them, kept when they have the fields the strip reads. */
export const auditEntries = (audit: ReadonlyArray<unknown>): Array<AuditEntry> =>
  audit.filter(
    (e): e is AuditEntry =>
      typeof e === "object" &&
      e !== null &&
      typeof (e as AuditEntry).id === "string" &&
      typeof (e as AuditEntry).at === "number" &&
      typeof (e as AuditEntry).kind === "string",
  )

/** Stream entry ids in order (`<ms>-<seq>`). */
export const compareIds = (a: string, b: string): number => {
  const [am, as] = a.split("-").map(Number) as [number, number]
  const [bm, bs] = b.split("-").map(Number) as [number, number]
  return am !== bm ? am - bm : as - bs
}

/**
 * The strip over [from, now]: `events` in any order (deduplicated by id),
 * `current` the snapshot's owner per shard (index = shard), `shards` the
 * shards to draw.
 */
export const buildStrip = (
  events: ReadonlyArray<AuditEntry>,
  current: ReadonlyArray<{ readonly shard: number; readonly owner: string | null }>,
  from: number,
  now: number,
): Strip => {
  const byId = new Map<string, AuditEntry>()
  for (const e of events) byId.set(e.id, e)
  const ordered = [...byId.values()].sort((a, b) => compareIds(a.id, b.id))
  const state = new Map<number, { owner: string | null | undefined; since: number }>()
  const segments = new Map<number, Array<Segment>>()
  const shards = current.map((c) => c.shard)
  for (const shard of shards) {
    state.set(shard, { owner: undefined, since: from })
    segments.set(shard, [])
  }
  const close = (shard: number, at: number, next: string | null) => {
    const s = state.get(shard)
    if (s === undefined) return
    const to = Math.max(from, at)
    if (s.owner !== undefined && to > s.since)
      segments.get(shard)!.push({ from: s.since, to, owner: s.owner })
    state.set(shard, { owner: next, since: to })
  }
  const markers: Array<Marker> = []
  for (const e of ordered) {
    const marker = MARKERS[e.kind]
    if (marker !== undefined && e.at >= from)
      markers.push({
        at: e.at,
        kind: marker,
        label: `${e.kind}${e.memberId === undefined ? "" : ` ${e.memberId}`}: ${e.reason ?? ""}`,
      })
    if (e.shards === undefined || e.memberId === undefined) continue
    for (const shard of e.shards) {
      const s = state.get(shard)
      if (s === undefined) continue
      if (e.kind === "ShardsGranted") close(shard, e.at, e.memberId)
      else if (RELEASES.has(e.kind)) {
        // the first thing known of the shard ends a member's ownership: it owned it before
        if (s.owner === undefined && segments.get(shard)!.length === 0) s.owner = e.memberId
        if (s.owner === e.memberId || s.owner === undefined) close(shard, e.at, null)
      }
    }
  }
  // the snapshot closes the strip: the owner now, from the last event on (or the window's start)
  for (const c of current) {
    const s = state.get(c.shard)!
    if (s.owner !== c.owner) {
      close(c.shard, s.since, c.owner)
    }
    close(c.shard, now, c.owner)
  }
  return {
    from,
    to: now,
    shards: shards.map((shard) => ({ shard, segments: mergeSegments(segments.get(shard)!) })),
    markers,
  }
}

/** Adjacent segments of one owner become one. */
const mergeSegments = (segments: ReadonlyArray<Segment>): Array<Segment> => {
  const out: Array<Segment> = []
  for (const s of segments) {
    const last = out[out.length - 1]
    if (last !== undefined && last.owner === s.owner && last.to === s.from)
      out[out.length - 1] = { from: last.from, to: s.to, owner: s.owner }
    else out.push(s)
  }
  return out
}
