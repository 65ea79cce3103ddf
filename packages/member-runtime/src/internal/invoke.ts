/**
 * Calling user code from fibers: a Promise-returning (or synchronous)
 * function becomes an Effect that fails with whatever it threw or rejected
 * with (`undefined` included), and whose interruption only stops waiting (a
 * promise cannot be cancelled; the handler sees its `signal` instead).
 */
import { Cause, Effect } from "effect"

const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

/** Why a user call failed: what it threw, rejected or failed with. */
export class UserCodeFailed {
  readonly _tag = "UserCodeFailed"
  constructor(readonly error: unknown) {}
}

const noop = () => {}

/**
 * Run `f` (sync or async user code); its throw or rejection is a
 * `UserCodeFailed` failure. `settled` is called once the user code has really
 * finished, even when this Effect was interrupted long before (a promise
 * cannot be cancelled: the runtime waits for it before a shard's next loop).
 */
export const callUser = (
  f: () => unknown,
  settled: () => void = noop,
): Effect.Effect<void, UserCodeFailed> =>
  Effect.callback<void, UserCodeFailed>((resume) => {
    let result: unknown
    try {
      result = f()
    } catch (error) {
      settled()
      resume(Effect.fail(new UserCodeFailed(error)))
      return
    }
    if (!isPromiseLike(result)) {
      settled()
      resume(Effect.void)
      return
    }
    result.then(
      () => {
        settled()
        resume(Effect.void)
      },
      (error: unknown) => {
        settled()
        resume(Effect.fail(new UserCodeFailed(error)))
      },
    )
  })

/**
 * Run a user Effect: its failure or defect becomes a `UserCodeFailed` (an
 * interruption stays an interruption).
 */
export const callUserEffect = (
  f: () => Effect.Effect<void, unknown>,
  settled: () => void = noop,
): Effect.Effect<void, UserCodeFailed> =>
  Effect.suspend(f).pipe(
    Effect.ensuring(Effect.sync(settled)),
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause as Cause.Cause<never>)
        : Effect.fail(new UserCodeFailed(Cause.squash(cause))),
    ),
  )
