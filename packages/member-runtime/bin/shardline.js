#!/usr/bin/env node
// The `shardline` command (docs/redis.md, "The shardline CLI"). The CLI lives
// in @shardline/redis-store; this committed shim exists before any build, so
// package managers can link the bin at install time (pnpm links bins before
// it builds a workspace).
import { run } from "@shardline/redis-store/cli"

run(process.argv.slice(2))
