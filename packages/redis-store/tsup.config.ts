import { defineConfig } from "tsup"

export default defineConfig({
  entry: {
    index: "src/index.ts",
    testing: "src/testing.ts",
    // for @shardline/tools only (src/internal.ts): not public API
    internal: "src/internal.ts",
    bench: "bench/index.ts",
  },
  format: ["esm"],
  dts: {
    entry: { index: "src/index.ts", testing: "src/testing.ts", internal: "src/internal.ts" },
  },
  // the Lua scripts (src/scripts.ts) are bundled as strings
  loader: { ".lua": "text" },
  sourcemap: true,
  clean: true,
  target: "node20",
})
