/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
/**
 * `shardline dashboard` in a real browser (docs/observability.md, "The
 * dashboard"), the same check for every browser (test/redis/dashboard.test.ts:
 * Debian's Chromium through playwright-core; dashboardFirefox.test.ts:
 * Debian's Firefox ESR through puppeteer-core and WebDriver BiDi). The CLI of
 * @shardline/tools runs as a child process, connected as a read-only
 * ACL user (`Acl.readOnlyRules`), against a live group of member runtimes on
 * a real redis-server. Checks:
 * - the page's numbers (members, shards, epochs, dead letters, resharding)
 *   equal `shardline inspect --json` read at the same moment (the group is
 *   kept still: two shards paused with a backlog, nothing produced while
 *   comparing; a comparison is retried until both reads agree, never timed);
 * - the ownership strip gains the second member, with a rebalance marker,
 *   once it joins;
 * - the page raised no error;
 * - the server refused the dashboard's user nothing (ACL LOG): it wrote
 *   nothing and tried to write nothing;
 * - a screenshot goes to test-output/.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, mkdirSync } from "node:fs"
import path from "node:path"
import { Acl } from "@shardline/redis-store"
import { Redis } from "ioredis"
import { afterAll, beforeAll, expect, it } from "vitest"
import { consumer } from "../../src/Consumer.js"
import { type ShardlineRuntime, start } from "../../src/Runtime.js"
import type { DashboardBrowser, DashboardPage } from "./dashboardBrowsers.js"
import { eventually, useRedisServer } from "./redis.js"

const OUTPUT = path.resolve(import.meta.dirname, "../../test-output")
const USER = "dashboard"
const PASSWORD = "read-only"
const stream = "orders"
const group = "billing"
const SHARDS = 8

const cli = () => {
  const file = path.resolve(import.meta.dirname, "../../node_modules/@shardline/tools/dist/cli.js")
  if (!existsSync(file))
    throw new Error(
      `${file} is missing: run \`pnpm build\` (the shardline CLI of @shardline/tools)`,
    )
  return file
}

/** `shardline inspect --json` as the read-only user. */
const inspectJson = (url: string): Promise<InspectJson> =>
  new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [cli(), "inspect", "--redis", url, "--stream", stream, "--group", group, "--json"],
      { stdio: ["ignore", "pipe", "pipe"] },
    )
    let out = ""
    let err = ""
    child.stdout.on("data", (c) => {
      out += String(c)
    })
    child.stderr.on("data", (c) => {
      err += String(c)
    })
    child.on("close", (code) =>
      code === 0 ? resolve(JSON.parse(out) as InspectJson) : reject(new Error(`inspect: ${err}`)),
    )
  })

interface InspectJson {
  readonly storeRevision: number
  readonly groupEpoch: number
  readonly assignmentEpoch: number
  readonly deadLetters: number
  readonly members: ReadonlyArray<{
    readonly memberId: string
    readonly memberEpoch: number
    readonly incarnation: number
    readonly state: string
    readonly host: string
    readonly owned: ReadonlyArray<number>
    readonly target: ReadonlyArray<number>
  }>
  readonly assignment: ReadonlyArray<{
    readonly shard: number
    readonly owner: string | null
    readonly target: string | null
    readonly confirmed: boolean
  }>
  readonly shards: ReadonlyArray<{
    readonly shard: number
    readonly generation: number
    readonly length: number
    readonly pending: number
    readonly lag: number
    readonly ownerToken: number
    readonly deadLetters: number
  }>
  readonly resharding: { readonly phase: string; readonly layout: { readonly generation: number } }
  readonly rebalanceInProgress: boolean
}

const ranges = (shards: ReadonlyArray<number>): string => {
  if (shards.length === 0) return "-"
  const out: Array<string> = []
  let first = shards[0]!
  let prev = first
  for (const s of [...shards.slice(1), Number.NaN]) {
    if (s === prev + 1) {
      prev = s
      continue
    }
    out.push(first === prev ? `${first}` : `${first}-${prev}`)
    first = s
    prev = s
  }
  return out.join(",")
}

const num = (n: number) => n.toLocaleString("en-US")

