/**
 * What a user installs (README, "Install"): every published package packed
 * with `pnpm pack`, the tarballs installed with npm into a fresh project in a
 * temp dir outside the workspace, a strict TypeScript app (fixtures/app)
 * typechecked against the published declarations with TC39 decorators and
 * with `experimentalDecorators`, then run on the memory ports and on a real
 * Redis; typed messages validated by zod, installed from npm as a user
 * would; CommonJS `require` (ESM-only packages, Node's require(esm)); the
 * `shardline` and `shardline-sim` bins through npx; a NestJS app
 * (fixtures/app/src/nest.ts, `@shardline/nestjs` with the real `@nestjs/*`
 * from npm) boots and consumes on Redis.
 */
import { execFileSync, spawnSync } from "node:child_process"
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs"
import { createRequire } from "node:module"
import os from "node:os"
import path from "node:path"
import { type RedisServer, startRedis } from "@shardline/redis-store/testing"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const ROOT = path.resolve(import.meta.dirname, "../../..")
const PUBLISHED = ["core", "redis-store", "tools", "member-runtime", "simulator", "nestjs"] as const
/** What a NestJS app installs beside @shardline/nestjs: the versions its tests use. */
const NEST = [
  "@nestjs/common",
  "@nestjs/core",
  "@nestjs/terminus",
  "reflect-metadata",
  "rxjs",
] as const
/** The exact versions @shardline/nestjs is tested with (its devDependencies). */
const nestVersionOf = (pkg: string): string => {
  const manifest = JSON.parse(
    readFileSync(path.join(ROOT, "packages", "nestjs", "package.json"), "utf8"),
  ) as { devDependencies: Record<string, string> }
  const version = manifest.devDependencies[pkg]
  if (version === undefined) throw new Error(`@shardline/nestjs has no devDependency ${pkg}`)
  return version
}
const require = createRequire(import.meta.url)
/**
 * The oldest TypeScript a strict app typechecks with against the published
 * declarations, without `skipLibCheck` (5.6 fails in effect's declarations:
 * its generic `Uint8Array` is 5.7's), and the oldest with it: what the
 * READMEs claim (issue 33).
 */
const OLDEST_TYPESCRIPT = "5.7.3"
const OLDEST_TYPESCRIPT_SKIPLIBCHECK = "5.0.4"
const versionOf = (pkg: string): string =>
  (JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), "utf8")) as { version: string })
    .version

let tmp: string
let app: string
let tarballs: Record<(typeof PUBLISHED)[number], string>
let redis: RedisServer | undefined

interface Run {
  readonly status: number | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * The environment of a user's shell: without the `npm_*` variables pnpm sets
 * for this test's script (npm would read them as its own config).
 */
const userEnv = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && !/^pnpm_/i.test(k)),
)

const run = (command: string, args: ReadonlyArray<string>, cwd = app): Run => {
  const r = spawnSync(command, args, { cwd, env: userEnv, encoding: "utf8", timeout: 240_000 })
  // a timeout keeps what the command printed so far: show it
  if (r.error !== undefined)
    throw new Error(`${command} ${args.join(" ")}: ${r.error.message}\n${r.stdout}\n${r.stderr}`)
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

/** Exit 0, else fail with what it printed. */
const ok = (r: Run): string => {
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0)
  return r.stdout
}

/** pnpm as it runs this test (`pnpm test` sets npm_execpath), else from PATH. */
const pnpm = (args: ReadonlyArray<string>, cwd: string): Run => {
  const execpath = process.env.npm_execpath
  return execpath !== undefined && /pnpm/.test(execpath)
    ? run(process.execPath, [execpath, ...args], cwd)
    : run("pnpm", args, cwd)
}

const manifestOf = (tarball: string): Record<string, unknown> =>
  JSON.parse(execFileSync("tar", ["-xzOf", tarball, "package/package.json"], { encoding: "utf8" }))

const filesOf = (tarball: string): Array<string> =>
  execFileSync("tar", ["-tzf", tarball], { encoding: "utf8" }).trim().split("\n")

beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "shardline-pack-"))
  const packed = path.join(tmp, "tarballs")
  mkdirSync(packed)
  for (const pkg of PUBLISHED)
    ok(pnpm(["pack", "--pack-destination", packed], path.join(ROOT, "packages", pkg)))
  const files = readdirSync(packed)
  tarballs = Object.fromEntries(
    PUBLISHED.map((pkg) => {
      const file = files.find((f) => f.startsWith(`shardline-${pkg}-`) && f.endsWith(".tgz"))
      if (file === undefined) throw new Error(`pnpm pack wrote no tarball for ${pkg}: ${files}`)
      return [pkg, path.join(packed, file)]
    }),
  ) as typeof tarballs

  // a fresh npm project outside the workspace, as a user starts one
  app = path.join(tmp, "app")
  cpSync(path.join(import.meta.dirname, "..", "fixtures", "app"), app, { recursive: true })
  writeFileSync(
    path.join(app, "package.json"),
    `${JSON.stringify({ name: "shardline-user-app", private: true, type: "module" }, null, 2)}\n`,
  )
  ok(
    run("npm", [
      "install",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      ...PUBLISHED.map((pkg) => tarballs[pkg]),
      `effect@${versionOf("effect")}`,
      // a Standard Schema library from npm, as a user's app brings its own
      `zod@${versionOf("zod")}`,
      `typescript@${versionOf("typescript")}`,
      // the oldest TypeScript the READMEs claim, without and with skipLibCheck
      `typescript-5.7@npm:typescript@${OLDEST_TYPESCRIPT}`,
      `typescript-5.0@npm:typescript@${OLDEST_TYPESCRIPT_SKIPLIBCHECK}`,
      `@types/node@${versionOf("@types/node")}`,
      ...NEST.map((pkg) => `${pkg}@${nestVersionOf(pkg)}`),
    ]),
  )
}, 300_000)

afterAll(async () => {
  await redis?.stop()
  if (tmp !== undefined) rmSync(tmp, { recursive: true, force: true })
})

describe("the packed packages", () => {
  it.each(PUBLISHED)(
    "%s: real version ranges, effect as a peer, ESM with types, README and LICENSE",
    (pkg) => {
      const manifest = manifestOf(tarballs[pkg])
      const text = JSON.stringify(manifest)
      expect(text).not.toContain("workspace:")
      const deps = (manifest.dependencies ?? {}) as Record<string, string>
      for (const [name, range] of Object.entries(deps))
        if (name.startsWith("@shardline/")) expect(range).toBe(`^${manifest.version}`)
      expect(deps.effect).toBeUndefined()
      if (pkg === "nestjs") {
        // Nest and the runtime are the app's own: one copy of each (docs/nestjs.md)
        const peers = manifest.peerDependencies as Record<string, string>
        expect(peers["@shardline/member-runtime"]).toBe(`^${manifest.version}`)
        expect(Object.keys(peers).sort()).toEqual([...NEST, "@shardline/member-runtime"].sort())
        expect(manifest.peerDependenciesMeta).toEqual({ "@nestjs/terminus": { optional: true } })
      } else
        expect(manifest.peerDependencies).toEqual(
          pkg === "member-runtime"
            ? { "@opentelemetry/api": ">=1.9.0 <2.0.0", effect: "^4.1.0" }
            : { effect: "^4.1.0" },
        )
      if (pkg === "member-runtime")
        expect(manifest.peerDependenciesMeta).toEqual({ "@opentelemetry/api": { optional: true } })
      expect(manifest.type).toBe("module")
      expect(manifest.license).toBe("MIT")
      const exports = manifest.exports as Record<string, { types: string; default: string }>
      const files = filesOf(tarballs[pkg])
      for (const entry of Object.values(exports)) {
        expect(files).toContain(`package/${entry.types.slice(2)}`)
        expect(files).toContain(`package/${entry.default.slice(2)}`)
      }
      expect(files).toContain("package/README.md")
      expect(files).toContain("package/LICENSE")
      for (const bin of Object.values((manifest.bin ?? {}) as Record<string, string>))
        expect(files).toContain(`package/${bin.replace(/^\.\//, "")}`)
    },
  )

  it("the shardline bin is member-runtime's (what users install); the simulator has shardline-sim", () => {
    expect(manifestOf(tarballs["member-runtime"]).bin).toEqual({ shardline: "./bin/shardline.js" })
    expect(manifestOf(tarballs.simulator).bin).toEqual({
      "shardline-sim": "./bin/shardline-sim.js",
    })
    expect(manifestOf(tarballs["redis-store"]).bin).toBeUndefined()
    expect(manifestOf(tarballs.tools).bin).toBeUndefined()
    expect(manifestOf(tarballs.core).bin).toBeUndefined()
    // the bin runs the CLI of @shardline/tools, a dependency of the runtime
    // (no cycle: tools depends on redis-store and core only)
    const runtimeDeps = manifestOf(tarballs["member-runtime"]).dependencies as Record<
      string,
      string
    >
    expect(runtimeDeps["@shardline/tools"]).toBe(`^${manifestOf(tarballs.tools).version}`)
    expect(Object.keys(manifestOf(tarballs.tools).dependencies as object).sort()).toEqual([
      "@shardline/core",
      "@shardline/redis-store",
      "ioredis",
    ])
    // redis-store is the storage adapter only: the CLI is no longer its export
    expect(Object.keys(manifestOf(tarballs["redis-store"]).exports as object)).not.toContain(
      "./cli",
    )
  })
})

