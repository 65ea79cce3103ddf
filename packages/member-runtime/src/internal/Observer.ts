/**
 * What the runtime keeps from its own events (docs/runtime.md, "Logging"
 * and "Revoke, fence, shutdown"): every event a member or a coordinator
 * candidate emits passes here, synchronously, on its way to the event hub.
 * It is logged (src/Logging.ts), and each member's latest error and
 * heartbeat state are kept: `members()[i].lastError`, and a stop that does
 * not wait for a leave no coordinator can answer.
 */
import type {
  DataPlaneError,
  HeartbeatRejected,
  LeaseUnusable,
  MemberSuperseded,
} from "@shardline/core"
import type { HandlerStuck } from "../Errors.js"
import type { EventHub, HeartbeatFailure, RuntimeEvent } from "../Events.js"
import { isPermissionDenied, type LevelLogger, makeEventLog } from "../Logging.js"

/** The latest error a member met, with when. */
export type MemberError =
  | MemberSuperseded
  | LeaseUnusable
  | HeartbeatRejected
  | HeartbeatFailure
  | DataPlaneError
  | HandlerStuck

interface MemberState {
  lastError: MemberError | undefined
  lastErrorAt: number | undefined
  /** The last heartbeat ended without an answer. */
  heartbeatFailing: boolean
  /** It failed in a way that waiting will not cure (no coordinator, NOPERM). */
  hopeless: boolean
}

export interface Observer {
  /** The hub members emit to: logs, keeps state, then forwards to `hub`. */
  readonly events: EventHub
  readonly member: (stream: string, group: string, memberId: string) => Readonly<MemberState>
}

const keyOf = (stream: string, group: string, memberId: string) =>
  `${stream}\u0000${group}\u0000${memberId}`

export const makeObserver = (hub: EventHub, log: LevelLogger): Observer => {
  const states = new Map<string, MemberState>()
  const writeLog = makeEventLog(log)
  const stateOf = (stream: string, group: string, memberId: string): MemberState => {
    const k = keyOf(stream, group, memberId)
    let s = states.get(k)
    if (s === undefined) {
      s = { lastError: undefined, lastErrorAt: undefined, heartbeatFailing: false, hopeless: false }
      states.set(k, s)
    }
    return s
  }
  const remember = (event: RuntimeEvent & { memberId: string }, error: MemberError) => {
    const s = stateOf(event.stream, event.group, event.memberId)
    s.lastError = error
    s.lastErrorAt = event.at
  }

  const observe = (event: RuntimeEvent): void => {
    switch (event.type) {
      case "heartbeat": {
        const s = stateOf(event.stream, event.group, event.memberId)
        s.heartbeatFailing = event.errorCode === "TRANSPORT_ERROR"
        s.hopeless =
          s.heartbeatFailing &&
          event.error !== undefined &&
          (event.error._tag === "NoCoordinator" || isPermissionDenied(event.error))
        if (event.error !== undefined) remember(event, event.error)
        break
      }
      case "superseded":
      case "leaseUnusable":
      case "requestRejected":
      case "handlerStuck":
        remember(event, event.error)
        break
      case "dataPlaneError":
        if (isPermissionDenied(event.error)) remember(event, event.error as DataPlaneError)
        break
      default:
        break
    }
    writeLog(event)
  }

  return {
    events: {
      emit: (event) => {
        hub.emit(event)
        observe(event)
      },
      on: hub.on,
      stats: hub.stats,
    },
    member: (stream, group, memberId) => stateOf(stream, group, memberId),
  }
}
