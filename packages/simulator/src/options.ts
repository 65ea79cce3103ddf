/**
 * Run options and everything derived from the seed. One seed plus these
 * options determine the whole run: the world's shape (when drawn), the fault
 * mix and the per-subsystem options (network, store, members, workload), in
 * the manner of TigerBeetle's VOPR (`options_swarm`): every subsystem gets its
 * own options struct, drawn from its own named PRNG stream.
 *
 * @module
 */
import {
  defaultCoordinatorLeaseMs,
  defaultFenceWaitMs,
  MAX_MEMBER_WEIGHT,
  MIN_MEMBER_WEIGHT,
} from "@shardline/core"
import { Prng } from "./engine/Prng.js"

export const SCENARIOS = [
  "steady",
  "rolling-restart",
  "scale-out",
  "scale-in",
  "churn",
  "partition-storm",
  "coordinator-failover",
  "swarm",
  "reshard-up",
  "reshard-down",
  "reshard-rollback",
] as const
export type Scenario = (typeof SCENARIOS)[number]

/** Scenarios that change the stream's shard count mid-run (docs/resharding.md). */
export const RESHARD_SCENARIOS: ReadonlySet<Scenario> = new Set<Scenario>([
  "reshard-up",
  "reshard-down",
  "reshard-rollback",
])
export const isReshard = (scenario: Scenario): boolean => RESHARD_SCENARIOS.has(scenario)

/**
 * The shard counts a reshard scenario's stream goes through, oldest first
 * (`shards` is the first): up N -> 2N, down N -> N/2 (at least 1), rollback
 * N -> 2N, then back to N while the first migration runs. One count for the
 * other scenarios.
 */
export const reshardCounts = (scenario: Scenario, shards: number): ReadonlyArray<number> => {
  switch (scenario) {
    case "reshard-up":
      return [shards, 2 * shards]
    case "reshard-down":
      return [shards, Math.max(1, Math.floor(shards / 2))]
    case "reshard-rollback":
      return [shards, 2 * shards, shards]
    default:
      return [shards]
  }
}

/**
 * Size of the shard id space: every generation numbers its shards after the
 * previous one's (docs/resharding.md), so a run with resharding uses the sum
 * of its counts as ids.
 */
export const shardIdSpace = (o: Pick<SimOptions, "scenario" | "shards">): number =>
  reshardCounts(o.scenario, o.shards).reduce((a, b) => a + b, 0)

/**
 * Fault kinds. The order is part of the seed's meaning (each kind draws its
 * on/off and intensity in this order), so new kinds are appended.
 */
export const FAULT_KINDS = [
  "loss",
  "dup",
  "delay",
  "partition",
  "oneway",
  "store-partition",
  "crash",
  "pause",
  "coord-crash",
  "coord-stale",
  "slow-drain",
  "clock",
  "kill",
  "clog",
  "twin",
  "forge",
  "replay",
  "burst",
  "weights",
  "configs",
  "collide",
  "clock-step",
  "redis-outage",
  "stale-claim",
  "evict",
  "hung-store",
  "handler-ignores-abort",
  "refused",
  "store-rewind",
  "coord-stop",
  "outbox-relay",
  "fence-hang",
] as const
export type FaultKind = (typeof FAULT_KINDS)[number]

/**
 * Kinds only a comma list turns on: `swarm` leaves them off (their on/off
 * and intensity are still drawn, so every other kind's mix is unchanged),
 * and so do the pinned seeds' lists (`SWARM_FAULT_KINDS`). A sweep with
 * one on lists every kind (`--faults` with `SWARM_FAULT_KINDS` and it).
 */
export const OPT_IN_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>([
  "hung-store",
  "handler-ignores-abort",
  "refused",
  "store-rewind",
  "coord-stop",
  "outbox-relay",
  "fence-hang",
])

/** Every kind the `swarm` mix may turn on (all but the opt-in ones). */
export const SWARM_FAULT_KINDS: ReadonlyArray<FaultKind> = FAULT_KINDS.filter(
  (k) => !OPT_IN_FAULTS.has(k),
)

