import { readFileSync } from "node:fs"
import { defineConfig, type Plugin } from "vitest/config"

/** `.lua` and `.html` files load as text, as tsup's `loader` does for the build. */
const luaText: Plugin = {
  name: "shardline-lua-text",
  enforce: "pre",
  load(id) {
    if (!id.endsWith(".lua") && !id.endsWith(".html")) return null
    return `export default ${JSON.stringify(readFileSync(id, "utf8"))}`
  },
}

export default defineConfig({
  plugins: [luaText],
  test: {
    include: ["test/**/*.test.ts"],
    // one set of real servers (Redis 7.0, Redis 8.x, Valkey 8, a 3-node
    // cluster) for the whole run; a missing binary becomes one failing test
    globalSetup: ["test/globalSetup.ts"],
    // the suites mostly wait on Redis and on timeouts, not on the CPU: run
    // more files at once than the default (cores - 1 = 1 on 2 cores)
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    passWithNoTests: false,
    reporters: ["default", "json"],
    outputFile: { json: "test-results.json" },
  },
})
