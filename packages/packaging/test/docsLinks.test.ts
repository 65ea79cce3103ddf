/**
 * Every relative link of README.md, the docs/ pages (not the generated
 * docs/api), the package READMEs and the dated bench results history
 * resolves: the file exists and, for a markdown page, the `#anchor` names
 * one of its headings (GitHub's slugs: lower case, punctuation dropped,
 * spaces to hyphens). Pages move and sections are renamed (docs/README.md
 * indexes them all); a link left behind fails here, not in a reader's
 * browser. Links inside code blocks are not links.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import { expect, it } from "vitest"

const ROOT = path.resolve(import.meta.dirname, "../../..")

const markdown = (dir: string): Array<string> =>
  readdirSync(path.join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md") && !f.startsWith(`api${path.sep}`))
    .map((f) => path.join(dir, f))

const pages = [
  "README.md",
  ...markdown("docs"),
  ...markdown("packages/bench/results/history"),
  ...readdirSync(path.join(ROOT, "packages"))
    .map((p) => path.join("packages", p, "README.md"))
    .filter((f) => existsSync(path.join(ROOT, f))),
]

const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\- ]/gu, "")
    .replace(/ /g, "-")

const anchorsOf = new Map<string, Set<string>>()
const anchors = (file: string): Set<string> => {
  let found = anchorsOf.get(file)
  if (found === undefined) {
    const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "")
    found = new Set([...text.matchAll(/^#+ (.*)$/gm)].map((m) => slug(m[1]!)))
    anchorsOf.set(file, found)
  }
  return found
}

it("every relative link in the docs resolves, anchors included", () => {
  const broken: Array<string> = []
  let checked = 0
  for (const page of pages) {
    const text = readFileSync(path.join(ROOT, page), "utf8").replace(/```[\s\S]*?```/g, "")
    for (const [, url] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^(https?|mailto):/.test(url!)) continue
      checked++
      const [file, anchor] = url!.split("#") as [string, string | undefined]
      const target =
        file === "" ? path.join(ROOT, page) : path.resolve(ROOT, path.dirname(page), file)
      if (!existsSync(target)) broken.push(`${page}: ${url} (no such file)`)
      else if (anchor !== undefined && target.endsWith(".md") && !anchors(target).has(anchor))
        broken.push(`${page}: ${url} (no such heading)`)
    }
  }
  expect(checked).toBeGreaterThan(200)
  expect(broken).toEqual([])
})
