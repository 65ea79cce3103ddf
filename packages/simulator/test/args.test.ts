import { describe, expect, it } from "vitest"
import { parseArgs, UsageError } from "../src/args.js"

const usageError = (argv: ReadonlyArray<string>): string => {
  try {
    parseArgs(argv)
  } catch (e) {
    if (e instanceof UsageError) return e.message
    throw e
  }
  throw new Error(`accepted: ${argv.join(" ")}`)
}

describe("shardline-sim arguments", () => {
  it("parses a scenario with its options", () => {
    const cli = parseArgs([
      "scale-out",
      "--seed",
      "7",
      "--members",
      "10",
      "--shards",
      "64",
      "--workers",
      "3",
      "--duration",
      "5m",
      "--faults",
      "loss,pause",
      "--json",
    ])
    expect(cli.options).toMatchObject({
      scenario: "scale-out",
      seed: 7,
      members: 10,
      shards: 64,
      workers: 3,
      durationMs: 300_000,
      faults: "loss,pause",
    })
    expect(cli.json).toBe(true)
  })

  it("--fence, --strict, and which shape dimensions a swarm keeps", () => {
    const cli = parseArgs(["--swarm", "5", "--shards", "32", "--fence", "off", "--strict"])
    expect(cli.options.fence).toBe("off")
    expect(cli.options.strict).toBe(true)
    expect([...cli.fixed]).toEqual(["shards"])
    expect(parseArgs(["steady"]).options.fence).toBe("on")
    expect(usageError(["steady", "--fence", "maybe"])).toMatch(/--fence needs on or off/)
  })

  it("a swarm without a scenario runs the swarm scenario", () => {
    const cli = parseArgs(["--swarm", "20", "--from-seed", "0"])
    expect(cli.swarm).toBe(20)
    expect(cli.fromSeed).toBe(0)
    expect(cli.options.scenario).toBe("swarm")
  })

  it("refuses zero or negative counts instead of silently using 1", () => {
    expect(usageError(["steady", "--members", "0"])).toMatch(/--members needs a positive integer/)
    expect(usageError(["steady", "--shards", "0"])).toMatch(/--shards needs a positive integer/)
    expect(usageError(["steady", "--workers", "0"])).toMatch(/--workers needs a positive integer/)
    expect(usageError(["--swarm", "0"])).toMatch(/--swarm needs a positive integer/)
    expect(usageError(["steady", "--jobs", "0"])).toMatch(/--jobs needs a positive integer/)
    expect(usageError(["steady", "--seed", "-1"])).toMatch(/--seed needs a non-negative integer/)
    expect(usageError(["steady", "--members", "2.5"])).toMatch(/positive integer/)
  })

  it("refuses unknown scenarios, fault kinds, breakages, durations and flags", () => {
    expect(usageError(["bogus"])).toMatch(/unknown scenario "bogus"/)
    expect(usageError(["steady", "--faults", "nope"])).toMatch(/unknown fault kind "nope"/)
    expect(usageError(["steady", "--faults", "loss,swarm"])).toMatch(/stand alone/)
    expect(usageError(["steady", "--broken", "x"])).toMatch(/unknown --broken "x"/)
    expect(usageError(["steady", "--duration", "xyz"])).toMatch(/bad duration/)
    expect(usageError(["steady", "--verbose"])).toMatch(/unknown argument "--verbose"/)
    expect(usageError(["steady", "--seed"])).toMatch(/--seed needs a value/)
    expect(usageError(["steady", "scale-in"])).toMatch(/unknown argument "scale-in"/)
  })
})
