#!/usr/bin/env node
/**
 * `pnpm demo`: a live consumer group on the embedded default, in memory, no
 * Redis, or on a real Redis with `--redis <url>` / `--redis-cluster <nodes>`
 * (see src/demo/run.ts). Exit code 0 when every check passes, 1 when one
 * fails, 2 on a usage error.
 */
import { DEMO_USAGE, parseDemoArgs } from "./demo/args.js"
import { renderSummary, runDemo } from "./demo/run.js"

/** The URL without its password. */
const redacted = (url: string): string => {
  const u = new URL(url)
  if (u.password !== "") u.password = "***"
  return u.toString()
}

const main = async (): Promise<number> => {
  const parsed = parseDemoArgs(process.argv.slice(2))
  if (parsed._tag === "UsageError") {
    console.error(`demo: ${parsed.message}\n\n${DEMO_USAGE}`)
    return 2
  }
  const { args } = parsed
  if (args.help) {
    console.log(DEMO_USAGE)
    return 0
  }
  const tty = process.stdout.isTTY === true
  let ticks = 0
  const where =
    args.redis === undefined
      ? "in memory"
      : args.redis.url !== undefined
        ? `on Redis at ${redacted(args.redis.url)}`
        : `on the Redis Cluster at ${(args.redis.nodes ?? []).join(",")}`
  console.log(
    `Shardline demo: group "billing", ${args.shards} shards, ${args.messages.toLocaleString("en-US")} keyed messages, ${where} (embedded coordinator).`,
  )
  const { redis, ...rest } = args
  const summary = await runDemo({
    ...rest,
    ...(redis === undefined ? {} : { redis }),
    onPhase: (line) => {
      if (tty) process.stdout.write("\r\x1b[2K")
      console.log(`- ${line}`)
    },
    onProgress: (line) => {
      if (tty) process.stdout.write(`\r\x1b[2K${line}`)
      else if (++ticks % 5 === 0) console.log(`  ${line}`)
    },
  })
  if (tty) process.stdout.write("\r\x1b[2K")
  console.log(renderSummary(summary))
  return summary.ok ? 0 : 1
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    console.error("demo failed:", error)
    process.exitCode = 1
  },
)
