/**
 * The kernel every subsystem shares: virtual time, the event queue, the run's
 * named PRNG streams, process clocks, the trace ring around the first
 * violation, marks for the report, and the counters each fault kind and
 * checker bumps so tests can assert that a path was reached.
 *
 * Single-threaded, no wall clock, no Math.random: every random choice comes
 * from a named stream of the run seed (`Prng.stream(seed, name)`).
 *
 * @module
 */
import type { Violation } from "./checkers/types.js"
import { Digest } from "./engine/Digest.js"
import { EventQueue } from "./engine/EventQueue.js"
import { Prng } from "./engine/Prng.js"
import { type SimOptions, shardIdSpace } from "./options.js"

/** Event kinds; `a`/`b` are small integers, `p` an optional payload. */
export const K = {
  MEMBER_TIMER: 1,
  REQ_AT_COORD: 2,
  RESP_AT_MEMBER: 3,
  REQ_TIMEOUT: 4,
  COORD_TIMER: 5,
  WORKER: 6,
  BATCH_DONE: 7,
  PRODUCE: 8,
  FAULT: 9,
  HEAL: 10,
  /** Candidate `a`'s host renews its lease, or takes a free one (its renewal loop). */
  LEASE: 11,
  NOTICE: 12,
  ACTION: 13,
  SAMPLE: 16,
  LIVENESS: 17,
  DRAINED: 18,
  RESTART_SLOT: 19,
  /** A read loop checks whether its (sealed) shard is drained. */
  EXHAUSTED: 20,
  /** The stream changes its layout (reshard scenarios): `a` = 0 reshard, 1 rollback. */
  RESHARD: 22,
  END: 21,
  /** A fan-out group's reader polls every shard: `a` = group. */
  FANOUT: 23,
  /** Coordinator candidate `a` checks its lease and its serve (`b`: the check's generation). */
  CAND_CHECK: 24,
  /** A request the serve of candidate `a` took while that candidate was paused. */
  REQ_POPPED: 25,
  /** Candidate `a`'s late serve claims the group's presence (the `stale-claim` fault). */
  STALE_CLAIM: 26,
  /**
   * Process `a` relays shard `b`'s outbox (payload: its loops generation);
   * `a` = -1: a paused relayer delivers what it read (payload: the entries).
   */
  OUTBOX_RELAY: 40,
} as const
export const EVENT_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(K).map(([k, v]) => [v, k]),
)

/** A process clock: `local = offset + true * rate`. */
export interface Clock {
  readonly offset: number
  readonly rate: number
}
export const local = (c: Clock, t: number): number => c.offset + t * c.rate
/** The first true time at which clock `c` reads at least `l`. */
export const toTrue = (c: Clock, l: number): number => {
  let t = (l - c.offset) / c.rate
  while (local(c, t) < l) t += 1e-6 * Math.max(1, Math.abs(t))
  return t
}

export interface Mark {
  readonly time: number
  readonly kind: "fault" | "heal" | "rebalance" | "fence" | "violation" | "action" | "phase"
  readonly label: string
}

export interface TraceLine {
  readonly time: number
  readonly event: string
  readonly a: number
  readonly b: number
}

const RING = 64

/** Named PRNG streams: adding draws to one never shifts another. */
export interface Streams {
  readonly arrivals: Prng
  readonly processing: Prng
  readonly network: Prng
  readonly store: Prng
  readonly clocks: Prng
  readonly faultEvents: Prng
  readonly scenario: Prng
  readonly processes: Prng
  readonly forge: Prng
  /** Each process's 96-bit instance (docs/protocol.md rule 24). */
  readonly instances: Prng
  /** The coordinator candidates' loops: their phases and first order. */
  readonly candidates: Prng
}

export class World {
  /** A request's transport timeout is always the same delay after its send: a FIFO lane. */
  readonly q = new EventQueue(4096, [K.REQ_TIMEOUT])
  readonly digest = new Digest()
  now = 0
  readonly rng: Streams
  readonly S: number
  readonly violations: Array<Violation> = []
  /** Counters by name: fault paths reached, checker inputs, runtime facts. */
  readonly counters: Record<string, number> = Object.create(null)
  readonly marks: Array<Mark> = []
  /** Stop the run at this virtual time (2 s after the first violation). */
  stopAfter = Number.POSITIVE_INFINITY
  around: Array<TraceLine> = []
  private aroundStart = 0
  private readonly ringT = new Float64Array(RING)
  private readonly ringK = new Int32Array(RING)
  private readonly ringA = new Int32Array(RING)
  private readonly ringB = new Int32Array(RING)
  private ringN = 0

  constructor(readonly options: SimOptions) {
    const seed = options.seed
    this.rng = {
      arrivals: Prng.stream(seed, "arrivals"),
      processing: Prng.stream(seed, "processing"),
      network: Prng.stream(seed, "network"),
      store: Prng.stream(seed, "store"),
      clocks: Prng.stream(seed, "clocks"),
      faultEvents: Prng.stream(seed, "fault-events"),
      scenario: Prng.stream(seed, "scenario"),
      processes: Prng.stream(seed, "processes"),
      forge: Prng.stream(seed, "forge"),
      instances: Prng.stream(seed, "instances"),
      candidates: Prng.stream(seed, "candidates"),
    }
    this.S = shardIdSpace(options)
  }

  count(name: string, n = 1): void {
    this.counters[name] = (this.counters[name] ?? 0) + n
  }

  /** Records a processed event in the digest and the trace ring. */
  trace(t: number, kind: number, a: number, b: number): void {
    this.digest.event(t, kind, a, b)
    const r = this.ringN++ & (RING - 1)
    this.ringT[r] = t
    this.ringK[r] = kind
    this.ringA[r] = a
    this.ringB[r] = b
  }

  violation(v: Violation): void {
    this.violations.push(v)
    this.marks.push({ time: v.time, kind: "violation", label: v.message })
    if (this.around.length === 0) {
      this.around = this.ring()
      // Keep running a little to show what follows, then stop.
      this.stopAfter = this.now + 2_000
      this.aroundStart = this.ringN
    }
  }

  mark(kind: Mark["kind"], label: string): void {
    if (this.options.timeline === true && this.marks.length < 20_000)
      this.marks.push({ time: this.now, kind, label })
  }

  private ring(): Array<TraceLine> {
    const out: Array<TraceLine> = []
    const n = Math.min(this.ringN, RING)
    for (let j = this.ringN - n; j < this.ringN; j++) {
      const r = j & (RING - 1)
      out.push({
        time: this.ringT[r]!,
        event: EVENT_NAMES[this.ringK[r]!] ?? "?",
        a: this.ringA[r]!,
        b: this.ringB[r]!,
      })
    }
    return out
  }

  /** After the run: append up to 16 events that followed the first violation. */
  captureAfter(): void {
    if (this.around.length === 0 || this.around.length >= RING) return
    const after = Math.min(this.ringN - this.aroundStart, 16)
    if (after <= 0) return
    const all = this.ring()
    this.around.push(...all.slice(all.length - after))
  }

  /** A drawn clock within the bound (or exact when clock faults are off). */
  drawClock(on: boolean): Clock {
    const off = this.rng.clocks.range(-100, 100)
    const rate = 1 + this.rng.clocks.range(-500, 500) * 1e-6
    return on ? { offset: off, rate } : { offset: 0, rate: 1 }
  }
}