/**
 * Kinds that act on every message or at setup (no episodes): network
 * loss/dup/delay, clocks, member weights and member configs.
 */
export const CONTINUOUS_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>([
  "loss",
  "dup",
  "delay",
  "clock",
  "weights",
  "configs",
])

/**
 * Kinds appended since `burst` and `weights` under which a correct protocol
 * still moves nothing, so a run with only these on is held to exactness:
 * `coord-stop`, a graceful coordinator stop (docs/protocol.md rule 20: a
 * failover moves nothing).
 */
const NON_DISRUPTIVE_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>(["coord-stop"])

/**
 * Kinds under which a correct protocol still fences, expires or duplicates by
 * design (the storage fence is what stops the zombie). A run with none of
 * these on must be exact: zero duplicates, fenced reads, fences, expiries and
 * self-fences, movement equal to the lower bound, convergence within the
 * scenario's tight bound.
 */
export const DISRUPTIVE_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>(
  FAULT_KINDS.filter((k) => k !== "burst" && k !== "weights" && !NON_DISRUPTIVE_FAULTS.has(k)),
)

/**
 * Test-only protocol breakages, proving the checkers can fail:
 * - `assign-before-revoke`: hand a pending shard over before its previous
 *   owner reported REVOKED.
 * - `skip-election`: a new coordinator leader serves without committing its
 *   election (`CoordinatorElected`), as `CoordinatorHost` did before the fix;
 *   the Store's lease fence (docs/protocol.md rule 32) is off too, as it was
 *   then: with it on, it alone refuses the paused ex-leader's commit.
 * - `cutover-before-drain`: the data plane calls a shard of an earlier layout
 *   generation drained as soon as it is sealed (and its loop asks with a
 *   batch in flight), with messages still unread or unacknowledged, so the
 *   group cuts over to the new generation before the old one drained
 *   (reshard scenarios).
 * - `tx-effects-at-handle`, `tx-commit-without-pending-check` (they turn
 *   `tx` on): a transactional handler's effects applied when it runs, not at
 *   its commit; a commit that does not check its messages are still pending
 *   (`transactions.ts`).
 * - `missing-token-is-zero`, `vanished-read-as-empty` (the `evict` fault;
 *   docs/protocol.md rule 26): the storage fence compares a missing owner
 *   token with 0, so every token passes; a read of a shard whose stream or
 *   group vanished is an empty read, the group recreated in silence at the
 *   stream's end (`dataplane.ts`).
 * - `missing-token-unreported` (the `evict` fault): a loop refused for a
 *   missing owner token waits without telling its member, as the runtime
 *   did before docs/protocol.md rule 30: nothing writes the token again
 *   until the shard moves or a coordinator takes over (`members.ts`).
 * - `serve-without-check`: a coordinator candidate decides as before
 *   docs/protocol.md rule 25: it keeps any serve while its host holds the
 *   lease, whatever term the serve started under and whether it still
 *   answers (`coordinator.ts`).
 * - `no-command-deadline` (the `hung-store` fault): a store command that
 *   never answers is waited for without a deadline, as before
 *   docs/protocol.md rule 27: the leader holds its lock for good while its
 *   renewal loop keeps its lease (`coordinator.ts`).
 * - `hung-commit-keeps-shell` (the `hung-store` fault): at the hung
 *   command's deadline the host keeps leading on its shell instead of
 *   stepping down, so a deadline `dueTimer` handed out is never run.
 * - `drained-before-handler-returns` (the `handler-ignores-abort` fault):
 *   a stopped loop is reported drained at once though its handler, which
 *   ignores its abort signal, still runs (`members.ts`), so the member
 *   rejoins, "proving" it stopped (docs/protocol.md rule 19).
 * - `refused-ack-counted-as-acked` (the `refused` fault): a loop whose ack
 *   was refused (NOPERM) takes it as done and reads only new entries, so
 *   what it handled stays pending, never read again while the loop runs;
 *   the runtime reads its pending entries again after a failed ack
 *   (`members.ts`).
 * - `no-rewind-check` (the `store-rewind` fault): a new leader does not
 *   compare the owner tokens storage holds with the loaded state's
 *   (docs/protocol.md rule 23) and re-fences the rewound state's lower
 *   tokens (`coordinator.ts`).
 * - `stop-without-handover` (the `coord-stop` fault): a coordinator that
 *   stops gracefully exits without its handover (docs/protocol.md rule 20):
 *   no release of its lease, no handover mark, no wake-up of the standbys,
 *   so a successor serves only once the lease ran out (`coordinator.ts`).
 * - `outbox-gone-as-shard` (`outbox-relay` with `tx`): a relayer reads the
 *   re-route's -1 ("the entry is already gone") as a shard number, the
 *   product bug of issue 32 item 9 (`outbox.ts`).
 * - `drain-with-outbox` (`outbox-relay` with `tx`, reshard scenarios): a
 *   sealed shard is called drained whatever its outbox still holds
 *   (docs/exactly-once.md, "Resharding and the outbox").
 * - `no-commit-lease-fence` (`store-rewind` with `coord-stale`): the Store's
 *   commit is fenced by the revision only, not by the lease term
 *   (docs/protocol.md rule 32), so a paused ex-leader's commit passes once
 *   the Store rewound to its revision (`store.ts`).
 * - `fence-under-lock`, `grant-before-fence`, `no-fence-wait` (the
 *   `fence-hang` fault; docs/protocol.md rules 27 and 31): a grant's fence
 *   write held under the host's lock, as before rule 31 (every other answer
 *   waits for the hung shard); a grant told in `assigned` before its write
 *   landed (rule 1's order broken); the answer that made a grant waiting
 *   for its write until the command deadline instead of `fenceWaitMs`
 *   (`coordinator.ts`).
 */
