/**
 * The event queue: events in (time, sequence) order (docs/simulator.md,
 * Speed, "the event queue").
 *
 * Allocation-light: an event lives in a slot of typed arrays (time, sequence,
 * kind, two integer arguments) with an optional payload slot for the rare
 * event that carries an object (a heartbeat request or response); freed
 * slots are recycled. Sequence numbers are assigned on push, so events
 * scheduled for the same instant run in the order they were scheduled: the
 * order is total and does not depend on the data structure.
 *
 * Three kinds of storage, merged at `pop` by (time, sequence):
 * - a 4-ary min-heap, its keys (time, sequence) stored inline and
 *   interleaved by heap position, so a sift compares neighbouring array
 *   entries instead of chasing slots and the four children of a node share
 *   a cache line (half the depth of a binary heap: at 5,000 members the heap
 *   holds tens of thousands of events and each level is a cache miss);
 * - the "now" lane: events pushed for the instant of the event being run (a
 *   worker woken by new data, a drain report) are already in order, so a
 *   FIFO ring holds them: no heap work;
 * - a FIFO lane per kind registered as `fifoKinds`: a kind always scheduled
 *   a constant delay after the current time (a request's transport timeout)
 *   arrives in order too. A push that would break a lane's order goes to
 *   the heap instead, so the order never depends on the lanes.
 *
 * @module
 */

const HEAP = -1

/** A FIFO ring of slots whose events are in (time, sequence) order. */
class Lane {
  buf: Int32Array
  head = 0
  count = 0
  /** Time of the last event appended (its order key with the growing sequence). */
  lastTime = Number.NEGATIVE_INFINITY

  constructor(capacity: number) {
    this.buf = new Int32Array(capacity)
  }

  push(slot: number): void {
    const n = this.buf.length
    if (this.count === n) {
      const grown = new Int32Array(n * 2)
      for (let i = 0; i < this.count; i++) grown[i] = this.buf[(this.head + i) & (n - 1)]!
      this.buf = grown
      this.head = 0
    }
    this.buf[(this.head + this.count++) & (this.buf.length - 1)] = slot
  }

  shift(): number {
    const slot = this.buf[this.head]!
    this.head = (this.head + 1) & (this.buf.length - 1)
    this.count--
    return slot
  }
}

export class EventQueue {
  // slots
  private time: Float64Array
  private seq: Float64Array
  private kindA: Int32Array
  private argA: Int32Array
  private argB: Int32Array
  private payload: Array<unknown>
  private free: Int32Array
  private freeCount = 0
  private used = 0
  // the heap: slot and key by heap position
  private heap: Int32Array
  /** (time, sequence) of heap position i at 2i and 2i + 1. */
  private heapKeys: Float64Array
  private heapSize = 0
  // lanes: 0 is "now"; then one per registered kind
  private readonly lanes: Array<Lane>
  private readonly laneOf: Int8Array
  private nextSeq = 0

  constructor(capacity = 1024, fifoKinds: ReadonlyArray<number> = []) {
    capacity = Math.max(16, capacity)
    this.time = new Float64Array(capacity)
    this.seq = new Float64Array(capacity)
    this.kindA = new Int32Array(capacity)
    this.argA = new Int32Array(capacity)
    this.argB = new Int32Array(capacity)
    this.payload = new Array(capacity).fill(undefined)
    this.free = new Int32Array(capacity)
    this.heap = new Int32Array(capacity)
    this.heapKeys = new Float64Array(2 * capacity)
    this.lanes = [new Lane(256)]
    this.laneOf = new Int8Array(256)
    for (const kind of fifoKinds) {
      if (kind <= 0 || kind >= 256 || this.laneOf[kind] !== 0)
        throw new Error(`EventQueue: bad FIFO kind ${kind}`)
      this.laneOf[kind] = this.lanes.length
      this.lanes.push(new Lane(256))
    }
  }

  get size(): number {
    let n = this.heapSize
    for (const lane of this.lanes) n += lane.count
    return n
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
    const seq = this.nextSeq++
    this.time[slot] = time
    this.seq[slot] = seq
    this.kindA[slot] = kind
    this.argA[slot] = a
    this.argB[slot] = b
    this.payload[slot] = payload
    // the instant being run: in order by construction
    if (time === this.t) {
      const lane = this.lanes[0]!
      lane.lastTime = time
      lane.push(slot)
      return
    }
    const l = this.laneOf[kind]!
    if (l !== 0) {
      const lane = this.lanes[l]!
      if (time >= lane.lastTime) {
        lane.lastTime = time
        lane.push(slot)
        return
      }
    }
    this.heapPush(slot, time, seq)
  }

