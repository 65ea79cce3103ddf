#!/usr/bin/env node
/**
 * `pnpm mutate [--only a,b] [--skip-unit] [--dir /tmp/x]`: the mutation
 * harness. Not part of `pnpm test`.
 *
 * For each mutant of packages/core/src (scripts/mutants.mjs) it mutates a
 * scratch copy of core, rebuilds it (esbuild via tsup, no .d.ts), then runs in
 * parallel (a) core's unit tests (vitest, stopping at the first failure) and
 * (b) the simulator on its mutation seed set, outside its CI seeds
 * (packages/simulator/src/mutation.ts; stops at the first violation), both
 * against the mutated core. It prints per mutant whether each caught it and
 * writes packages/simulator/results/mutation.{md,json}. A mutant with
 * `broken` is a mutant of the simulator's own model (a `--broken` kind, e.g.
 * transactional effects applied at handle time): core stays pristine and
 * only the simulator runs, with `--broken`.
 *
 * Scratch layout (default /tmp/shardline-mutate): node_modules -> the repo's,
 * a copy of packages/core (sources, tests, configs, its node_modules links)
 * and of the simulator's dist; packages/simulator/node_modules/@shardline/core
 * is a relative link, so the simulator resolves the scratch core.
 */
import { execFileSync, spawn } from "node:child_process"
import {
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs"
import { cpus } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { mutants } from "./mutants.mjs"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const arg = (name) => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : undefined
}
const only = arg("--only")?.split(",")
const skipUnit = process.argv.includes("--skip-unit")
const scratch = resolve(arg("--dir") ?? "/tmp/shardline-mutate")
const log = (s) => process.stderr.write(`${s}\n`)
const started = performance.now()

// ------------------------------------------------------------------ setup

log("building core and the simulator ...")
execFileSync(
  "pnpm",
  [
    "exec",
    "turbo",
    "run",
    "build",
    "--filter=@shardline/simulator...",
    "--output-logs=errors-only",
  ],
  {
    cwd: root,
    stdio: "inherit",
  },
)

rmSync(scratch, { recursive: true, force: true })
mkdirSync(join(scratch, "packages"), { recursive: true })
symlinkSync(join(root, "node_modules"), join(scratch, "node_modules"))
cpSync(join(root, "tsconfig.base.json"), join(scratch, "tsconfig.base.json"))
const core = join(scratch, "packages/core")
for (const f of [
  "src",
  "test",
  "package.json",
  "tsconfig.json",
  "vitest.config.ts",
  "node_modules",
])
  cpSync(join(root, "packages/core", f), join(core, f), { recursive: true, verbatimSymlinks: true })
writeFileSync(
  join(core, "tsup.mutate.config.mjs"),
  `export default { entry: ["src/index.ts", "src/testing.ts"], format: ["esm"], dts: false, clean: true, target: "node20" }\n`,
)
const sim = join(scratch, "packages/simulator")
for (const f of ["dist", "package.json", "node_modules"])
  cpSync(join(root, "packages/simulator", f), join(sim, f), {
    recursive: true,
    verbatimSymlinks: true,
  })
const pristine = join(scratch, "core-src")
cpSync(join(core, "src"), pristine, { recursive: true })

const bin = (name) => join(root, "node_modules/.bin", name)

const buildCore = () =>
  execFileSync(bin("tsup"), ["--config", "tsup.mutate.config.mjs"], { cwd: core, stdio: "pipe" })

/** Runs a command; resolves with its exit code, stdout and wall time. */
const run = (cmd, args, cwd, timeoutMs) =>
  new Promise((done) => {
    const t0 = performance.now()
    const child = spawn(cmd, args, {
      cwd,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, CI: "1" },
    })
    let out = ""
    child.stdout.on("data", (d) => (out += d))
    child.stderr.on("data", () => {})
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      done({
        code,
        timedOut: signal === "SIGKILL",
        out,
        wallMs: Math.round(performance.now() - t0),
      })
    })
  })

