/**
 * `ShardlineModule` on a real Redis (redis-store's test harness), and the
 * example application (example/) run as a process (docs/nestjs.md): it
 * boots, is ready on its health endpoint, consumes what is produced, and on
 * SIGTERM (Nest's shutdown hooks) leaves the group and exits 0.
 */
import "reflect-metadata"
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import path from "node:path"
import { Test } from "@nestjs/testing"
import { start } from "@shardline/member-runtime"
import { freePort, type RedisServer, startRedis } from "@shardline/redis-store/testing"
import ts from "typescript"
import { afterAll, beforeAll, expect, it } from "vitest"
import { Shardline, ShardlineModule } from "../src/index.js"
import { Billing, Ledger, until } from "./fixtures.js"

let redis: RedisServer | undefined
beforeAll(async () => {
  redis = await startRedis({ kind: "redis7" })
}, 120_000)
afterAll(async () => {
  await redis?.stop()
})
const url = () => redis!.url

it("forRoot on Redis: providers' listeners consume with their dependencies; close leaves the group", async () => {
  const moduleRef = await Test.createTestingModule({
    imports: [
      ShardlineModule.forRoot({ redis: { url: url() }, memberBase: "nest", logLevel: "silent" }),
    ],
    providers: [Ledger, Billing],
  }).compile()
  await moduleRef.init()
  const left: Array<string> = []
  try {
    const shardline = moduleRef.get(Shardline)
    shardline.runtime.on((e) => {
      if (e.type === "left") left.push(e.memberId)
    })
    await shardline
      .producer("orders")
      .sendBatch(
        Array.from({ length: 60 }, (_, n) => ({ key: `k${n % 5}`, fields: { n: String(n) } })),
      )
    const ledger = moduleRef.get(Ledger)
    await until("every order charged", () => ledger.count === 60)
    expect(ledger.charged.get("k1")).toEqual(
      Array.from({ length: 12 }, (_, i) => String(1 + i * 5)),
    )
    await until("ready", () => shardline.health().ready)
  } finally {
    await moduleRef.close()
  }
  await until("both members left", () => left.length === 2)
  expect(left.sort()).toEqual(["nest-m0", "nest-m1"])
})

// -- the example application as a process ------------------------------------

const pkg = path.resolve(import.meta.dirname, "..")
// inside the package (not under node_modules) so that `@shardline/nestjs` resolves to
// the package itself, as in an app; dist/ is ignored by git
const out = path.join(pkg, "example", "dist")

/** Compile example/*.ts as a Nest app is compiled (legacy decorators, decorator metadata). */
const compileExample = () => {
  if (!existsSync(path.join(pkg, "dist", "index.js")))
    throw new Error(
      `${pkg}/dist is missing: run \`pnpm build\` (the example imports @shardline/nestjs)`,
    )
  rmSync(out, { recursive: true, force: true })
  mkdirSync(out, { recursive: true })
  for (const file of readdirSync(path.join(pkg, "example")).filter((f) => f.endsWith(".ts"))) {
    const source = readFileSync(path.join(pkg, "example", file), "utf8")
    const js = ts.transpileModule(source, {
      fileName: file,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
      },
    }).outputText
    writeFileSync(path.join(out, file.replace(/\.ts$/, ".js")), js)
  }
  return path.join(out, "main.js")
}

it("the example app boots, is ready, consumes, and on SIGTERM leaves the group before it exits", async () => {
  const main = compileExample()
  const httpPort = await freePort()
  const child: ChildProcess = spawn(process.execPath, [main], {
    cwd: pkg,
    env: {
      ...process.env,
      REDIS_URL: url(),
      HTTP_PORT: String(httpPort),
      POD_IP: "10.0.0.7",
      SHUTDOWN_TIMEOUT_MS: "10000",
    },
    stdio: ["ignore", "pipe", "pipe"],
  })
  let output = ""
  child.stdout!.on("data", (c) => {
    output += String(c)
  })
  child.stderr!.on("data", (c) => {
    output += String(c)
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  )
  try {
    await until(
      () => `started\n${output}`,
      () => output.includes('"event":"started"'),
    )
    expect(output).toContain('"memberBase":"10.0.0.7"')
    const ready = async () => {
      try {
        return (await fetch(`http://127.0.0.1:${httpPort}/readyz`)).status === 200
      } catch {
        return false
      }
    }
    for (let i = 0; i < 1_500 && !(await ready()); i++)
      await new Promise((resolve) => setTimeout(resolve, 20))
    expect(await ready(), output).toBe(true)
    // another process produces, as a service would
    const producer = await start({ redis: { url: url() }, handleSignals: false })
    try {
      await producer
        .producer("orders")
        .sendBatch(
          Array.from({ length: 20 }, (_, n) => ({ key: `c${n}`, fields: { n: String(n) } })),
        )
    } finally {
      await producer.stop()
    }
    await until(
      `20 billed\n${output}`,
      () => (output.match(/"event":"billed"/g) ?? []).length >= 20,
    )
    const metrics = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text()
    expect(metrics).toMatch(/^shardline_messages_handled_total\{.*group="billing".*\} \d+/m)
    child.kill("SIGTERM")
    // Nest's shutdown hooks close the application, then raise the signal again
    // (the process ends by SIGTERM, as without hooks, but after the close)
    expect(await exited).toEqual({ code: null, signal: "SIGTERM" })
    expect(output).toContain('"event":"stopped"')
    // the runtime left the group: SIGTERM went through Nest's shutdown hooks, not a bare exit
    expect(output.match(/"event":"left"/g)?.length).toBe(2)
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL")
  }
}, 120_000)