export type Broken =
  | "assign-before-revoke"
  | "skip-election"
  | "cutover-before-drain"
  | "tx-effects-at-handle"
  | "tx-commit-without-pending-check"
  | "serve-without-check"
  | "missing-token-is-zero"
  | "vanished-read-as-empty"
  | "missing-token-unreported"
  | "no-command-deadline"
  | "hung-commit-keeps-shell"
  | "drained-before-handler-returns"
  | "refused-ack-counted-as-acked"
  | "no-rewind-check"
  | "stop-without-handover"
  | "outbox-gone-as-shard"
  | "drain-with-outbox"
  | "no-commit-lease-fence"
  | "fence-under-lock"
  | "grant-before-fence"
  | "no-fence-wait"
  | "withheld-grant-deadline"
  | "withhold-confirmed"
export const BROKEN: ReadonlyArray<Broken> = [
  "assign-before-revoke",
  "skip-election",
  "cutover-before-drain",
  "tx-effects-at-handle",
  "tx-commit-without-pending-check",
  "serve-without-check",
  "missing-token-is-zero",
  "vanished-read-as-empty",
  "missing-token-unreported",
  "no-command-deadline",
  "hung-commit-keeps-shell",
  "drained-before-handler-returns",
  "refused-ack-counted-as-acked",
  "no-rewind-check",
  "stop-without-handover",
  "outbox-gone-as-shard",
  "drain-with-outbox",
  "no-commit-lease-fence",
  "fence-under-lock",
  "grant-before-fence",
  "no-fence-wait",
  "withheld-grant-deadline",
  "withhold-confirmed",
]

/** Transactional handlers on: asked for, or implied by a `tx-` breakage. */
export const txOn = (o: SimOptions): boolean =>
  o.tx === true || (o.broken?.startsWith("tx-") ?? false)

