/**
 * The embedded coordinator (docs/runtime.md, "Coordinator placement"): core's
 * `CoordinatorCandidate` for one group, reporting its role changes as the
 * runtime's `coordinatorElected` / `coordinatorResigned` events.
 */
import { CoordinatorCandidate } from "@shardline/core"
import { Clock, Effect } from "effect"
import type { EventHub } from "../Events.js"

export type Candidate = CoordinatorCandidate.Candidate

export interface CandidateOptions extends Omit<CoordinatorCandidate.CandidateOptions, "onRole"> {
  readonly events?: EventHub
}

export const runCandidate = (options: CandidateOptions) => {
  const key = { stream: options.config.stream, group: options.config.groupId }
  const { events, ...rest } = options
  return CoordinatorCandidate.run({
    ...rest,
    onRole: (role) =>
      Effect.map(Clock.currentTimeMillis, (at) =>
        events?.emit({
          ...key,
          at,
          type: role === "coordinator" ? "coordinatorElected" : "coordinatorResigned",
          holder: options.holder,
        }),
      ),
  })
}
