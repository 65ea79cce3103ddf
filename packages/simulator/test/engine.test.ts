import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  Digest,
  defaultOptions,
  EventQueue,
  Prng,
  runSeed,
  streamSeed,
  swarmOptions,
} from "../src/index.js"

describe("EventQueue", () => {
  it("pops in (time, sequence) order, whatever the push order", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 300 }), (times) => {
        const q = new EventQueue(2)
        for (const [i, t] of times.entries()) q.push(t, 1, i)
        const out: Array<[number, number]> = []
        while (q.pop()) out.push([q.t, q.a])
        const expected = times
          .map((t, i) => [t, i] as [number, number])
          .sort((x, y) => x[0] - y[0] || x[1] - y[1])
        expect(out).toEqual(expected)
      }),
    )
  })

  it("interleaved pushes and pops match a sorted model, with the now lane and a FIFO kind", () => {
    // kind 2 has a FIFO lane; pushes at the current instant use the now lane;
    // a kind-2 push behind its lane's last time falls back to the heap
    const op = fc.record({
      pops: fc.integer({ min: 0, max: 3 }),
      kind: fc.constantFrom(1, 2),
      delay: fc.oneof(fc.constant(0), fc.constant(15), fc.integer({ min: 0, max: 30 })),
    })
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
        const q = new EventQueue(2, [2])
        const model: Array<{ t: number; seq: number; kind: number }> = []
        const out: Array<string> = []
        const expected: Array<string> = []
        let seq = 0
        let now = 0
        const popBoth = () => {
          model.sort((x, y) => x.t - y.t || x.seq - y.seq)
          const m = model.shift()
          expect(q.pop()).toBe(m !== undefined)
          if (m === undefined) return
          now = m.t
          expected.push(`${m.t}/${m.seq}/${m.kind}`)
          out.push(`${q.t}/${q.a}/${q.kind}`)
        }
        for (const o of ops) {
          q.push(now + o.delay, o.kind, seq)
          model.push({ t: now + o.delay, seq: seq++, kind: o.kind })
          for (let i = 0; i < o.pops; i++) popBoth()
          expect(q.size).toBe(model.length)
        }
        while (model.length > 0) popBoth()
        expect(q.pop()).toBe(false)
        expect(out).toEqual(expected)
      }),
    )
  })

  it("interleaves pushes and pops and recycles slots", () => {
    const q = new EventQueue(1)
    q.push(5, 1, 1)
    q.push(1, 1, 2)
    expect(q.pop()).toBe(true)
    expect(q.a).toBe(2)
    q.push(3, 1, 3, 0, { payload: true })
    q.push(3, 1, 4)
    expect(q.pop() && q.a).toBe(3)
    expect(q.p).toEqual({ payload: true })
    expect(q.pop() && q.a).toBe(4)
    expect(q.pop() && q.a).toBe(1)
    expect(q.pop()).toBe(false)
    expect(q.peekTime()).toBe(Number.POSITIVE_INFINITY)
  })
})

describe("Prng", () => {
  it("is deterministic per (seed, stream name)", () => {
    const a = Prng.stream(42, "workload")
    const b = Prng.stream(42, "workload")
    for (let i = 0; i < 100; i++) expect(a.nextU32()).toBe(b.nextU32())
  })

  it("streams are independent: draws on one never shift another", () => {
    const workload1 = Prng.stream(7, "workload")
    const faults1 = Prng.stream(7, "faults")
    const seq1: Array<number> = []
    for (let i = 0; i < 50; i++) {
      seq1.push(workload1.nextU32())
      for (let k = 0; k < i % 5; k++) faults1.nextU32()
    }
    const workload2 = Prng.stream(7, "workload")
    const seq2 = Array.from({ length: 50 }, () => workload2.nextU32())
    expect(seq1).toEqual(seq2)
    expect(streamSeed(7, "workload")).not.toBe(streamSeed(7, "faults"))
    expect(streamSeed(7, "workload")).not.toBe(streamSeed(8, "workload"))
    expect(streamSeed(2 ** 40 + 7, "workload")).not.toBe(streamSeed(7, "workload"))
  })

  it("draws stay in range", () => {
    const r = Prng.stream(1, "x")
    for (let i = 0; i < 10_000; i++) {
      const u = r.next()
      expect(u >= 0 && u < 1).toBe(true)
      const n = r.int(7)
      expect(n >= 0 && n < 7 && Number.isInteger(n)).toBe(true)
    }
  })

  it("adding a fault kind does not change the workload (arrivals)", () => {
    const base = { ...defaultOptions, seed: 11, durationMs: 20_000 }
    const none = runSeed({ ...base, faults: "none" }).summary
    const crash = runSeed({ ...base, faults: "crash,partition,loss" }).summary
    expect(crash.produced).toBe(none.produced)
  })
})

describe("Digest", () => {
  it("is equal for equal event streams and differs otherwise", () => {
    const d1 = new Digest()
    const d2 = new Digest()
    const d3 = new Digest()
    for (let i = 0; i < 100; i++) {
      d1.event(i * 1.5, 3, i, 0)
      d2.event(i * 1.5, 3, i, 0)
      d3.event(i * 1.5, 3, i, i === 50 ? 1 : 0)
    }
    expect(d1.hex()).toBe(d2.hex())
    expect(d1.hex()).not.toBe(d3.hex())
    expect(d1.count).toBe(100)
  })

  it("a whole run is deterministic: same seed, same digest and event count", () => {
    const o = { ...defaultOptions, scenario: "swarm" as const, seed: 5, durationMs: 30_000 }
    const a = runSeed(o).summary
    const b = runSeed(o).summary
    expect(b.digest).toBe(a.digest)
    expect(b.events).toBe(a.events)
    const c = runSeed({ ...o, seed: 6 }).summary
    expect(c.digest).not.toBe(a.digest)
  })

  it("a swarm seed draws its shape from the seed and replays with the shape spelled out", () => {
    const base = { ...defaultOptions, scenario: "swarm" as const, durationMs: 20_000 }
    const drawn = swarmOptions(base, 77)
    expect(swarmOptions(base, 77)).toEqual(drawn)
    expect(swarmOptions(base, 77, new Set(["shards"])).shards).toBe(base.shards)
    const shapes = new Set(
      Array.from({ length: 20 }, (_, i) => JSON.stringify(swarmOptions(base, i))),
    )
    expect(shapes.size).toBe(20)
    // the replay command spells every dimension out: the same run
    const replayed = {
      ...base,
      seed: 77,
      members: drawn.members,
      shards: drawn.shards,
      workers: drawn.workers,
      ratePerShard: drawn.ratePerShard,
    }
    expect(runSeed(replayed).summary.digest).toBe(runSeed(drawn).summary.digest)
  })
})