export interface SimOptions {
  readonly scenario: Scenario
  readonly seed: number
  readonly members: number
  readonly shards: number
  /** Local workers per logical member. */
  readonly workers: number
  /** Safety phase (faults on) in virtual ms; a liveness phase follows. */
  readonly durationMs: number
  /** "default" (the scenario's mix), "none", "swarm", or a comma list of fault kinds. */
  readonly faults: string
  /** Produced messages per second per shard (average; skewed per seed). */
  readonly ratePerShard: number
  /**
   * "on": storage refuses stale owner tokens (production). "off": storage
   * accepts any token, so safety must come from the protocol alone; the
   * checkers then see every zombie's effect.
   */
  readonly fence: "on" | "off"
  readonly broken?: Broken | undefined
  /**
   * Do not excuse the known protocol finding F2 (docs/simulator.md): reports
   * of a member that may have applied an older answer. Its seeds then fail.
   * (F1 and F4 are fixed in core and no longer excused.)
   */
  readonly strict?: boolean | undefined
  /**
   * Consumer groups on the stream (default 1): the simulated group plus
   * `groups - 1` fan-out groups reading the same shard streams, each with
   * an ack mode drawn per seed (docs/simulator.md, Fan-out).
   */
  readonly groups?: number | undefined
  /**
   * Transactional handlers (`--tx`, docs/simulator.md, Transactions): each
   * message's effect is applied by the fenced commit that acknowledges it,
   * and the transactions checker holds every effect to exactly once.
   */
  readonly tx?: boolean | undefined
  /** Record ownership segments for the HTML report. */
  readonly timeline?: boolean | undefined
}

export const defaultOptions: SimOptions = {
  scenario: "steady",
  seed: 1,
  members: 5,
  shards: 16,
  workers: 2,
  durationMs: 60_000,
  faults: "default",
  ratePerShard: 1,
  fence: "on",
}

/**
 * The reshard scenarios' seed-varied shape (CI seeds, `bench:simulator-reshard`):
 * 2..6 members, 1..3 workers, 4 shards (8 for reshard-down), 5 messages/s per shard.
 */
export const reshardShape = (
  scenario: Scenario,
  seed: number,
  extra: Partial<SimOptions> = {},
): SimOptions => ({
  ...defaultOptions,
  scenario,
  seed,
  members: 2 + (seed % 5),
  shards: scenario === "reshard-down" ? 8 : 4,
  workers: 1 + (seed % 3),
  durationMs: 60_000,
  ratePerShard: 5,
  ...extra,
})

const heartbeatIntervalMs = 1_000
const sessionTimeoutMs = 10_000

/** Protocol timing of the group (ms); member-side settings may be drawn at the edges. */
export const timing = {
  heartbeatIntervalMs,
  sessionTimeoutMs,
  revokeTimeoutMs: 5_000,
  /** The runtime's transport timeout: a request without an answer by then has failed. */
  requestTimeoutMs: 1_500,
  /** Member self-fence margin (default member config; covers the clock bound). */
  safetyMarginMs: 1_500,
  /**
   * The coordinator lease TTL: the product's default, core's
   * `defaultCoordinatorLeaseMs` of the group's timing (docs/protocol.md rule
   * 20: twice the heartbeat interval, at most a quarter of the session, at
   * least 1 s), 2 s here; renewed and checked every third of it.
   */
  coordinatorLeaseMs: defaultCoordinatorLeaseMs({ heartbeatIntervalMs, sessionTimeoutMs }),
  /**
   * How long a graceful stop's handover mark holds members' requests for
   * the successor (the Redis transport's `handoverMs` default;
   * docs/protocol.md rule 20).
   */
  handoverMs: 2_000,
  /**
   * Every store command's deadline (`commandTimeoutMs`, its default;
   * docs/redis.md, "Command deadline"): past it the command fails
   * `BackendUnavailable`, its outcome unknown.
   */
  commandTimeoutMs: 5_000,
  /**
   * How long the answer that made a grant waits for its fence writes, and a
   * takeover for each shard's token read and re-fence (`CoordinatorHost`'s
   * `fenceWaitMs`, its default `defaultFenceWaitMs` of the group's timing:
   * 1 s here; docs/protocol.md rules 27 and 31).
   */
  fenceWaitMs: defaultFenceWaitMs({ sessionTimeoutMs }),
  /** Clock bound: offsets within ±maxSkewMs, rates within ±maxDriftPpm. */
  maxSkewMs: 100,
  maxDriftPpm: 500,
  batchSize: 16,
  sampleEveryMs: 1_000,
} as const

