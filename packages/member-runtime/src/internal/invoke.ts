/**
 * Calling user code from fibers: a Promise-returning (or synchronous)
 * function becomes an Effect that fails with whatever it threw or rejected
 * with (`undefined` included). A call ends early when its `signal` aborts
 * (the runtime abandons it, or it timed out): a promise cannot be cancelled,
 * so the runtime stops waiting and `settled` tells it when the user code has
 * really finished.
 */
import { Cause, Effect } from "effect"

export const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

/** Why a user call failed: what it threw, rejected or failed with. */
export class UserCodeFailed {
  readonly _tag = "UserCodeFailed"
  constructor(readonly error: unknown) {}
}

/** The call's signal aborted first (abandoned or timed out); `reason` is the signal's. */
export class CallAborted {
  readonly _tag = "CallAborted"
  constructor(readonly reason: unknown) {}
}

const noop = () => {}

/** An Effect that fails with `CallAborted` once `signal` aborts. */
const aborted = (signal: AbortSignal): Effect.Effect<never, CallAborted> =>
  Effect.callback<never, CallAborted>((resume) => {
    if (signal.aborted) return resume(Effect.fail(new CallAborted(signal.reason)))
    const onAbort = () => resume(Effect.fail(new CallAborted(signal.reason)))
    signal.addEventListener("abort", onAbort, { once: true })
    return Effect.sync(() => signal.removeEventListener("abort", onAbort))
  })

/**
 * Run `f` (sync or async user code); its throw or rejection is a
 * `UserCodeFailed`, an abort of `signal` first is a `CallAborted`. `settled`
 * is called once the user code has really finished.
 */
export const callUser = (
  f: () => unknown,
  settled: () => void = noop,
  signal?: AbortSignal,
): Effect.Effect<void, UserCodeFailed | CallAborted> =>
  Effect.callback<void, UserCodeFailed | CallAborted>((resume) => {
    if (signal?.aborted) {
      settled()
      return resume(Effect.fail(new CallAborted(signal.reason)))
    }
    let result: unknown
    try {
      result = f()
    } catch (error) {
      settled()
      return resume(Effect.fail(new UserCodeFailed(error)))
    }
    if (!isPromiseLike(result)) {
      settled()
      return resume(Effect.void)
    }
    return settle(result, settled, signal, resume)
  })

/**
 * Wait for a promise user code already returned (the poller's fast path
 * called it directly): as `callUser` does after the call.
 */
export const awaitUser = (
  result: PromiseLike<unknown>,
  settled: () => void,
  signal: AbortSignal,
): Effect.Effect<void, UserCodeFailed | CallAborted> =>
  Effect.callback<void, UserCodeFailed | CallAborted>((resume) =>
    settle(result, settled, signal, resume),
  )

const settle = (
  result: PromiseLike<unknown>,
  settled: () => void,
  signal: AbortSignal | undefined,
  resume: (effect: Effect.Effect<void, UserCodeFailed | CallAborted>) => void,
): Effect.Effect<void> => {
  const onAbort = () => resume(Effect.fail(new CallAborted(signal?.reason)))
  signal?.addEventListener("abort", onAbort, { once: true })
  const done = () => {
    signal?.removeEventListener("abort", onAbort)
    settled()
  }
  result.then(
    () => {
      done()
      resume(Effect.void)
    },
    (error: unknown) => {
      done()
      resume(Effect.fail(new UserCodeFailed(error)))
    },
  )
  return Effect.sync(() => signal?.removeEventListener("abort", onAbort))
}

/**
 * Run a user Effect: its failure or defect becomes a `UserCodeFailed`; an
 * abort of `signal` interrupts it (Effects can be cancelled for real).
 */
export const callUserEffect = (
  f: () => Effect.Effect<void, unknown>,
  settled: () => void = noop,
  signal?: AbortSignal,
): Effect.Effect<void, UserCodeFailed | CallAborted> => {
  const run = Effect.suspend(f).pipe(
    Effect.ensuring(Effect.sync(settled)),
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause as Cause.Cause<never>)
        : Effect.fail(new UserCodeFailed(Cause.squash(cause))),
    ),
  )
  return signal === undefined ? run : Effect.raceFirst(run, aborted(signal))
}
