/**
 * The runtime benchmark's shape from `BENCH_SHARDS` and `BENCH_WORKERS`
 * (bench:runtime-redis): one member owning every shard with that many
 * workers, against as many raw loops. Refused with the variable's name
 * unless each is an integer within the runtime's own limits (docs/runtime.md,
 * configuration: `shardCount` 1..65,536, `runtimeMaxConcurrency` 1..1,024),
 * so a typo fails here, not as NaN loops halfway through a run.
 *
 * @module
 */

export interface BenchShape {
  readonly shards: number
  readonly workers: number
}

export const DEFAULT_SHAPE: BenchShape = { shards: 16, workers: 4 }

const integerIn = (
  name: string,
  raw: string | undefined,
  fallback: number,
  max: number,
): number => {
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > max)
    throw new Error(`${name}=${JSON.stringify(raw)}: expected an integer from 1 to ${max}`)
  return n
}

export const benchShape = (env: Readonly<Record<string, string | undefined>>): BenchShape => ({
  shards: integerIn("BENCH_SHARDS", env.BENCH_SHARDS, DEFAULT_SHAPE.shards, 65_536),
  workers: integerIn("BENCH_WORKERS", env.BENCH_WORKERS, DEFAULT_SHAPE.workers, 1_024),
})

/** The results' name suffix: none for the default shape, `-<S>x<W>` otherwise. */
export const shapeSuffix = ({ shards, workers }: BenchShape): string =>
  shards === DEFAULT_SHAPE.shards && workers === DEFAULT_SHAPE.workers
    ? ""
    : `-${shards}x${workers}`
