import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // packing, npm install and tsc runs take tens of seconds each
    testTimeout: 300_000,
    hookTimeout: 300_000,
    passWithNoTests: false,
    reporters: ["default", "json"],
    outputFile: { json: "test-results.json" },
  },
})
