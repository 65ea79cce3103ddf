#!/usr/bin/env node
/**
 * Finds or installs the Redis servers the tests start (docs/redis.md, "Test
 * servers"). The root `pnpm test` runs it first; `.ci/run` runs `pnpm test`.
 *
 *   redis7   `$SHARDLINE_REDIS7_BIN`, else `redis-server` 7.x on PATH       apt-get install redis-server
 *   valkey8  `$SHARDLINE_VALKEY_BIN`, else `valkey-server` 8.x on PATH      apt-get install -t bookworm-backports valkey-server
 *   redis8   `$SHARDLINE_REDIS8_DIR/bin/redis-server` 8.x                   scripts/build-redis8.sh (about 5 min, once)
 *            (default ~/.cache/shardline/redis-8)
 *   chromium `$SHARDLINE_CHROMIUM_BIN`, else /usr/bin/chromium            apt-get install chromium
 *            (the dashboard's browser test drives it with playwright-core; no browser download)
 *   firefox  `$SHARDLINE_FIREFOX_BIN`, else /usr/bin/firefox-esr          apt-get install firefox-esr
 *            (the same test in Firefox, driven by puppeteer-core over WebDriver BiDi)
 *   iptables as root only: /usr/sbin/iptables                            apt-get install iptables
 *            (the network-namespace tests' cuts and packet loss; without root they skip)
 *
 * It installs only when it may: apt-get is on PATH, the user is root or has
 * passwordless sudo, and `SHARDLINE_INSTALL` is not `0`. Otherwise, with
 * anything missing, it stops at once with one line on stderr naming what is
 * missing and the command to run, and exits 1. With everything found it
 * prints one line of versions and exits 0.
 */
import { execFileSync, spawnSync } from "node:child_process"
import {
  accessSync,
  constants,
  existsSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"

const SCRIPT = fileURLToPath(import.meta.url)
const ROOT = path.resolve(path.dirname(SCRIPT), "..")
const REDIS8_DIR =
  process.env.SHARDLINE_REDIS8_DIR ?? path.join(os.homedir(), ".cache", "shardline", "redis-8")

const log = (line) => process.stderr.write(`== ensure-servers: ${line}\n`)

/** Stop with the one line that says what to do. */
const stop = (line) => {
  process.stderr.write(`ensure-servers: ${line}\n`)
  process.exit(1)
}

const executable = (file) => {
  try {
    accessSync(file, constants.X_OK)
    return true
  } catch {
    return false
  }
}

const onPath = (name) => {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    if (dir === "") continue
    const candidate = path.join(dir, name)
    if (executable(candidate)) return candidate
  }
  return undefined
}

const versionOf = (binary) => {
  try {
    return execFileSync(binary, ["--version"], { encoding: "utf8", stdio: "pipe" }).trim()
  } catch {
    return undefined
  }
}

/** `7.0.15` out of `Redis server v=7.0.15 sha=...`. */
const short = (version) => version.match(/ v=(\S+)/)?.[1] ?? version

const sibling = (server, name) => {
  const candidate = path.join(path.dirname(server), name)
  return executable(candidate) ? candidate : onPath(name)
}

/**
 * Each server the tests need: where it is looked for, which version it must
 * be, and how it is installed. `check` returns `{ ok: true, version }`, or
 * `{ ok: false, problem, installable }` (a wrong version set through an
 * environment variable is not something apt-get fixes).
 */
