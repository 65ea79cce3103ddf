/**
 * What every checker reports.
 *
 * @module
 */

export type CheckerName =
  | "ownership"
  | "intent"
  | "drain"
  | "lease"
  | "deadline"
  | "requests"
  | "runtime"
  | "message-loss"
  | "starvation"
  | "store-revision"
  | "convergence"
  | "exactness"
  | "key-order"
  | "tokens"
  | "collateral"
  | "lease-config"
  | "fan-out"
  | "transactions"
  | "liveness"
  | "answers"
  | "handover"
  | "outbox"
  | "fence-wait"

export interface Violation {
  readonly checker: CheckerName
  readonly time: number
  readonly shard?: number | undefined
  readonly message: string
}

export type Report = (v: Violation) => void

export const fmt = (ms: number): string =>
  ms >= 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms)}ms`
