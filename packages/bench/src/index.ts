/**
 * Benchmark entry: `node dist/index.js [suite ...] [--quick]`.
 * Suites: `assignor` (default: all). `--quick` runs a small smoke subset and
 * writes to `results/quick/` instead of `results/`.
 */
import { fullCases, quickCases, runAssignorBench } from "./assignor.bench.js"
import { renderMarkdown } from "./report.js"

const suites = {
  assignor: async (quick: boolean) => {
    const report = await runAssignorBench({
      cases: quick ? quickCases : fullCases,
      minSamples: quick ? 2 : 5,
      maxTime: quick ? 0.1 : 0.5,
      outDir: new URL(quick ? "../results/quick/" : "../results/", import.meta.url),
    })
    console.log(renderMarkdown(report))
  },
} as const

const main = async (argv: ReadonlyArray<string>): Promise<void> => {
  const quick = argv.includes("--quick")
  const names = argv.filter((a) => !a.startsWith("--"))
  const selected = names.length === 0 ? Object.keys(suites) : names
  for (const name of selected) {
    const run = suites[name as keyof typeof suites]
    if (run === undefined)
      throw new Error(`unknown suite ${name}; known: ${Object.keys(suites).join(", ")}`)
    await run(quick)
  }
}

await main(process.argv.slice(2))
