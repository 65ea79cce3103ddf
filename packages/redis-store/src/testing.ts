/**
 * Real Redis servers for tests: `@shardline/redis-store/testing`.
 *
 * Starts `redis-server` (or `valkey-server`) on a free loopback port with its
 * own temp directory, waits until it answers PING, and stops it again (and
 * kills it when the test process exits, even on SIGKILL, through a tiny
 * watchdog). A 3-node Redis Cluster is three such servers joined by
 * `redis-cli --cluster create`.
 *
 * Server kinds (docs/redis.md, "Test servers"):
 * - `redis7`: Debian 12's `redis-server` 7.0 from PATH, or `$SHARDLINE_REDIS7_BIN`
 * - `redis8`: Redis 8.x built by `scripts/build-redis8.sh` into
 *   `$SHARDLINE_REDIS8_DIR` (default `~/.cache/shardline/redis-8`)
 * - `valkey8`: Valkey 8 from bookworm-backports (`valkey-server`), or `$SHARDLINE_VALKEY_BIN`
 *
 * A Redis Sentinel deployment (`startRedisSentinel`) is a primary, its
 * replicas (`--replicaof`) and sentinels (`redis-server <conf> --sentinel`
 * with a generated sentinel.conf) that monitor it, each such a server.
 *
 * A TCP proxy in front of any of them (`startProxy`, src/testProxy.ts) adds
 * latency in order, loses a reply or holds a link.
 *
 * A missing binary is a `ServerMissing` error whose message is one line that
 * says how to install it. Tests must fail with it, never skip.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import calculateSlot from "cluster-key-slot"

export {
  type ProxyDelay,
  type ProxyOptions,
  startProxy,
  type TcpProxy,
} from "./testProxy.js"

export type ServerKind = "redis7" | "redis8" | "valkey8"

export const SERVER_KINDS: ReadonlyArray<ServerKind> = ["redis7", "redis8", "valkey8"]

/** A server binary is not installed; the message is one line saying how to install it. */
export class ServerMissing extends Error {
  override readonly name = "ServerMissing"
}

export interface ServerBinaries {
  readonly kind: ServerKind
  readonly server: string
  readonly cli: string
  /** `redis-server --version` output, e.g. `Redis server v=7.0.15 ...`. */
  readonly version: string
}

export interface RedisServer {
  readonly kind: ServerKind
  readonly host: string
  readonly port: number
  readonly url: string
  /** Server version from INFO (`redis_version`, or `valkey_version` on Valkey). */
  readonly version: string
  readonly dir: string
  readonly pid: number
  /** Sends a command through `redis-cli` and returns its raw output (for test setup only). */
  readonly cli: (...args: ReadonlyArray<string>) => string
  /**
   * Kills the server (SIGKILL: a crash, nothing flushed beyond what its
   * persistence already wrote) and starts it again on the same port and
   * directory with the same arguments. Without persistence it comes back empty.
   */
  readonly restart: () => Promise<void>
  /** kill -9 (a crash) and wait until it is gone; `restart` starts it again. */
  readonly kill: () => Promise<void>
  /** SIGSTOP: a hung process (the port accepts, nothing answers) until `resume`. */
  readonly pause: () => void
  /** SIGCONT after `pause`. */
  readonly resume: () => void
  /** Is the process running (not killed; a paused one is running)? */
  readonly running: () => boolean
  /** Is it paused (`pause` without `resume` since)? */
  readonly paused: () => boolean
  readonly stop: () => Promise<void>
}

export interface RedisCluster {
  readonly kind: ServerKind
  readonly nodes: ReadonlyArray<{ readonly host: string; readonly port: number }>
  /** Every node: the masters first (as created), then their replicas. */
  readonly servers: ReadonlyArray<RedisServer>
  readonly version: string
  /**
   * The server that serves `key`'s hash slot as a master now (CLUSTER SHARDS
   * asked of a running node; the key as Redis hashes it, hash tag included).
   */
  readonly masterOf: (key: string) => RedisServer
  /** The servers that are masters now (ROLE of each running node). */
  readonly masters: () => ReadonlyArray<RedisServer>
  /**
   * Resolves once `failed`'s slots are served by another node (its replica
   * took over) and every other running node says `cluster_state:ok`; throws
   * after `timeoutMs` (default 30,000). Returns the new master.
   */
  readonly waitForFailover: (failed: RedisServer, timeoutMs?: number) => Promise<RedisServer>
  /**
   * A manual, graceful failover of `master` (docs/redis.md, "Stall per
   * fault"): runs `CLUSTER FAILOVER` on one of its replicas, which waits for
   * the master's writes to be replicated and takes its slots over, and
   * resolves with that replica once it says it is a master and every node
   * but the old master says `cluster_state:ok`. The old
   * master keeps running, now a replica. Throws if `master` has no running
   * replica or after `timeoutMs` (default 30,000).
   *
   * ```ts
   * const promoted = await cluster.failover(cluster.masterOf("shardline:{orders:3}"))
   * ```
   */
  readonly failover: (master: RedisServer, timeoutMs?: number) => Promise<RedisServer>
  /**
   * Resolves once every running node says `cluster_state:ok`, every running
   * replica's link to its master is up and no sync is in progress.
   */
  readonly waitForHealthy: (timeoutMs?: number) => Promise<void>
  readonly stop: () => Promise<void>
}