const SERVERS = [
  {
    name: "redis-server 7",
    check: () => {
      const override = process.env.SHARDLINE_REDIS7_BIN
      const server = override ?? onPath("redis-server")
      if (server === undefined) return { ok: false, problem: "redis-server 7", installable: true }
      if (!executable(server))
        return { ok: false, problem: `SHARDLINE_REDIS7_BIN=${server} (not an executable)` }
      const version = versionOf(server) ?? "no --version"
      if (!/ v=7\./.test(version))
        return {
          ok: false,
          problem: `${server} is not Redis 7 (${version}); set SHARDLINE_REDIS7_BIN to a Redis 7 redis-server`,
        }
      if (sibling(server, "redis-cli") === undefined)
        return { ok: false, problem: "redis-cli (redis-tools)", installable: true }
      return { ok: true, version: `redis-server ${short(version)}` }
    },
    install: (apt) => apt(["install", "redis-server", "redis-tools"]),
  },
  {
    name: "valkey-server 8",
    check: () => {
      const override = process.env.SHARDLINE_VALKEY_BIN
      const server = override ?? onPath("valkey-server")
      if (server === undefined) return { ok: false, problem: "valkey-server 8", installable: true }
      if (!executable(server))
        return { ok: false, problem: `SHARDLINE_VALKEY_BIN=${server} (not an executable)` }
      const version = versionOf(server) ?? "no --version"
      if (!/ v=8\./.test(version))
        return {
          ok: false,
          problem: `${server} is not Valkey 8 (${version}); set SHARDLINE_VALKEY_BIN to a Valkey 8 valkey-server`,
        }
      if (sibling(server, "valkey-cli") === undefined)
        return { ok: false, problem: "valkey-cli", installable: true }
      return { ok: true, version: `valkey-server ${short(version)}` }
    },
    install: (apt, sudo) => {
      const codename = osRelease().VERSION_CODENAME
      // Valkey 8 is in bookworm's backports (and in the main suite of later releases)
      if (codename !== "bookworm") return apt(["install", "valkey-server"])
      addBackports(sudo)
      return apt(["install", "-t", "bookworm-backports", "valkey-server"])
    },
  },
  {
    name: "Redis 8",
    check: () => {
      const server = path.join(REDIS8_DIR, "bin", "redis-server")
      if (!executable(server) || !executable(path.join(REDIS8_DIR, "bin", "redis-cli")))
        return { ok: false, problem: `Redis 8 (${server})`, installable: true }
      const version = versionOf(server) ?? "no --version"
      if (!/ v=8\./.test(version))
        return { ok: false, problem: `Redis 8 (${server} is ${version})`, installable: true }
      return { ok: true, version: `Redis ${short(version)} (${REDIS8_DIR})` }
    },
    // builds as this user into REDIS8_DIR; apt-get (for the source package
    // and a C toolchain) through sudo when not root
    install: () => {
      log("building Redis 8 from Debian's source package (about 5 min on 2 cores, once)")
      const r = spawnSync("bash", [path.join(ROOT, "scripts", "build-redis8.sh")], {
        stdio: ["ignore", "ignore", "inherit"],
        env: { ...process.env, SHARDLINE_REDIS8_DIR: REDIS8_DIR },
      })
      return r.status === 0
    },
  },
]

SERVERS.push({
  name: "chromium",
  check: () => {
    const browser = process.env.SHARDLINE_CHROMIUM_BIN ?? "/usr/bin/chromium"
    if (!executable(browser))
      return { ok: false, problem: `chromium (${browser})`, installable: true }
    const version = versionOf(browser) ?? "no --version"
    return { ok: true, version: version.replace(/\s+built on.*$/, "") }
  },
  install: (apt) => apt(["install", "chromium"]),
})

SERVERS.push({
  name: "firefox",
  check: () => {
    const browser = process.env.SHARDLINE_FIREFOX_BIN ?? "/usr/bin/firefox-esr"
    if (!executable(browser))
      return { ok: false, problem: `firefox (${browser})`, installable: true }
    return { ok: true, version: versionOf(browser) ?? "no --version" }
  },
  install: (apt) => apt(["install", "firefox-esr"]),
})

// the network-namespace tests (member-runtime test/redis/partition.test.ts)
// cut and drop packets with iptables; they need root, and skip loudly without
// it, so iptables is installed only where they run
SERVERS.push({
  name: "iptables",
  check: () => {
    // (a tool, not a server: it adds nothing to the line of versions)
    if (process.getuid?.() !== 0) return { ok: true }
    const found = ["/usr/sbin/iptables", "/sbin/iptables"].find(executable) ?? onPath("iptables")
    if (found === undefined) return { ok: false, problem: "iptables", installable: true }
    return { ok: true }
  },
  install: (apt) => apt(["install", "iptables"]),
})

