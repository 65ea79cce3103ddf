/**
 * The README's quick start runs as a user pasting it would (issue 33: it
 * once stopped the runtime before the group joined and printed nothing):
 * its ```ts block under "## Quick start", written to a module of its own
 * and imported (its top-level await finishes when the block does), must
 * print what the README says it prints. The docs' snippet test
 * (packages/packaging/test/snippets.test.ts) only typechecks it.
 */
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import path from "node:path"
import { afterAll, expect, it, vi } from "vitest"

const here = import.meta.dirname
const module = path.join(here, `.readme-quick-start-${process.pid}.ts`)
afterAll(() => rmSync(module, { force: true }))

/** The first ```ts block after `heading` in the package README. */
const blockAfter = (heading: string): string => {
  const readme = readFileSync(path.join(here, "..", "README.md"), "utf8")
  const from = readme.indexOf(`\n${heading}\n`)
  expect(from, heading).toBeGreaterThan(0)
  const open = readme.indexOf("```ts\n", from)
  return readme.slice(open + "```ts\n".length, readme.indexOf("\n```", open))
}

it("the README's quick start prints what both groups handled, then stops", async () => {
  writeFileSync(module, blockAfter("## Quick start"))
  const log = vi.spyOn(console, "log").mockImplementation(() => {})
  try {
    await import(/* @vite-ignore */ module)
    const lines = log.mock.calls.map((args) => args.map(String).join(" "))
    expect(lines).toContain("billing customer-42 [object Object]")
    expect(lines.some((l) => /^audit customer-42 \d+-\d+$/.test(l))).toBe(true)
    expect(log.mock.calls.find((args) => args[0] === "billing")?.[2]).toEqual({ amount: "12.50" })
  } finally {
    log.mockRestore()
  }
}, 30_000)