/** What the page should show for a report, in the page's own text. */
const expected = (r: InspectJson) => ({
  cards: {
    memberCount: num(r.members.length),
    groupEpoch: num(r.groupEpoch),
    assignmentEpoch: num(r.assignmentEpoch),
    storeRevision: num(r.storeRevision),
    deadLetters: num(r.deadLetters),
  },
  members: Object.fromEntries(
    r.members.map((m) => [
      m.memberId,
      {
        incarnation: String(m.incarnation),
        memberEpoch: String(m.memberEpoch),
        state: m.state,
        owned: ranges(m.owned),
        target: ranges(m.target),
        host: m.host,
      },
    ]),
  ),
  shards: Object.fromEntries(
    r.shards.map((s) => {
      const a = r.assignment.find((x) => x.shard === s.shard)
      return [
        String(s.shard),
        {
          generation: String(s.generation),
          owner: a?.owner == null ? "-" : `${a.owner}${a.confirmed ? "" : "?"}`,
          target: a?.target ?? "-",
          length: num(s.length),
          backlog: num(s.lag + s.pending),
          lag: num(s.lag),
          pending: num(s.pending),
          deadLetters: num(s.deadLetters),
          ownerToken: String(s.ownerToken),
        },
      ]
    }),
  ),
  resharding: {
    phase: r.resharding.phase,
    layoutGeneration: String(r.resharding.layout.generation),
  },
})

/** The same fields, read off the page. */
const shown = (page: DashboardPage) =>
  page.evaluate(() => {
    const text = (root: Element, field: string) =>
      root.querySelector(`[data-field="${field}"]`)?.textContent?.trim() ?? "(none)"
    const doc = document
    const cards: Record<string, string> = {}
    for (const f of [
      "memberCount",
      "groupEpoch",
      "assignmentEpoch",
      "storeRevision",
      "deadLetters",
    ])
      cards[f] = text(doc.querySelector(".cards")!, f)
    const members: Record<string, Record<string, string>> = {}
    for (const row of doc.querySelectorAll("#members tbody tr")) {
      const id = (row as HTMLElement).dataset.member!
      members[id] = Object.fromEntries(
        ["incarnation", "memberEpoch", "state", "owned", "target", "host"].map((f) => [
          f,
          text(row, f),
        ]),
      )
    }
    const shards: Record<string, Record<string, string>> = {}
    for (const row of doc.querySelectorAll("#shards tbody tr")) {
      const shard = (row as HTMLElement).dataset.shard!
      shards[shard] = Object.fromEntries(
        [
          "generation",
          "owner",
          "target",
          "length",
          "backlog",
          "lag",
          "pending",
          "deadLetters",
          "ownerToken",
        ].map((f) => [f, text(row, f)]),
      )
    }
    const resharding = {
      phase: text(doc.querySelector("#resharding")!, "phase"),
      layoutGeneration: text(doc.querySelector("#resharding")!, "layoutGeneration"),
    }
    return { cards, members, shards, resharding }
  })

const owners = (page: DashboardPage) =>
  page.evaluate(() => [
    ...new Set(
      [...document.querySelectorAll("#strip rect[data-owner]")].map(
        (r) => (r as SVGElement).dataset.owner!,
      ),
    ),
  ])

/**
 * Registers the test (and its Redis server) for one browser, in the test
 * file that calls it.
 */
