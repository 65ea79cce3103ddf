/**
 * scripts/ensure-servers.mjs, which the root `pnpm test` runs first (README,
 * "Quick start"; docs/redis.md, "Test servers"): with the servers out of
 * reach it installs them when it may, and otherwise stops at once with one
 * line saying what to run. Each case runs the script with a PATH of its own
 * (a temp dir holding `node` and fakes), so the machine's real servers are
 * out of reach and nothing is installed for real.
 */
import { spawnSync } from "node:child_process"
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs"
import os from "node:os"
import path from "node:path"
import { afterEach, describe, expect, it } from "vitest"

const SOURCE = path.resolve(import.meta.dirname, "../../../scripts/ensure-servers.mjs")
const NOBODY = 65534

interface Sandbox {
  readonly dir: string
  readonly bin: string
  readonly script: string
  readonly redis8: string
  readonly aptLog: string
}

const sandboxes: Array<string> = []
afterEach(() => {
  for (const dir of sandboxes.splice(0)) rmSync(dir, { recursive: true, force: true })
})

/** A temp dir anyone can read: bin/ with `node`, the script, an empty Redis 8 dir. */
const sandbox = (): Sandbox => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "shardline-ensure-"))
  sandboxes.push(dir)
  const bin = path.join(dir, "bin")
  const redis8 = path.join(dir, "redis-8")
  mkdirSync(bin)
  mkdirSync(redis8)
  mkdirSync(path.join(dir, "scripts"))
  const script = path.join(dir, "scripts", "ensure-servers.mjs")
  copyFileSync(SOURCE, script)
  symlinkSync(process.execPath, path.join(bin, "node"))
  for (const d of [dir, bin, redis8, path.join(dir, "scripts")]) chmodSync(d, 0o755)
  chmodSync(script, 0o644)
  // the dashboard's browsers are found (the cases here are about the servers)
  writeFileSync(path.join(bin, "chromium"), `#!/bin/sh\necho "${CHROMIUM}"\n`)
  chmodSync(path.join(bin, "chromium"), 0o755)
  writeFileSync(path.join(bin, "firefox-esr"), `#!/bin/sh\necho "${FIREFOX}"\n`)
  chmodSync(path.join(bin, "firefox-esr"), 0o755)
  return { dir, bin, script, redis8, aptLog: path.join(dir, "apt.log") }
}

/** An executable shell script. */
const shell = (file: string, body: string) => {
  mkdirSync(path.dirname(file), { recursive: true })
  writeFileSync(file, `#!/bin/sh\n${body}\n`)
  chmodSync(file, 0o755)
}

/** A fake server binary answering `--version` like the real one. */
const fakeServer = (file: string, versionLine: string) => shell(file, `echo "${versionLine}"`)

const REDIS7 = "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1"
const VALKEY8 = "Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1"
const REDIS8 = "Redis server v=8.6.3 sha=00000000:1 malloc=jemalloc-5.3.0 bits=64 build=1"
const CHROMIUM = "Chromium 156.0.8078.114 built on Debian GNU/Linux 12 (bookworm)"
const FIREFOX = "Mozilla Firefox 153.8.0esr"

const withRedis7 = (s: Sandbox) => {
  fakeServer(path.join(s.bin, "redis-server"), REDIS7)
  shell(path.join(s.bin, "redis-cli"), "exit 0")
}
const withValkey8 = (s: Sandbox) => {
  fakeServer(path.join(s.bin, "valkey-server"), VALKEY8)
  shell(path.join(s.bin, "valkey-cli"), "exit 0")
}
const withRedis8 = (s: Sandbox) => {
  fakeServer(path.join(s.redis8, "bin", "redis-server"), REDIS8)
  shell(path.join(s.redis8, "bin", "redis-cli"), "exit 0")
}

/**
 * A fake apt-get that logs its arguments; `install redis-server` puts a
 * Redis 7 and its redis-cli on the sandbox's PATH, as the real one would.
 */
const withFakeAptGet = (s: Sandbox) =>
  shell(
    path.join(s.bin, "apt-get"),
    [
      `echo "$*" >> ${s.aptLog}`,
      `case "$*" in *"install redis-server"*)`,
      `  printf '#!/bin/sh\\necho "${REDIS7}"\\n' > ${s.bin}/redis-server`,
      `  printf '#!/bin/sh\\nexit 0\\n' > ${s.bin}/redis-cli`,
      `  ${onOurPath("chmod")} +x ${s.bin}/redis-server ${s.bin}/redis-cli ;;`,
      "esac",
    ].join("\n"),
  )

interface Run {
  readonly status: number | null
  readonly stdout: string
  readonly stderr: string
}

/** A tool from this test process's own PATH (the script's PATH is the sandbox only). */
const onOurPath = (name: string): string => {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter))
    if (dir !== "" && existsSync(path.join(dir, name))) return path.join(dir, name)
  throw new Error(`${name} not found on PATH (util-linux)`)
}

