/**
 * The swarm runner: many seeds over worker threads (all cores by default),
 * for CI and long runs. Each seed draws its shape (members, shards, workers,
 * rate) unless a dimension is fixed. Each worker runs whole seeds; results come back as
 * summaries (the failing ones with the events around the violation).
 *
 * @module
 */
import { availableParallelism } from "node:os"
import { Worker } from "node:worker_threads"
import { drawShape, type ShapeDim, type SimOptions } from "./options.js"
import type { Summary } from "./summary.js"

export interface SwarmOptions {
  readonly base: SimOptions
  readonly fromSeed: number
  readonly count: number
  readonly jobs?: number | undefined
  /** Shape dimensions to keep from `base`; the others are drawn per seed. */
  readonly fixed?: ReadonlySet<ShapeDim> | undefined
  readonly onResult?: (summary: Summary, done: number) => void
}

export interface SwarmReport {
  readonly seeds: number
  readonly failed: ReadonlyArray<Summary>
  readonly events: number
  readonly wallMs: number
}

/** The options of one swarm seed: the base with the shape drawn (except `fixed` dimensions). */
export const swarmOptions = (
  base: SimOptions,
  seed: number,
  fixed: ReadonlySet<ShapeDim> = new Set(),
): SimOptions => ({ ...base, seed, ...drawShape(seed, base, fixed) })

export const runSwarm = (options: SwarmOptions): Promise<SwarmReport> =>
  new Promise((resolve, reject) => {
    const jobs = Math.max(1, Math.min(options.jobs ?? availableParallelism(), options.count))
    const t0 = performance.now()
    const failed: Array<Summary> = []
    let next = 0
    let done = 0
    let events = 0
    let live = jobs
    const workers: Array<Worker> = []
    const feed = (w: Worker) => {
      if (next >= options.count) {
        void w.terminate()
        if (--live === 0)
          resolve({ seeds: done, failed, events, wallMs: Math.round(performance.now() - t0) })
        return
      }
      const seed = options.fromSeed + next++
      w.postMessage(swarmOptions(options.base, seed, options.fixed))
    }
    for (let j = 0; j < jobs; j++) {
      const w = new Worker(new URL("./swarmWorker.js", import.meta.url))
      workers.push(w)
      w.on("message", (s: Summary) => {
        done++
        events += s.events
        if (s.violations.length > 0) failed.push(s)
        options.onResult?.(s, done)
        feed(w)
      })
      w.on("error", (e) => {
        for (const other of workers) void other.terminate()
        reject(e)
      })
      feed(w)
    }
  })
