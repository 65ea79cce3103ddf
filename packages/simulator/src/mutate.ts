#!/usr/bin/env node
/**
 * Runs the mutation seed set (`mutationSeeds`) against whatever
 * `@shardline/core` this file resolves, stopping at the first violation, and
 * prints the outcome as one JSON line. scripts/mutate.mjs runs it once per
 * mutant, in a scratch copy of the repository whose core was mutated.
 *
 *   node packages/simulator/dist/mutate.js [--limit N]
 *
 * @module
 */
import { mutationSeeds, runMutationSeeds } from "./mutation.js"
import { replayCommand } from "./run.js"

const limitAt = process.argv.indexOf("--limit")
const limit = limitAt >= 0 ? Number(process.argv[limitAt + 1]) : Number.POSITIVE_INFINITY
const t0 = performance.now()
const outcome = runMutationSeeds(mutationSeeds().slice(0, limit))
console.log(
  JSON.stringify({
    ...outcome,
    replay: outcome.options === undefined ? undefined : replayCommand(outcome.options),
    wallMs: Math.round(performance.now() - t0),
  }),
)