export const dashboardTest = (browser: DashboardBrowser): void => {
  const server = useRedisServer("redis7")
  let dashboard: ChildProcess | undefined
  const runtimes: Array<ShardlineRuntime> = []

  beforeAll(() => {
    const missing = browser.missing()
    if (missing !== undefined) throw new Error(missing)
  })

  afterAll(async () => {
    await browser.close()
    dashboard?.kill("SIGTERM")
    await Promise.all(runtimes.map((r) => r.stop()))
  })

  it(`${browser.name}: the page shows what \`shardline inspect --json\` shows, its ownership strip follows a join, and it writes nothing`, async () => {
    const admin = new Redis(server().url)
    try {
      await admin.call(
        "ACL",
        "SETUSER",
        USER,
        "reset",
        "on",
        `>${PASSWORD}`,
        ...Acl.readOnlyRules(),
      )
      await admin.call("ACL", "LOG", "RESET")
    } finally {
      admin.disconnect()
    }
    const readOnlyUrl = server().url.replace("redis://", `redis://${USER}:${PASSWORD}@`)

    const timing = {
      shardCount: SHARDS,
      sessionTimeoutMs: 4_000,
      heartbeatIntervalMs: 200,
      rebalanceTimeoutMs: 6_000,
      maxDeliveries: 1,
    }
    const member = (memberId: string) =>
      consumer({
        stream,
        group,
        memberId,
        ...timing,
        eachMessage: (m) => {
          if (m.fields.poison !== undefined) throw new Error("poison")
        },
      })
    const a = await start({
      redis: { url: server().url },
      handleSignals: false,
      memberBase: "pod-a",
      consumers: [member("pod-a")],
    })
    runtimes.push(a)
    await eventually("pod-a owns every shard", () => a.members()[0]!.owned.length === SHARDS)
    const producer = a.producer(stream)
    // a dead letter, then a backlog on two paused shards
    await producer.send("k-poison", { poison: "1" })
    await eventually(
      "dead-lettered",
      async () => (await inspectJson(readOnlyUrl)).deadLetters === 1,
    )
    a.pause(stream, group, 0)
    a.pause(stream, group, 1)
    await producer.sendBatch(Array.from({ length: 200 }, (_, i) => ({ key: `key-${i}` })))

    // the dashboard, as the read-only user
    dashboard = spawn(
      process.execPath,
      [cli(), "dashboard", "--redis", readOnlyUrl, "--port", "0", "--interval", "250"],
      { stdio: ["ignore", "pipe", "pipe"] },
    )
    let out = ""
    dashboard.stdout!.on("data", (c) => {
      out += String(c)
    })
    dashboard.stderr!.on("data", (c) => {
      out += String(c)
    })
    await eventually(`the dashboard's URL (${out})`, () => /http:\/\/\S+/.test(out))
    const url = out.match(/http:\/\/\S+/)![0]
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/)

    const page = await browser.open()
    await page.goto(url)
    await page.waitForSelector("#live.on")
    await page.waitForSelector(`section#group[data-group="${group}"]`)
    expect(await page.text(`nav button[data-group="${group}"]`)).toContain(group)

    // the same moment: the group is still (nothing produced, two shards paused)
    let last = ""
    await eventually(
      "the page and `shardline inspect --json` agree",
      async () => {
        const report = await inspectJson(readOnlyUrl)
        if (report.rebalanceInProgress) return false
        const want = expected(report)
        const got = await shown(page)
        last = JSON.stringify({ want, got }, null, 1)
        return JSON.stringify(want) === JSON.stringify(got)
      },
      60_000,
      300,
    ).catch((e: unknown) => {
      throw new Error(`${String(e)}\n${last}`)
    })
    const agreed = JSON.parse(last) as { want: ReturnType<typeof expected> }
    // what was compared is not trivial: a backlog on the paused shards, one dead letter, one owner
    expect(Number(agreed.want.shards["0"]!.lag.replace(/,/g, ""))).toBeGreaterThan(0)
    expect(agreed.want.cards.deadLetters).toBe("1")
    expect(Object.keys(agreed.want.members)).toEqual(["pod-a"])
    expect(await owners(page)).toEqual(["pod-a"])

    // a second member joins: the strip gains it, with a rebalance marker after the join
    const joinedAt = Date.now()
    const b = await start({
      redis: { url: server().url },
      handleSignals: false,
      memberBase: "pod-b",
      consumers: [member("pod-b")],
    })
    runtimes.push(b)
    await eventually("pod-b owns its shards", () => b.members()[0]!.owned.length === SHARDS / 2)
    await eventually("the strip shows pod-b", async () => (await owners(page)).includes("pod-b"))
    const markers = await page.evaluate(() =>
      [...document.querySelectorAll("#strip line[data-marker='rebalance']")].map((l) =>
        Number((l as SVGElement).dataset.at),
      ),
    )
    expect(markers.some((at) => at >= joinedAt - 1_000)).toBe(true)
    await eventually("the members table shows pod-b", async () =>
      Object.keys((await shown(page)).members).includes("pod-b"),
    )

    // issue 33 item 10: the live group says so, and each member keeps its
    // colour (a hash of its id) across refreshes and a reload
    const status = () =>
      page.evaluate(
        () => document.querySelector('.cards [data-field="status"]')?.textContent ?? "(none)",
      )
    expect(await status()).toBe("live")
    const swatches = () =>
      page.evaluate(() =>
        Object.fromEntries(
          [...document.querySelectorAll("#members tbody tr")].map((row) => [
            (row as HTMLElement).dataset.member!,
            (row.querySelector(".swatch") as HTMLElement).style.background,
          ]),
        ),
      )
    const before = await swatches()
    expect(before["pod-a"]).not.toBe(before["pod-b"])
    await new Promise((resolve) => setTimeout(resolve, 1_500)) // a refresh or two
    expect(await swatches()).toEqual(before)
    await page.goto(url)
    await page.waitForSelector(`section#group[data-group="${group}"] #members tbody tr`)
    expect(await swatches()).toEqual(before)

    mkdirSync(OUTPUT, { recursive: true })
    await page.screenshot(path.join(OUTPUT, browser.screenshot))
    expect(page.errors).toEqual([])

    // the server refused the dashboard's user nothing: it never tried to write
    const check = new Redis(server().url)
    try {
      const log = (await check.call("ACL", "LOG")) as Array<Array<unknown>>
      const mine = log.filter((entry) => entry[entry.indexOf("username") + 1] === USER)
      expect(mine).toEqual([])
    } finally {
      check.disconnect()
    }
  })
}
