import ts from "typescript"
import { defineConfig, type Plugin } from "vitest/config"

/**
 * NestJS code is compiled as Nest apps compile it: `experimentalDecorators`
 * and `emitDecoratorMetadata` (constructor injection by type needs the
 * emitted `design:paramtypes`, which Vite's own transformer does not write).
 */
const nestDecorators: Plugin = {
  name: "shardline:nest-decorators",
  enforce: "pre",
  transform(code, id) {
    const [file = id] = id.split("?")
    if (!file.endsWith(".ts") || file.includes("/node_modules/") || !/^\s*@[A-Za-z]/m.test(code))
      return undefined
    const out = ts.transpileModule(code, {
      fileName: file,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        sourceMap: true,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
      },
    })
    return { code: out.outputText, map: out.sourceMapText ?? null }
  },
}

export default defineConfig({
  plugins: [nestDecorators],
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    passWithNoTests: false,
    reporters: ["default", "json"],
    outputFile: { json: "test-results.json" },
  },
})
