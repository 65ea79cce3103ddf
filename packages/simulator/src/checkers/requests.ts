/**
 * Requests the leader must not act on, judged against the committed view
 * just before the leader handled them (only the serving leader is judged: a
 * stale ex-leader's steps are the store-revision checker's business):
 *
 * - a request from a superseded lifecycle (an older process of the member
 *   id, an older member epoch of the same process, or a join older than the
 *   one that started the current lifecycle: docs/protocol.md rules 7, 9, 13,
 *   18 and 24) changes nothing, except that a superseded process's join or
 *   leave (sent only once it stopped everything) releases the shards held for
 *   that very process (rule 19); only a join of the registered process older
 *   than its current one may be answered NONE (from the standing state,
 *   rule 18: the process drops it, it is not its newest request);
 * - the join that started the current lifecycle, received again, changes
 *   nothing (rule 13);
 * - a forged ownership report (the fault injector knows what it forged:
 *   claims of shards the member's lifecycle does not hold, REVOKING of a
 *   shard that is not its own) fences the member (rule 2);
 * - an honest report is never fenced: a request of the current lifecycle,
 *   delivered for the first time and after every earlier request of its
 *   process (not a network duplicate, replay or straggler), from a process
 *   that never lied, describes what the member really holds, which is what
 *   the coordinator granted it (rules 2, 3, 7);
 * - an honest request is never INVALID_REQUEST;
 * - a join of a removed process no newer than the join that started its
 *   removed lifecycle (a duplicate or replay delivered after the removal)
 *   starts no lifecycle (rule 18: the leader remembers the processes it
 *   removed, from its load on; issue 34).
 *
 * @module
 */
import type { CoordinatorRecord, HeartbeatRequest, HeartbeatResponse } from "@shardline/core"
import { fmt, type Report } from "./types.js"
import type { CommittedView, Lifecycle } from "./view.js"

/** Most removed processes a leader remembers (core's `MAX_DEPARTED`). */
const DEPARTED_KEPT = 4_096

/** A process whose lifecycle a leader removed, and which leader's shell did. */
interface Departed {
  readonly incarnation: number
  readonly instance: string
  readonly joinSeq: number
  readonly shell: string
}

/** What the fault injector forged into a request. */
export interface Forgery {
  /** Shards claimed as owned that the member did not own. */
  readonly claims: ReadonlyArray<number>
  /** Shards reported REVOKING that the member did not own (with a made-up token). */
  readonly revoking: ReadonlyArray<number>
  /** Shards reported REVOKED while the member still reads them (byzantine; no expectation). */
  readonly revokedWhileReading: ReadonlyArray<number>
}

export class RequestChecker {
  stale = 0
  staleJudged = 0
  forgedJudged = 0
  forgedFenced = 0
  freshJudged = 0
  /** Requests of an older epoch of the registered process, and those with a seq above its join. */
  olderEpoch = 0
  olderEpochAfterJoin = 0
  /** Joins of a removed process judged by the departed rule (issue 34). */
  departedJudged = 0
  private readonly departed = new Map<string, Departed>()
  /**
   * Lifecycles (`memberId#epoch`) alive when the store failed over to a
   * replica that missed commits (`store-rewind`): what they were answered
   * may be state the group lost, so rule 23 fences them when they report it
   * (a shard the rewound state does not give them, an assignment epoch it
   * never reached). Their fences are counted, not judged.
   */
  private readonly rewound = new Set<string>()
  rewindFenced = 0

  constructor(private readonly report: Report) {}

  /** The store failed over (`store-rewind`) while lifecycle `memberId`/`epoch` ran. */
  rewoundUnder(memberId: string, epoch: number): void {
    if (epoch > 0) this.rewound.add(`${memberId}#${epoch}`)
  }

  /** A join of a process this leader removed, no newer than its removed lifecycle's join. */
  private judgeDeparted(
    time: number,
    request: HeartbeatRequest,
    records: ReadonlyArray<CoordinatorRecord>,
    shell: string,
  ): void {
    if (request.memberEpoch !== 0) return
    const d = this.departed.get(request.memberId)
    if (
      d === undefined ||
      d.shell !== shell ||
      d.incarnation !== request.incarnation ||
      d.instance !== (request.instance ?? "") ||
      request.seq > d.joinSeq
    )
      return
    this.departedJudged++
    if (startsLifecycle(records, request.memberId))
      this.report({
        checker: "requests",
        time,
        message: `a join of ${request.memberId} (seq ${request.seq}) from the process whose lifecycle (joined at seq ${d.joinSeq}) this leader removed, delivered again after the removal, started a lifecycle at ${fmt(time)}`,
      })
  }

  /** The committed view removed lifecycle `m`, committed by shell `shell`. */
  removed(m: Lifecycle, shell: string): void {
    this.departed.delete(m.memberId)
    this.departed.set(m.memberId, {
      incarnation: m.incarnation,
      instance: m.instance,
      joinSeq: m.joinSeq,
      shell,
    })
    if (this.departed.size > DEPARTED_KEPT) {
      const oldest = this.departed.keys().next().value
      if (oldest !== undefined) this.departed.delete(oldest)
    }
  }

