// Sums the vitest JSON reports of every package into the one line CI reads:
// "N passed, N failed". A package whose report is missing (it crashed before
// writing one) counts as one failure so a broken package can never look green.
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const root = new URL("..", import.meta.url).pathname
let passed = 0
let failed = 0
let skipped = 0
for (const dir of readdirSync(join(root, "packages"))) {
  const pkgJson = join(root, "packages", dir, "package.json")
  if (!existsSync(pkgJson)) continue
  const report = join(root, "packages", dir, "test-results.json")
  if (!existsSync(report)) {
    console.log(`${dir}: no test report (did its tests run?)`)
    failed += 1
    continue
  }
  const r = JSON.parse(readFileSync(report, "utf8"))
  const p = r.numPassedTests ?? 0
  // a file that failed with no failed test (an import error, a failing hook)
  // counts once; a failed test is not counted again through its suites
  const brokenFiles = (r.testResults ?? []).filter(
    (file) =>
      file.status === "failed" && !(file.assertionResults ?? []).some((t) => t.status === "failed"),
  ).length
  const f = (r.numFailedTests ?? 0) + brokenFiles
  const s = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0)
  console.log(`${dir}: ${p} passed, ${f} failed, ${s} skipped`)
  passed += p
  failed += f
  skipped += s
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`)
process.exitCode = failed > 0 ? 1 : 0
