import { defineConfig } from "tsup"

export default defineConfig({
  entry: {
    index: "src/index.ts",
    testing: "src/testing.ts",
    cli: "src/cli.ts",
    bench: "bench/index.ts",
  },
  format: ["esm"],
  dts: { entry: { index: "src/index.ts", testing: "src/testing.ts", cli: "src/cli.ts" } },
  // the Lua scripts (src/scripts.ts) and the dashboard page are bundled as strings
  loader: { ".lua": "text", ".html": "text" },
  sourcemap: true,
  clean: true,
  target: "node20",
})
