/**
 * The embedded coordinator (docs/runtime.md, "Coordinator placement"): core's
 * `CoordinatorCandidate` for one group, reporting its role changes as the
 * runtime's `coordinatorElected` / `coordinatorResigned` events, and a serve
 * it started again under its lease as `coordinatorServeRestarted`
 * (docs/protocol.md rule 25).
 */
import {
  CoordinatorCandidate,
  type CoordinatorLease,
  type OwnerFence,
  type Store,
} from "@shardline/core"
import { Clock, Effect, type Scope } from "effect"
import type { EventHub } from "../Events.js"

export type Candidate = CoordinatorCandidate.Candidate

export interface CandidateOptions extends Omit<CoordinatorCandidate.CandidateOptions, "onRole"> {
  readonly events?: EventHub
}

// the return type spelled out: the declaration build cannot name the inferred one
export const runCandidate = (
  options: CandidateOptions,
): Effect.Effect<
  Candidate,
  never,
  Scope.Scope | Store.Store | CoordinatorLease.CoordinatorLease | OwnerFence.OwnerFence
> => {
  const key = { stream: options.config.stream, group: options.config.groupId }
  const { events, ...rest } = options
  return CoordinatorCandidate.run({
    ...rest,
    onRole: (role, reason) =>
      Effect.map(Clock.currentTimeMillis, (at) =>
        events?.emit(
          role === "coordinator"
            ? { ...key, at, type: "coordinatorElected", holder: options.holder }
            : {
                ...key,
                at,
                type: "coordinatorResigned",
                holder: options.holder,
                ...(reason === undefined ? {} : { reason }),
              },
        ),
      ),
    onRestart: (leaseToken) =>
      Effect.map(Clock.currentTimeMillis, (at) =>
        events?.emit({
          ...key,
          at,
          type: "coordinatorServeRestarted",
          holder: options.holder,
          leaseToken,
        }),
      ),
  })
}
