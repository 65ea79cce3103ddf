/**
 * `pnpm demo` arguments. Unknown flags and bad counts are usage errors (exit
 * 2), never silently replaced by defaults.
 */

export interface DemoArgs {
  readonly messages: number
  readonly keys: number
  readonly shards: number
  /** `--redis <url>`: parsed, not available yet (the Redis ports come next). */
  readonly redis: string | undefined
  readonly help: boolean
}

export const DEMO_DEFAULTS: Omit<DemoArgs, "redis" | "help"> = {
  messages: 20_000,
  keys: 500,
  shards: 16,
}

export const DEMO_USAGE = `Usage: pnpm demo [-- --messages N] [--keys N] [--shards N] [--redis <url>]

A live consumer group in this process, on the in-memory ports (no Redis):
a producer writes keyed messages, logical members consume them, one process
is stopped and another added mid-run, and a verified summary ends the run.

  --messages N   messages to produce (default ${DEMO_DEFAULTS.messages})
  --keys N       distinct keys (default ${DEMO_DEFAULTS.keys})
  --shards N     shards of the stream (default ${DEMO_DEFAULTS.shards})
  --redis <url>  run on Redis (not yet: the Redis ports arrive in the next round)
  --help         this text`

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
  const args = { ...DEMO_DEFAULTS, redis: undefined as string | undefined, help: false }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!
    switch (flag) {
      case "--":
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
      case "--redis": {
        const url = argv[++i]
        if (url === undefined || url.startsWith("--"))
          return { _tag: "UsageError", message: "--redis needs a URL (redis://host:port)" }
        args.redis = url
        break
      }
      default:
        return { _tag: "UsageError", message: `unknown argument ${flag}` }
    }
  }
  return { _tag: "Args", args }
}
