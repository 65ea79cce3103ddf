/**
 * The reference docs stay whole (docs/README.md, "Reference"): every error
 * class the packages declare is listed in docs/reference/errors.md, every
 * metric and event type of the runtime in
 * docs/reference/metrics-and-events.md, the CLI reference shows what
 * `shardline --help` prints, and
 * every symbol `@shardline/member-runtime` exports has a doc comment, which
 * the TypeDoc API reference (`pnpm docs:api`) and editors show. A namespace
 * export (`export * as Metrics`) counts as documented by its module's
 * opening comment.
 */
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import path from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const ROOT = path.resolve(import.meta.dirname, "../../..")
const read = (file: string) => readFileSync(path.join(ROOT, file), "utf8")

describe("docs/reference/errors.md", () => {
  const page = read("docs/reference/errors.md")
  it.each(["core", "redis-store", "member-runtime"])("lists every error class of %s", (pkg) => {
    const source = read(`packages/${pkg}/src/Errors.ts`)
    const classes = [...source.matchAll(/^export class (\w+) extends/gm)].map((m) => m[1]!)
    expect(classes.length).toBeGreaterThan(0)
    expect(classes.filter((name) => !page.includes(`| \`${name}\` |`))).toEqual([])
  })
})

describe("docs/reference/metrics-and-events.md", () => {
  const page = read("docs/reference/metrics-and-events.md")
  it("lists every metric of the runtime", () => {
    const source = read("packages/member-runtime/src/Metrics.ts")
    const names = [...source.matchAll(/Metric\.(?:counter|gauge|histogram)\(\s*"(\w+)"/g)].map(
      (m) => m[1]!,
    )
    expect(names.length).toBeGreaterThan(10)
    expect(names.filter((name) => !page.includes(`| \`${name}\` |`))).toEqual([])
  })
  it("lists every event type", () => {
    const source = read("packages/member-runtime/src/Events.ts")
    const unions = [...source.matchAll(/readonly type: ((?:"\w+"(?: \| )?)+)/g)].map((m) => m[1]!)
    const types = unions.flatMap((u) => [...u.matchAll(/"(\w+)"/g)].map((m) => m[1]!))
    expect(types.length).toBeGreaterThan(20)
    expect(types.filter((type) => !page.includes(`\`${type}\``))).toEqual([])
  })
})

describe("docs/reference/cli.md", () => {
  it("shows what `shardline --help` prints", () => {
    const page = read("docs/reference/cli.md")
    const open = page.indexOf("```text\n")
    const shown = page.slice(open + "```text\n".length, page.indexOf("\n```", open))
    // the bin a user runs (`npx shardline`), over the built packages
    const bin = path.join(ROOT, "packages/member-runtime/bin/shardline.js")
    const help = execFileSync(process.execPath, [bin, "--help"], { encoding: "utf8" })
    expect(shown.trim()).toBe(help.trim())
  }, 60_000)
})

describe("@shardline/member-runtime's exports", () => {
  it("each has a doc comment", () => {
    const entry = path.join(ROOT, "packages/member-runtime/src/index.ts")
    const program = ts.createProgram([entry], {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      skipLibCheck: true,
      noEmit: true,
    })
    const checker = program.getTypeChecker()
    const module = checker.getSymbolAtLocation(program.getSourceFile(entry)!)!
    const exported = checker.getExportsOfModule(module)
    const documented = (symbol: ts.Symbol): boolean => {
      const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol
      const text = ts.displayPartsToString(target.getDocumentationComment(checker)).trim()
      if (text !== "") return true
      // `export * as X from "./X.js"`: the module's opening comment
      const file = target.valueDeclaration ?? target.declarations?.[0]
      return file !== undefined && ts.isSourceFile(file) && file.text.trimStart().startsWith("/**")
    }
    expect(exported.length).toBeGreaterThan(50)
    expect(exported.filter((s) => !documented(s)).map((s) => s.name)).toEqual([])
  }, 120_000)
})
