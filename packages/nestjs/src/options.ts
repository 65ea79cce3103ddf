/**
 * The options of `ShardlineModule` (docs/nestjs.md): `start`'s options
 * (docs/runtime.md) without `handleSignals` (Nest's `enableShutdownHooks`
 * owns the signals), plus where listeners come from.
 */
import type { StartOptions } from "@shardline/member-runtime"

export interface ShardlineModuleOptions extends Omit<StartOptions, "handleSignals"> {
  /**
   * Find `@StreamListener` methods on every provider and controller of the
   * application (default true). Request- and transient-scoped providers are
   * skipped: a listener is one instance for the process.
   */
  readonly discover?: boolean
}

/** The injection token of the module's options. */
export const SHARDLINE_MODULE_OPTIONS = Symbol.for("@shardline/nestjs/options")
