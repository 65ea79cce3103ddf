/**
 * Consumer and runtime options, validated with Effect Schema at start,
 * before anything connects (docs/runtime.md, "Configuration"). A bad value is
 * an `InvalidRuntimeConfig` naming the field (`consumers[1].concurrency`,
 * `OrderHandlers.handle.ack`, `shutdownTimeoutMs`, ...). Unknown option names
 * are refused too, so a typo never silently falls back to a default.
 */
import { MemberWeight, StartAt as StartAtSchema } from "@shardline/core"
import { Result, Schema, SchemaIssue } from "effect"
import { isCodecOption, isStandardSchema } from "./Codec.js"
import { InvalidRuntimeConfig } from "./Errors.js"
import type { BreakerSettings } from "./internal/CircuitBreaker.js"
import { type Decoder, makeDecoder } from "./internal/Decode.js"
import type { RateLimitSettings } from "./internal/RateLimiter.js"

// ---------------------------------------------------------------------------
// public option types

/** What happens to a message whose handler succeeded: XACK, or XACK + delete the entry. */
export type AckPolicy = "ack" | "xackdel"

/** The delay before a failed message is delivered again: doubling from `initialMs` up to `maxMs`. */
export interface RetryBackoff {
  /** Delay before the first retry of a failed message (default 100 ms). */
  readonly initialMs?: number
  /** Cap of the delay, which doubles per delivery (default 30,000 ms). */
  readonly maxMs?: number
}

/**
 * Where a group that does not exist yet starts reading each shard
 * (docs/runtime.md, "Where a new group starts"): `earliest` (the default:
 * every entry the shard holds), `latest` (only entries appended after the
 * group's first grant of the shard) or an entry id (`<ms>-<seq>` or `<ms>`:
 * entries after it). A group that exists keeps its position.
 */
export type StartAt = "earliest" | "latest" | (string & {})

/** Options shared by `@StreamListener`, `consumer` and `effectConsumer`. */
export interface CommonOptions {
  readonly stream: string
  readonly group: string
  /**
   * Where the group starts when it does not exist yet (default `earliest`:
   * a queue's consumers deployed after its producers miss nothing); a group
   * that exists is unaffected (docs/runtime.md, "Where a new group starts").
   */
  readonly startAt?: StartAt
  /** On success (default `ack`). Failures are retried, then dead-lettered. */
  readonly ack?: AckPolicy
  /** Entries read per batch of a shard (default 32). */
  readonly batchSize?: number
  /**
   * Deliveries before a failing message goes to the shard's dead-letter
   * stream, atomically with its ack (default 5). 1 dead-letters on the first failure.
   */
  readonly maxDeliveries?: number
  readonly retryBackoff?: RetryBackoff
  /** A handler call running longer is aborted (its signal fires) and counts as failed (default 300,000 ms). */
  readonly handlerTimeoutMs?: number
  /**
   * How long a revoked shard's in-flight batch may take before its handler
   * is aborted and the shard is released without acking it (default: half the
   * group's rebalance timeout). Must be below `rebalanceTimeoutMs`.
   */
  readonly drainTimeoutMs?: number
  /** An idle shard re-checks for entries at least this often (default 5,000 ms); appends wake it at once. */
  readonly idleWaitMs?: number
  /** Shards of the stream (generation 0) when the embedded coordinator creates the group (default 16). */
  readonly shardCount?: number
  /** The group's session timeout, for the coordinator (default 30,000 ms). */
  readonly sessionTimeoutMs?: number
  /** The group's revoke timeout, for the coordinator (default 60,000 ms). */
  readonly rebalanceTimeoutMs?: number
  /** The group's heartbeat interval, for the coordinator (default 3,000 ms); below the session timeout. */
  readonly heartbeatIntervalMs?: number
  /** Self-fence this long before the session timeout would expire the member (default: a fifth of it). */
  readonly safetyMarginMs?: number
  /** A heartbeat without an answer for this long has failed (default 5,000 ms, at most a third of the session timeout). */
  readonly heartbeatTimeoutMs?: number
  /** Configured assignment weight of each logical member (default 1). */
  readonly weight?: number
  /**
   * Opt-in: after `failures` handler failures in a row, stop reading the
   * member's shards (or the shard's, `scope: "shard"`), leaving failed
   * messages pending (never dead-lettered), then try one message after
   * `resetMs` (docs/runtime.md, "Circuit breaker and rate limit").
   */
  readonly circuitBreaker?: CircuitBreakerOptions
  /** Opt-in: at most `messages` per `intervalMs`, per member or per group. */
  readonly rateLimit?: RateLimitOptions
  /**
   * Limits of a handler's transaction (docs/exactly-once.md, "Refusals"): a
   * write or send past either is refused with `TransactionRefused` (`TooLarge`).
   */
  readonly transaction?: TransactionLimits
}

