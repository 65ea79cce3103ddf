// Removes last run's per-package vitest reports so the totals only count this run.
import { readdirSync, rmSync } from "node:fs"
import { join } from "node:path"

const root = new URL("..", import.meta.url).pathname
for (const dir of readdirSync(join(root, "packages"))) {
  rmSync(join(root, "packages", dir, "test-results.json"), { force: true })
}
