/**
 * Makes the targets sum to exactly `n`, so the assignment is total: a missing
 * target would leave a shard without an owner while members live. The quotas
 * are IEEE doubles; with weights inside [MIN_MEMBER_WEIGHT, MAX_MEMBER_WEIGHT]
 * no input has been found whose floors and ceil slots miss `n` (millions of
 * random inputs), so this is a guard, a no-op whenever the arithmetic is
 * exact. Adds to the member furthest below its quota, or takes from the one
 * furthest above it (ties by ascending id).
 */
export const repairTotal = (n: number, quota: Float64Array, target: Int32Array): void => {
  let sum = 0
  for (let i = 0; i < target.length; i++) sum += target[i]!
  for (; sum < n; sum++) {
    let best = 0
    for (let i = 1; i < target.length; i++)
      if (quota[i]! - target[i]! > quota[best]! - target[best]!) best = i
    target[best]!++
  }
  for (; sum > n; sum--) {
    let best = -1
    for (let i = 0; i < target.length; i++)
      if (target[i]! > 0 && (best < 0 || quota[i]! - target[i]! < quota[best]! - target[best]!))
        best = i
    target[best]!--
  }
}
