/**
 * How a long-running command of the `shardline` bin (`dashboard`,
 * `coordinator`) knows it must stop: SIGTERM or SIGINT, or its parent
 * process is gone (docs/observability.md, "The dashboard").
 *
 * `npx shardline ...` runs the bin under `sh -c`: a SIGTERM to npx (a
 * container's PID 1, a service manager, `kill`) is passed on by npm to that
 * shell, which exits without passing it on to the bin (dash does not). The
 * bin would run on, orphaned, holding its port or its coordinator lease. So
 * a change of parent counts as the SIGTERM the shell did not pass on.
 * Removes its listeners and timer once resolved.
 */
import { Effect } from "effect"

/** Resolves with what stopped it: the signal's name, or `orphaned`. */
export const untilStopped = (pollMs = 200): Effect.Effect<"SIGTERM" | "SIGINT" | "orphaned"> =>
  Effect.callback<"SIGTERM" | "SIGINT" | "orphaned">((resume) => {
    const parent = process.ppid
    const done = (why: "SIGTERM" | "SIGINT" | "orphaned") => {
      process.off("SIGTERM", onTerm)
      process.off("SIGINT", onInt)
      clearInterval(timer)
      resume(Effect.succeed(why))
    }
    const onTerm = () => done("SIGTERM")
    const onInt = () => done("SIGINT")
    process.once("SIGTERM", onTerm)
    process.once("SIGINT", onInt)
    // a parent that exits leaves the bin to init (or a subreaper): ppid changes
    const timer = setInterval(() => {
      if (process.ppid !== parent) done("orphaned")
    }, pollMs)
    return Effect.sync(() => {
      process.off("SIGTERM", onTerm)
      process.off("SIGINT", onInt)
      clearInterval(timer)
    })
  })