  /**
   * `fresh`: the first delivery of the request and no later request of its
   * process was delivered before it; `honest`: neither it nor an earlier
   * request of its process was forged.
   */
  judge(
    time: number,
    request: HeartbeatRequest,
    forgery: Forgery | undefined,
    view: CommittedView,
    step: {
      readonly records: ReadonlyArray<CoordinatorRecord>
      readonly response: HeartbeatResponse | undefined
    },
    fresh: boolean,
    honest: boolean,
    /** The handling leader's shell (see `removed`). */
    shell = "",
  ): void {
    const response = step.response
    const id = request.memberId
    const removesMember = step.records.some((r) => r._tag === "MemberRemoved" && r.memberId === id)
    const m = view.members.get(id)
    const newLifecycle =
      m !== undefined &&
      step.records.some(
        (r) =>
          r._tag === "MemberUpserted" &&
          r.member.memberId === id &&
          r.member.memberEpoch !== m.epoch,
      )
    const code = response?.errorCode
    if (
      this.rewound.size > 0 &&
      this.rewound.has(`${id}#${request.memberEpoch}`) &&
      (code !== "NONE" || step.records.length > 0)
    ) {
      this.rewindFenced++
      return
    }
    if (code === "INVALID_REQUEST" && forgery === undefined)
      this.report({
        checker: "requests",
        time,
        message: `the leader rejected an honest request of ${request.memberId} (seq ${request.seq}) as invalid: ${response?.errorMessage ?? ""}`,
      })
    if (m === undefined) {
      this.judgeDeparted(time, request, step.records, shell)
      return
    }
    const instance = request.instance ?? ""
    const sameProcess = request.incarnation === m.incarnation && instance === m.instance
    const olderProcess =
      request.incarnation < m.incarnation ||
      (request.incarnation === m.incarnation && instance < m.instance)
    // `older-epoch-accepted` (scripts/mutants.mjs) is equivalent if a request
    // of an older epoch of the registered process never comes after the join
    // that started its current epoch: rule 18's seq check answers it first.
    if (sameProcess && request.memberEpoch > 0 && request.memberEpoch < m.epoch) {
      this.olderEpoch++
      if (request.seq > m.joinSeq) this.olderEpochAfterJoin++
    }
    const why = olderProcess
      ? `process ${request.incarnation}/${instance} older than ${m.incarnation}/${m.instance}`
      : !sameProcess
        ? undefined
        : request.memberEpoch > 0 && request.memberEpoch !== m.epoch
          ? `member epoch ${request.memberEpoch} of a superseded lifecycle (current ${m.epoch})`
          : request.memberEpoch === 0 && request.seq < m.joinSeq
            ? `join seq ${request.seq} older than the current lifecycle's join seq ${m.joinSeq}`
            : undefined
    if (why !== undefined) {
      this.stale++
      this.staleJudged++
      const changes = step.records.filter((r) => !releasesHeldOf(r, view, request))
      const standingJoin = sameProcess && request.memberEpoch === 0
      if (changes.length > 0 || (code === "NONE" && !standingJoin && request.memberEpoch !== -1))
        this.report({
          checker: "requests",
          time,
          message: `a stale request of ${request.memberId} (${why}, seq ${request.seq}) ${changes.length > 0 ? `changed the group (${changes.length} records)` : "was answered NONE"} at ${fmt(time)}`,
        })
      return
    }
    if (
      request.memberEpoch === 0 &&
      sameProcess &&
      request.seq === m.joinSeq &&
      (newLifecycle || removesMember)
    )
      this.report({
        checker: "requests",
        time,
        message: `the join that started ${id}'s lifecycle (seq ${request.seq}), received again, started another at ${fmt(time)}`,
      })
    if (request.memberEpoch !== m.epoch) return
    if (forgery === undefined) {
      if (!fresh || !honest) return
      this.freshJudged++
      if (code === "FENCED_MEMBER_EPOCH" || removesMember)
        this.report({
          checker: "requests",
          time,
          message: `an honest, in-order report of ${request.memberId} (seq ${request.seq}, epoch ${request.memberEpoch}) was fenced at ${fmt(time)}: ${response?.errorMessage ?? "removed"}`,
        })
      return
    }
    // A duplicate or replay of a forged request gets the standing answer
    // (docs/protocol.md rule 18): the lie was judged when it was new.
    if (!fresh) return
    const invalid: Array<string> = []
    for (const s of forgery.claims) {
      const o = view.owner[s]
      if (o == null || o.memberId !== request.memberId || o.epoch !== m.epoch)
        invalid.push(`claims shard ${s}`)
    }
    for (const s of forgery.revoking) {
      const o = view.owner[s]
      if (o == null || o.memberId !== request.memberId) invalid.push(`REVOKING shard ${s}`)
    }
    if (invalid.length === 0) return
    this.forgedJudged++
    if (code !== "NONE" && removesMember) {
      this.forgedFenced++
      return
    }
    this.report({
      checker: "requests",
      time,
      message: `${request.memberId} sent an invalid ownership report (${invalid.join(", ")}) and was ${code === "NONE" ? "answered NONE" : `answered ${code}`} ${removesMember ? "" : "without being fenced "}at ${fmt(time)}`,
    })
  }
}

/** Lifecycles `records` start for `memberId`. */
const startsLifecycle = (records: ReadonlyArray<CoordinatorRecord>, memberId: string): boolean =>
  records.some((r) => r._tag === "MemberUpserted" && r.member.memberId === memberId)

/**
 * A record that only releases shards held for the process that sent
 * `request` (rule 19), or audits that release: what a superseded process's
 * join or leave may change.
 */
const releasesHeldOf = (
  r: CoordinatorRecord,
  view: CommittedView,
  request: HeartbeatRequest,
): boolean => {
  if (r._tag === "Audit") return r.event.kind === "ShardsReleased"
  if (r._tag !== "HeldChanged") return false
  if (request.memberEpoch > 0) return false
  return r.shards.every(({ shard, held }) => {
    const h = view.held[shard]
    return (
      held === null &&
      h != null &&
      h.memberId === request.memberId &&
      h.incarnation === request.incarnation &&
      h.instance === (request.instance ?? "") &&
      (request.memberEpoch === -1 || request.seq > h.joinSeq)
    )
  })
}