export interface RedisSentinel {
  readonly kind: ServerKind
  /** The primary's name the sentinels monitor (`sentinel monitor <name> ...`). */
  readonly name: string
  /** Where the sentinels listen (a runtime's `redis: { sentinels, name }`). */
  readonly sentinels: ReadonlyArray<{ readonly host: string; readonly port: number }>
  /** The sentinel processes (`cli` talks to a sentinel: `SENTINEL ...`). */
  readonly sentinelServers: ReadonlyArray<RedisServer>
  /** The data servers: the first started as the primary, the others as its replicas. */
  readonly servers: ReadonlyArray<RedisServer>
  readonly version: string
  /**
   * The server the sentinels name as the primary now (SENTINEL
   * get-master-addr-by-name, asked of each sentinel until one answers).
   */
  readonly primary: () => Promise<RedisServer>
  /**
   * Resolves with the new primary once every sentinel names another server
   * than `from` (after a failover), and that server says it is a primary
   * (ROLE); throws after `timeoutMs` (default 30,000).
   */
  readonly waitForFailover: (from: RedisServer, timeoutMs?: number) => Promise<RedisServer>
  readonly stop: () => Promise<void>
}

export interface StartOptions {
  readonly kind?: ServerKind
  /** Keep RDB snapshots / AOF in the temp dir (default: no persistence at all). */
  readonly persistence?: boolean
  /** Extra `redis-server` arguments, e.g. `["--maxmemory", "10mb"]`. */
  readonly args?: ReadonlyArray<string>
}

const HOST = "127.0.0.1"

const onPath = (name: string): string | undefined => {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, name)
    if (dir !== "" && existsSync(candidate)) return candidate
  }
  return undefined
}

const versionOf = (binary: string): string =>
  execFileSync(binary, ["--version"], { encoding: "utf8" }).trim()

const sibling = (server: string, name: string): string | undefined => {
  const candidate = path.join(path.dirname(server), name)
  return existsSync(candidate) ? candidate : onPath(name)
}

/** The default cache directory of the Redis 8 build (`scripts/build-redis8.sh`). */
export const redis8Dir = (): string =>
  process.env.SHARDLINE_REDIS8_DIR ?? path.join(os.homedir(), ".cache", "shardline", "redis-8")

/** Finds the binaries of a server kind; throws `ServerMissing` (one line) when absent. */
export const resolveBinaries = (kind: ServerKind): ServerBinaries => {
  switch (kind) {
    case "redis7": {
      const server = process.env.SHARDLINE_REDIS7_BIN ?? onPath("redis-server")
      if (server === undefined || !existsSync(server))
        throw new ServerMissing(
          'redis-server not found: run "apt-get install redis-server" (or set SHARDLINE_REDIS7_BIN)',
        )
      const version = versionOf(server)
      if (!/ v=7\./.test(version))
        throw new ServerMissing(
          `${server} is not Redis 7 (${version}): install Debian 12's redis-server or set SHARDLINE_REDIS7_BIN`,
        )
      const cli = sibling(server, "redis-cli")
      if (cli === undefined)
        throw new ServerMissing('redis-cli not found: run "apt-get install redis-tools"')
      return { kind, server, cli, version }
    }
    case "redis8": {
      const dir = redis8Dir()
      const server = path.join(dir, "bin", "redis-server")
      const cli = path.join(dir, "bin", "redis-cli")
      if (!existsSync(server) || !existsSync(cli))
        throw new ServerMissing(`Redis 8 not built: run scripts/build-redis8.sh (looked in ${dir})`)
      return { kind, server, cli, version: versionOf(server) }
    }
    case "valkey8": {
      const server = process.env.SHARDLINE_VALKEY_BIN ?? onPath("valkey-server")
      const cli = server === undefined ? undefined : sibling(server, "valkey-cli")
      if (server === undefined || cli === undefined || !existsSync(server))
        throw new ServerMissing(
          'valkey-server not found: run "apt-get install -t bookworm-backports valkey-server" (or set SHARDLINE_VALKEY_BIN)',
        )
      return { kind, server, cli, version: versionOf(server) }
    }
  }
}