const osRelease = () => {
  try {
    return Object.fromEntries(
      readFileSync("/etc/os-release", "utf8")
        .split("\n")
        .map((line) => line.match(/^(\w+)=("?)(.*)\2$/))
        .filter((m) => m !== null)
        .map((m) => [m[1], m[3]]),
    )
  } catch {
    return {}
  }
}

/**
 * The Debian mirror this machine already uses (the first deb source for the
 * release), so the backports entry points at the same place.
 */
const debianMirror = (codename) => {
  const dir = "/etc/apt/sources.list.d"
  const files = existsSync(dir) ? readdirSync(dir).map((f) => path.join(dir, f)) : []
  for (const file of [...files, "/etc/apt/sources.list"]) {
    let text
    try {
      text = readFileSync(file, "utf8")
    } catch {
      continue
    }
    for (const stanza of text.split(/\n\s*\n/)) {
      const uri = stanza.match(/^URIs:\s*(\S+)/m)?.[1]
      const suites = stanza.match(/^Suites:\s*(.+)$/m)?.[1]?.split(/\s+/) ?? []
      if (uri !== undefined && /^Types:.*\bdeb\b/m.test(stanza) && suites.includes(codename))
        return uri
    }
    const line = text.match(
      new RegExp(`^deb\\s+(?:\\[[^\\]]*\\]\\s+)?(\\S+)\\s+${codename}\\s`, "m"),
    )
    if (line) return line[1]
  }
  return undefined
}

const addBackports = (sudo) => {
  const lists = ["/etc/apt/sources.list", "/etc/apt/sources.list.d"]
  const has = lists.some((p) => {
    if (!existsSync(p)) return false
    const files = p.endsWith(".d") ? readdirSync(p).map((f) => path.join(p, f)) : [p]
    return files.some((f) => {
      try {
        return readFileSync(f, "utf8").includes("bookworm-backports")
      } catch {
        return false
      }
    })
  })
  if (has) return
  const mirror = debianMirror("bookworm")
  if (mirror === undefined)
    stop("no Debian mirror for bookworm in /etc/apt: add bookworm-backports to apt's sources")
  const entry = `Types: deb\nURIs: ${mirror}\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n`
  const file = "/etc/apt/sources.list.d/shardline-backports.sources"
  log(`adding bookworm-backports (${file})`)
  if (sudo.length === 0) writeFileSync(file, entry)
  else
    spawnSync(...withSudo(sudo, ["tee", file]), {
      input: entry,
      stdio: ["pipe", "ignore", "inherit"],
    })
  updated = false // the new suite needs its own apt-get update
}

/** `[command, args]` for spawnSync, through sudo when not root. */
const withSudo = (sudo, argv) =>
  sudo.length > 0 ? [sudo[0], [...sudo.slice(1), ...argv]] : [argv[0], argv.slice(1)]

const shellQuote = (s) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`)

/** `[]` as root, `["sudo", "-n"]` with passwordless sudo, undefined otherwise. */
const privilege = () => {
  if (process.getuid?.() === 0) return []
  const sudo = onPath("sudo")
  if (sudo === undefined) return undefined
  return spawnSync(sudo, ["-n", "true"], { stdio: "ignore" }).status === 0
    ? [sudo, "-n"]
    : undefined
}

// ---------------------------------------------------------------------------

let updated = false
const found = SERVERS.map((s) => ({ server: s, result: s.check() }))
const missing = found.filter((f) => !f.result.ok)
if (missing.length === 0) {
  console.log(`servers: ${found.flatMap((f) => f.result.version ?? []).join(", ")}`)
  process.exit(0)
}

const what = missing.map((f) => f.result.problem).join(", ")
const fixable = missing.filter((f) => f.result.installable)
if (fixable.length < missing.length)
  stop(
    `${missing
      .filter((f) => !f.result.installable)
      .map((f) => f.result.problem)
      .join("; ")}`,
  )

const aptGet = onPath("apt-get")
if (aptGet === undefined)
  stop(
    `missing ${what}, and there is no apt-get here to install them: install Redis 7, Valkey 8 and Redis 8 and set SHARDLINE_REDIS7_BIN, SHARDLINE_VALKEY_BIN and SHARDLINE_REDIS8_DIR (docs/redis.md, "Test servers")`,
  )
const rerun = `${shellQuote(process.execPath)} ${shellQuote(SCRIPT)}`
if (process.env.SHARDLINE_INSTALL === "0")
  stop(`missing ${what}, and SHARDLINE_INSTALL=0: run SHARDLINE_INSTALL=1 ${rerun}`)
const sudo = privilege()
if (sudo === undefined)
  stop(
    `missing ${what}, and installing needs root or passwordless sudo: run sudo env SHARDLINE_REDIS8_DIR=${shellQuote(REDIS8_DIR)} ${rerun}`,
  )

const apt = (args) => {
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  const run = (argv) => {
    log(`${sudo.length ? "sudo " : ""}apt-get ${argv.join(" ")}`)
    const [cmd, rest] = withSudo(sudo, [
      aptGet,
      "-q",
      "-y",
      "-o",
      "DPkg::Lock::Timeout=300",
      ...argv,
    ])
    return spawnSync(cmd, rest, { stdio: ["ignore", "inherit", "inherit"], env }).status === 0
  }
  if (!updated) {
    if (!run(["update"])) return false
    updated = true
  }
  return run(args)
}

for (const { server } of fixable) {
  log(`installing ${server.name}`)
  if (!server.install(apt, sudo)) stop(`could not install ${server.name} (see above)`)
}
const after = SERVERS.map((s) => s.check())
const still = after.filter((r) => !r.ok)
if (still.length > 0)
  stop(`still missing after installing: ${still.map((r) => r.problem).join(", ")}`)
console.log(`servers: ${after.flatMap((r) => r.version ?? []).join(", ")}`)
