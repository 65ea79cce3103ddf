/**
 * Every ```ts block of README.md, the docs/ pages (every folder under docs/
 * but the generated docs/api) and the package READMEs is
 * typechecked as a strict TypeScript module against the built packages, as a
 * user pasting it would compile it. A block that is deliberately partial is
 * fenced ```ts skip-check: <why> (kept rare; the reason is required). A
 * block fenced ```ts legacy-decorators is compiled as NestJS apps are
 * (`experimentalDecorators`, `emitDecoratorMetadata`; docs/nestjs.md).
 * Placeholders for the app's own code (`charge`, `audit`, ...) are declared
 * in fixtures/snippets/app.d.ts.
 */
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs"
import path from "node:path"
import ts from "typescript"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { extract, type Snippet } from "./support/markdown.js"

const ROOT = path.resolve(import.meta.dirname, "../../..")

const markdownFiles = (): Array<string> => [
  "README.md",
  // docs/ and its sections (tutorials/, how-to/, reference/, ...); docs/api
  // is TypeDoc's generated HTML (git-ignored)
  ...readdirSync(path.join(ROOT, "docs"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md") && !f.startsWith(`api${path.sep}`))
    .map((f) => `docs/${f.split(path.sep).join("/")}`)
    .sort(),
  ...readdirSync(path.join(ROOT, "packages"))
    .map((p) => `packages/${p}/README.md`)
    .filter((f) => {
      try {
        readFileSync(path.join(ROOT, f))
        return true
      } catch {
        return false
      }
    }),
]

const snippets = markdownFiles().flatMap((f) =>
  extract(f, readFileSync(path.join(ROOT, f), "utf8")),
)
const checked = snippets.filter((s) => s.skip === undefined)
const fileOf = (s: Snippet) => `${s.name.replace(/[^A-Za-z0-9]+/g, "_")}.ts`

let dir: string
const diagnostics = new Map<string, Array<string>>()

beforeAll(() => {
  // inside this package, so the snippets resolve @shardline/* and effect as a
  // workspace app would (node_modules is git-ignored)
  const cache = path.join(import.meta.dirname, "..", "node_modules", ".cache")
  mkdirSync(cache, { recursive: true })
  dir = mkdtempSync(path.join(cache, "snippets-"))
  writeFileSync(path.join(dir, "package.json"), '{ "type": "module" }\n')
  copyFileSync(
    path.join(import.meta.dirname, "..", "fixtures", "snippets", "app.d.ts"),
    path.join(dir, "app.d.ts"),
  )
  // each block is a module of its own (`export {}`), so blocks never collide
  for (const s of checked) writeFileSync(path.join(dir, fileOf(s)), `${s.code}\nexport {}\n`)
  const programOf = (legacy: boolean) =>
    ts.createProgram(
      [
        path.join(dir, "app.d.ts"),
        ...checked.filter((s) => s.legacy === legacy).map((s) => path.join(dir, fileOf(s))),
      ],
      {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        strict: true,
        noUncheckedIndexedAccess: true,
        skipLibCheck: true,
        noEmit: true,
        types: ["node"],
        ...(legacy ? { experimentalDecorators: true, emitDecoratorMetadata: true } : {}),
      },
    )
  const programs = { standard: programOf(false), legacy: programOf(true) }
  for (const s of checked) {
    const program = s.legacy ? programs.legacy : programs.standard
    const source = program.getSourceFile(path.join(dir, fileOf(s)))!
    diagnostics.set(
      s.name,
      [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)].map(
        (d) => {
          const { line } = source.getLineAndCharacterOfPosition(d.start ?? 0)
          const at = s.name.replace(/:\d+$/, `:${s.line + 1 + line}`)
          return `${at}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`
        },
      ),
    )
  }
}, 300_000)

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

describe("code snippets in the docs", () => {
  it("there are snippets to check, and few are skipped, each with its reason", () => {
    expect(checked.length).toBeGreaterThanOrEqual(15)
    const skipped = snippets.filter((s) => s.skip !== undefined)
    for (const s of skipped) expect(s.skip, `${s.name} skips without a reason`).not.toBe("")
    expect(skipped.length).toBeLessThanOrEqual(3)
  })

  it.each(checked.map((s) => [s.name, s] as const))("%s typechecks (strict)", (name) => {
    expect(diagnostics.get(name)).toEqual([])
  })
})
