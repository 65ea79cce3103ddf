/**
 * A running digest of every processed event (time, kind, arguments), used by
 * `--check-determinism`: two runs of one seed must produce the same digest.
 * Two independent 32-bit FNV-1a-style lanes, so a collision needs both.
 *
 * @module
 */
export class Digest {
  private h1 = 0x811c9dc5
  private h2 = 0x9747b28c
  count = 0

  mix(x: number): void {
    const lo = x | 0
    const hi = (x / 0x1_0000_0000) | 0
    this.h1 = Math.imul(this.h1 ^ lo, 0x01000193)
    this.h1 = Math.imul(this.h1 ^ hi, 0x01000193)
    this.h2 = Math.imul(this.h2 ^ lo, 0x5bd1e995)
    this.h2 ^= this.h2 >>> 15
    this.h2 = Math.imul(this.h2 ^ hi, 0x5bd1e995)
    this.h2 ^= this.h2 >>> 13
  }

  event(time: number, kind: number, a: number, b: number): void {
    this.count++
    this.mix(Math.round(time * 1000))
    this.mix(kind)
    this.mix(a)
    this.mix(b)
  }

  hex(): string {
    return (
      (this.h1 >>> 0).toString(16).padStart(8, "0") + (this.h2 >>> 0).toString(16).padStart(8, "0")
    )
  }
}