/** A free loopback TCP port (bind to 0, read, close). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, HOST, () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Where the RESP reply starting at `at` ends, or -1 while it is incomplete
 * (lengths are counted in characters: the test servers' replies read here
 * are ASCII).
 */
const replyEnd = (data: string, at: number): number => {
  const eol = data.indexOf("\r\n", at)
  if (eol < 0) return -1
  const type = data[at]
  const n = Number(data.slice(at + 1, eol))
  if (type === "$") return n < 0 ? eol + 2 : data.length >= eol + 4 + n ? eol + 4 + n : -1
  if (type === "*") {
    let next = eol + 2
    for (let i = 0; i < n; i++) {
      next = replyEnd(data, next)
      if (next < 0) return -1
    }
    return next
  }
  return eol + 2
}

/** The strings of a RESP reply (bulk strings and simple lines, arrays flattened). */
const replyStrings = (reply: string): Array<string> => {
  const out: Array<string> = []
  const walk = (at: number): number => {
    const eol = reply.indexOf("\r\n", at)
    const type = reply[at]
    const n = Number(reply.slice(at + 1, eol))
    if (type === "$") {
      if (n < 0) return eol + 2
      out.push(reply.slice(eol + 2, eol + 2 + n))
      return eol + 4 + n
    }
    if (type === "*") {
      let next = eol + 2
      for (let i = 0; i < n; i++) next = walk(next)
      return next
    }
    out.push(reply.slice(at + 1, eol))
    return eol + 2
  }
  walk(0)
  return out
}