  private heapPush(slot: number, time: number, seq: number): void {
    if (this.heapSize === this.heap.length) this.growHeap()
    const heap = this.heap
    const keys = this.heapKeys
    let i = this.heapSize++
    while (i > 0) {
      const parent = (i - 1) >> 2
      const pt = keys[2 * parent]!
      if (pt < time || (pt === time && keys[2 * parent + 1]! < seq)) break
      heap[i] = heap[parent]!
      keys[2 * i] = pt
      keys[2 * i + 1] = keys[2 * parent + 1]!
      i = parent
    }
    heap[i] = slot
    keys[2 * i] = time
    keys[2 * i + 1] = seq
  }

  /** Time of the earliest event; Infinity when empty. */
  peekTime(): number {
    let t = this.heapSize === 0 ? Number.POSITIVE_INFINITY : this.heapKeys[0]!
    for (const lane of this.lanes)
      if (lane.count > 0) t = Math.min(t, this.time[lane.buf[lane.head]!]!)
    return t
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
    let source = HEAP
    let bt = Number.POSITIVE_INFINITY
    let bs = 0
    if (this.heapSize > 0) {
      bt = this.heapKeys[0]!
      bs = this.heapKeys[1]!
    }
    const lanes = this.lanes
    for (let l = 0; l < lanes.length; l++) {
      const lane = lanes[l]!
      if (lane.count === 0) continue
      const slot = lane.buf[lane.head]!
      const t = this.time[slot]!
      if (t < bt || (t === bt && this.seq[slot]! < bs)) {
        source = l
        bt = t
        bs = this.seq[slot]!
      }
    }
    let slot: number
    if (source !== HEAP) slot = lanes[source]!.shift()
    else if (this.heapSize > 0) slot = this.heapPop()
    else return false
    this.t = bt
    this.s = bs
    this.kind = this.kindA[slot]!
    this.a = this.argA[slot]!
    this.b = this.argB[slot]!
    this.p = this.payload[slot]
    this.payload[slot] = undefined
    this.free[this.freeCount++] = slot
    return true
  }

  private heapPop(): number {
    const heap = this.heap
    const keys = this.heapKeys
    const top = heap[0]!
    const n = --this.heapSize
    if (n > 0) {
      const last = heap[n]!
      const lt = keys[2 * n]!
      const ls = keys[2 * n + 1]!
      let i = 0
      for (;;) {
        const first = 4 * i + 1
        if (first >= n) break
        // the least of up to four children, whose keys share a cache line
        let c = first
        let ct = keys[2 * c]!
        let cs = keys[2 * c + 1]!
        const end = Math.min(first + 4, n)
        for (let r = first + 1; r < end; r++) {
          const rt = keys[2 * r]!
          if (rt < ct || (rt === ct && keys[2 * r + 1]! < cs)) {
            c = r
            ct = rt
            cs = keys[2 * r + 1]!
          }
        }
        if (lt < ct || (lt === ct && ls < cs)) break
        heap[i] = heap[c]!
        keys[2 * i] = ct
        keys[2 * i + 1] = cs
        i = c
      }
      heap[i] = last
      keys[2 * i] = lt
      keys[2 * i + 1] = ls
    }
    return top
  }

  private grow(): void {
    const cap = this.time.length * 2
    this.time = grow64(this.time, cap)
    this.seq = grow64(this.seq, cap)
    this.kindA = grow32(this.kindA, cap)
    this.argA = grow32(this.argA, cap)
    this.argB = grow32(this.argB, cap)
    this.free = grow32(this.free, cap)
    this.payload.length = cap
  }

  private growHeap(): void {
    const cap = this.heap.length * 2
    this.heap = grow32(this.heap, cap)
    this.heapKeys = grow64(this.heapKeys, 2 * cap)
  }
}

const grow64 = (src: Float64Array, cap: number): Float64Array => {
  const out = new Float64Array(cap)
  out.set(src)
  return out
}

const grow32 = (src: Int32Array, cap: number): Int32Array => {
  const out = new Int32Array(cap)
  out.set(src)
  return out
}