/**
 * The liveness checker's bound (`checkers/liveness.ts`): how long live
 * members' requests may keep reaching the transport without one NONE answer
 * while Redis is up and a candidate is alive and not paused, counted from
 * the last NONE answer or the last excuse (Redis back, a candidate available
 * again, the lease holder crashed or paused by a fault). A session timeout
 * plus a lease TTL plus a check period (10 + 2 + 0.67 = 12.7 s with the
 * 2 s lease core's `defaultCoordinatorLeaseMs` gives). With T the
 * lease TTL and P = T/3 the check and renewal period, what the correct
 * protocol needs at worst, chained: a takeover after the holder was lost,
 * T + 2P (its lease runs out at most T after its last renewal, a standby
 * takes it within P, serves at once or, taken silently by its host's
 * renewal loop, at its next check within P); a serve replaced, restarted at
 * the holder's next check, which the `stale-claim` fault starves by at most
 * T; a second loss in that term, a resignation, served by a standby at the
 * handover or, with none available, by the same candidate after its T of
 * abstention and a check, T + P. That is 3T + 3P = 8 s < 12.7 s; a live
 * member's request sent after it finds a serve.
 */
export const stallBoundMs =
  timing.sessionTimeoutMs + timing.coordinatorLeaseMs + timing.coordinatorLeaseMs / 3

/**
 * The handover checker's bound (`checkers/handover.ts`): after a graceful
 * coordinator stop with a standby available, a successor serves within this
 * (docs/protocol.md rule 20: woken by the handover, it "serves within
 * milliseconds"). The lease expiry path, a stop without the handover, takes
 * from two thirds of a lease TTL (its last renewal) to a TTL plus a check:
 * at least 1.3 s with the 2 s lease.
 */
export const handoverBoundMs = 100

/** After faults stop, the group must be balanced within this (session + revoke + lease + 10 hb). */
export const livenessBoundMs =
  timing.sessionTimeoutMs +
  timing.revokeTimeoutMs +
  timing.coordinatorLeaseMs +
  10 * timing.heartbeatIntervalMs

/**
 * Tight convergence bounds for exact runs, in heartbeat intervals, per
 * scenario: from the last membership change of an episode to a balanced
 * group (every shard read by exactly one live member, counts at the weighted
 * quotas). The critical path is one heartbeat interval (the owner learns of
 * its revocation at its next heartbeat) plus a drain (at most 16 messages)
 * and three round trips (REVOKED, notice, grant): the real protocol's worst
 * over 1,700 seeds of each exact scenario was 1.07 intervals. A handoff that
 * waits for the receiver's next heartbeat instead of a notice needs up to 2.
 */
export const exactConvergenceHeartbeats: Record<Scenario, number> = {
  steady: 1.5,
  "rolling-restart": 1.5,
  "scale-out": 1.5,
  "scale-in": 1.5,
  churn: 1.5,
  "partition-storm": 1.5,
  "coordinator-failover": 1.5,
  swarm: 1.5,
  "reshard-up": 1.5,
  "reshard-down": 1.5,
  "reshard-rollback": 1.5,
}

const scenarioFaults: Record<Scenario, string> = {
  steady: "none",
  "rolling-restart": "none",
  "scale-out": "none",
  "scale-in": "none",
  churn: "burst,weights",
  "partition-storm": "partition,oneway,clog,store-partition,loss,delay,dup",
  "coordinator-failover": "coord-crash,coord-stale,kill,delay",
  swarm: "swarm",
  "reshard-up": "partition,oneway,crash,coord-crash,coord-stale,loss,delay,dup",
  "reshard-down": "partition,oneway,crash,coord-crash,coord-stale,loss,delay,dup",
  "reshard-rollback": "partition,oneway,crash,coord-crash,coord-stale,loss,delay,dup",
}

// ---------------------------------------------------------------- shape

export interface Shape {
  readonly members: number
  readonly shards: number
  readonly workers: number
  readonly ratePerShard: number
}

/** Dimensions a swarm run may draw per seed (those not given explicitly). */
export type ShapeDim = keyof Shape

