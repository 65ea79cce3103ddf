#!/usr/bin/env node
/**
 * `shardline`: the package's command line.
 *
 *   shardline coordinator --stream <s> --group <g> [--shards N] [--session-timeout-ms N]
 *                         [--rebalance-timeout-ms N] [--heartbeat-interval-ms N] [--redis <url>]
 *
 * Runs a standalone coordinator for one group until SIGTERM / SIGINT. It
 * needs ports shared with the members' processes, i.e. Redis: this round has
 * only the in-memory ports, so it validates its arguments and says so.
 */
import { parseCoordinatorArgs, USAGE } from "./args.js"

const main = (argv: ReadonlyArray<string>): number => {
  const [command, ...rest] = argv
  if (command === undefined || command === "--help" || command === "-h") {
    console.log(USAGE)
    return command === undefined ? 2 : 0
  }
  if (command !== "coordinator") {
    console.error(`shardline: unknown command ${command}\n\n${USAGE}`)
    return 2
  }
  const parsed = parseCoordinatorArgs(rest)
  if (parsed._tag === "UsageError") {
    console.error(`shardline coordinator: ${parsed.message}\n\n${USAGE}`)
    return 2
  }
  if (parsed.args.redis === undefined) {
    console.error(
      "shardline coordinator: a standalone coordinator serves members in other processes, so it needs shared ports: --redis <url>.",
    )
    return 2
  }
  console.error(
    `shardline coordinator: --redis ${parsed.args.redis}: not yet. The Redis ports arrive in the next round; until then run coordinators embedded (the default) or in-process with startCoordinator().`,
  )
  return 2
}

process.exitCode = main(process.argv.slice(2))