const unitTests = () =>
  skipUnit
    ? Promise.resolve(undefined)
    : run(
        bin("vitest"),
        ["run", "--bail", "1", "--reporter", "dot", "--outputFile.json=/dev/null"],
        core,
        600_000,
      ).then((r) => ({ caught: r.code !== 0, timedOut: r.timedOut, wallMs: r.wallMs }))

const simulator = (broken) =>
  run(
    process.execPath,
    [join(sim, "dist/mutate.js"), ...(broken === undefined ? [] : ["--broken", broken])],
    scratch,
    900_000,
  ).then((r) => {
    if (r.timedOut) return { caught: true, how: "timeout", wallMs: r.wallMs }
    try {
      const last = r.out.trim().split("\n").pop()
      return { ...JSON.parse(last), wallMs: r.wallMs }
    } catch {
      return { caught: true, how: "crash", detail: `exit ${r.code}`, wallMs: r.wallMs }
    }
  })

const apply = (m) => {
  cpSync(pristine, join(core, "src"), { recursive: true })
  if (m === undefined) return
  const path = join(core, "src", m.file)
  const text = readFileSync(path, "utf8")
  const count = text.split(m.find).length - 1
  if (count !== 1)
    throw new Error(
      `mutant ${m.name}: its snippet occurs ${count} times in ${m.file} (must be once)`,
    )
  writeFileSync(path, text.replace(m.find, m.replace))
}

// ------------------------------------------------------------------ baseline

log("baseline (no mutation): unit tests and simulator must pass ...")
apply(undefined)
buildCore()
const [baseUnit, baseSim] = await Promise.all([unitTests(), simulator()])
if (baseUnit?.caught || baseSim.caught) {
  log(`baseline failed: unit ${JSON.stringify(baseUnit)} simulator ${JSON.stringify(baseSim)}`)
  process.exit(1)
}
log(
  `  ok: unit tests ${baseUnit?.wallMs ?? "-"} ms, simulator ${baseSim.runs} runs ${baseSim.wallMs} ms`,
)

// ------------------------------------------------------------------ mutants

const selected = mutants.filter((m) => only === undefined || only.includes(m.name))
const results = []
let coreMutated = false
for (const m of selected) {
  // A simulator-side mutant (`broken`) breaks the model, not core: core stays
  // pristine, its unit tests do not apply, the simulator runs `--broken`.
  if (m.broken !== undefined) {
    if (coreMutated) {
      apply(undefined)
      buildCore()
      coreMutated = false
    }
    const simulated = await simulator(m.broken)
    const r = { ...m, unit: undefined, sim: simulated }
    results.push(r)
    log(
      `${m.name.padEnd(36)} unit -  sim ${
        simulated.caught
          ? `caught (${simulated.how}, run ${simulated.runs ?? "?"}, ${simulated.wallMs} ms)`
          : `MISSED (${simulated.runs} runs)`
      }  [simulator model]`,
    )
    continue
  }
  apply(m)
  coreMutated = true
  let built = true
  try {
    buildCore()
  } catch {
    built = false
  }
  const [unit, simulated] = built
    ? await Promise.all([unitTests(), simulator()])
    : [
        { caught: true, how: "build" },
        { caught: true, how: "build" },
      ]
  const r = { ...m, find: undefined, replace: undefined, unit, sim: simulated }
  results.push(r)
  log(
    `${m.name.padEnd(36)} unit ${unit === undefined ? "-" : unit.caught ? "caught" : "MISSED"}  sim ${
      simulated.caught
        ? `caught (${simulated.how}, run ${simulated.runs ?? "?"}, ${simulated.wallMs} ms)`
        : `MISSED (${simulated.runs} runs)`
    }${m.simulated === false ? "  [not run by the simulator]" : ""}`,
  )
}
apply(undefined)

// ------------------------------------------------------------------ report

