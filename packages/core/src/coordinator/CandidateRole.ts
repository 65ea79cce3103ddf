/**
 * What a coordinator candidate does next (docs/protocol.md rule 25): a lease
 * holder serves, or gives the lease up within one renewal. Pure, so the
 * runtime's `CoordinatorCandidate` and the simulator's candidates take the
 * same decision from the same view.
 *
 * A serve belongs to one lease term (the lease token it started under). It
 * stops being the group's serve without the scope that runs it closing when
 * a newer serve claims the group's presence (another candidate that held the
 * lease meanwhile), or when its loop ended on its own. A holder whose serve
 * is gone, or was started under an earlier term, starts a new one; a holder
 * whose restarted serve is gone again within the same term resigns (releases
 * the lease), so that a standby takes over instead of the group stalling
 * behind a lease nobody serves under.
 *
 * @example
 * CandidateRole.decide({ leaseToken: 5, serving: { leaseToken: 4, active: true, restarts: 0 } })
 * // "restart": the lease was taken again under a new term; serve under it
 */

/** The candidate as it sees itself at one check. */
export interface CandidateView {
  /** The lease token this candidate's host holds now; undefined when it holds none. */
  readonly leaseToken: number | undefined
  /** The serve this candidate runs, if any. */
  readonly serving:
    | {
        /** The lease token it was started under. */
        readonly leaseToken: number
        /** Its loop still answers the group's requests (not replaced, not ended). */
        readonly active: boolean
        /** Serves started in this term before this one (0: the first). */
        readonly restarts: number
      }
    | undefined
}

/**
 * - `idle`: a standby with nothing running;
 * - `serve`: lease held, no serve: start one;
 * - `keep`: lease held and served under it;
 * - `restart`: lease held, its serve is gone or from an earlier term: stop it, start a new one;
 * - `resign`: lease held, the restarted serve is gone again: stop it and release the lease;
 * - `stop`: no lease, a serve still runs: stop it.
 */
export type CandidateAction = "idle" | "serve" | "keep" | "restart" | "resign" | "stop"

/** Serves a candidate may start in one lease term before it resigns. */
export const MAX_SERVES_PER_TERM = 2

export const decide = (view: CandidateView): CandidateAction => {
  const { leaseToken, serving } = view
  if (leaseToken === undefined) return serving === undefined ? "idle" : "stop"
  if (serving === undefined) return "serve"
  if (serving.leaseToken !== leaseToken) return "restart"
  if (serving.active) return "keep"
  return serving.restarts + 1 >= MAX_SERVES_PER_TERM ? "resign" : "restart"
}
