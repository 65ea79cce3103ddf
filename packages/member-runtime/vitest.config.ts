import ts from "typescript"
import { defineConfig, type Plugin } from "vitest/config"

/**
 * Standard (TC39) decorators, as `@StreamListener` uses: Vite 8's transformer
 * (oxc) lowers only legacy decorators, so test and example files that use
 * them go through TypeScript first (tsup's esbuild lowers them for the build).
 * A module imported with `?legacy-decorators` is compiled with
 * `experimentalDecorators` instead, as NestJS apps are (test/decoratorFlavours.test.ts).
 */
const standardDecorators: Plugin = {
  name: "shardline:standard-decorators",
  enforce: "pre",
  transform(code, id) {
    const [file = id, query] = id.split("?")
    if (!file.endsWith(".ts") || !/^\s*@[A-Za-z]/m.test(code)) return undefined
    const out = ts.transpileModule(code, {
      fileName: file,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        sourceMap: true,
        experimentalDecorators: query === "legacy-decorators",
      },
    })
    return { code: out.outputText, map: out.sourceMapText ?? null }
  },
}

export default defineConfig({
  plugins: [standardDecorators],
  // examples import the package by name, as users do
  resolve: {
    alias: { "@shardline/member-runtime": new URL("./src/index.ts", import.meta.url).pathname },
  },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    passWithNoTests: false,
    reporters: ["default", "json"],
    outputFile: { json: "test-results.json" },
  },
})
