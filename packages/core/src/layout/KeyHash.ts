/**
 * The documented key hash producers route by: MurmurHash3 x86 32-bit, seed 0,
 * over the key's UTF-8 bytes, as an unsigned 32-bit integer. Any client in any
 * language that implements it routes a key to the same shard.
 *
 * @example
 * ```ts
 * keyHash("")      // 0
 * keyHash("hello") // 0x248bfa47 (613153351), as every murmur3_32 implementation
 * ```
 */
const encoder = new TextEncoder()

const C1 = 0xcc9e2d51
const C2 = 0x1b873593

export const keyHash = (key: string): number => {
  const bytes = encoder.encode(key)
  const n = bytes.length
  let h = 0
  const blocks = n & ~3
  for (let i = 0; i < blocks; i += 4) {
    let k = bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24)
    k = Math.imul(k, C1)
    k = (k << 15) | (k >>> 17)
    k = Math.imul(k, C2)
    h ^= k
    h = (h << 13) | (h >>> 19)
    h = (Math.imul(h, 5) + 0xe6546b64) | 0
  }
  const tail = n & 3
  if (tail > 0) {
    let k = 0
    if (tail === 3) k ^= bytes[blocks + 2]! << 16
    if (tail >= 2) k ^= bytes[blocks + 1]! << 8
    k ^= bytes[blocks]!
    k = Math.imul(k, C1)
    k = (k << 15) | (k >>> 17)
    k = Math.imul(k, C2)
    h ^= k
  }
  h ^= n
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}