/** Limits of one handler's transaction (docs/exactly-once.md). */
export interface TransactionLimits {
  /** Writes and sends per transaction (default 1,000). */
  readonly maxOperations?: number
  /** UTF-8 bytes of keys, arguments, fields and values per transaction (default 1 MiB). */
  readonly maxBytes?: number
}

/** The opt-in circuit breaker of a consumer (`circuitBreaker`; docs/runtime.md, "Circuit breaker and rate limit"). */
export interface CircuitBreakerOptions {
  /** Handler failures in a row that open it (>= 1). Above `maxDeliveries`, a lone poison message is still dead-lettered. */
  readonly failures: number
  /** `member` (default): one breaker for all the member's shards; `shard`: one per shard. */
  readonly scope?: "member" | "shard"
  /** Open this long before one message is tried (default 30,000 ms). */
  readonly resetMs?: number
  /** The open period doubles after each failed trial, up to this (default 600,000 ms). */
  readonly maxResetMs?: number
}

/** The opt-in rate limit of a consumer (`rateLimit`; docs/runtime.md, "Circuit breaker and rate limit"). */
export interface RateLimitOptions {
  /** At most this many messages ... */
  readonly messages: number
  /** ... in any window of this long (ms). */
  readonly intervalMs: number
  /**
   * `member` (default): each logical member on its own. `group`: the group's
   * total, split by the share of the stream's shards each member owns (no
   * coordination through Redis).
   */
  readonly scope?: "member" | "group"
}

/** Shard lifecycle hooks, all optional; each receives the member and shard. */
export interface ShardHookInfo {
  readonly stream: string
  readonly group: string
  readonly memberId: string
  readonly shard: number
}

/** What `onLost` is told: the member's shards taken away at once (fence, lease lost, superseded), and why. */
export interface LostHookInfo {
  readonly stream: string
  readonly group: string
  readonly memberId: string
  readonly shards: ReadonlyArray<number>
  readonly reason: string
}

// ---------------------------------------------------------------------------
// resolved specs (internal)

export interface GroupSettings {
  readonly shardCount: number
  readonly sessionTimeoutMs: number
  readonly rebalanceTimeoutMs: number
  readonly heartbeatIntervalMs: number
  /** Where a new group starts (undefined: earliest). */
  readonly startAt: StartAt | undefined
}

export interface ConsumerSettings extends GroupSettings {
  readonly stream: string
  readonly group: string
  readonly ack: AckPolicy
  readonly batchSize: number
  readonly maxDeliveries: number
  readonly retryInitialMs: number
  readonly retryMaxMs: number
  readonly handlerTimeoutMs: number
  readonly drainTimeoutMs: number | undefined
  readonly idleWaitMs: number
  readonly safetyMarginMs: number | undefined
  readonly heartbeatTimeoutMs: number
  readonly weight: number | undefined
  readonly circuitBreaker: BreakerSettings | undefined
  readonly rateLimit: RateLimitSettings | undefined
  /** A handler transaction's limits (docs/exactly-once.md). */
  readonly transaction: { readonly maxOperations: number; readonly maxBytes: number }
  /** The codec and schema's decoding; undefined for raw messages without a schema. */
  readonly decode: Decoder | undefined
}

/** The consumer options' defaults (docs/runtime.md, "Configuration"). */
export const DEFAULTS = {
  ack: "ack",
  batchSize: 32,
  maxDeliveries: 5,
  retryInitialMs: 100,
  retryMaxMs: 30_000,
  handlerTimeoutMs: 300_000,
  idleWaitMs: 5_000,
  shardCount: 16,
  sessionTimeoutMs: 30_000,
  rebalanceTimeoutMs: 60_000,
  heartbeatIntervalMs: 3_000,
  heartbeatTimeoutMs: 5_000,
  shutdownTimeoutMs: 30_000,
  breakerResetMs: 30_000,
  breakerMaxResetMs: 600_000,
  transactionMaxOperations: 1_000,
  transactionMaxBytes: 1_048_576,
} as const

