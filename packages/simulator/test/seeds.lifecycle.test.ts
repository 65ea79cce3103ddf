import { describe, expect, it } from "vitest"
import { failures, range } from "./helpers.js"

// Membership scenarios without injected faults: 4 x 60 small seeds.
describe("fixed seeds: lifecycle scenarios", () => {
  for (const scenario of ["steady", "rolling-restart", "scale-out", "scale-in"] as const)
    it(`${scenario}: 60 seeds, zero violations`, () => {
      expect(failures(scenario, range(1, 60))).toEqual([])
    })
})
