import { defineConfig } from "tsup"

export default defineConfig({
  entry: { index: "src/index.ts", cli: "src/cli.ts" },
  format: ["esm"],
  dts: true,
  // the dashboard page (src/dashboard/page.html) is bundled as a string
  loader: { ".html": "text" },
  sourcemap: true,
  clean: true,
  target: "node20",
})
