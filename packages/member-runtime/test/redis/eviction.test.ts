/**
 * Nothing Shardline stores disappears in silence (docs/protocol.md rule 25;
 * docs/redis.md, "Eviction"), through `start({ redis })` on real servers:
 * - a server that evicts keys (issue 32: `maxmemory 40mb`, `allkeys-lru`,
 *   where a paused group lost 930 of 6,000 accepted messages without a
 *   word) refuses every runtime at start, a producer-only one too, with
 *   `EvictionPolicyRefused` naming the setting; `redis: { allowEviction:
 *   true }` starts it with a warning in the runtime's logger.
 */
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { LogFields, Logger } from "../../src/Logging.js"
import { start } from "../../src/Runtime.js"
import { useRedisServer } from "../support/redis.js"

const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }
const noop = () => {}

/** A logger that keeps what it is given. */
const recording = () => {
  const lines: Array<{
    readonly level: string
    readonly message: string
    readonly fields: LogFields
  }> = []
  const at =
    (level: string) =>
    (fields: LogFields, message: string): void => {
      lines.push({ level, message, fields })
    }
  const logger: Logger = {
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
  }
  return { lines, logger }
}

/** What `start` rejects with. */
const rejection = async (options: Parameters<typeof start>[0]) => {
  try {
    const runtime = await start({ handleSignals: false, logLevel: "silent", ...options })
    await runtime.stop()
  } catch (error) {
    return error as { readonly _tag: string; readonly message: string; readonly policy?: string }
  }
  throw new Error("start succeeded")
}

describe("a server that evicts keys (maxmemory 40mb, allkeys-lru)", () => {
  const server = useRedisServer("redis7", {
    args: ["--maxmemory", "40mb", "--maxmemory-policy", "allkeys-lru"],
  })

  it("start is refused: EvictionPolicyRefused naming maxmemory-policy, the fix and the opt-in", async () => {
    const error = await rejection({
      redis: { url: server().url },
      consumers: [consumer({ stream: "orders", group: "billing", eachMessage: noop, ...fast })],
    })
    expect(error._tag).toBe("EvictionPolicyRefused")
    expect(error.policy).toBe("allkeys-lru")
    expect(error.message).toContain("maxmemory-policy is allkeys-lru")
    expect(error.message).toContain("CONFIG SET maxmemory-policy noeviction")
    expect(error.message).toContain("redis: { allowEviction: true }")
    // nothing was written: no key of the namespace exists
    expect(server().cli("--scan", "--pattern", "shardline:*").trim()).toBe("")
  })

  it("a producer-only runtime is refused too", async () => {
    const error = await rejection({ redis: { url: server().url } })
    expect(error._tag).toBe("EvictionPolicyRefused")
  })

  it("with redis: { allowEviction: true } it starts, and the runtime's logger gets a warning", async () => {
    const { lines, logger } = recording()
    const runtime = await start({
      redis: { url: server().url, allowEviction: true },
      consumers: [consumer({ stream: "orders", group: "billing", eachMessage: noop, ...fast })],
      handleSignals: false,
      logger,
    })
    await runtime.stop()
    const warnings = lines.filter((l) => l.level === "warn" && l.message.includes("evicts keys"))
    expect(warnings).toHaveLength(1)
    expect(warnings[0]!.message).toContain("maxmemory-policy allkeys-lru")
    expect(warnings[0]!.message).toContain("allowEviction is on")
  })

  it("allowEviction must be a boolean", async () => {
    const error = await rejection({
      redis: { url: server().url, allowEviction: "yes" as unknown as boolean },
    })
    expect(error._tag).toBe("InvalidRuntimeConfig")
    expect(error.message).toContain("redis.allowEviction")
  })
})