/**
 * Draws the world's shape from the seed ("shape" stream): one member up to
 * dozens, one shard up to a few hundred, 1-8 workers, rates from a trickle
 * to what half the members can serve. Dimensions in `fixed` keep the value in
 * `base`.
 */
export const drawShape = (
  seed: number,
  base: Shape,
  fixed: ReadonlySet<ShapeDim> = new Set(),
): Shape => {
  const r = Prng.stream(seed, "shape")
  const logUniform = (lo: number, hi: number) => Math.exp(r.range(Math.log(lo), Math.log(hi)))
  const members = r.chance(0.1) ? 1 + r.int(2) : Math.round(logUniform(2, 48))
  const shards = r.chance(0.1) ? 1 + r.int(4) : Math.round(logUniform(4, 256))
  const workers = 1 + r.int(8)
  const drawn = logUniform(0.2, 10)
  const shape = {
    members: fixed.has("members") ? base.members : members,
    shards: fixed.has("shards") ? base.shards : shards,
    workers: fixed.has("workers") ? base.workers : workers,
  }
  // Keep the load serviceable by half the members (hot shards run at up to
  // 5x the rate, messages take up to 12 ms): a backlog that cannot drain by
  // the end would be reported as lost messages.
  const capacity = (30 * shape.workers * Math.max(1, shape.members / 2)) / shape.shards
  const rate = Math.max(0.1, Math.round(Math.min(drawn, capacity) * 10) / 10)
  return { ...shape, ratePerShard: fixed.has("ratePerShard") ? base.ratePerShard : rate }
}

// ---------------------------------------------------------------- faults

/** Per-seed fault mix: intensity 0 = off. Drawn from the "faults" stream only. */
export interface FaultMix {
  readonly intensity: Readonly<Record<FaultKind, number>>
}

export const faultSpec = (options: Pick<SimOptions, "faults" | "scenario">): string =>
  options.faults === "default" ? scenarioFaults[options.scenario] : options.faults

export const drawFaults = (options: SimOptions): FaultMix => {
  const spec = faultSpec(options)
  const rng = Prng.stream(options.seed, "faults")
  const intensity = {} as Record<FaultKind, number>
  const listed = new Set(spec.split(",").map((s) => s.trim()))
  for (const k of listed)
    if (k !== "none" && k !== "swarm" && !(FAULT_KINDS as ReadonlyArray<string>).includes(k))
      throw new Error(`unknown fault kind "${k}" (known: ${FAULT_KINDS.join(", ")}, swarm, none)`)
  for (const k of FAULT_KINDS) {
    // Always draw both numbers so the mix of one kind never depends on another.
    const on = rng.chance(0.5)
    const level = rng.range(0.2, 1)
    const enabled = OPT_IN_FAULTS.has(k) ? listed.has(k) : spec === "swarm" ? on : listed.has(k)
    intensity[k] = enabled ? level : 0
  }
  return { intensity }
}

/** True when no fault that legitimately fences, expires or duplicates is on. */
export const isExact = (mix: FaultMix): boolean => {
  for (const k of FAULT_KINDS) if (mix.intensity[k] > 0 && DISRUPTIVE_FAULTS.has(k)) return false
  return true
}

// ---------------------------------------------------------------- per-subsystem options

export interface NetworkOptions {
  /** Probability that one message is lost. */
  readonly lossP: number
  /** Probability that one message is delivered twice (each copy with its own delay). */
  readonly dupP: number
  /** Mean one-way delay (exponential, plus 0.2 ms). */
  readonly delayMeanMs: number
}

export const networkOptions = (mix: FaultMix): NetworkOptions => ({
  lossP: mix.intensity.loss * 0.05,
  dupP: mix.intensity.dup * 0.03,
  delayMeanMs: 1 + mix.intensity.delay * 60,
})

export interface StoreOptions {
  /** Storage refuses stale owner tokens (see `SimOptions.fence`). */
  readonly fence: boolean
}

/** Member-side settings a process of one logical member starts with. */
export interface MemberSettings {
  readonly weight: number
  readonly safetyMarginMs: number
  readonly retryBackoffInitialMs: number
  readonly retryBackoffMaxMs: number
  readonly leaveTimeoutMs: number | undefined
  /** Why the settings are not the defaults ("" when they are). */
  readonly edge: string
}

