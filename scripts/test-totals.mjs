// Sums the vitest JSON reports of every package into the one line CI reads:
// "N passed, N failed". A package whose report is missing (it crashed before
// writing one) counts as one failure so a broken package can never look green.
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const root = new URL("..", import.meta.url).pathname
let passed = 0
let failed = 0
let skipped = 0
/** Every failed test by file and title, with its message's first lines: CI shows only the log's tail. */
const failures = []
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
  for (const file of r.testResults ?? []) {
    const name = file.name.replace(`${root}`, "")
    const failedTests = (file.assertionResults ?? []).filter((t) => t.status === "failed")
    for (const t of failedTests)
      failures.push(`${name} > ${t.fullName}\n    ${firstLines(t.failureMessages?.[0])}`)
    if (file.status === "failed" && failedTests.length === 0)
      failures.push(`${name} (the file failed)\n    ${firstLines(file.message)}`)
  }
  const f = (r.numFailedTests ?? 0) + brokenFiles
  const s = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0)
  console.log(`${dir}: ${p} passed, ${f} failed, ${s} skipped`)
  passed += p
  failed += f
  skipped += s
}
if (failures.length > 0) {
  console.log(`\nfailed (${failures.length}):`)
  for (const f of failures) console.log(`- ${f}`)
  console.log("")
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`)
process.exitCode = failed > 0 ? 1 : 0

function firstLines(text) {
  if (!text) return "(no message)"
  return text.split("\n").slice(0, 6).join("\n    ").slice(0, 1200)
}
