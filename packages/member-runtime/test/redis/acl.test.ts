/**
 * A runtime whose Redis user lacks a permission (docs/runtime.md, "On
 * Redis"; docs/redis.md, "ACL"): `start` probes every command, key and
 * channel its groups need and fails naming what is missing, before any
 * member runs (a runtime with producers only: what a producer needs, as
 * `createProducer` probes it); a permission taken away later surfaces with its cause
 * (events, `lastError`, an error in the log), and `stop` does not wait for
 * a leave no coordinator can answer. The probe itself is tested on every
 * server kind and a cluster in redis-store (test/acl.test.ts).
 */
import { Acl, Keys } from "@shardline/redis-store"
import { describe, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import type { RuntimeEvent } from "../../src/Events.js"
import type { LogFields, Logger } from "../../src/Logging.js"
import { start } from "../../src/Runtime.js"
import { createProducer } from "../../src/StandaloneProducer.js"
import { eventually, useRedisServer } from "../support/redis.js"

const server = useRedisServer("redis7")
const fast = { sessionTimeoutMs: 3_000, rebalanceTimeoutMs: 6_000, heartbeatIntervalMs: 200 }

/**
 * A user with the least-privilege rules of the namespace `prefix` minus
 * `drop` (the server is Redis 7: no XACKDEL).
 */
const user = (
  name: string,
  drop: ReadonlyArray<string> = [],
  prefix?: string,
  role: "member" | "producer" = "member",
) => {
  const rules = Acl.aclRules({ xackdel: false, role, ...(prefix === undefined ? {} : { prefix }) })
  server().cli(
    "ACL",
    "SETUSER",
    name,
    "reset",
    "on",
    ">pw",
    ...rules.filter((r) => !drop.includes(r)),
  )
  return {
    url: server().url,
    username: name,
    password: "pw",
    ...(prefix === undefined ? {} : { keyPrefix: prefix }),
  }
}

describe("start() with a Redis user that lacks permissions", () => {
  it("fails PermissionDenied naming each missing command and key, before any member runs", async () => {
    const stream = "acl-start"
    const error = await start({
      redis: user("lacks-two", ["+xautoclaim", "~shardline:*"]),
      handleSignals: false,
      logLevel: "silent",
      consumers: [consumer({ stream, group: "billing", ...fast, eachMessage: () => {} })],
    }).then(
      async (runtime) => {
        await runtime.stop()
        return undefined
      },
      (e: { _tag: string; message: string; missing: ReadonlyArray<{ rule: string }> }) => e,
    )
    expect(error?._tag).toBe("PermissionDenied")
    expect(error?.missing.map((m) => m.rule).sort()).toEqual(["+xautoclaim", "~shardline:*"])
    expect(error?.message).toContain("command XAUTOCLAIM (+xautoclaim)")
    expect(error?.message).toMatch(/key shardline:\S+ \(used by [A-Z]/)
    expect(error?.message).toContain("ACL SETUSER lacks-two")
    // nothing joined, nothing was created
    expect(
      server()
        .cli("EXISTS", Keys.defaultKeys.storeRevisionKey({ stream, group: "billing" }))
        .trim(),
    ).toBe("0")
    expect(server().cli("EXISTS", Keys.defaultKeys.shardKey(stream, 0)).trim()).toBe("0")
  })
})

describe("start() of a runtime with producers only", () => {
  it("a user without +xadd: PermissionDenied naming it, as createProducer's probe does", async () => {
    const error = await start({
      redis: user("runtime-producer-lacks-xadd", ["+xadd"], undefined, "producer"),
      handleSignals: false,
      logLevel: "silent",
    }).then(
      async (runtime) => {
        await runtime.stop()
        return undefined
      },
      (e: { _tag: string; message: string; missing: ReadonlyArray<{ rule: string }> }) => e,
    )
    expect(error?._tag).toBe("PermissionDenied")
    expect(error?.missing.map((m) => m.rule)).toEqual(["+xadd"])
    expect(error?.message).toContain("command XADD (+xadd)")
    expect(error?.message).toContain("needs to send to the streams of namespace shardline:")
    expect(error?.message).toContain("ACL SETUSER runtime-producer-lacks-xadd +xadd")
    // the probe ran nothing: the stand-in stream's keys were not created
    expect(server().cli("KEYS", "shardline:*acl-probe*").trim()).toBe("")
  })

  it("a user with a producer's rules only starts, and its producer sends", async () => {
    const stream = "acl-runtime-producer"
    const redis = user("runtime-producer-only", [], undefined, "producer")
    // the layout, as a producer of its own creates it
    const created = await createProducer({ redis, stream, shardCount: 2, logLevel: "silent" })
    await created.close()
    const runtime = await start({ redis, handleSignals: false, logLevel: "silent" })
    try {
      const sent = await runtime.producer(stream).send("k", { n: "1" })
      expect(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, sent.shard)).trim()).toBe("1")
    } finally {
      await runtime.stop()
    }
  })
})

