/**
 * What the runtime tells an operator (docs/runtime.md, "Logging"): every
 * runtime event passes here on its way to the event hub; the ones an
 * operator must see are written to the `logger` option (default: `console`)
 * at or above `logLevel` (default `warn`). Warnings and errors: a member
 * superseded, fenced, a lost lease (reads paused), a message dead-lettered, a
 * shard whose handler still ran past its drain budget, a storage that
 * refused an owner token, data Shardline stored that vanished (an owner
 * token, a shard's stream or the group on it: docs/protocol.md rule 26),
 * heartbeats or data-plane calls failing (a lost
 * connection; said once when it starts and once when it ends, not per
 * call), a Redis permission refused (NOPERM), no coordinator serving a
 * standalone group, an open circuit breaker.
 *
 * The logger's shape is pino's (and bunyan's): `logger.warn(fields,
 * message)`. `console` fits too; given `console` itself, the runtime writes
 * one line, `shardline [warn] <message> (stream=... group=... ...)`.
 *
 * @example
 * import pino from "pino"
 * await start({ logger: pino(), logLevel: "info", listeners: [new Billing()] })
 */
import { Cause, Logger as EffectLogger, type Layer } from "effect"
import type { RuntimeEvent } from "./Events.js"

/** The structured fields of a log line (stream, group, memberId, shard, error, ...). */
export type LogFields = Readonly<Record<string, unknown>>

/** A logger: pino, bunyan, `console`, or your own. Each method gets (fields, message). */
export interface Logger {
  readonly debug: (fields: LogFields, message: string) => void
  readonly info: (fields: LogFields, message: string) => void
  readonly warn: (fields: LogFields, message: string) => void
  readonly error: (fields: LogFields, message: string) => void
}

/** The least level written to the `logger` (`warn` by default); `silent` writes nothing. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent"

export const LOG_LEVELS: ReadonlyArray<LogLevel> = ["debug", "info", "warn", "error", "silent"]

const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }

/** One readable line: what the error says, without a stack. */
export const describeError = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const e = error as {
      readonly _tag?: unknown
      readonly message?: unknown
      readonly id?: unknown
    }
    const tag = typeof e._tag === "string" ? e._tag : error instanceof Error ? error.name : ""
    const message = typeof e.message === "string" ? e.message : ""
    if (tag !== "" && message !== "") return `${tag}: ${message}`
    if (message !== "") return message
    if (tag !== "") return typeof e.id === "string" ? `${tag} (${e.id})` : tag
  }
  return String(error)
}

/** Redis refused a command or key to this user (an ACL rule is missing). */
export const isPermissionDenied = (error: unknown): boolean =>
  /\bNOPERM\b|no permissions to (run|access)|can't run this command/i.test(describeError(error))

/** What a refusal by Redis (NOPERM) means, and where to read about it. */
const LACKS_PERMISSION = ' The Redis user lacks a permission Shardline needs (docs/redis.md, "ACL")'

/** Writes `console` lines: `shardline [warn] message (stream=... group=...)`. */
const consoleLogger = (c: Console): Logger => {
  const line = (level: string, fields: LogFields, message: string) => {
    const context = Object.entries(fields)
      .filter(([k, v]) => k !== "err" && k !== "event" && v !== undefined)
      .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(" ")
    return `shardline [${level}] ${message}${context === "" ? "" : ` (${context})`}`
  }
  return {
    debug: (f, m) => c.debug(line("debug", f, m)),
    info: (f, m) => c.info(line("info", f, m)),
    warn: (f, m) => c.warn(line("warn", f, m)),
    error: (f, m) => c.error(line("error", f, m)),
  }
}

/** A logger that writes at or above `level`; a throwing logger never reaches the caller. */
export interface LevelLogger {
  readonly enabled: (level: Exclude<LogLevel, "silent">) => boolean
  readonly log: (level: Exclude<LogLevel, "silent">, fields: LogFields, message: string) => void
}

export const makeLevelLogger = (
  logger: Logger | Console | undefined,
  level: LogLevel = "warn",
): LevelLogger => {
  const target: Logger =
    logger === undefined || logger === console ? consoleLogger(console) : (logger as Logger)
  const threshold = rank[level]
  return {
    enabled: (l) => rank[l] >= threshold,
    log: (l, fields, message) => {
      if (rank[l] < threshold) return
      try {
        target[l](fields, message)
      } catch {
        // a broken logger must not break a member
      }
    },
  }
}

type Level = Exclude<LogLevel, "silent">

