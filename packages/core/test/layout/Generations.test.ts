import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  contains,
  type Generation,
  HASH_SPACE,
  hashRange,
  keyHash,
  next,
  overlapping,
  shardOf,
  shardOfHash,
} from "../../src/layout/index.js"

const gen = (shardCount: number, firstShard = 0, generation = 0): Generation => ({
  generation,
  firstShard,
  shardCount,
})

describe("keyHash (MurmurHash3 x86 32-bit, seed 0, UTF-8)", () => {
  it.each([
    ["", 0x00000000],
    ["a", 0x3c2569b2],
    ["abc", 0xb3dd93fa],
    ["aaaa", 0x7eeed987],
    ["hello", 0x248bfa47],
    ["héllo", 0xbc9fa068],
    ["The quick brown fox jumps over the lazy dog", 0x2e4ff723],
  ])("keyHash(%j) is the reference value", (key, expected) => {
    expect(keyHash(key)).toBe(expected)
  })
})

describe("generations", () => {
  it("the shards of a generation tile the hash space with contiguous, non-empty ranges", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4_096 }), fc.nat(1_000), (count, first) => {
        const g = gen(count, first)
        let lo = 0
        for (let s = first; s < first + count; s++) {
          const [from, to] = hashRange(g, s)
          expect(from).toBe(lo)
          expect(to).toBeGreaterThan(from)
          lo = to
        }
        expect(lo).toBe(HASH_SPACE)
      }),
    )
  })

  it("shardOfHash puts every hash in the shard whose range holds it", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 65_536 }),
        fc.nat(100),
        fc.integer({ min: 0, max: HASH_SPACE - 1 }),
        (count, first, h) => {
          const g = gen(count, first)
          const s = shardOfHash(g, h)
          expect(contains(g, s)).toBe(true)
          const [lo, hi] = hashRange(g, s)
          expect(h).toBeGreaterThanOrEqual(lo)
          expect(h).toBeLessThan(hi)
        },
      ),
    )
  })

  it("a key's shard under the next generation overlaps its shard under the previous one", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 512 }),
        fc.integer({ min: 1, max: 512 }),
        fc.string(),
        (n, m, key) => {
          const a = gen(n)
          const b = next(a, m)
          expect(b.firstShard).toBe(n)
          expect(overlapping(a, b, shardOf(b, key))).toContain(shardOf(a, key))
        },
      ),
    )
  })

  it("locality: a split feeds each new shard from one old shard, a merge from two", () => {
    const a = gen(16)
    const split = next(a, 32)
    for (let s = split.firstShard; s < split.firstShard + 32; s++)
      expect(overlapping(a, split, s)).toHaveLength(1)
    const merge = next(a, 8)
    for (let s = merge.firstShard; s < merge.firstShard + 8; s++)
      expect(overlapping(a, merge, s)).toHaveLength(2)
    // 3 -> 2: the middle old shard feeds both new ones
    expect(overlapping(gen(3), next(gen(3), 2), 3)).toEqual([0, 1])
    expect(overlapping(gen(3), next(gen(3), 2), 4)).toEqual([1, 2])
  })

  it("keys spread over the shards of a generation", () => {
    const g = gen(16)
    const counts = new Array<number>(16).fill(0)
    for (let i = 0; i < 16_000; i++) counts[shardOf(g, `key-${i}`)]!++
    for (const c of counts) expect(c).toBeGreaterThan(800)
  })
})
