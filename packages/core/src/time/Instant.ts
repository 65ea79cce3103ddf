/**
 * The two clocks of every process (docs/protocol.md rule 21): durations —
 * leases, deadlines, timeouts — are measured on the monotonic clock, which
 * no NTP step moves; the wall clock is only for what is stored or shown
 * (audit times, event timestamps) and for the owner-token floor (rule 16).
 * Both come from effect's `Clock`, so `TestClock` drives them in tests.
 *
 * @example
 * const mono = yield* monotonicMillis            // compare with other monotonic readings
 * const now = yield* instant                     // { mono, wall } for the pure coordinator
 * const at = clock.monotonicTimeNanosUnsafe()    // in a hot path, with `monotonicMillisOf`
 */
import { Clock, Effect } from "effect"
import type { Instant } from "../coordinator/internal/Draft.js"

export type { Instant } from "../coordinator/internal/Draft.js"

const NANOS_PER_MS = BigInt(1_000_000)

/** The clock's monotonic time in ms (a reading to subtract from another, never a date). */
export const monotonicMillisOf = (clock: Clock.Clock): number =>
  Number(clock.monotonicTimeNanosUnsafe() / NANOS_PER_MS)

/** Monotonic ms from effect's Clock. */
export const monotonicMillis: Effect.Effect<number> = Clock.clockWith((clock) =>
  Effect.sync(() => monotonicMillisOf(clock)),
)

/** Both clocks at once, for the pure coordinator's handlers. */
export const instant: Effect.Effect<Exclude<Instant, number>> = Clock.clockWith((clock) =>
  Effect.sync(() => ({ mono: monotonicMillisOf(clock), wall: clock.currentTimeMillisUnsafe() })),
)
