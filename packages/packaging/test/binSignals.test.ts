/**
 * `npx shardline dashboard` (and `coordinator`) stop when npx is sent
 * SIGTERM (issue 33): npx runs the bin under `sh -c`, and the shell exits
 * on the SIGTERM npm passes on without passing it on to the bin, which ran
 * on orphaned, holding its port. The bin now stops when its parent is gone
 * (redis-store src/internal/untilStopped.ts). Through the workspace's
 * linked bin, as a user's `npx shardline` runs it.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { type RedisServer, startRedis } from "@shardline/redis-store/testing"
import { afterAll, beforeAll, expect, it } from "vitest"

let redis: RedisServer
beforeAll(async () => {
  redis = await startRedis({ kind: "redis7" })
}, 120_000)
afterAll(async () => {
  await redis?.stop()
})

/** pid -> [ppid, state] of every process (Linux /proc). */
const processes = (): Map<number, { readonly ppid: number; readonly state: string }> => {
  const out = new Map<number, { ppid: number; state: string }>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      // "pid (comm) state ppid ...": comm may hold spaces
      const [state, ppid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      out.set(Number(entry), { ppid: Number(ppid), state: state ?? "" })
    } catch {
      // gone meanwhile
    }
  }
  return out
}

/** Every process below `pid`. */
const descendants = (pid: number): Array<number> => {
  const all = processes()
  const found: Array<number> = []
  const walk = (parent: number) => {
    for (const [child, p] of all)
      if (p.ppid === parent) {
        found.push(child)
        walk(child)
      }
  }
  walk(pid)
  return found
}

/** Still running: present and not a zombie. */
const alive = (pid: number): boolean => {
  const p = processes().get(pid)
  return p !== undefined && p.state !== "Z"
}

const waitFor = async (what: string, condition: () => boolean, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** Start `npx shardline <args>` and wait until it printed `ready`; returns it and its descendants. */
const npx = async (args: ReadonlyArray<string>, ready: RegExp) => {
  const child: ChildProcess = spawn("npx", ["--no-install", "shardline", ...args], {
    cwd: import.meta.dirname,
    stdio: ["ignore", "pipe", "pipe"],
  })
  let out = ""
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString()
  })
  child.stderr?.on("data", (d: Buffer) => {
    out += d.toString()
  })
  await waitFor(`${args[0]} to start (${out})`, () => ready.test(out), 30_000)
  const below = descendants(child.pid!)
  // npx, its shell, the bin's node
  expect(below.length, out).toBeGreaterThanOrEqual(1)
  return { child, below, output: () => out }
}

/** SIGTERM to npx; every process it started exits (any left is killed, failing the test). */
const stopsEverything = async (child: ChildProcess, below: ReadonlyArray<number>) => {
  const exited = new Promise((resolve) => child.once("exit", resolve))
  child.kill("SIGTERM")
  await exited
  try {
    await waitFor("every process npx started to exit", () => below.every((p) => !alive(p)), 10_000)
  } finally {
    for (const p of below.filter(alive)) process.kill(p, "SIGKILL")
  }
}

it("SIGTERM to `npx shardline dashboard`: the dashboard exits too, no orphan", async () => {
  const { child, below } = await npx(
    ["dashboard", "--redis", redis.url, "--port", "0"],
    /shardline dashboard on http:\/\/\S+/,
  )
  await stopsEverything(child, below)
})

it("SIGTERM to `npx shardline coordinator`: the coordinator hands over and exits too", async () => {
  const { child, below, output } = await npx(
    ["coordinator", "--redis", redis.url, "--stream", "s", "--group", "g", "--shards", "2"],
    /"event":"(coordinator|standby)"/,
  )
  await stopsEverything(child, below)
  expect(output()).toContain('"event":"stopping"')
})
