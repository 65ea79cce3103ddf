/** Fairness metrics of the runtime benchmark (pure; see runtime.bench.ts). */

/** Jain's fairness index of per-shard service: 1 when equal, 1/n when one shard gets everything. */
export const jainIndex = (service: ReadonlyArray<number>): number => {
  const sum = service.reduce((a, b) => a + b, 0)
  const squares = service.reduce((a, b) => a + b * b, 0)
  return squares === 0 ? 1 : (sum * sum) / (service.length * squares)
}

/**
 * The worst wait of a backlogged shard, in rounds of `shards` turns: the most
 * turns of other shards between two turns of a shard (or before its first
 * turn) while it still had backlog, divided by the shard count.
 */
export const worstWaitRounds = (
  order: ReadonlyArray<number>,
  backlogTurns: ReadonlyMap<number, number>,
  shards: number,
): number => {
  const remaining = new Map(backlogTurns)
  const last = new Map<number, number>()
  let worst = 0
  order.forEach((shard, i) => {
    const prev = last.get(shard) ?? -1
    worst = Math.max(worst, i - prev - 1)
    last.set(shard, i)
    remaining.set(shard, (remaining.get(shard) ?? 0) - 1)
  })
  // a shard never served at all waited the whole run
  for (const [shard, turns] of backlogTurns)
    if (turns > 0 && !last.has(shard)) worst = Math.max(worst, order.length)
  return worst / shards
}

/** Service per shard in the first `window` turns. */
export const serviceCounts = (order: ReadonlyArray<number>, shards: number, window: number) => {
  const counts = new Array<number>(shards).fill(0)
  for (const shard of order.slice(0, window)) counts[shard]!++
  return counts
}

/** Skewed backlogs: the last shard 20x the first, every shard at least `minTurns` batches. */
export const skewedBacklog = (shards: number, batch: number, minTurns: number) =>
  Array.from({ length: shards }, (_, s) =>
    s === shards - 1 ? batch * minTurns * 20 : batch * (minTurns + ((s * 7) % 11)),
  )
