/** Running the built `shardline` bin as a child process (tests). */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { Effect } from "effect"
import { CLI } from "./buildCli.js"

export interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

export const runCli = (args: ReadonlyArray<string>) =>
  Effect.callback<Run>((resume) => {
    // a generous deadline (a loaded CI machine has taken seconds to start
    // node); a CLI killed at it says so in stderr instead of empty output
    execFile("node", [CLI, ...args], { timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 99
      const killed =
        error?.killed === true
          ? `\n[test] the CLI was killed (${error.signal}) at its 60 s deadline`
          : ""
      resume(Effect.succeed({ code, stdout, stderr: stderr + killed }))
    })
  })

/** A standalone coordinator process; its JSON lines are collected. */
export const spawnCoordinator = (args: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child = spawn("node", [CLI, "coordinator", ...args], {
        stdio: ["ignore", "pipe", "pipe"],
      })
      const lines: Array<Record<string, unknown>> = []
      let buffer = ""
      child.stdout.on("data", (chunk: Buffer) => {
        buffer += chunk.toString()
        let i = buffer.indexOf("\n")
        while (i >= 0) {
          const line = buffer.slice(0, i)
          buffer = buffer.slice(i + 1)
          try {
            lines.push(JSON.parse(line) as Record<string, unknown>)
          } catch {
            lines.push({ event: "text", line })
          }
          i = buffer.indexOf("\n")
        }
      })
      let stderr = ""
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString()
      })
      return { child, lines, stderr: () => stderr }
    }),
    ({ child }) => Effect.sync(() => (child.exitCode === null ? child.kill("SIGKILL") : undefined)),
  )

export const exited = (child: ChildProcess) =>
  Effect.callback<number | null>((resume) => {
    if (child.exitCode !== null) return resume(Effect.succeed(child.exitCode))
    child.once("exit", (code) => resume(Effect.succeed(code)))
  })
