import { describe, expect, it } from "vitest"
import { stickyAssign } from "../src/index.js"

describe("placeholder", () => {
  it("assigns every shard", () => {
    expect(stickyAssign({ shardCount: 3, members: [{ id: "a" }] })).toEqual(["a", "a", "a"])
  })
})
