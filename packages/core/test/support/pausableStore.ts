/**
 * A Store whose commits can be held, to model a coordinator process that
 * paused inside a commit (it checked its lease, then stopped: GC, SIGSTOP).
 */
import { Deferred, Effect } from "effect"
import type { Store } from "../../src/index.js"

export const pausableStore = (store: Store.StoreShape) => {
  let gate: Deferred.Deferred<void> | undefined
  const pausable: Store.StoreShape = {
    load: store.load,
    commit: (g, rev, records, fence) =>
      Effect.suspend(() =>
        gate === undefined
          ? store.commit(g, rev, records, fence)
          : Effect.andThen(Deferred.await(gate), store.commit(g, rev, records, fence)),
      ),
  }
  return {
    store: pausable,
    /** Commits from now on wait until `resume`. */
    pause: Effect.map(Deferred.make<void>(), (d) => {
      gate = d
    }),
    /** Lets every held commit through. */
    resume: Effect.suspend(() =>
      gate === undefined ? Effect.void : Effect.asVoid(Deferred.succeed(gate, undefined)),
    ),
  }
}