/** Sends one inline command over a raw socket and resolves with the raw reply text. */
const rawCommand = (port: number, command: string, timeoutMs = 500): Promise<string> =>
  new Promise((resolve, reject) => {
    const socket = net.connect({ host: HOST, port })
    let data = ""
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error("timeout"))
    }, timeoutMs)
    socket.on("connect", () => socket.write(`${command}\r\n`))
    socket.on("data", (chunk) => {
      data += chunk.toString("utf8")
      // one complete reply: a simple line, a bulk string with its body, an array of them
      if (replyEnd(data, 0) >= 0) {
        clearTimeout(timer)
        socket.end()
        resolve(data)
      }
    })
    socket.on("error", (error) => {
      clearTimeout(timer)
      reject(error)
    })
  })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const waitFor = async (
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  /** Why waiting longer is pointless (a server that exited), checked before each try. */
  hopeless?: () => string | undefined,
) => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const why = hopeless?.()
    if (why !== undefined) throw new Error(why)
    if (await check().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

const live = new Set<ChildProcess>()
let exitHookInstalled = false
const installExitHook = () => {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on("exit", () => {
    for (const child of live) child.kill("SIGKILL")
  })
}

/**
 * Kills `pid` once this process is gone, even if it dies by SIGKILL (no exit
 * hook runs then): a detached shell polling both pids once a second.
 */
const watchdog = (pid: number) => {
  const script = `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 1; done; kill -9 ${pid} 2>/dev/null`
  const child = spawn("sh", ["-c", script], { detached: true, stdio: "ignore" })
  child.unref()
}

const infoField = (info: string, field: string): string | undefined =>
  new RegExp(`^${field}:(.*)$`, "m").exec(info)?.[1]?.trim()

const spawnServer = async (
  binaries: ServerBinaries,
  dir: string,
  port: number,
  args: ReadonlyArray<string>,
  leading: ReadonlyArray<string> = [],
): Promise<ChildProcess> => {
  const child = spawn(
    binaries.server,
    [
      ...leading,
      "--port",
      String(port),
      "--bind",
      HOST,
      "--dir",
      dir,
      "--logfile",
      "server.log",
      ...args,
    ],
    // stderr until it answers: what it says before its log file is open
    // (a bad argument) explains a start that failed
    { stdio: ["ignore", "ignore", "pipe"] },
  )
  let said = ""
  child.stderr?.on("data", (chunk: Buffer) => {
    said = (said + chunk.toString("utf8")).slice(-2_000)
  })
  installExitHook()
  live.add(child)
  child.on("exit", () => live.delete(child))
  if (child.pid !== undefined) watchdog(child.pid)
  let exited = false
  child.on("exit", () => {
    exited = true
  })
  try {
    await waitFor(
      `${binaries.kind} on port ${port}`,
      async () => (await rawCommand(port, "PING")).startsWith("+PONG"),
      10_000,
      // e.g. the port taken: fail at once and try another, not after 10 s
      () => (exited ? "exited" : undefined),
    )
    // the port can be taken between freePort's probe and this server's bind
    // (another test process's server): then the PING above was answered by
    // that server, and this one exits. Using it would share a server between
    // two test files, each changing the other's config.
    const answered = infoField(await rawCommand(port, "INFO server", 5_000), "process_id")
    if (answered !== String(child.pid))
      throw new Error(`another server (pid ${answered ?? "unknown"}) answers on this port`)
  } catch (error) {
    child.kill("SIGKILL")
    // what it wrote before it exited may still be on its way (at most 1 s)
    const stderr = child.stderr
    if (stderr !== null && !stderr.closed)
      await new Promise((resolve) => {
        stderr.once("close", resolve)
        setTimeout(resolve, 1_000).unref()
      })
    const log = path.join(dir, "server.log")
    const lines = (text: string) => text.trim().split("\n").slice(-5).join(" | ")
    const tail = existsSync(log) ? lines(readFileSync(log, "utf8")) : ""
    throw new Error(
      `${binaries.kind} did not start on port ${port}: ${String(error)} ${tail || lines(said)}`,
    )
  }
  child.stderr?.destroy()
  return child
}

const startOne = async (
  binaries: ServerBinaries,
  options: StartOptions,
  extraArgs: ReadonlyArray<string>,
  /** A sentinel: its sentinel.conf (written into the server's directory; Sentinel rewrites it). */
  sentinelConfig?: string,
): Promise<RedisServer> => {
  const dir = mkdtempSync(
    path.join(
      os.tmpdir(),
      `shardline-${binaries.kind}${sentinelConfig === undefined ? "" : "-sentinel"}-`,
    ),
  )
  const persistence =
    sentinelConfig !== undefined
      ? []
      : options.persistence
        ? ["--appendonly", "yes", "--appendfsync", "always"]
        : ["--save", "", "--appendonly", "no"]
  let leading: Array<string> = []
  if (sentinelConfig !== undefined) {
    const file = path.join(dir, "sentinel.conf")
    writeFileSync(file, sentinelConfig)
    leading = [file, "--sentinel"]
  }
  let lastError: unknown
  // a free port can be taken between the probe and the bind: try a few
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort()
    try {
      // a cluster node's bus port can be taken too (seen in a fresh-clone
      // run): a retry asks for a new one as well
      const nodeArgs = attempt === 0 ? extraArgs : await withFreshClusterPort(extraArgs)
      const serverArgs = [...persistence, ...nodeArgs, ...(options.args ?? [])]
      let child = await spawnServer(binaries, dir, port, serverArgs, leading)
      const info = await rawCommand(port, "INFO server")
      const version =
        infoField(info, "valkey_version") ?? infoField(info, "redis_version") ?? "unknown"
      // a deadline, so that asking a paused (SIGSTOPped) server fails rather
      // than blocking the test process's event loop for good
      const cli = (...args: ReadonlyArray<string>) =>
        execFileSync(binaries.cli, ["-h", HOST, "-p", String(port), ...args], {
          encoding: "utf8",
          timeout: 10_000,
        })
      let paused = false
      let stopped: Promise<void> | undefined
      const stop = () => {
        stopped ??= new Promise<void>((resolve) => {
          const done = () => {
            rmSync(dir, { recursive: true, force: true })
            resolve()
          }
          if (child.exitCode !== null || child.signalCode !== null) return done()
          child.once("exit", done)
          child.kill("SIGTERM")
          setTimeout(() => child.kill("SIGKILL"), 3_000).unref()
        })
        return stopped
      }
      const running = () => child.exitCode === null && child.signalCode === null
      const kill = async () => {
        if (!running()) return
        const gone = new Promise((resolve) => child.once("exit", resolve))
        child.kill("SIGCONT")
        child.kill("SIGKILL")
        await gone
      }
      const restart = async () => {
        await kill()
        child = await spawnServer(binaries, dir, port, serverArgs, leading)
      }
      return {
        kind: binaries.kind,
        host: HOST,
        port,
        url: `redis://${HOST}:${port}`,
        version,
        dir,
        get pid() {
          return child.pid!
        },
        cli,
        restart,
        kill,
        pause: () => {
          if (running()) child.kill("SIGSTOP")
          paused = true
        },
        resume: () => {
          if (running()) child.kill("SIGCONT")
          paused = false
        },
        running,
        paused: () => paused && running(),
        stop: async () => {
          if (running()) child.kill("SIGCONT")
          await stop()
        },
      }
    } catch (error) {
      lastError = error
    }
  }
  rmSync(dir, { recursive: true, force: true })
  throw lastError
}

