/**
 * Worker thread of the swarm runner: receives run options, answers summaries.
 *
 * @module
 */
import { parentPort } from "node:worker_threads"
import type { SimOptions } from "./options.js"
import { runSeed } from "./run.js"

parentPort?.on("message", (options: SimOptions) => {
  const { summary } = runSeed(options)
  parentPort?.postMessage(summary)
})
