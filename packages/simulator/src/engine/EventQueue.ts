/**
 * The event queue: a binary min-heap ordered by (time, sequence).
 *
 * Allocation-light: the heap stores slot indexes; time, sequence, kind and two
 * integer arguments live in typed arrays, with an optional payload slot for
 * the rare event that carries an object (a heartbeat request or response).
 * Freed slots are recycled. Sequence numbers are assigned on push, so events
 * scheduled for the same instant run in the order they were scheduled: the
 * order is total and does not depend on heap internals.
 *
 * @module
 */
export class EventQueue {
  private heap: Int32Array
  private time: Float64Array
  private seq: Float64Array
  private kindA: Int32Array
  private argA: Int32Array
  private argB: Int32Array
  private payload: Array<unknown>
  private free: Int32Array
  private freeCount = 0
  private used = 0
  private size_ = 0
  private nextSeq = 0

  constructor(capacity = 1024) {
    this.heap = new Int32Array(capacity)
    this.time = new Float64Array(capacity)
    this.seq = new Float64Array(capacity)
    this.kindA = new Int32Array(capacity)
    this.argA = new Int32Array(capacity)
    this.argB = new Int32Array(capacity)
    this.payload = new Array(capacity).fill(undefined)
    this.free = new Int32Array(capacity)
  }

  get size(): number {
    return this.size_
  }

  /** Number of events ever pushed (the next sequence number). */
  get pushed(): number {
    return this.nextSeq
  }

  push(time: number, kind: number, a = 0, b = 0, payload?: unknown): void {
    let slot: number
    if (this.freeCount > 0) slot = this.free[--this.freeCount]!
    else {
      if (this.used === this.time.length) this.grow()
      slot = this.used++
    }
    this.time[slot] = time
    this.seq[slot] = this.nextSeq++
    this.kindA[slot] = kind
    this.argA[slot] = a
    this.argB[slot] = b
    this.payload[slot] = payload
    let i = this.size_++
    const heap = this.heap
    while (i > 0) {
      const parent = (i - 1) >> 1
      const p = heap[parent]!
      if (!this.less(slot, p)) break
      heap[i] = p
      i = parent
    }
    heap[i] = slot
  }

  /** Time of the earliest event; Infinity when empty. */
  peekTime(): number {
    return this.size_ === 0 ? Number.POSITIVE_INFINITY : this.time[this.heap[0]!]!
  }

  // The popped event, read through the fields below until the next pop.
  t = 0
  s = 0
  kind = 0
  a = 0
  b = 0
  p: unknown = undefined

  /** Pops the earliest event into `t, s, kind, a, b, p`; false when empty. */
  pop(): boolean {
    if (this.size_ === 0) return false
    const heap = this.heap
    const top = heap[0]!
    this.t = this.time[top]!
    this.s = this.seq[top]!
    this.kind = this.kindA[top]!
    this.a = this.argA[top]!
    this.b = this.argB[top]!
    this.p = this.payload[top]
    this.payload[top] = undefined
    this.free[this.freeCount++] = top
    const last = heap[--this.size_]!
    const n = this.size_
    if (n > 0) {
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const r = l + 1
        let c = l
        if (r < n && this.less(heap[r]!, heap[l]!)) c = r
        const cs = heap[c]!
        if (!this.less(cs, last)) break
        heap[i] = cs
        i = c
      }
      heap[i] = last
    }
    return true
  }

  private less(x: number, y: number): boolean {
    const tx = this.time[x]!
    const ty = this.time[y]!
    return tx < ty || (tx === ty && this.seq[x]! < this.seq[y]!)
  }

  private grow(): void {
    const cap = this.time.length * 2
    const g64 = (src: Float64Array) => {
      const out = new Float64Array(cap)
      out.set(src)
      return out
    }
    const g32 = (src: Int32Array) => {
      const out = new Int32Array(cap)
      out.set(src)
      return out
    }
    this.heap = g32(this.heap)
    this.time = g64(this.time)
    this.seq = g64(this.seq)
    this.kindA = g32(this.kindA)
    this.argA = g32(this.argA)
    this.argB = g32(this.argB)
    this.free = g32(this.free)
    this.payload.length = cap
  }
}
