// `pnpm --filter @shardline/member-runtime example <name>`: build examples/<name>.ts and run it.
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"

const name = process.argv[2]
const here = new URL("..", import.meta.url).pathname
if (name === undefined || !existsSync(`${here}examples/${name}.ts`)) {
  console.error(
    "usage: pnpm --filter @shardline/member-runtime example <listener|explicitMember|effectApi|producer|metrics>",
  )
  process.exit(2)
}
const run = (command, args) => {
  const r = spawnSync(command, args, { cwd: here, stdio: "inherit" })
  if (r.status !== 0) process.exit(r.status ?? 1)
}
run("pnpm", ["exec", "tsup", "--config", "tsup.examples.config.ts", "--silent"])
run(process.execPath, [`examples/dist/${name}.js`])