describe("installed with npm into a fresh project", () => {
  it("a strict app typechecks against the published declarations (TC39 decorators)", () => {
    ok(run(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"]))
  })

  it(`the oldest claimed TypeScript (${OLDEST_TYPESCRIPT}) typechecks it without skipLibCheck`, () => {
    const tsc = "node_modules/typescript-5.7/bin/tsc"
    expect(ok(run(process.execPath, [tsc, "--version"]))).toContain(OLDEST_TYPESCRIPT)
    ok(run(process.execPath, [tsc, "-p", "tsconfig.json", "--noEmit"]))
  })

  it(`TypeScript ${OLDEST_TYPESCRIPT_SKIPLIBCHECK} typechecks it with skipLibCheck`, () => {
    const tsc = "node_modules/typescript-5.0/bin/tsc"
    expect(ok(run(process.execPath, [tsc, "--version"]))).toContain(OLDEST_TYPESCRIPT_SKIPLIBCHECK)
    ok(run(process.execPath, [tsc, "-p", "tsconfig.json", "--noEmit", "--skipLibCheck"]))
  })

  it("the same with experimentalDecorators", () => {
    ok(run(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.legacy.json"]))
  })

  it("runs on the memory ports: the decorated listener, the batch consumer and the Effect API see every message", () => {
    const out = ok(run(process.execPath, ["dist/app.js", "memory"]))
    expect(JSON.parse(out)).toEqual({ mode: "memory", billed: 120, audited: 120, effect: 120 })
  })

  it("typed messages with a zod schema (installed from npm): typed values, a refused and a non-retryable message dead-lettered at once", () => {
    const out = ok(run(process.execPath, ["dist/typed.js"]))
    expect(JSON.parse(out)).toEqual({
      mode: "typed",
      handled: [["customer-42", 12.5]],
      deadLettered: [
        expect.stringMatching(/^invalid: invalid: at amount: /),
        "nonRetryable: non-retryable: negative amount",
      ],
    })
  })

  it("runs with experimentalDecorators", () => {
    const out = ok(run(process.execPath, ["dist-legacy/legacy.js"]))
    expect(JSON.parse(out)).toEqual({ mode: "legacy", billed: 120, audited: 120 })
  })

  it("runs on a real Redis", async () => {
    redis = await startRedis({ kind: "redis7" })
    const out = ok(run(process.execPath, ["dist/app.js", "redis", redis.url]))
    expect(JSON.parse(out)).toEqual({ mode: "redis", billed: 120, audited: 120, effect: 120 })
    // the CLI from the same install sees the group the app left behind
    const inspect = run("npx", [
      "--no-install",
      "shardline",
      "inspect",
      "--redis",
      redis.url,
      "--stream",
      "nope",
      "--group",
      "g",
    ])
    expect(inspect.status).toBe(2)
    expect(inspect.stderr).toMatch(/^shardline: group g on stream nope does not exist/)
  })

  it("a NestJS app typechecks (experimentalDecorators, emitDecoratorMetadata), boots and consumes on Redis, and closes", () => {
    ok(run(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.nest.json"]))
    if (redis === undefined) throw new Error("the Redis of the test before is not running")
    const out = ok(run(process.execPath, ["dist-nest/nest.js", redis.url]))
    expect(JSON.parse(out)).toEqual({ billed: 40, members: 2, indicator: "up", state: "stopped" })
  })

  it("a producer-only process: typed json createProducer creates the layout, another routes by it, a wrong count is refused, a json consumer started later handles everything", async () => {
    redis ??= await startRedis({ kind: "redis7" })
    const out = ok(run(process.execPath, ["dist/producer.js", redis.url]))
    expect(JSON.parse(out)).toEqual({
      sent: 60,
      shards: true,
      refused: "ShardCountMismatch 4",
      consumed: 60,
    })
  })

  it("CommonJS require works on this Node (require(esm), Node 20.19+ / 22.12+)", () => {
    const out = ok(run(process.execPath, ["src/require.cjs"]))
    expect(JSON.parse(out)).toEqual({ start: "function", stickyAssign: "function" })
  })

  it("without require(esm) (Node before 20.19) require fails with ERR_REQUIRE_ESM, naming import()", () => {
    const r = run(process.execPath, ["--no-experimental-require-module", "src/require.cjs"])
    expect(r.status).not.toBe(0)
    expect(r.stderr).toContain("ERR_REQUIRE_ESM")
    expect(r.stderr).toContain("dynamic import()")
  })

  it("npx shardline --help and --version", () => {
    const help = run("npx", ["--no-install", "shardline", "--help"])
    expect(help.status, help.stderr).toBe(0)
    expect(help.stdout).toMatch(/^usage:\n {2}shardline inspect/)
    const version = run("npx", ["--no-install", "shardline", "--version"])
    expect(version.status, version.stderr).toBe(0)
    expect(version.stdout).toBe(`shardline ${manifestOf(tarballs.tools).version}\n`)
  })

  it("npx shardline-sim runs a scenario", () => {
    const sim = run("npx", [
      "--no-install",
      "shardline-sim",
      "steady",
      "--seed",
      "1",
      "--members",
      "3",
      "--shards",
      "8",
      "--duration",
      "5s",
    ])
    expect(sim.status, sim.stderr).toBe(0)
    expect(sim.stdout).toContain("seed 1")
  })
})