/**
 * A TCP server on a free loopback port that accepts every connection and
 * never writes a byte (a hung process, a port forwarded to nothing): no
 * Redis ever answers there. Used by the connect-deadline tests.
 */
export const startSilentServer = async (): Promise<{
  readonly port: number
  /** Connections it accepted and still holds open. */
  readonly open: () => number
  readonly close: () => Promise<void>
}> => {
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    sockets.add(socket)
    socket.on("error", () => {})
    socket.on("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve))
  return {
    port: (server.address() as net.AddressInfo).port,
    open: () => sockets.size,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  }
}

/** Starts one server on a free loopback port; `stop()` ends it and removes its directory. */
export const startRedis = (options: StartOptions = {}): Promise<RedisServer> =>
  startOne(resolveBinaries(options.kind ?? "redis7"), options, [])

/**
 * The arguments that make a server a cluster node (`startRedis({ args })`,
 * e.g. a replica added to a running cluster): its cluster bus on a free
 * port of its own (the default, port + 10000, may be taken), a 2 s node
 * timeout.
 */
/** `args` with a newly probed free port after `--cluster-port`, if it has one. */
const withFreshClusterPort = async (
  args: ReadonlyArray<string>,
): Promise<ReadonlyArray<string>> => {
  const at = args.indexOf("--cluster-port")
  if (at < 0 || at + 1 >= args.length) return args
  const fresh = [...args]
  fresh[at + 1] = String(await freePort())
  return fresh
}

export const clusterNodeArgs = async (): Promise<Array<string>> => [
  "--cluster-enabled",
  "yes",
  "--cluster-config-file",
  "nodes.conf",
  "--cluster-node-timeout",
  "2000",
  "--cluster-port",
  String(await freePort()),
]

/**
 * Starts a Redis Cluster of `nodes` masters (default 3), each with
 * `replicas` replicas (default 0; `redis-cli --cluster create
 * --cluster-replicas`), and waits until every node reports
 * `cluster_state:ok` and every replica is in sync with its master. `args`
 * apply to every node (e.g. `["--cluster-require-full-coverage", "no"]`,
 * docs/redis.md "Recommended settings").
 *
 * ```ts
 * const cluster = await startRedisCluster({ replicas: 1 }) // 3 masters + 3 replicas
 * const victim = cluster.masterOf("shardline:{orders:3}")
 * await victim.kill()
 * const promoted = await cluster.waitForFailover(victim)
 * ```
 */
export const startRedisCluster = async (
  options: StartOptions & { readonly nodes?: number; readonly replicas?: number } = {},
): Promise<RedisCluster> => {
  const binaries = resolveBinaries(options.kind ?? "redis7")
  const count = options.nodes ?? 3
  const replicas = options.replicas ?? 0
  const servers: Array<RedisServer> = []
  const stop = async () => {
    await Promise.all(servers.map((s) => s.stop()))
  }
  const running = () => servers.filter((s) => s.running())
  const waitForHealthy = (timeoutMs = 30_000) =>
    waitFor(
      "cluster_state:ok on every node and every replica in sync",
      async () => {
        for (const s of running()) {
          if (!(await rawCommand(s.port, "CLUSTER INFO")).includes("cluster_state:ok")) return false
          const replication = await rawCommand(s.port, "INFO replication")
          if (
            replication.includes("role:slave") &&
            (!replication.includes("master_link_status:up") ||
              !replication.includes("master_sync_in_progress:0"))
          )
            return false
        }
        return true
      },
      timeoutMs,
    )
  try {
    const total = count * (1 + replicas)
    const args = await Promise.all(Array.from({ length: total }, () => clusterNodeArgs()))
    servers.push(...(await Promise.all(args.map((a) => startOne(binaries, options, a)))))
    execFileSync(
      binaries.cli,
      [
        "--cluster",
        "create",
        ...servers.map((s) => `${s.host}:${s.port}`),
        "--cluster-replicas",
        String(replicas),
        "--cluster-yes",
      ],
      { stdio: "ignore", timeout: 30_000 },
    )
    await waitForHealthy(60_000)
    // redis-cli picks which of the nodes become masters: masters first
    const roles = await Promise.all(servers.map((s) => rawCommand(s.port, "ROLE")))
    const masters = servers.filter((_, i) => replyStrings(roles[i]!)[0] === "master")
    const others = servers.filter((s) => !masters.includes(s))
    servers.splice(0, servers.length, ...masters, ...others)
  } catch (error) {
    await stop()
    throw error
  }
  const masterOf = (key: string): RedisServer => {
    const slot = calculateSlot(key)
    let lastError: unknown
    // a paused node answers nothing: ask the others
    for (const s of running().filter((x) => !x.paused())) {
      try {
        // CLUSTER NODES: `<id> <ip:port@bus> <flags> <master> ... <slot ranges>`
        for (const line of s.cli("CLUSTER", "NODES").split("\n")) {
          const words = line.trim().split(" ")
          if (!words[2]?.split(",").includes("master") || words[2].includes("fail")) continue
          const covers = words.slice(8).some((range) => {
            const [from, to] = range.split("-").map(Number)
            return slot >= from! && slot <= (to ?? from)!
          })
          if (!covers) continue
          const port = Number(words[1]!.split("@")[0]!.split(":").pop())
          const server = servers.find((x) => x.port === port)
          if (server !== undefined) return server
        }
      } catch (error) {
        lastError = error
      }
    }
    throw new Error(
      `no running node names a master for slot ${slot} (${key}): ${String(lastError)}`,
    )
  }
  const masters = () =>
    running().filter((s) => {
      if (s.paused()) return false
      try {
        return s.cli("ROLE").split("\n")[0]?.trim() === "master"
      } catch {
        return false
      }
    })
  const failover = async (master: RedisServer, timeoutMs = 30_000) => {
    // over raw sockets, not a redis-cli process per call: on a loaded machine
    // each process costs a fraction of a second, which the caller would
    // count as the failover's
    const ask = async (s: RedisServer, command: string) =>
      replyStrings(await rawCommand(s.port, command, 10_000))[0] ?? ""
    const id = (await ask(master, "CLUSTER MYID")).trim()
    let replica: RedisServer | undefined
    for (const s of running().filter((x) => x !== master && !x.paused())) {
      // CLUSTER NODES' own line: `<id> <ip:port@bus> myself,slave <master id> ...`
      const mine = (await ask(s, "CLUSTER NODES")).split("\n").find((l) => l.includes("myself"))
      if (mine?.split(" ")[3] === id) replica = s
    }
    if (replica === undefined) throw new Error(`port ${master.port} has no running replica`)
    const reply = (await ask(replica, "CLUSTER FAILOVER")).trim()
    if (reply !== "OK") throw new Error(`CLUSTER FAILOVER on port ${replica.port}: ${reply}`)
    const promoted = replica
    // the replica takes the slots as it turns master (one step in Redis)
    await waitFor(
      `port ${promoted.port} to take over from port ${master.port} (CLUSTER FAILOVER)`,
      async () => {
        if (replyStrings(await rawCommand(promoted.port, "ROLE"))[0] !== "master") return false
        for (const s of running().filter((x) => x !== master)) {
          const info = await rawCommand(s.port, "CLUSTER INFO")
          if (!info.includes("cluster_state:ok")) return false
        }
        return true
      },
      timeoutMs,
    )
    return promoted
  }
  const waitForFailover = async (failed: RedisServer, timeoutMs = 30_000) => {
    // a slot the failed master served: the first of its CLUSTER NODES ranges, as another node sees it
    const witness = running().find((s) => s !== failed)!
    const line = witness
      .cli("CLUSTER", "NODES")
      .split("\n")
      .find((l) => l.includes(`:${failed.port}@`))
    const range = line?.trim().split(" ")[8]
    if (range === undefined) throw new Error(`port ${failed.port} serves no slot: not a master`)
    const slot = Number(range.split("-")[0])
    let promoted: RedisServer | undefined
    await waitFor(
      `a replica of port ${failed.port} to serve its slots`,
      async () => {
        for (const s of running().filter((x) => x !== failed)) {
          const info = await rawCommand(s.port, "CLUSTER INFO")
          if (!info.includes("cluster_state:ok")) return false
        }
        const owner = running()
          .filter((x) => x !== failed)
          .find((s) => {
            const nodes = s.cli("CLUSTER", "NODES").split("\n")
            const mine = nodes.find((l) => l.includes("myself"))
            if (mine === undefined || !mine.split(" ")[2]!.includes("master")) return false
            return mine
              .trim()
              .split(" ")
              .slice(8)
              .some((r) => {
                const [from, to] = r.split("-").map(Number)
                return slot >= from! && slot <= (to ?? from)!
              })
          })
        promoted = owner
        return owner !== undefined
      },
      timeoutMs,
    )
    return promoted!
  }
  return {
    kind: binaries.kind,
    nodes: servers.map((s) => ({ host: s.host, port: s.port })),
    servers,
    version: servers[0]!.version,
    masterOf,
    masters,
    waitForFailover,
    failover,
    waitForHealthy,
    stop,
  }
}

export interface SentinelStartOptions extends StartOptions {
  /** Replicas of the primary (default 1). */
  readonly replicas?: number
  /** Sentinels (default 3); the quorum is 2 (1 with a single sentinel). */
  readonly sentinels?: number
  /** The primary's name (default `mymaster`). */
  readonly name?: string
  /** `sentinel down-after-milliseconds` (default 1,000). */
  readonly downAfterMs?: number
  /** `sentinel failover-timeout` (default 5,000). */
  readonly failoverTimeoutMs?: number
}

/**
 * Starts a Redis Sentinel deployment on free loopback ports: a primary,
 * `replicas` replicas of it, and `sentinels` sentinels monitoring it with a
 * generated sentinel.conf (`sentinel monitor <name> 127.0.0.1 <port> 2`,
 * `down-after-milliseconds` 1,000, `failover-timeout` 5,000), and waits
 * until every replica's link is up and every sentinel sees every replica and
 * every other sentinel (so a failover can be agreed on at once). A failed
 * start stops what it started.
 */
export const startRedisSentinel = async (
  options: SentinelStartOptions = {},
): Promise<RedisSentinel> => {
  const binaries = resolveBinaries(options.kind ?? "redis7")
  const name = options.name ?? "mymaster"
  const replicaCount = options.replicas ?? 1
  const sentinelCount = options.sentinels ?? 3
  const servers: Array<RedisServer> = []
  const sentinelServers: Array<RedisServer> = []
  const stop = async () => {
    await Promise.all([...sentinelServers, ...servers].map((s) => s.stop()))
  }
  try {
    const primary = await startOne(binaries, options, [])
    servers.push(primary)
    for (let i = 0; i < replicaCount; i++)
      servers.push(await startOne(binaries, options, ["--replicaof", HOST, String(primary.port)]))
    await waitFor(
      "every replica's link to the primary",
      async () => {
        const infos = await Promise.all(
          servers.slice(1).map((s) => rawCommand(s.port, "INFO replication")),
        )
        return infos.every((info) => info.includes("master_link_status:up"))
      },
      30_000,
    )
    const config = [
      `sentinel monitor ${name} ${HOST} ${primary.port} ${Math.min(2, sentinelCount)}`,
      `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 1_000}`,
      `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 5_000}`,
      `sentinel parallel-syncs ${name} 1`,
      "",
    ].join("\n")
    for (let i = 0; i < sentinelCount; i++)
      sentinelServers.push(await startOne(binaries, { kind: binaries.kind }, [], config))
    await waitFor(
      `${sentinelCount} sentinels seeing ${replicaCount} replicas and each other`,
      async () => {
        const infos = await Promise.all(
          sentinelServers.map((s) => rawCommand(s.port, "INFO sentinel")),
        )
        return infos.every(
          (info) =>
            info.includes(`slaves=${replicaCount},`) && info.includes(`sentinels=${sentinelCount}`),
        )
      },
      30_000,
    )
  } catch (error) {
    await stop()
    throw error
  }
  const named = async (sentinel: RedisServer): Promise<RedisServer | undefined> => {
    const reply = replyStrings(
      await rawCommand(sentinel.port, `SENTINEL get-master-addr-by-name ${name}`),
    )
    const port = Number(reply[1])
    return servers.find((s) => s.port === port)
  }
  const primary = async (): Promise<RedisServer> => {
    let lastError: unknown
    for (const sentinel of sentinelServers) {
      try {
        const server = await named(sentinel)
        if (server !== undefined) return server
      } catch (error) {
        lastError = error
      }
    }
    throw new Error(`no sentinel names the primary of ${name}: ${String(lastError)}`)
  }
  const waitForFailover = async (from: RedisServer, timeoutMs = 30_000): Promise<RedisServer> => {
    let promoted: RedisServer | undefined
    await waitFor(
      `the sentinels to promote a replica of ${name} in place of port ${from.port}`,
      async () => {
        const now = await Promise.all(sentinelServers.map(named))
        const first = now[0]
        if (first === undefined || first.port === from.port) return false
        if (!now.every((s) => s?.port === first.port)) return false
        const role = replyStrings(await rawCommand(first.port, "ROLE"))
        promoted = first
        return role[0] === "master"
      },
      timeoutMs,
    )
    return promoted!
  }
  return {
    kind: binaries.kind,
    name,
    sentinels: sentinelServers.map((s) => ({ host: s.host, port: s.port })),
    sentinelServers,
    servers,
    version: servers[0]!.version,
    primary,
    waitForFailover,
    stop,
  }
}

/**
 * What a vitest `globalSetup` hands to test files through `provide`/`inject`:
 * where a server runs, or the one-line reason it could not start.
 */
export type ServerInfo =
  | {
      readonly ok: true
      readonly kind: ServerKind
      readonly version: string
      readonly url: string
      readonly host: string
      readonly port: number
    }
  | { readonly ok: false; readonly kind: ServerKind; readonly error: string }

export type ClusterInfo =
  | {
      readonly ok: true
      readonly kind: ServerKind
      readonly version: string
      readonly nodes: ReadonlyArray<{ readonly host: string; readonly port: number }>
    }
  | { readonly ok: false; readonly kind: ServerKind; readonly error: string }

const oneLine = (error: unknown): string =>
  (error instanceof Error ? error.message : String(error)).split("\n")[0]!

/** Starts a server and describes it as a `ServerInfo`, never throwing. */
export const startForTests = async (
  kind: ServerKind,
): Promise<{ readonly info: ServerInfo; readonly stop: () => Promise<void> }> => {
  try {
    const server = await startRedis({ kind })
    return {
      info: {
        ok: true,
        kind,
        version: server.version,
        url: server.url,
        host: server.host,
        port: server.port,
      },
      stop: server.stop,
    }
  } catch (error) {
    return { info: { ok: false, kind, error: oneLine(error) }, stop: async () => {} }
  }
}

/** Starts a cluster and describes it as a `ClusterInfo`, never throwing. */
export const startClusterForTests = async (
  kind: ServerKind,
): Promise<{ readonly info: ClusterInfo; readonly stop: () => Promise<void> }> => {
  try {
    const cluster = await startRedisCluster({ kind })
    return {
      info: { ok: true, kind, version: cluster.version, nodes: cluster.nodes },
      stop: cluster.stop,
    }
  } catch (error) {
    return { info: { ok: false, kind, error: oneLine(error) }, stop: async () => {} }
  }
}

/**
 * Everything a vitest `globalSetup` needs: starts the given server kinds and
 * (optionally) a cluster in parallel, never throwing; hand `infos` to the test
 * files with `project.provide` and call `stop` from the teardown.
 *
 * ```ts
 * export default async function setup(project: TestProject) {
 *   const servers = await startTestServers({ kinds: ["redis7"], cluster: "redis7" })
 *   project.provide("redis7", servers.infos.redis7!)
 *   return servers.stop
 * }
 * ```
 */
export const startTestServers = async (options: {
  readonly kinds?: ReadonlyArray<ServerKind>
  readonly cluster?: ServerKind | false
}): Promise<{
  readonly infos: Partial<Record<ServerKind, ServerInfo>>
  readonly cluster: ClusterInfo | undefined
  readonly stop: () => Promise<void>
}> => {
  const kinds = options.kinds ?? SERVER_KINDS
  const [singles, cluster] = await Promise.all([
    Promise.all(kinds.map((kind) => startForTests(kind))),
    options.cluster ? startClusterForTests(options.cluster) : Promise.resolve(undefined),
  ])
  return {
    infos: Object.fromEntries(singles.map((s) => [s.info.kind, s.info])),
    cluster: cluster?.info,
    stop: async () => {
      await Promise.all([...singles, ...(cluster ? [cluster] : [])].map((s) => s.stop()))
    },
  }
}