/** Runs the script with only the sandbox on PATH; `unprivileged`: as nobody when root. */
const ensure = (
  s: Sandbox,
  options: { env?: Record<string, string>; unprivileged?: boolean } = {},
): Run => {
  const env = {
    PATH: s.bin,
    HOME: s.dir,
    SHARDLINE_REDIS8_DIR: s.redis8,
    SHARDLINE_CHROMIUM_BIN: path.join(s.bin, "chromium"),
    SHARDLINE_FIREFOX_BIN: path.join(s.bin, "firefox-esr"),
    ...options.env,
  }
  const asNobody = options.unprivileged === true && process.getuid?.() === 0
  const [command, args] = asNobody
    ? [
        onOurPath("setpriv"),
        [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", process.execPath, s.script],
      ]
    : [process.execPath, [s.script]]
  const r = spawnSync(command, args, { env, encoding: "utf8", timeout: 60_000 })
  if (r.error !== undefined) throw r.error
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

/** Exit 1, nothing on stdout, exactly one line on stderr: that line. */
const oneLine = (run: Run): string => {
  expect(run.status, run.stderr).toBe(1)
  expect(run.stdout).toBe("")
  const lines = run.stderr.split("\n").filter((l) => l !== "")
  expect(lines, run.stderr).toHaveLength(1)
  return lines[0]!
}

describe("ensure-servers: the servers out of reach, installing not allowed", () => {
  it("not root, no passwordless sudo: one line with the exact command, nothing installed", () => {
    const s = sandbox()
    withFakeAptGet(s)
    const line = oneLine(ensure(s, { unprivileged: true }))
    expect(line).toBe(
      `ensure-servers: missing redis-server 7, valkey-server 8, Redis 8 (${s.redis8}/bin/redis-server), and installing needs root or passwordless sudo: run sudo env SHARDLINE_REDIS8_DIR=${s.redis8} ${process.execPath} ${s.script}`,
    )
    expect(existsSync(s.aptLog)).toBe(false)
  })

  it("SHARDLINE_INSTALL=0: one line, nothing installed", () => {
    const s = sandbox()
    withFakeAptGet(s)
    withValkey8(s)
    const line = oneLine(ensure(s, { env: { SHARDLINE_INSTALL: "0" } }))
    expect(line).toBe(
      `ensure-servers: missing redis-server 7, Redis 8 (${s.redis8}/bin/redis-server), and SHARDLINE_INSTALL=0: run SHARDLINE_INSTALL=1 ${process.execPath} ${s.script}`,
    )
    expect(existsSync(s.aptLog)).toBe(false)
  })

  it("no apt-get (not Debian): one line naming the variables to set", () => {
    const s = sandbox()
    withRedis7(s)
    const line = oneLine(ensure(s))
    expect(line).toMatch(
      /^ensure-servers: missing valkey-server 8, Redis 8 \(.*\), and there is no apt-get here/,
    )
    expect(line).toContain("SHARDLINE_VALKEY_BIN")
    expect(line).toContain("SHARDLINE_REDIS8_DIR")
  })

  it("a redis-server that is not Redis 7: one line, and apt-get is not asked (it would not fix it)", () => {
    const s = sandbox()
    withFakeAptGet(s)
    withValkey8(s)
    withRedis8(s)
    fakeServer(path.join(s.bin, "redis-server"), "Redis server v=6.2.1 sha=0")
    const line = oneLine(ensure(s))
    expect(line).toBe(
      `ensure-servers: ${s.bin}/redis-server is not Redis 7 (Redis server v=6.2.1 sha=0); set SHARDLINE_REDIS7_BIN to a Redis 7 redis-server`,
    )
    expect(existsSync(s.aptLog)).toBe(false)
  })

  it("SHARDLINE_VALKEY_BIN naming a missing file: one line naming it", () => {
    const s = sandbox()
    withRedis7(s)
    withRedis8(s)
    const line = oneLine(ensure(s, { env: { SHARDLINE_VALKEY_BIN: "/nowhere/valkey-server" } }))
    expect(line).toBe(
      "ensure-servers: SHARDLINE_VALKEY_BIN=/nowhere/valkey-server (not an executable)",
    )
  })
})

describe("ensure-servers: found or installed", () => {
  it("everything found: one line of versions, exit 0, apt-get not asked", () => {
    const s = sandbox()
    withFakeAptGet(s)
    withRedis7(s)
    withValkey8(s)
    withRedis8(s)
    const run = ensure(s)
    expect(run.status).toBe(0)
    expect(run.stdout).toBe(
      `servers: redis-server 7.0.15, valkey-server 8.0.1, Redis 8.6.3 (${s.redis8}), Chromium 156.0.8078.114, Mozilla Firefox 153.8.0esr\n`,
    )
    expect(existsSync(s.aptLog)).toBe(false)
  })

  it.runIf(process.getuid?.() === 0)(
    "as root: installs a missing redis-server with apt-get, then finds it",
    () => {
      const s = sandbox()
      withFakeAptGet(s)
      withValkey8(s)
      withRedis8(s)
      const run = ensure(s)
      expect(run.stderr).toContain("== ensure-servers: installing redis-server 7")
      expect(run.status, run.stderr).toBe(0)
      expect(run.stdout).toBe(
        `servers: redis-server 7.0.15, valkey-server 8.0.1, Redis 8.6.3 (${s.redis8}), Chromium 156.0.8078.114, Mozilla Firefox 153.8.0esr\n`,
      )
      const calls = readFileSync(s.aptLog, "utf8").trim().split("\n")
      expect(calls).toEqual([
        "-q -y -o DPkg::Lock::Timeout=300 update",
        "-q -y -o DPkg::Lock::Timeout=300 install redis-server redis-tools",
      ])
    },
  )
})
