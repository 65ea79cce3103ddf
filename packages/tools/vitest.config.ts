import { readFileSync } from "node:fs"
import { defineConfig, type Plugin } from "vitest/config"

/**
 * `.html` (the dashboard's page) and `.lua` (redis-store's scripts, read
 * from its sources below) load as text, as tsup's `loader` does for the builds.
 */
const text: Plugin = {
  name: "shardline-text",
  enforce: "pre",
  load(id) {
    if (!id.endsWith(".lua") && !id.endsWith(".html")) return null
    return `export default ${JSON.stringify(readFileSync(id, "utf8"))}`
  },
}

const redisStore = (file: string) => new URL(`../redis-store/src/${file}`, import.meta.url).pathname

export default defineConfig({
  plugins: [text],
  resolve: {
    // one copy of redis-store in a test run: the tests reuse redis-store's
    // test harness (its servers, targets and driver, from its sources), and
    // the tools import the same modules by the package's name
    alias: [
      { find: /^@shardline\/redis-store$/, replacement: redisStore("index.ts") },
      { find: /^@shardline\/redis-store\/internal$/, replacement: redisStore("internal.ts") },
      { find: /^@shardline\/redis-store\/testing$/, replacement: redisStore("testing.ts") },
    ],
  },
  test: {
    include: ["test/**/*.test.ts"],
    // one set of real servers (Redis 7.0, Redis 8.x, Valkey 8, a 3-node
    // cluster) for the whole run, as redis-store's suites start them
    globalSetup: ["test/globalSetup.ts"],
    // the suites mostly wait on Redis and on child processes, not on the CPU
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    passWithNoTests: false,
    reporters: ["default", "json"],
    outputFile: { json: "test-results.json" },
  },
})
