import { describe, expect, it } from "vitest"
import { benchShape, shapeSuffix } from "../src/benchShape.js"

describe("the runtime benchmark's shape (BENCH_SHARDS, BENCH_WORKERS)", () => {
  it("defaults to 16 shards and 4 workers, with no suffix on the results' name", () => {
    expect(benchShape({})).toEqual({ shards: 16, workers: 4 })
    expect(benchShape({ BENCH_SHARDS: "", BENCH_WORKERS: "" })).toEqual({ shards: 16, workers: 4 })
    expect(shapeSuffix(benchShape({}))).toBe("")
  })

  it("takes integers at the runtime's limits and names another shape's results", () => {
    expect(benchShape({ BENCH_SHARDS: "64", BENCH_WORKERS: "8" })).toEqual({
      shards: 64,
      workers: 8,
    })
    expect(benchShape({ BENCH_SHARDS: "65536", BENCH_WORKERS: "1024" })).toEqual({
      shards: 65_536,
      workers: 1_024,
    })
    expect(benchShape({ BENCH_SHARDS: "1", BENCH_WORKERS: "1" })).toEqual({ shards: 1, workers: 1 })
    expect(shapeSuffix({ shards: 64, workers: 8 })).toBe("-64x8")
    expect(shapeSuffix({ shards: 16, workers: 8 })).toBe("-16x8")
  })

  it.each([
    ["BENCH_SHARDS", "abc"],
    ["BENCH_SHARDS", "0"],
    ["BENCH_SHARDS", "65537"],
    ["BENCH_SHARDS", "2.5"],
    ["BENCH_WORKERS", "-1"],
    ["BENCH_WORKERS", "1025"],
    ["BENCH_WORKERS", "Infinity"],
  ])("refuses %s=%s, naming the variable and the range", (name, value) => {
    expect(() => benchShape({ [name]: value })).toThrow(
      new RegExp(`^${name}="${value.replace(".", "\\.")}": expected an integer from 1 to`),
    )
  })
})