// ---------------------------------------------------------------------------
// schemas

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
const Name = Schema.String.check(
  Schema.isNonEmpty({ message: "must be a non-empty string" }),
  Schema.isMaxLength(256),
)
const Fn = Schema.declare(
  (u: unknown): u is (...args: ReadonlyArray<never>) => unknown => typeof u === "function",
  { expected: "a function" },
)

/** A consumer's or producer's `codec` option (docs/runtime.md, "Typed messages"). */
export const CodecOptionSchema = Schema.declare(isCodecOption, {
  expected: '"raw", "json" or a codec { contentType, encode, decode }',
})

const commonFields = {
  stream: Name,
  group: Name,
  startAt: Schema.optional(StartAtSchema),
  codec: Schema.optional(CodecOptionSchema),
  schema: Schema.optional(
    Schema.declare(isStandardSchema, {
      expected: "a Standard Schema (zod, valibot, effect Schema.toStandardSchemaV1, ...)",
    }),
  ),
  ack: Schema.optional(Schema.Literals(["ack", "xackdel"])),
  batchSize: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(10_000))),
  maxDeliveries: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(1_000_000))),
  retryBackoff: Schema.optional(
    Schema.Struct({ initialMs: Schema.optional(PositiveInt), maxMs: Schema.optional(PositiveInt) }),
  ),
  handlerTimeoutMs: Schema.optional(PositiveInt),
  drainTimeoutMs: Schema.optional(PositiveInt),
  idleWaitMs: Schema.optional(PositiveInt),
  shardCount: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(65_536))),
  sessionTimeoutMs: Schema.optional(PositiveInt),
  rebalanceTimeoutMs: Schema.optional(PositiveInt),
  heartbeatIntervalMs: Schema.optional(PositiveInt),
  safetyMarginMs: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
  heartbeatTimeoutMs: Schema.optional(PositiveInt),
  weight: Schema.optional(MemberWeight),
  circuitBreaker: Schema.optional(
    Schema.Struct({
      failures: PositiveInt,
      scope: Schema.optional(Schema.Literals(["member", "shard"])),
      resetMs: Schema.optional(PositiveInt),
      maxResetMs: Schema.optional(PositiveInt),
    }),
  ),
  rateLimit: Schema.optional(
    Schema.Struct({
      messages: PositiveInt,
      intervalMs: PositiveInt,
      scope: Schema.optional(Schema.Literals(["member", "group"])),
    }),
  ),
  transaction: Schema.optional(
    Schema.Struct({
      maxOperations: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(100_000))),
      maxBytes: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(512 * 1_048_576))),
    }),
  ),
  onAssigned: Schema.optional(Fn),
  onRevoked: Schema.optional(Fn),
  onLost: Schema.optional(Fn),
} as const

/** `@StreamListener` options. */
export const ListenerOptionsSchema = Schema.Struct({
  ...commonFields,
  /** Logical members this listener creates in the process (`<base>-m0` ..). */
  concurrency: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(1_024))),
  /** Local workers of each logical member (default 1). */
  workersPerMember: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(1_024))),
  /** The method takes a batch (`EachBatch`) instead of one message. */
  batch: Schema.optional(Schema.Boolean),
  autoResolve: Schema.optional(Schema.Boolean),
})

/** `consumer` / `effectConsumer` options: one explicit member. */
export const MemberOptionsSchema = Schema.Struct({
  ...commonFields,
  /** This member's id (default: the process's base id). */
  memberId: Schema.optional(Name),
  /** Local workers of this one member; never creates members, never caps shards (default 1). */
  runtimeMaxConcurrency: Schema.optional(PositiveInt.check(Schema.isLessThanOrEqualTo(1_024))),
  eachMessage: Schema.optional(Fn),
  eachBatch: Schema.optional(Fn),
  autoResolve: Schema.optional(Schema.Boolean),
})

