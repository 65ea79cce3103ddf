/**
 * The handler type rules (test/types/handlers.ts) hold under both decorator
 * flavours: the file is compiled by tsc once with TC39 standard decorators
 * and once with `experimentalDecorators`, as NestJS apps compile. Every
 * `@ts-expect-error` there must meet its error (an unused one fails).
 */
import path from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const root = path.resolve(import.meta.dirname, "..")
const fixture = path.join(root, "test", "types", "handlers.ts")

const compile = (overrides: ts.CompilerOptions): ReadonlyArray<string> => {
  const configFile = ts.readConfigFile(path.join(root, "tsconfig.json"), ts.sys.readFile)
  const parsed = ts.parseJsonConfigFileContent(configFile.config, ts.sys, root)
  const program = ts.createProgram([fixture], { ...parsed.options, ...overrides, noEmit: true })
  const source = program.getSourceFile(fixture)!
  return [
    ...program.getSyntacticDiagnostics(source),
    ...program.getSemanticDiagnostics(source),
  ].map((d) => {
    const { line } = d.file!.getLineAndCharacterOfPosition(d.start!)
    return `${path.basename(d.file!.fileName)}:${line + 1}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`
  })
}

describe("handler types", () => {
  it("TC39 standard decorators: wrong signatures and handler counts are type errors", () => {
    expect(compile({ experimentalDecorators: false })).toEqual([])
  })

  it("experimentalDecorators: the same rules", () => {
    expect(compile({ experimentalDecorators: true })).toEqual([])
  })

  it("the rules are not vacuous: without the directives the file has one error per rule", () => {
    // the same file with every @ts-expect-error turned into a plain comment
    const text = ts.sys
      .readFile(fixture)!
      .replace(/^(\s*)\/\/ @ts-expect-error/gm, "$1// (expected)")
    const expected = text
      .split("\n")
      .flatMap((line, i) => (/^\s*\/\/ \(expected\)/.test(line) ? [i + 2] : []))
    const host = ts.createCompilerHost({})
    const probe = path.join(root, "test", "types", "handlers.probe.ts")
    const original = host.readFile
    host.readFile = (f) => (f === probe ? text : original(f))
    host.fileExists = (
      (exists) => (f: string) =>
        f === probe || exists(f)
    )(host.fileExists)
    for (const experimentalDecorators of [false, true]) {
      const configFile = ts.readConfigFile(path.join(root, "tsconfig.json"), ts.sys.readFile)
      const parsed = ts.parseJsonConfigFileContent(configFile.config, ts.sys, root)
      const options = { ...parsed.options, experimentalDecorators, noEmit: true }
      const program = ts.createProgram({ rootNames: [probe], options, host })
      const lines = program
        .getSemanticDiagnostics(program.getSourceFile(probe))
        .map((d) => d.file!.getLineAndCharacterOfPosition(d.start!).line + 1)
      expect([...new Set(lines)].sort((a, b) => a - b)).toEqual(expected)
    }
  })
})
