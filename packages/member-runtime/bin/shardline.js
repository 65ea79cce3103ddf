#!/usr/bin/env node
// The `shardline` command (docs/reference/cli.md). The CLI lives in
// @shardline/tools, the operator tools' package; this committed shim exists
// before any build, so package managers can link the bin at install time
// (pnpm links bins before it builds a workspace).
import { run } from "@shardline/tools/cli"

run(process.argv.slice(2))
