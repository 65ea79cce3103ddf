/**
 * Deterministic pseudo-random streams.
 *
 * One run seed derives every random choice. Each concern (workload, network,
 * store, clocks, faults, ...) draws from its own named stream, seeded by
 * hashing `(seed, name)`, so adding draws to one stream (a new fault kind)
 * never shifts the values another stream (the workload) sees.
 *
 * Generator: xoshiro128** (32-bit state words, no BigInt, no allocation per
 * draw), seeded with splitmix32 as its authors recommend.
 *
 * @module
 */

const splitmix32 = (state: { s: number }): number => {
  state.s = (state.s + 0x9e3779b9) | 0
  let z = state.s
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  return (z ^ (z >>> 16)) >>> 0
}

/** FNV-1a over the seed's two 32-bit halves and the stream name. */
export const streamSeed = (seed: number, name: string): number => {
  let h = 0x811c9dc5
  const lo = seed >>> 0
  const hi = Math.floor(seed / 0x1_0000_0000) >>> 0
  for (const word of [lo, hi]) {
    for (let i = 0; i < 4; i++) {
      h ^= (word >>> (i * 8)) & 0xff
      h = Math.imul(h, 0x01000193)
    }
  }
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

export class Prng {
  private a: number
  private b: number
  private c: number
  private d: number

  constructor(seed32: number) {
    const st = { s: seed32 | 0 }
    this.a = splitmix32(st)
    this.b = splitmix32(st)
    this.c = splitmix32(st)
    this.d = splitmix32(st)
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1
  }

  /** A named stream of a run seed. */
  static stream(seed: number, name: string): Prng {
    return new Prng(streamSeed(seed, name))
  }

  /** Uniform 32-bit unsigned integer. */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0
    const t = this.b << 9
    this.c ^= this.a
    this.d ^= this.b
    this.b ^= this.c
    this.a ^= this.d
    this.c ^= t
    this.d = rotl(this.d, 11)
    return result
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 0x1_0000_0000
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }

  /** Uniform in [lo, hi). */
  range(lo: number, hi: number): number {
    return lo + this.next() * (hi - lo)
  }

  chance(p: number): boolean {
    return p > 0 && this.next() < p
  }

  /** Exponentially distributed with the given mean. */
  exp(mean: number): number {
    return -Math.log(1 - this.next()) * mean
  }

  pick<A>(items: ReadonlyArray<A>): A {
    if (items.length === 0) throw new Error("Prng.pick: empty")
    return items[this.int(items.length)]!
  }
}

const rotl = (x: number, k: number): number => (x << k) | (x >>> (32 - k))
