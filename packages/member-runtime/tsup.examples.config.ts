import { defineConfig } from "tsup"

/** Builds examples/*.ts to examples/dist/ (git-ignored), bundling the package from src. */
export default defineConfig({
  entry: ["examples/*.ts"],
  outDir: "examples/dist",
  format: ["esm"],
  target: "node20",
  clean: true,
  // `@shardline/member-runtime` resolves to src/ through tsconfig.json "paths"
  noExternal: ["@shardline/member-runtime"],
})