interface Entry {
  readonly level: Level
  readonly message: string
  readonly fields?: LogFields
}

const shards = (list: ReadonlyArray<number>) => (list.length === 0 ? "none" : list.join(","))

const reasons: Record<string, string> = {
  fenced: "the coordinator fenced it (its epoch was stale)",
  "unknown-member": "the coordinator no longer knew it (expired or restarted without its state)",
  "lease-lost": "no heartbeat was answered within its lease",
  superseded: "a newer process joined with the same member id",
  left: "it left",
  "leave-timeout": "its leave did not finish in time",
}

/**
 * Turns events into log entries, with a little state so that a lost
 * connection is said when it starts and when it ends, not on every call.
 */
export const makeEventLog = (log: LevelLogger) => {
  /** Heartbeats failed in a row, per member. */
  const heartbeatFailures = new Map<string, number>()
  /**
   * Members whose refusal by Redis (NOPERM) was said in this outage: said
   * even when another failure came first (the embedded coordinator's own
   * scripts are refused too, so "no coordinator" often does).
   */
  const refusalSaid = new Set<string>()
  /** Data-plane failures in a row, per member and shard. */
  const dataPlaneFailures = new Map<string, number>()
  const memberKey = (e: { stream: string; group: string; memberId: string }) =>
    `${e.stream}\u0000${e.group}\u0000${e.memberId}`

  const entry = (event: RuntimeEvent): Entry | undefined => {
    switch (event.type) {
      case "joined":
        return { level: "info", message: `member joined the group (epoch ${event.memberEpoch})` }
      case "assigned":
        return { level: "debug", message: `reading shard ${event.shard} (token ${event.token})` }
      case "revoking":
        return { level: "debug", message: `shard ${event.shard} revoked: draining it` }
      case "revoked":
        return event.abandoned
          ? {
              level: "warn",
              message: `shard ${event.shard} revoked once a handler that outlived its drain budget (drainTimeoutMs) returned: its signal was aborted and its batch released unacknowledged, to be delivered again to the next owner`,
            }
          : { level: "debug", message: `shard ${event.shard} drained and released` }
      case "lost":
        // a lost lease is said by its leaseLost event
        return event.reason === "lease-lost" || event.reason === "left"
          ? undefined
          : {
              level: "warn",
              message: `member dropped shards ${shards(event.shards)} at once: ${reasons[event.reason] ?? event.reason}; it stopped reading them and rejoins`,
            }
      case "leaseLost":
        return {
          level: "error",
          message: `member lost its lease: ${reasons["lease-lost"]}, so it stopped reading shards ${shards(event.shards)} before the coordinator could give them away; it keeps its epoch and resumes them when its coordinator answers again (or rejoins if the coordinator expired it)`,
        }
      case "leaseRegained":
        return {
          level: "info",
          message: `member's lease is back: it reads its shards again (epoch ${event.memberEpoch}, no rejoin)`,
        }
      case "handlerStuck":
        return {
          level: "error",
          message: `${describeError(event.error)}; a handler must return once its signal aborts (docs/runtime.md, "A handler past its drain")`,
        }
      case "leaseUnusable":
        return { level: "error", message: describeError(event.error) }
      case "superseded":
        return {
          level: "warn",
          message: `superseded: ${describeError(event.error)}; this process waits as a standby (two processes with one member id: check POD_IP / HOSTNAME / memberBase)`,
        }
      case "shardsWaiting": {
        const whose =
          event.reason === "replaced"
            ? `an earlier process of this member id (${event.holder}), which this one replaced`
            : `member ${event.holder}`
        const why =
          event.reason === "revoking"
            ? "was asked to give them up and has not confirmed it"
            : event.reason === "fenced"
              ? "was fenced and may still be reading them"
              : "may still be reading them"
        const until = new Date(event.until).toISOString()
        return {
          level: event.holderSilent ? "warn" : "info",
          message: `shards ${shards(event.shards)} are held for ${whose}, which ${why}: its session has not ended${event.holderSilent ? " although it has not heartbeated for more than two heartbeat intervals (a process that crashed or was restarted?)" : ""}. They come to this member when it confirms, or when its session ends, by ${until} at the latest. ${event.reason === "replaced" ? "A restarted process waits so for the process it replaced, at most the group's sessionTimeoutMs" : 'A process restarted with a new member id waits so for its old self: give memberBase a stable value (docs/runtime.md, "Identity") so a restart keeps its member id and gets its own shards back (sticky restarts)'}`,
          fields: {
            shards: [...event.shards],
            holder: event.holder,
            reason: event.reason,
            until,
          },
        }
      }
      case "requestRejected":
        return { level: "warn", message: `heartbeat rejected: ${describeError(event.error)}` }
      case "staleOwner":
        return {
          level: "warn",
          message: `the storage refused this member's owner token for shard ${event.shard} (the shard moved): its loop stopped`,
        }
      case "dataLost":
        return {
          level: "error",
          message:
            event.what === "token"
              ? `the owner token of shard ${event.shard} vanished (deleted or evicted): every read and ack of the shard is refused until a coordinator writes one again (its next grant, or a coordinator failover or restart); the shard waits (docs/protocol.md rule 26)`
              : `${describeError(event.error)}. The member creates the group again at the stream's start and reads on: what the stream still holds is delivered again, what vanished is lost (docs/protocol.md rule 26; docs/redis.md, "Eviction")`,
        }
      case "deadLettered":
        return {
          level: "warn",
          message:
            event.cause === "maxDeliveries"
              ? `message ${event.messageId} of shard ${event.shard} dead-lettered after ${event.deliveryCount} deliveries (dead-letter id ${event.deadLetterId}): ${event.reason}`
              : `message ${event.messageId} of shard ${event.shard} dead-lettered without a retry (${event.cause}; dead-letter id ${event.deadLetterId}): ${event.reason}`,
        }
      case "handlerError":
        return {
          level: "info",
          message: `handler failed on message ${event.messageId} of shard ${event.shard} (delivery ${event.deliveryCount}): ${describeError(event.error)}`,
        }
      case "heartbeat": {
        const k = memberKey(event)
        const before = heartbeatFailures.get(k) ?? 0
        if (event.errorCode !== "TRANSPORT_ERROR") {
          if (before === 0) return undefined
          heartbeatFailures.delete(k)
          refusalSaid.delete(k)
          return {
            level: "info",
            message: `heartbeats answered again after ${before} failure(s)`,
          }
        }
        heartbeatFailures.set(k, before + 1)
        const cause = event.error === undefined ? "no cause reported" : describeError(event.error)
        if (isPermissionDenied(event.error)) {
          if (refusalSaid.has(k)) return undefined
          refusalSaid.add(k)
          return {
            level: "error",
            message: `heartbeat refused by Redis: ${cause}.${LACKS_PERMISSION}`,
          }
        }
        if (before > 0) return undefined
        return event.error !== undefined &&
          (event.error as { _tag?: string })._tag === "NoCoordinator"
          ? { level: "error", message: cause }
          : {
              level: "warn",
              message: `heartbeat failed: ${cause}; retrying (said again when heartbeats are answered)`,
            }
      }
      case "dataPlaneError": {
        const k = `${memberKey(event)}\u0000${event.shard}`
        const before = dataPlaneFailures.get(k) ?? 0
        dataPlaneFailures.set(k, before + 1)
        if (before > 0) return undefined
        return isPermissionDenied(event.error)
          ? {
              level: "error",
              message: `Redis refused a data-plane call on shard ${event.shard}: ${describeError(event.error)}.${LACKS_PERMISSION}; the shard retries`,
            }
          : {
              level: "warn",
              message: `data-plane call failed on shard ${event.shard}: ${describeError(event.error)}; the shard retries after a backoff (said again when it reads)`,
            }
      }
      case "batchEnd": {
        const k = `${memberKey(event)}\u0000${event.shard}`
        const before = dataPlaneFailures.get(k)
        if (before !== undefined) {
          dataPlaneFailures.delete(k)
          return {
            level: "info",
            message: `shard ${event.shard} reads again after ${before} failed data-plane call(s)`,
          }
        }
        return {
          level: "debug",
          message: `batch of ${event.count} on shard ${event.shard}: ${event.acked} acked, ${event.failed} failed, ${event.durationMs} ms`,
        }
      }
      case "outboxStranded":
        return {
          level: "warn",
          message: `shard ${event.shard} is sealed and drained but its outbox holds sends committed on a Redis Cluster, which this runtime cannot relay (no outbox on this storage): the shard is not reported drained and the reshard waits. Relay them from a runtime on the cluster, or remove them if they were delivered (docs/exactly-once.md, "Resharding and the outbox")`,
        }
      case "exhausted":
        return {
          level: "info",
          message: `shard ${event.shard} sealed by a reshard and drained: reported, read no more`,
        }
      case "rebalance":
        return {
          level: "info",
          message: `assignment epoch ${event.assignmentEpoch}: owns shards ${shards(event.owned)}`,
        }
      case "layoutChanged":
        return {
          level: "info",
          message: `stream layout changed: generation ${event.layout.generation}, ${event.layout.shardCount} shards`,
        }
      case "paused":
      case "resumed":
        return { level: "info", message: `shard ${event.shard} ${event.type}` }
      case "seeked":
        return { level: "info", message: `shard ${event.shard} moved to ${event.position}` }
      case "left":
        return { level: "info", message: `member left the group (${event.reason})` }
      case "coordinatorElected":
        return {
          level: "info",
          message: `this process coordinates the group now (${event.holder})`,
        }
      case "coordinatorResigned":
        return event.reason === undefined
          ? { level: "info", message: `this process no longer coordinates the group` }
          : {
              level: "warn",
              message: `this process gave the coordinator lease up: ${event.reason}; a standby takes over (docs/protocol.md rule 25)`,
            }
      case "coordinatorServeRestarted":
        return {
          level: "warn",
          message: `this process holds the coordinator lease (token ${event.leaseToken}) but its serve had stopped answering (replaced by another candidate's, or the lease was taken again): it serves again (docs/protocol.md rule 25)`,
        }
      case "coordinatorUnavailable":
        return {
          level: "error",
          message: `no coordinator has answered for ${event.forMs} ms (since ${new Date(event.since).toISOString()}): the group has live members and nobody serves it; last failure: ${event.error} (docs/observability.md, "No coordinator")${isPermissionDenied(event.error) ? `.${LACKS_PERMISSION}` : ""}`,
        }
      case "coordinatorAvailable":
        return {
          level: "info",
          message: `a coordinator answers again after ${event.unavailableMs} ms without one`,
        }
      case "circuitOpened":
        return {
          level: "warn",
          message: `circuit breaker opened (${event.scope === "member" ? "the member's shards" : `shard ${event.shard}`}) after ${event.failures} handler failure(s) in a row, the last on shard ${event.shard}: ${describeError(event.error)}; nothing is read for ${event.retryInMs} ms, then one message is tried; failed messages stay pending, none is dead-lettered meanwhile (resetCircuit closes it by hand)`,
        }
      case "circuitClosed":
        return {
          level: "info",
          message: `circuit breaker closed (${event.scope === "member" ? "the member's shards" : `shard ${event.shard}`}): ${event.reason}`,
        }
      case "batchStart":
        return undefined
      default:
        return undefined
    }
  }

  const debug = log.enabled("debug")
  return (event: RuntimeEvent): void => {
    // the per-batch events say nothing below debug unless a data-plane streak ends
    if (
      !debug &&
      (event.type === "batchStart" || (event.type === "batchEnd" && dataPlaneFailures.size === 0))
    )
      return
    const e = entry(event)
    if (e === undefined || !log.enabled(e.level)) return
    const fields: Record<string, unknown> = {
      event: event.type,
      stream: event.stream,
      group: event.group,
    }
    if ("memberId" in event && event.memberId !== "") fields.memberId = event.memberId
    if ("shard" in event) fields.shard = event.shard
    const error = "error" in event ? event.error : undefined
    if (error instanceof Error) fields.err = error
    log.log(e.level, { ...fields, ...e.fields }, e.message)
  }
}

const effectLevels: Record<string, Level | undefined> = {
  Fatal: "error",
  Error: "error",
  Warn: "warn",
  Info: "info",
  Debug: "debug",
  Trace: "debug",
}

/**
 * Effect's own logs (`Effect.logWarning` in the ports, e.g. the Redis
 * transport's "a heartbeat was not answered") to the same logger, for
 * `start`: its runtime replaces Effect's default logger with this one.
 */
export const effectLoggerLayer = (log: LevelLogger): Layer.Layer<never> =>
  EffectLogger.layer([
    EffectLogger.make((o) => {
      const level = effectLevels[o.logLevel]
      if (level === undefined || !log.enabled(level)) return
      const parts = Array.isArray(o.message) ? o.message : [o.message]
      const message = parts.map((p) => (typeof p === "string" ? p : describeError(p))).join(" ")
      const cause =
        Cause.hasFails(o.cause) || Cause.hasDies(o.cause) ? Cause.squash(o.cause) : undefined
      log.log(
        level,
        { source: "effect", ...(cause === undefined ? {} : { error: describeError(cause) }) },
        message,
      )
    }),
  ])