export const RuntimeOptionsSchema = Schema.Struct({
  consumers: Schema.optional(Schema.Array(Schema.Unknown)),
  listeners: Schema.optional(Schema.Array(Schema.Unknown)),
  ports: Schema.optional(Schema.Unknown),
  /** `embedded` (default): this process is a coordinator candidate for its groups. */
  coordinator: Schema.optional(Schema.Literals(["embedded", "standalone"])),
  /** Base of the member ids (default: POD_IP, HOSTNAME, then an interface address). */
  memberBase: Schema.optional(Name),
  /** `stop()` (and SIGTERM/SIGINT) finishes within this long (default 30,000 ms). */
  shutdownTimeoutMs: Schema.optional(PositiveInt),
  /** Stop gracefully on SIGTERM and SIGINT, then exit (default true for `start`, false for `make`). */
  handleSignals: Schema.optional(Schema.Boolean),
  /** Capacity of each event listener's buffer (default 10,000). */
  eventBufferCapacity: Schema.optional(PositiveInt),
  metricRegistry: Schema.optional(Schema.Unknown),
  onEvent: Schema.optional(Fn),
  eventHub: Schema.optional(Schema.Unknown),
  /** Where warnings and errors go: `{ debug, info, warn, error }` taking (fields, message), or `console`. */
  logger: Schema.optional(
    Schema.declare(
      (u: unknown): u is object =>
        typeof u === "object" &&
        u !== null &&
        ["debug", "info", "warn", "error"].every(
          (m) => typeof (u as Record<string, unknown>)[m] === "function",
        ),
      { expected: "a logger with debug, info, warn and error methods (pino, console, ...)" },
    ),
  ),
  /** The least severe level the runtime writes (default warn). */
  logLevel: Schema.optional(Schema.Literals(["debug", "info", "warn", "error", "silent"])),
  /** OpenTelemetry providers, or `false` for none (docs/observability.md). */
  telemetry: Schema.optional(
    Schema.Union([
      Schema.Literal(false),
      Schema.Struct({
        tracerProvider: Schema.optional(Schema.Unknown),
        meterProvider: Schema.optional(Schema.Unknown),
      }),
    ]),
  ),
})

// ---------------------------------------------------------------------------
// decoding with named fields

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

const fieldName = (prefix: string, path: ReadonlyArray<unknown>): string =>
  path.reduce<string>(
    (acc, key) =>
      typeof key === "number"
        ? `${acc}[${key}]`
        : acc === ""
          ? String(key)
          : `${acc}.${String(key)}`,
    prefix,
  )

/** Decode `input` with `schema`; the first problem becomes an `InvalidRuntimeConfig` naming its field. */
export const decodeOptions = <S extends Schema.Top & { readonly DecodingServices: never }>(
  schema: S,
  input: unknown,
  prefix: string,
): Result.Result<S["Type"], InvalidRuntimeConfig> => {
  const decoded = Schema.decodeUnknownResult(schema as never, { onExcessProperty: "error" })(input)
  if (Result.isSuccess(decoded)) return Result.succeed(decoded.success as S["Type"])
  const issue = formatter(decoded.failure.issue).issues[0]
  const field = fieldName(prefix, issue?.path ?? [])
  return Result.fail(
    new InvalidRuntimeConfig({
      field: field === "" ? "options" : field,
      message: `${field === "" ? "options" : field}: ${issue?.message ?? "invalid"}`,
    }),
  )
}

export const invalid = (field: string, message: string): InvalidRuntimeConfig =>
  new InvalidRuntimeConfig({ field, message: `${field}: ${message}` })

const CommonSchema = Schema.Struct(commonFields)
type CommonDecoded = typeof CommonSchema.Type

