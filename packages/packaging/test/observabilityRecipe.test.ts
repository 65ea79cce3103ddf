/**
 * docs/observability.md, "See your spans locally", runs as written (issue
 * 33: the recipe it replaced read an `InMemorySpanExporter` after
 * `sdk.shutdown()`, which had emptied it; and one run in 12 printed
 * nothing until it flushed the processor first: a span is exported only once
 * the SDK's resource detection ends). The block is transpiled and run
 * with Node against the built packages, as a user's script would be; the
 * docs' snippet test (test/snippets.test.ts) only typechecks it.
 */
import { spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import path from "node:path"
import ts from "typescript"
import { afterAll, expect, it } from "vitest"
import { extract } from "./support/markdown.js"

const ROOT = path.resolve(import.meta.dirname, "../../..")
const cache = path.join(import.meta.dirname, "..", "node_modules", ".cache")
mkdirSync(cache, { recursive: true })
const dir = mkdtempSync(path.join(cache, "recipe-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** The first ```ts block after `heading` in a docs page. */
const blockAfter = (file: string, heading: string): string => {
  const text = readFileSync(path.join(ROOT, file), "utf8")
  const line = text.split("\n").indexOf(heading) + 1
  expect(line, heading).toBeGreaterThan(0)
  const block = extract(file, text).find((s) => s.line > line)
  if (block === undefined) throw new Error(`no ts block after ${heading} in ${file}`)
  return block.code
}

it("see your spans locally: one trace from checkout through send to process, read before shutdown", () => {
  const code = blockAfter("docs/observability.md", "### See your spans locally")
  const js = ts.transpileModule(code, {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  }).outputText
  const file = path.join(dir, "recipe.mjs")
  writeFileSync(file, js)
  const r = spawnSync(process.execPath, [file], { cwd: dir, encoding: "utf8", timeout: 60_000 })
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0)
  const spans = r.stdout
    .trim()
    .split("\n")
    .map((line) => line.split(" "))
    .map(([traceId, ...name]) => ({ traceId, name: name.slice(0, -1).join(" ") }))
  const names = spans.map((s) => s.name)
  expect(names).toEqual(expect.arrayContaining(["checkout", "send orders", "process orders"]))
  const traceOf = (name: string) => spans.find((s) => s.name === name)?.traceId
  expect(traceOf("send orders")).toBe(traceOf("checkout"))
  expect(traceOf("process orders")).toBe(traceOf("checkout"))
})
