#!/usr/bin/env node
/**
 * Runs the mutation seed set (`mutationSeeds`) against whatever
 * `@shardline/core` this file resolves, stopping at the first violation, and
 * prints the outcome as one JSON line. scripts/mutate.mjs runs it once per
 * mutant, in a scratch copy of the repository whose core was mutated.
 *
 *   node packages/simulator/dist/mutate.js [--limit N] [--broken KIND]
 *
 * `--broken KIND` runs every seed with a simulator-side mutant (the model's
 * own breakages, e.g. `tx-effects-at-handle`) instead of a mutated core.
 *
 * @module
 */
import { mutationSeeds, runMutationSeeds } from "./mutation.js"
import { BROKEN } from "./options.js"
import { replayCommand } from "./run.js"

const limitAt = process.argv.indexOf("--limit")
const limit = limitAt >= 0 ? Number(process.argv[limitAt + 1]) : Number.POSITIVE_INFINITY
const brokenAt = process.argv.indexOf("--broken")
const broken = brokenAt >= 0 ? BROKEN.find((b) => b === process.argv[brokenAt + 1]) : undefined
if (brokenAt >= 0 && broken === undefined) {
  console.error(`unknown --broken "${process.argv[brokenAt + 1]}"`)
  process.exit(2)
}
const t0 = performance.now()
const outcome = runMutationSeeds(mutationSeeds().slice(0, limit), broken)
console.log(
  JSON.stringify({
    ...outcome,
    replay: outcome.options === undefined ? undefined : replayCommand(outcome.options),
    wallMs: Math.round(performance.now() - t0),
  }),
)
