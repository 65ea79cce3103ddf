/**
 * `pnpm demo` arguments. Unknown flags, bad counts and bad Redis addresses
 * are usage errors (exit 2), never silently replaced by defaults.
 */
import { Result } from "effect"
import { decodeRedisOptions, type RedisOptions } from "../Redis.js"

export interface DemoArgs {
  readonly messages: number
  readonly keys: number
  readonly shards: number
  /** `--redis <url>` or `--redis-cluster <host:port,...>`: run on Redis instead of in memory. */
  readonly redis: RedisOptions | undefined
  /** `--keep`: leave the run's keys on Redis (for `shardline inspect`). */
  readonly keep: boolean
  readonly help: boolean
}

export const DEMO_DEFAULTS: Omit<DemoArgs, "redis" | "keep" | "help"> = {
  messages: 20_000,
  keys: 500,
  shards: 16,
}

export const DEMO_USAGE = `Usage: pnpm demo [-- --messages N] [--keys N] [--shards N] [--redis <url> | --redis-cluster <nodes>]

A live consumer group in this process, on the in-memory ports (no Redis) or
on a real Redis: a producer writes keyed messages, logical members consume
them, one process is stopped and another added mid-run, and a verified
summary ends the run.

  --messages N               messages to produce (default ${DEMO_DEFAULTS.messages})
  --keys N                   distinct keys (default ${DEMO_DEFAULTS.keys})
  --shards N                 shards of the stream (default ${DEMO_DEFAULTS.shards})
  --redis <url>              run on this Redis (redis://host:port); the demo uses
                             a stream of its own and deletes its keys at the end
  --redis-cluster <nodes>    run on a Redis Cluster (host:port,host:port,...)
  --keep                     leave the run's keys on Redis (for shardline inspect)
  --help                     this text`

export type ParsedArgs =
  | { readonly _tag: "Args"; readonly args: DemoArgs }
  | { readonly _tag: "UsageError"; readonly message: string }

const count = (flag: string, value: string | undefined, max: number) => {
  if (value === undefined) return `${flag} needs a value`
  const n = Number(value)
  if (!Number.isSafeInteger(n) || n < 1 || n > max)
    return `${flag} must be an integer from 1 to ${max}, got ${value}`
  return n
}

export const parseDemoArgs = (argv: ReadonlyArray<string>): ParsedArgs => {
  const args = {
    ...DEMO_DEFAULTS,
    redis: undefined as RedisOptions | undefined,
    keep: false,
    help: false,
  }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!
    switch (flag) {
      case "--":
        break
      case "--keep":
        args.keep = true
        break
      case "--help":
      case "-h":
        args.help = true
        break
      case "--messages":
      case "--keys":
      case "--shards": {
        const max = flag === "--shards" ? 1_024 : 10_000_000
        const n = count(flag, argv[++i], max)
        if (typeof n === "string") return { _tag: "UsageError", message: n }
        if (flag === "--messages") args.messages = n
        else if (flag === "--keys") args.keys = n
        else args.shards = n
        break
      }
      case "--redis":
      case "--redis-cluster": {
        const value = argv[++i]
        if (value === undefined || value.startsWith("--"))
          return {
            _tag: "UsageError",
            message:
              flag === "--redis"
                ? "--redis needs a URL (redis://host:port)"
                : "--redis-cluster needs nodes (host:port,host:port,...)",
          }
        if (args.redis !== undefined)
          return { _tag: "UsageError", message: "give one of --redis and --redis-cluster" }
        const redis: RedisOptions =
          flag === "--redis" ? { url: value } : { nodes: value.split(",").filter((n) => n !== "") }
        const decoded = decodeRedisOptions(redis, "")
        if (Result.isFailure(decoded))
          return { _tag: "UsageError", message: `${flag}: ${decoded.failure.message}` }
        args.redis = redis
        break
      }
      default:
        return { _tag: "UsageError", message: `unknown argument ${flag}` }
    }
  }
  return { _tag: "Args", args }
}
