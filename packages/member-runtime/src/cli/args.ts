/** Arguments of `shardline coordinator` (usage errors exit 2; nothing is silently defaulted). */
import type { CoordinatedGroup } from "../Coordinator.js"

export const USAGE = `Usage: shardline coordinator --stream <name> --group <name> [options]

Runs a standalone coordinator for one group (members use coordinator: "standalone").

  --stream <name>              the stream the group consumes
  --group <name>               the consumer group
  --shards N                   shards when the group is created (default 16)
  --session-timeout-ms N       (default 30000)
  --rebalance-timeout-ms N     (default 60000)
  --heartbeat-interval-ms N    (default 3000)
  --redis <url>                the shared ports (not yet: the Redis ports arrive in the next round)`

export interface CoordinatorArgs extends CoordinatedGroup {
  readonly redis: string | undefined
}

export type Parsed =
  | { readonly _tag: "Args"; readonly args: CoordinatorArgs }
  | { readonly _tag: "UsageError"; readonly message: string }

const numeric: Record<string, keyof CoordinatedGroup> = {
  "--shards": "shardCount",
  "--session-timeout-ms": "sessionTimeoutMs",
  "--rebalance-timeout-ms": "rebalanceTimeoutMs",
  "--heartbeat-interval-ms": "heartbeatIntervalMs",
}

export const parseCoordinatorArgs = (argv: ReadonlyArray<string>): Parsed => {
  const out: Record<string, string | number | undefined> = {}
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!
    const value = argv[i + 1]
    if (value === undefined || value.startsWith("--"))
      return { _tag: "UsageError", message: `${flag} needs a value` }
    i++
    if (flag === "--stream") out.stream = value
    else if (flag === "--group") out.group = value
    else if (flag === "--redis") out.redis = value
    else if (flag in numeric) {
      const n = Number(value)
      if (!Number.isSafeInteger(n) || n < 1)
        return { _tag: "UsageError", message: `${flag} must be a positive integer, got ${value}` }
      out[numeric[flag]!] = n
    } else return { _tag: "UsageError", message: `unknown argument ${flag}` }
  }
  if (typeof out.stream !== "string" || out.stream === "")
    return { _tag: "UsageError", message: "--stream is required" }
  if (typeof out.group !== "string" || out.group === "")
    return { _tag: "UsageError", message: "--group is required" }
  return { _tag: "Args", args: out as unknown as CoordinatorArgs }
}