describe("createProducer with a Redis user that lacks what a producer needs", () => {
  for (const drop of [["+xadd"], ["+evalsha"], ["+xadd", "+hset"]])
    it(`without ${drop.join(" ")}: PermissionDenied naming it at creation, nothing written`, async () => {
      const stream = `acl-producer-${drop.join("").replace(/\W/g, "")}`
      const error = await createProducer({
        redis: user(`producer-lacks${drop.join("")}`, drop, undefined, "producer"),
        stream,
        shardCount: 2,
        logLevel: "silent",
      }).then(
        async (producer) => {
          await producer.close()
          return undefined
        },
        (e: { _tag: string; message: string; missing: ReadonlyArray<{ rule: string }> }) => e,
      )
      expect(error?._tag).toBe("PermissionDenied")
      expect(error?.missing.map((m) => m.rule).sort()).toEqual([...drop].sort())
      for (const rule of drop)
        expect(error?.message).toContain(`command ${rule.slice(1).toUpperCase()} (${rule})`)
      expect(error?.message).toContain(`needs to send to ${stream}`)
      // refused before the layout was created or anything appended
      expect(server().cli("EXISTS", Keys.defaultKeys.layoutKey(stream)).trim()).toBe("0")
      expect(server().cli("EXISTS", Keys.defaultKeys.shardKey(stream, 0)).trim()).toBe("0")
    })

  it("a user with a producer's rules only (no consumer command) creates the layout and sends", async () => {
    const stream = "acl-producer-ok"
    const producer = await createProducer({
      redis: user("producer-only", [], undefined, "producer"),
      stream,
      shardCount: 2,
      idempotent: true,
      logLevel: "silent",
    })
    try {
      const sent = await producer.send("k", { n: "1" })
      expect(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, sent.shard)).trim()).toBe("1")
    } finally {
      await producer.close()
    }
  })
})

describe("a permission taken away while the runtime runs", () => {
  it("NOPERM surfaces with its cause (heartbeat event, lastError, an error in the log); stop is fast", async () => {
    const lines: Array<{ level: string; message: string }> = []
    const at =
      (level: string) =>
      (_fields: LogFields, message: string): void => {
        lines.push({ level, message })
      }
    const logger: Logger = {
      debug: at("debug"),
      info: at("info"),
      warn: at("warn"),
      error: at("error"),
    }
    const events: Array<RuntimeEvent> = []
    const handled = new Set<string>()
    const runtime = await start({
      redis: user("revoked-later"),
      handleSignals: false,
      logger,
      onEvent: (e) => {
        events.push(e)
      },
      memberBase: "acl",
      consumers: [
        consumer({
          stream: "acl-later",
          group: "g",
          shardCount: 2,
          ...fast,
          eachMessage: (m) => {
            handled.add(m.id)
          },
        }),
      ],
    })
    let stopped = false
    try {
      await eventually("joined", () => events.some((e) => e.type === "joined"))
      // every script (heartbeats, fenced reads) needs EVALSHA
      server().cli("ACL", "SETUSER", "revoked-later", "-evalsha")
      await eventually("a refused heartbeat", () =>
        events.some(
          (e) => e.type === "heartbeat" && e.error !== undefined && /NOPERM/.test(e.error.message),
        ),
      )
      expect(runtime.members()[0]!.lastError?.message).toMatch(/NOPERM.*evalsha/)
      await eventually("an error in the log", () =>
        lines.some((l) => l.level === "error" && l.message.includes("NOPERM")),
      )
      const logged = lines.find((l) => l.level === "error" && l.message.includes("NOPERM"))!
      expect(logged.message).toContain('docs/redis.md, "ACL"')
      const outcome = await Promise.race([
        runtime.stop().then(() => "stopped"),
        new Promise((resolve) => setTimeout(() => resolve("still waiting after 20 s"), 20_000)),
      ])
      stopped = outcome === "stopped"
      expect(outcome).toBe("stopped")
    } finally {
      if (!stopped) await runtime.stop()
    }
  })
})

describe('a runtime in a namespace of its own (docs/redis.md, "Keys")', () => {
  it("runs as the namespace's least-privilege user; its keys are under the prefix, nobody else's touched", async () => {
    const prefix = "tenant-a:"
    const stream = "acl-tenant"
    // the other tenant's shard stream and an application key with a colon in a hash tag
    server().cli("XADD", `${Keys.defaultKeys.shardKey(stream, 0)}`, "*", "other", "tenant")
    server().cli("SET", "{user:42}", "the application's")
    const handled: Array<string> = []
    const runtime = await start({
      redis: user("tenant-a", [], prefix),
      handleSignals: false,
      logLevel: "silent",
      memberBase: "tenant",
      consumers: [
        consumer({
          stream,
          group: "billing",
          shardCount: 1,
          ...fast,
          eachMessage: (m) => {
            handled.push(m.fields.n!)
          },
        }),
      ],
    })
    try {
      const producer = runtime.producer(stream)
      for (let n = 0; n < 5; n++) await producer.send(`k${n}`, { n: String(n) })
      await producer.flush()
      await eventually("5 handled", () => handled.length === 5)
    } finally {
      await runtime.stop()
    }
    const mine = Keys.make(prefix)
    expect(server().cli("XLEN", mine.shardKey(stream, 0)).trim()).toBe("5")
    expect(server().cli("GET", mine.schema).trim()).toBe(String(Keys.SCHEMA_VERSION))
    expect(
      server()
        .cli("EXISTS", mine.storeRevisionKey({ stream, group: "billing" }))
        .trim(),
    ).toBe("1")
    // the default namespace's stream and the application's key: as they were
    expect(server().cli("XLEN", Keys.defaultKeys.shardKey(stream, 0)).trim()).toBe("1")
    expect(server().cli("XINFO", "GROUPS", Keys.defaultKeys.shardKey(stream, 0)).trim()).toBe("")
    expect(server().cli("GET", "{user:42}").trim()).toBe("the application's")
  })
})