export interface MembersOptions {
  readonly settings: ReadonlyArray<MemberSettings>
}

const defaultSettings: MemberSettings = {
  weight: 1,
  safetyMarginMs: timing.safetyMarginMs,
  retryBackoffInitialMs: 100,
  retryBackoffMaxMs: 5_000,
  leaveTimeoutMs: undefined,
  edge: "",
}

/**
 * Member weights and configs, drawn per seed ("members" stream): with the
 * `weights` kind on, some members get extreme but valid weights
 * (MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT, log-uniform between); with `configs`
 * on, some get settings at the edges of the group's timeouts: the smallest
 * margin that covers the clock bound, a lease of three heartbeat intervals, a
 * lease of exactly one interval (unusable: the member must leave on its
 * own), the tightest retry backoff, a near-zero leave timeout.
 */
export const membersOptions = (seed: number, members: number, mix: FaultMix): MembersOptions => {
  const r = Prng.stream(seed, "members")
  const hb = timing.heartbeatIntervalMs
  const session = timing.sessionTimeoutMs
  const clockBound = 2 * timing.maxSkewMs + Math.ceil((2 * timing.maxDriftPpm * session) / 1e6)
  const settings: Array<MemberSettings> = []
  for (let i = 0; i < members; i++) {
    let s = defaultSettings
    const w = r.next()
    const kind = r.int(4)
    if (mix.intensity.weights > 0 && w < 0.3 + 0.5 * mix.intensity.weights) {
      const weight =
        kind === 0
          ? MIN_MEMBER_WEIGHT
          : kind === 1
            ? MAX_MEMBER_WEIGHT
            : Math.exp(r.range(Math.log(MIN_MEMBER_WEIGHT), Math.log(MAX_MEMBER_WEIGHT)))
      s = { ...s, weight, edge: `weight ${weight.toPrecision(3)}` }
    } else r.next()
    const c = r.next()
    // Member 0 never gets the unusable lease, so someone can always consume.
    const edge = ((e) => (e === 2 && i === 0 ? 0 : e))(r.int(5))
    if (mix.intensity.configs > 0 && c < 0.5 * mix.intensity.configs) {
      const add = (patch: Partial<MemberSettings>, why: string) => {
        s = { ...s, ...patch, edge: s.edge === "" ? why : `${s.edge}, ${why}` }
      }
      switch (edge) {
        case 0:
          add({ safetyMarginMs: clockBound + 50 }, "margin at the clock bound")
          break
        case 1:
          add({ safetyMarginMs: session - 3 * hb }, "lease of 3 heartbeat intervals")
          break
        case 2:
          add({ safetyMarginMs: session - hb }, "lease of 1 heartbeat interval (unusable)")
          break
        case 3:
          add({ retryBackoffInitialMs: 1, retryBackoffMaxMs: 1 + r.int(hb) }, "tightest backoff")
          break
        default:
          add({ leaveTimeoutMs: 1 + r.int(200) }, "near-zero leave timeout")
      }
    }
    settings.push(s)
  }
  return { settings }
}

export interface WorkloadOptions {
  /** Cumulative arrival rate per shard (messages/s), for picking a shard. */
  readonly cumRate: Float64Array
  readonly totalRate: number
  /** Mean processing time per message (ms), per shard. */
  readonly procMeanMs: Float64Array
}

/** Skewed arrival rates (about 10% hot shards) and per-shard processing times ("workload" stream). */
export const workloadOptions = (seed: number, shards: number, rate: number): WorkloadOptions => {
  const r = Prng.stream(seed, "workload")
  const cumRate = new Float64Array(shards)
  const procMeanMs = new Float64Array(shards)
  let acc = 0
  for (let s = 0; s < shards; s++) {
    const hot = r.chance(0.1) ? r.range(2, 5) : r.range(0.3, 1.2)
    acc += rate * hot
    cumRate[s] = acc
    procMeanMs[s] = r.range(1, 8)
  }
  return { cumRate, totalRate: acc, procMeanMs }
}
