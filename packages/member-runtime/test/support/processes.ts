/**
 * Member processes for the real-process tests: builds
 * test/redis/procs/member.ts into one ESM file (tsup, dependencies external,
 * as the package build), spawns it as child Node processes and collects the
 * JSON lines each one writes (see that file for the line format).
 */
import { type ChildProcess, spawn } from "node:child_process"
import path from "node:path"
import { build } from "tsup"
import type { MemberProcessConfig } from "../redis/procs/member.js"
import type { ProducerProcessConfig } from "../redis/procs/producer.js"
import { eventually } from "./redis.js"

const here = import.meta.dirname
export const MEMBER_SCRIPT = path.resolve(here, "../redis/procs/dist/member.js")

/**
 * Builds the member script (a few seconds); call once per test file, in
 * `beforeAll`. A file that runs beside another process test file builds its
 * own copy (`name`: `procs/dist/<name>.js`, passed to `MemberProcess`), so
 * one file's build never rewrites the script the other is starting.
 */
export const buildMemberScript = async (
  name = "member",
  /** The process's source in test/redis/procs/ (`member`, or `producer`: procs/producer.ts). */
  source: "member" | "producer" = "member",
): Promise<string> => {
  await build({
    config: false,
    entry: { [name]: path.resolve(here, `../redis/procs/${source}.ts`) },
    outDir: path.dirname(MEMBER_SCRIPT),
    format: ["esm"],
    dts: false,
    clean: false,
    silent: true,
    target: "node20",
  })
  return path.join(path.dirname(MEMBER_SCRIPT), `${name}.js`)
}

export interface Line {
  readonly t: number
  readonly ev: string
  readonly [field: string]: unknown
  /** Set by the parent: which process wrote it (`<memberId>#<start number>`). */
  readonly proc: string
  readonly memberId: string
}

let started = 0

/**
 * A child process of the tests, by default a member (procs/member.ts);
 * `ProducerProcess` below runs procs/producer.ts.
 */
export class MemberProcess<Config extends { readonly memberId: string } = MemberProcessConfig> {
  readonly lines: Array<Line> = []
  readonly proc: string
  readonly child: ChildProcess
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  stderr = ""
  private partial = ""

  constructor(
    readonly config: Config,
    script: string = MEMBER_SCRIPT,
    /** A command that runs the process, e.g. `["ip", "netns", "exec", "ns1"]` (it must exec it). */
    wrap: ReadonlyArray<string> = [],
  ) {
    this.proc = `${config.memberId}#${++started}`
    const argv = [...wrap, process.execPath, script, JSON.stringify(config)]
    this.child = spawn(argv[0]!, argv.slice(1), {
      stdio: ["ignore", "pipe", "pipe"],
    })
    this.child.stdout!.setEncoding("utf8")
    this.child.stdout!.on("data", (chunk: string) => {
      const text = this.partial + chunk
      const parts = text.split("\n")
      this.partial = parts.pop()!
      for (const part of parts)
        if (part.trim() !== "")
          this.lines.push({ ...JSON.parse(part), proc: this.proc, memberId: config.memberId })
    })
    this.child.stderr!.setEncoding("utf8")
    this.child.stderr!.on("data", (chunk: string) => {
      this.stderr += chunk
    })
    // "close", not "exit": it comes once the process ended and its output was
    // read to the end, so a test that reads the lines after the exit sees all
    this.exited = new Promise((resolve) =>
      this.child.on("close", (code, signal) => resolve({ code, signal })),
    )
  }

  get pid(): number {
    return this.child.pid!
  }

  has(predicate: (line: Line) => boolean): boolean {
    return this.lines.some(predicate)
  }

  /** Waits (up to 60 s) until a line matches; fails with the process's stderr. */
  async waitFor(what: string, predicate: (line: Line) => boolean, timeoutMs = 60_000) {
    await eventually(
      `${this.proc}: ${what}\n${this.stderr.slice(-2_000)}`,
      () => this.lines.some(predicate),
      timeoutMs,
    )
    return this.lines.find(predicate)!
  }

  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal)
  }

  /** SIGTERM (graceful stop) and wait for the exit; SIGKILL if it takes over `timeoutMs`. */
  async stop(timeoutMs = 60_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.exited
    this.signal("SIGTERM")
    const timer = setTimeout(() => this.signal("SIGKILL"), timeoutMs)
    try {
      return await this.exited
    } finally {
      clearTimeout(timer)
    }
  }

  /** Ends it whatever its state (afterEach cleanup): SIGCONT then SIGKILL. */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    this.signal("SIGCONT")
    this.signal("SIGKILL")
    await this.exited
  }
}

/**
 * A producer process (procs/producer.ts, built with
 * `buildMemberScript(name, "producer")`): its lines say which sends were
 * confirmed (`sent`), in order per key.
 */
export class ProducerProcess extends MemberProcess<ProducerProcessConfig & { memberId: string }> {
  constructor(config: ProducerProcessConfig, script: string, name = "producer") {
    super({ ...config, memberId: name }, script)
  }

  /** The confirmed sends so far: `n` -> { key, shard, id }. */
  confirmed(): Map<number, { key: string; shard: number; id: string }> {
    const out = new Map<number, { key: string; shard: number; id: string }>()
    for (const l of this.lines)
      if (l.ev === "sent")
        out.set(l.n as number, {
          key: l.key as string,
          shard: l.shard as number,
          id: l.id as string,
        })
    return out
  }

  /** Every `n` each key's loop attempted, in order (the first attempt of each): what it produced. */
  producedByKey(): Map<string, Array<number>> {
    const out = new Map<string, Array<number>>()
    const seen = new Set<number>()
    for (const l of this.lines) {
      if (l.ev !== "attempt" || seen.has(l.n as number)) continue
      seen.add(l.n as number)
      const list = out.get(l.key as string) ?? []
      list.push(l.n as number)
      out.set(l.key as string, list)
    }
    return out
  }
}
