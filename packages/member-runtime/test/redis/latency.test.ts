/**
 * Latency between the coordinator's pod and Redis (issue 32, item 5;
 * docs/protocol.md rules 12 and 25, "Lease length against pauses and
 * latency"): four member processes ("pods", test/redis/procs/member.ts) of
 * one group on one redis-server. The first pod reaches Redis through the
 * tests' TCP proxy (`startProxy` of redis-store's harness), every other pod
 * directly; once it coordinates, the proxy adds 150 ms each way (+300 ms a
 * round trip, as `tc netem delay 300ms` on the pod's link) to every
 * connection of that pod: its coordinator's lease renewals, serve loop and
 * commits, and its own member. Issue 32 saw this cost other pods 10 leases.
 *
 * Checked from the lines the processes wrote, as an operator would: no
 * other pod loses, revokes or rejoins anything (0 collateral), no shard has
 * two owners at once, nothing is lost and per-key order holds. Timing is
 * reported (stdout and test-output/latency.json), not asserted, except that
 * the other pods' shards never wait out a session.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import path from "node:path"
import { startProxy, type TcpProxy } from "@shardline/redis-store/testing"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import {
  COLLATERAL,
  eventsBetween,
  isCoordinator,
  longestGap,
  realNow,
} from "../support/availabilityChecks.js"
import {
  handledOutsideOwnership,
  overlappingOwners,
  ownershipIntervals,
} from "../support/groupChecks.js"
import { buildMemberScript, type MemberProcess } from "../support/processes.js"
import { sleep, World } from "../support/processWorld.js"
import { eventually, useRedisServer } from "../support/redis.js"

const SESSION_MS = 4_000
const HEARTBEAT_MS = 300
/** Added each way: +300 ms a round trip. */
const DELAY_EACH_WAY_MS = 150
/** How long the delay lasts: several sessions. */
const DELAYED_MS = 15_000
const SCENARIO_TIMEOUT_MS = 240_000

let script = ""
beforeAll(async () => {
  // a copy of its own: other process test files may build theirs meanwhile
  script = await buildMemberScript("member-latency")
}, 120_000)

const measured: Array<{ scenario: string; values: Record<string, string | number> }> = []
afterAll(() => {
  if (measured.length === 0) return
  const dir = path.resolve(import.meta.dirname, "../../test-output")
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    path.join(dir, "latency.json"),
    `${JSON.stringify({ date: new Date().toISOString(), measured }, null, 2)}\n`,
  )
})

const linesOf = (procs: ReadonlyArray<MemberProcess>) => procs.flatMap((p) => p.lines)

describe("+300 ms between the coordinator's pod and Redis (one redis-server)", () => {
  const server = useRedisServer("redis7")
  let world: World | undefined
  let proxy: TcpProxy | undefined
  afterEach(async () => {
    await world?.close()
    await proxy?.close()
    world = undefined
    proxy = undefined
  })

  it(
    "no other pod loses, revokes or rejoins anything; no shard has two owners; nothing lost",
    async () => {
      const s = server()
      proxy = await startProxy({ host: s.host, port: s.port })
      const w = new World({ url: s.url }, { script, prefix: "latency" })
      world = w
      const timing = { sessionTimeoutMs: SESSION_MS, heartbeatIntervalMs: HEARTBEAT_MS }
      // the first pod, through the proxy, coordinates: it starts alone
      const hit = w.spawn("a", { ...timing, redis: { url: `redis://${proxy.address}` } })
      await hit.waitFor("the proxied pod coordinates", (l) => l.ev === "coordinatorElected")
      const others = ["b", "c", "d"].map((id) => w.spawn(id, timing))
      const pods = [hit, ...others]
      await w.settled(pods, "4 pods own every shard")
      await w.startProduction()
      await sleep(1_500)
      expect(isCoordinator(hit.lines), "the proxied pod still coordinates").toBe(true)

      const from = realNow()
      proxy.setDelay(DELAY_EACH_WAY_MS)
      await sleep(DELAYED_MS)
      proxy.setDelay(0)
      const to = realNow()
      await sleep(2_000)
      await w.drained()
      w.commonChecks()

      const intervals = ownershipIntervals(w.lines)
      expect(overlappingOwners(intervals).join("\n"), "two owners at once").toBe("")
      expect(handledOutsideOwnership(w.lines, intervals).join("\n"), "handled without owning").toBe(
        "",
      )
      const collateral = eventsBetween(linesOf(others), COLLATERAL, from)
      const hitEvents = (ev: string) => hit.lines.filter((l) => l.ev === ev && l.t >= from).length
      const gap = longestGap(others, from, to)
      const slow = hit.lines.filter((l) => l.ev === "heartbeat" && l.t >= from && l.t <= to)
      const values = {
        "delay (ms each way, for ms)": `${DELAY_EACH_WAY_MS}, ${DELAYED_MS}`,
        "collateral revocations / fences / rejoins / lease losses on other pods": collateral.length,
        "elections meanwhile": linesOf(pods).filter(
          (l) => l.ev === "coordinatorElected" && l.t >= from,
        ).length,
        "coordinator resignations meanwhile": hitEvents("coordinatorResigned"),
        "members told no coordinator serves": linesOf(pods).filter(
          (l) => l.ev === "coordinatorUnavailable" && l.t >= from,
        ).length,
        "heartbeats of other pods not answered NONE or slower than the interval": linesOf(
          others,
        ).filter((l) => l.ev === "heartbeat" && l.t >= from).length,
        "longest gap on other pods' shards (ms)": Math.round(gap?.ms ?? 0),
        "delayed pod: lease losses": hitEvents("leaseLost"),
        "delayed pod: slow or failed heartbeats": slow.length,
        "delayed pod: heartbeat latency max (ms)": Math.round(
          Math.max(0, ...slow.map((l) => Number(l.latencyMs ?? 0))),
        ),
        "delayed pod: messages handled while delayed": hit.lines.filter(
          (l) => l.ev === "done" && l.t >= from && l.t <= to,
        ).length,
        messages: w.produced,
      }
      measured.push({ scenario: "+300 ms round trip, coordinator's pod", values })
      process.stdout.write(
        `\n### +300 ms between the coordinator's pod and Redis\n\n| measured | value |\n|---|---:|\n${Object.entries(
          values,
        )
          .map(([k, v]) => `| ${k} | ${v} |`)
          .join("\n")}\n`,
      )
      expect(collateral.join("\n"), "collateral on other pods").toBe("")
      expect(gap?.ms ?? 0).toBeLessThan(SESSION_MS)
      await eventually("one pod coordinates at the end", () =>
        pods.some((p) => isCoordinator(p.lines)),
      )
    },
    SCENARIO_TIMEOUT_MS,
  )
})
