/**
 * The real-server harness (`@shardline/redis-store/testing`): a missing
 * binary is one line saying how to install it; servers start on free ports
 * in their own directory, persist only when asked, and leave nothing behind.
 */
import { execFileSync, spawn } from "node:child_process"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { afterEach, describe, expect, it } from "vitest"
import {
  resolveBinaries,
  ServerMissing,
  startForTests,
  startRedis,
  startRedisCluster,
} from "../src/testing.js"

/**
 * Polls `observe` until `done` holds (30 s): a cluster's views converge by
 * gossip, so a node's role or another node's map may lag the event that
 * changes it, the more so on a loaded machine.
 */
const eventually = async <A>(what: string, observe: () => A, done: (a: A) => boolean) => {
  const deadline = Date.now() + 30_000
  for (;;) {
    const seen = observe()
    if (done(seen)) return seen
    if (Date.now() > deadline) throw new Error(`${what}: still ${String(seen)} after 30 s`)
    await new Promise((r) => setTimeout(r, 100))
  }
}
const role = (s: { cli: (...args: Array<string>) => string }) => s.cli("ROLE").split("\n")[0]

const saved = { ...process.env }
afterEach(() => {
  process.env = { ...saved }
})

describe("test servers", () => {
  it("a missing Redis 8 build is one line naming the build script", async () => {
    process.env.SHARDLINE_REDIS8_DIR = "/nonexistent/redis-8"
    expect(() => resolveBinaries("redis8")).toThrow(ServerMissing)
    expect(() => resolveBinaries("redis8")).toThrow(
      "Redis 8 not built: run scripts/build-redis8.sh (looked in /nonexistent/redis-8)",
    )
    const info = await startForTests("redis8")
    expect(info.info).toEqual({
      ok: false,
      kind: "redis8",
      error: "Redis 8 not built: run scripts/build-redis8.sh (looked in /nonexistent/redis-8)",
    })
  })

  it("a missing redis-server is one line saying how to install it", () => {
    process.env.SHARDLINE_REDIS7_BIN = "/nonexistent/redis-server"
    expect(() => resolveBinaries("redis7")).toThrow(
      'redis-server not found: run "apt-get install redis-server" (or set SHARDLINE_REDIS7_BIN)',
    )
    process.env.SHARDLINE_VALKEY_BIN = "/nonexistent/valkey-server"
    expect(() => resolveBinaries("valkey8")).toThrow(
      /^valkey-server not found: run "apt-get install/,
    )
  })

  it("starts on a free loopback port in its own directory, without persistence, and cleans up", async () => {
    const [a, b] = await Promise.all([startRedis(), startRedis()])
    try {
      expect(a.port).not.toBe(b.port)
      expect(a.dir).not.toBe(b.dir)
      expect(a.version).toMatch(/^7\./)
      expect(a.cli("SET", "k", "v").trim()).toBe("OK")
      expect(a.cli("CONFIG", "GET", "appendonly")).toContain("no")
      expect(a.cli("CONFIG", "GET", "save").split("\n")[1]).toBe("")
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
    expect(existsSync(a.dir)).toBe(false)
    expect(() => process.kill(a.pid, 0)).toThrow()
    await a.stop() // idempotent
  })

  it("a port another server took before this one bound it: the start fails, the other server is not used", async () => {
    const a = await startRedis()
    const binary = resolveBinaries("redis7").server
    await a.kill()
    // another test process's server binds the port in between (a free port
    // is only probed, so two processes can be handed the same one)
    const intruder = spawn(
      binary,
      ["--port", String(a.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
      { stdio: "ignore" },
    )
    try {
      await eventually(
        "the intruder up",
        () => {
          try {
            return execFileSync(resolveBinaries("redis7").cli, ["-p", String(a.port), "PING"], {
              encoding: "utf8",
            }).trim()
          } catch {
            return "down"
          }
        },
        (reply) => reply === "PONG",
      )
      await expect(a.restart()).rejects.toThrow(
        new RegExp(`did not start on port ${a.port}: .*another server \\(pid ${intruder.pid}\\)`),
      )
    } finally {
      intruder.kill("SIGKILL")
      await a.stop()
    }
  })

  it("a server that exits at start (here: a bad argument) fails the start with its log, not a 10 s wait per try", async () => {
    await expect(startRedis({ args: ["--no-such-option", "x"] })).rejects.toThrow(
      /did not start on port \d+: Error: exited .*no-such-option/,
    )
  })

  it("persists only when asked", async () => {
    const server = await startRedis({ persistence: true })
    try {
      expect(server.cli("CONFIG", "GET", "appendonly")).toContain("yes")
      server.cli("SET", "k", "v")
      expect(readdirSync(server.dir)).toContain("appendonlydir")
    } finally {
      await server.stop()
    }
  })
})

describe("a 3 + 3 cluster", () => {
  it("starts 3 masters with one replica each, in sync; names a key's master; a killed master's replica takes over", async () => {
    const cluster = await startRedisCluster({ replicas: 1 })
    try {
      expect(cluster.servers).toHaveLength(6)
      expect(cluster.masters()).toEqual(cluster.servers.slice(0, 3))
      for (const replica of cluster.servers.slice(3))
        expect(replica.cli("INFO", "replication")).toContain("master_link_status:up")
      const key = "shardline:{orders:3}"
      const master = cluster.masterOf(key)
      master.cli("SET", key, "v")
      expect(master.cli("GET", key).trim()).toBe("v")
      await master.kill()
      expect(master.running()).toBe(false)
      const promoted = await cluster.waitForFailover(master)
      expect(promoted).not.toBe(master)
      await eventually(
        `the master of ${key}`,
        () => cluster.masterOf(key).port,
        (port) => port === promoted.port,
      )
      expect(promoted.cli("GET", key).trim()).toBe("v")
      // back as a replica of the promoted master
      await master.restart()
      await cluster.waitForHealthy()
      // it learns it lost its slots by gossip, after it answers
      await eventually(
        "the restarted master's role",
        () => role(master),
        (r) => r === "slave",
      )
      // SIGSTOP: running, silent; SIGCONT: answers again
      const other = cluster.masters().find((m) => m !== promoted)!
      other.pause()
      expect(other.running()).toBe(true)
      // state T: stopped by a signal (once the kernel delivered it: kill()
      // returns before the process stops)
      await eventually(
        "the paused master's state",
        () => readFileSync(`/proc/${other.pid}/stat`, "utf8").split(" ")[2],
        (state) => state === "T",
      )
      other.resume()
      expect(other.cli("PING").trim()).toBe("PONG")
      // CLUSTER FAILOVER on its replica: the replica takes its slots, it stays up as a replica
      const otherKey = ["a", "b", "c", "d", "e", "f"]
        .map((k) => `shardline:{${k}}`)
        .find((k) => cluster.masterOf(k) === other)!
      const taken = await cluster.failover(other)
      expect(taken).not.toBe(other)
      await cluster.waitForHealthy()
      await eventually(
        `the master of ${otherKey}`,
        () => cluster.masterOf(otherKey).port,
        (port) => port === taken.port,
      )
      expect(other.running()).toBe(true)
      await eventually(
        "the failed-over master's role",
        () => role(other),
        (r) => r === "slave",
      )
    } finally {
      await cluster.stop()
    }
  }, 120_000)
})