/** Defaults plus the checks across fields; `prefix` names the consumer in errors. */
export const resolveSettings = (
  o: CommonDecoded,
  prefix: string,
): Result.Result<ConsumerSettings, InvalidRuntimeConfig> => {
  const at = (field: string) => (prefix === "" ? field : `${prefix}.${field}`)
  const sessionTimeoutMs = o.sessionTimeoutMs ?? DEFAULTS.sessionTimeoutMs
  const heartbeatIntervalMs = o.heartbeatIntervalMs ?? DEFAULTS.heartbeatIntervalMs
  const rebalanceTimeoutMs = o.rebalanceTimeoutMs ?? DEFAULTS.rebalanceTimeoutMs
  const retryInitialMs = o.retryBackoff?.initialMs ?? DEFAULTS.retryInitialMs
  const retryMaxMs = o.retryBackoff?.maxMs ?? Math.max(DEFAULTS.retryMaxMs, retryInitialMs)
  const heartbeatTimeoutMs =
    o.heartbeatTimeoutMs ??
    Math.max(1, Math.min(DEFAULTS.heartbeatTimeoutMs, Math.floor(sessionTimeoutMs / 3)))
  if (heartbeatIntervalMs >= sessionTimeoutMs)
    return Result.fail(
      invalid(
        at("heartbeatIntervalMs"),
        `must be below sessionTimeoutMs (${heartbeatIntervalMs} >= ${sessionTimeoutMs})`,
      ),
    )
  const margin = o.safetyMarginMs ?? Math.floor(sessionTimeoutMs / 5)
  if (sessionTimeoutMs - margin <= heartbeatIntervalMs)
    return Result.fail(
      invalid(
        at("safetyMarginMs"),
        `sessionTimeoutMs - safetyMarginMs (${sessionTimeoutMs - margin}) must exceed heartbeatIntervalMs (${heartbeatIntervalMs})`,
      ),
    )
  if (o.drainTimeoutMs !== undefined && o.drainTimeoutMs >= rebalanceTimeoutMs)
    return Result.fail(
      invalid(
        at("drainTimeoutMs"),
        `must be below rebalanceTimeoutMs (${o.drainTimeoutMs} >= ${rebalanceTimeoutMs}), or the coordinator fences the member before it drains`,
      ),
    )
  if (retryMaxMs < retryInitialMs)
    return Result.fail(
      invalid(at("retryBackoff.maxMs"), `must be at least initialMs (${retryInitialMs})`),
    )
  const breaker = o.circuitBreaker
  const resetMs = breaker?.resetMs ?? DEFAULTS.breakerResetMs
  const maxResetMs = breaker?.maxResetMs ?? Math.max(DEFAULTS.breakerMaxResetMs, resetMs)
  if (breaker !== undefined && maxResetMs < resetMs)
    return Result.fail(
      invalid(at("circuitBreaker.maxResetMs"), `must be at least resetMs (${resetMs})`),
    )
  if (heartbeatTimeoutMs >= sessionTimeoutMs)
    return Result.fail(
      invalid(
        at("heartbeatTimeoutMs"),
        `must be below sessionTimeoutMs (${heartbeatTimeoutMs} >= ${sessionTimeoutMs})`,
      ),
    )
  return Result.succeed({
    stream: o.stream,
    group: o.group,
    ack: o.ack ?? DEFAULTS.ack,
    batchSize: o.batchSize ?? DEFAULTS.batchSize,
    maxDeliveries: o.maxDeliveries ?? DEFAULTS.maxDeliveries,
    retryInitialMs,
    retryMaxMs,
    handlerTimeoutMs: o.handlerTimeoutMs ?? DEFAULTS.handlerTimeoutMs,
    drainTimeoutMs: o.drainTimeoutMs,
    idleWaitMs: o.idleWaitMs ?? DEFAULTS.idleWaitMs,
    shardCount: o.shardCount ?? DEFAULTS.shardCount,
    sessionTimeoutMs,
    rebalanceTimeoutMs,
    heartbeatIntervalMs,
    safetyMarginMs: o.safetyMarginMs,
    heartbeatTimeoutMs,
    weight: o.weight,
    circuitBreaker:
      breaker === undefined
        ? undefined
        : { failures: breaker.failures, scope: breaker.scope ?? "member", resetMs, maxResetMs },
    rateLimit:
      o.rateLimit === undefined
        ? undefined
        : {
            messages: o.rateLimit.messages,
            intervalMs: o.rateLimit.intervalMs,
            scope: o.rateLimit.scope ?? "member",
          },
    transaction: {
      maxOperations: o.transaction?.maxOperations ?? DEFAULTS.transactionMaxOperations,
      maxBytes: o.transaction?.maxBytes ?? DEFAULTS.transactionMaxBytes,
    },
    startAt: o.startAt,
    decode: makeDecoder(o.codec, o.schema),
  })
}

/** The group settings two declarations of one (stream, group) in a process must agree on. */
export const groupSettingsDiffer = (
  a: GroupSettings,
  b: GroupSettings,
): keyof GroupSettings | undefined => {
  for (const field of [
    "shardCount",
    "sessionTimeoutMs",
    "rebalanceTimeoutMs",
    "heartbeatIntervalMs",
    "startAt",
  ] as const)
    if (a[field] !== b[field]) return field
  return undefined
}
