import { defineConfig } from "tsup"

export default defineConfig({
  entry: {
    index: "src/index.ts",
    demo: "src/demo.ts",
  },
  format: ["esm"],
  dts: { entry: { index: "src/index.ts" } },
  sourcemap: true,
  clean: true,
  target: "node20",
})