// The score counts mutants of core; the model's own mutants are counted apart.
const ofCore = results.filter((r) => r.broken === undefined)
const model = results.filter((r) => r.broken !== undefined)
const inSim = ofCore.filter((r) => r.simulated !== false)
const simCaught = inSim.filter((r) => r.sim.caught).length
const unitCaught = ofCore.filter((r) => r.unit?.caught).length
const modelCaught = `${model.filter((r) => r.sim.caught).length}/${model.length}`
const hardening = results.filter((r) => r.hardening !== undefined)
const summary = {
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, node: process.version },
  mutants: results.length,
  simulatorCaught: simCaught,
  simulatorCaughtOf: inSim.length,
  simulatorScore: Math.round((simCaught / Math.max(1, inSim.length)) * 1000) / 10,
  unitCaught: skipUnit ? null : unitCaught,
  hardeningCaughtBySimulator: `${hardening.filter((r) => r.sim.caught).length}/${hardening.length}`,
  modelMutantsCaught: modelCaught,
  baseline: {
    unitMs: baseUnit?.wallMs ?? null,
    simulatorMs: baseSim.wallMs,
    simulatorRuns: baseSim.runs,
  },
  wallMs: Math.round(performance.now() - started),
  results,
}
log(
  `\nsimulator: ${simCaught}/${inSim.length} mutants of code it runs (${summary.simulatorScore}%); hardening fixes reverted: ${summary.hardeningCaughtBySimulator}; the model's own mutants: ${modelCaught}; unit tests: ${skipUnit ? "skipped" : `${unitCaught}/${ofCore.length}`}`,
)

const out = join(root, "packages/simulator/results")
mkdirSync(out, { recursive: true })
writeFileSync(join(out, "mutation.json"), `${JSON.stringify(summary, null, 2)}\n`)
const cell = (x) => String(x).replace(/\|/g, "\\|").replace(/\n/g, " ")
const rows = results.map((r) => {
  const s = r.sim
  const simCell =
    r.simulated === false
      ? "not run by the simulator"
      : s.caught
        ? s.how === "violation"
          ? `yes: \`${s.options.scenario}\` seed ${s.options.seed} (run ${s.runs}, ${(s.wallMs / 1000).toFixed(1)} s)`
          : `yes (${s.how})`
        : `**no** (${s.runs} runs)`
  const why = s.caught && s.detail !== undefined ? cell(s.detail).slice(0, 160) : ""
  return `| ${r.name} | ${r.hardening ?? ""} | ${cell(r.why)} | ${r.unit === undefined ? "-" : r.unit.caught ? "yes" : "**no**"} | ${simCell} | ${why} |`
})
writeFileSync(
  join(out, "mutation.md"),
  `# Mutation results

Command: \`pnpm mutate\` (scripts/mutate.mjs, mutants in scripts/mutants.mjs), ${summary.date.slice(0, 10)}, ${summary.machine.cpus} CPUs, Node ${summary.machine.node}.

Each mutant changes one snippet of packages/core/src. "Unit tests": core's vitest suite fails. "Simulator": the
simulator alone finds a violation on its mutation seed set (packages/simulator/src/mutation.ts: seeds from
1,000,001, outside the CI seeds), stopping at the first; the seed given replays it (\`replay\` in mutation.json).

**Simulator: ${simCaught}/${inSim.length} mutants of code it runs caught (${summary.simulatorScore}%); reverted hardening fixes: ${summary.hardeningCaughtBySimulator}; mutants of the simulator's own model (\`--broken\`, not counted in the score): ${modelCaught}.**
Unit tests: ${skipUnit ? "skipped in this run" : `${unitCaught}/${ofCore.length}`}.
Baseline (unmutated): unit tests ${baseUnit === undefined ? "skipped" : `${(baseUnit.wallMs / 1000).toFixed(0)} s`}, simulator ${baseSim.runs} runs in ${(baseSim.wallMs / 1000).toFixed(1)} s, no violation. Whole harness: ${(summary.wallMs / 60_000).toFixed(1)} min.

| mutant | hardening | what it breaks | unit tests caught | simulator caught | first violation |
|---|---|---|---|---|---|
${rows.join("\n")}
`,
)
log(`wrote ${join(out, "mutation.md")}`)
if (!existsSync(join(out, "mutation.md"))) process.exit(1)
