/**
 * The first tutorial's program runs as a reader following it would
 * (docs/tutorials/first-group.md, step 3: "Here is the whole `orders.ts`"):
 * the block is written to a module of its own and imported (its top-level
 * await finishes when the program does). It must print what step 4 says:
 * every order once, each customer's in the order sent, then the total. The
 * docs' snippet test (packages/packaging/test/snippets.test.ts) only
 * typechecks it.
 */
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import path from "node:path"
import { afterAll, expect, it, vi } from "vitest"

const here = import.meta.dirname
const page = path.join(here, "..", "..", "..", "docs", "tutorials", "first-group.md")
const module = path.join(here, `.tutorial-first-group-${process.pid}.ts`)
afterAll(() => rmSync(module, { force: true }))

/** The first ```ts block after `marker` in the tutorial. */
const blockAfter = (marker: string): string => {
  const text = readFileSync(page, "utf8")
  const from = text.indexOf(marker)
  expect(from, marker).toBeGreaterThan(0)
  const open = text.indexOf("```ts\n", from)
  return text.slice(open + "```ts\n".length, text.indexOf("\n```", open))
}

it("tutorial 1's orders.ts handles every order once, each customer's in order, then stops", async () => {
  writeFileSync(module, blockAfter("Here is the whole `orders.ts`"))
  const log = vi.spyOn(console, "log").mockImplementation(() => {})
  try {
    await import(/* @vite-ignore */ module)
    const lines = log.mock.calls.map((args) => args.map(String).join(" "))
    const billed = lines.flatMap((l) => {
      const m = /^billed (\w+): (\d+)\.00 \(shard \d+, \S+-m[01]\)$/.exec(l)
      return m === null ? [] : [[m[1]!, Number(m[2])] as const]
    })
    expect(billed).toHaveLength(12)
    for (const customer of ["ada", "grace", "linus", "margaret"])
      expect(billed.filter(([c]) => c === customer).map(([, a]) => a)).toEqual([10, 20, 30])
    expect(lines.at(-1)).toBe("handled 12 orders")
  } finally {
    log.mockRestore()
  }
}, 60_000)
