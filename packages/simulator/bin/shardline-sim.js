#!/usr/bin/env node
// The `shardline-sim` command (docs/simulator.md). A committed shim over the
// build, so package managers can link the bin before `dist/` exists.
import "../dist/cli.js"
