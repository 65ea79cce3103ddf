/**
 * Builds `dist/cli.js` (the `shardline` bin) for the tests that run it as a
 * child process: tsup without type declarations, the same loader as the
 * package build. Called once per run from test/globalSetup.ts.
 */
import path from "node:path"
import { build } from "tsup"

export const CLI = path.resolve(import.meta.dirname, "../../dist/cli.js")

export const buildCli = () =>
  build({
    config: false,
    entry: { cli: path.resolve(import.meta.dirname, "../../src/cli.ts") },
    outDir: path.dirname(CLI),
    format: ["esm"],
    dts: false,
    clean: false,
    silent: true,
    loader: { ".html": "text" },
    target: "node20",
  })
