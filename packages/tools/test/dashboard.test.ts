/**
 * The dashboard's parts that need no browser (docs/observability.md, "The
 * dashboard"): the ownership strip rebuilt from the audit log, who may open
 * the page (token, loopback Host), the group list's key parsing, and the
 * read-only ACL: none of its commands writes (COMMAND INFO on every server),
 * a user with it can list and inspect groups (and the dashboard's whole
 * refresh) with an empty ACL LOG, and cannot write. The page itself, in a
 * browser against a live group: member-runtime test/redis/dashboard.test.ts.
 */
import { assert, it } from "@effect/vitest"
import { Coordinator } from "@shardline/core"
import { Acl, Keys, RedisConnection, RedisPorts, RedisStore } from "@shardline/redis-store"
import { Context, Effect, Layer, Option } from "effect"
import { Cluster, type Redis } from "ioredis"
import { describe, expect, it as test } from "vitest"
import { configFor } from "../../redis-store/test/contract/Store.js"
import {
  connect,
  describeTarget,
  redisTargets,
  unique,
} from "../../redis-store/test/support/targets.js"
import { type AuditEntry, buildStrip } from "../src/dashboard/ownership.js"
import {
  authorized,
  type GroupView,
  groupStatus,
  memberColor,
  orderGroups,
  readOnlyConnection,
  readState,
} from "../src/dashboard/server.js"
import { inspectReport, listGroups } from "../src/inspect.js"

let n = 0
const event = (
  at: number,
  kind: string,
  memberId?: string,
  shards?: ReadonlyArray<number>,
): AuditEntry => ({
  id: `${at}-${n++}`,
  at,
  kind,
  ...(memberId !== undefined ? { memberId } : {}),
  ...(shards !== undefined ? { shards } : {}),
  reason: kind,
})

describe("the ownership strip", () => {
  test("grants and revocations become segments; markers for rebalances, fences, coordinators", () => {
    const strip = buildStrip(
      [
        event(100, "CoordinatorElected"),
        event(110, "ShardsGranted", "a", [0, 1]),
        event(200, "TargetAssignmentChanged", undefined, [1]),
        event(210, "RevokeAccepted", "a", [1]),
        event(220, "ShardsGranted", "b", [1]),
        event(300, "MemberFenced", "b", [1]),
      ],
      [
        { shard: 0, owner: "a" },
        { shard: 1, owner: null },
      ],
      100,
      400,
    )
    expect(strip.shards).toEqual([
      { shard: 0, segments: [{ from: 110, to: 400, owner: "a" }] },
      {
        shard: 1,
        segments: [
          { from: 110, to: 210, owner: "a" },
          { from: 210, to: 220, owner: null },
          { from: 220, to: 300, owner: "b" },
          { from: 300, to: 400, owner: null },
        ],
      },
    ])
    expect(strip.markers.map((m) => [m.at, m.kind])).toEqual([
      [100, "coordinator"],
      [200, "rebalance"],
      [300, "fence"],
    ])
  })

  test("a release first: that member owned the shard from the window's start; no event: the snapshot's owner all along", () => {
    const strip = buildStrip(
      [event(150, "RevokeAccepted", "a", [0]), event(160, "ShardsGranted", "b", [0])],
      [
        { shard: 0, owner: "b" },
        { shard: 1, owner: "c" },
      ],
      100,
      200,
    )
    expect(strip.shards[0]!.segments).toEqual([
      { from: 100, to: 150, owner: "a" },
      { from: 150, to: 160, owner: null },
      { from: 160, to: 200, owner: "b" },
    ])
    expect(strip.shards[1]!.segments).toEqual([{ from: 100, to: 200, owner: "c" }])
  })

  test("the snapshot wins where the (capped) audit log missed events; duplicates count once; a release of another member's shard changes nothing", () => {
    const granted = event(110, "ShardsGranted", "a", [0])
    const strip = buildStrip(
      [granted, granted, event(120, "RevokeAccepted", "z", [0])],
      [{ shard: 0, owner: "b" }],
      100,
      200,
    )
    expect(strip.shards[0]!.segments).toEqual([{ from: 110, to: 200, owner: "b" }])
  })
})

describe("a group's status and its members' colours (issue 33 item 10)", () => {
  const live = {
    lease: { holder: "pod-a#1", token: 3, ttlMs: 4_000 },
    serving: true,
    lastHeartbeatAgoMs: 200,
    heartbeatIntervalMs: 3_000,
    members: [],
  }
  test("live only with a lease, a serving coordinator and a recent heartbeat", () => {
    expect(groupStatus(live)).toEqual({ state: "live" })
    expect(groupStatus({ ...live, lease: null }).state).toBe("lease-expired")
    expect(groupStatus({ ...live, serving: false }).state).toBe("no-coordinator")
    expect(groupStatus({ ...live, lastHeartbeatAgoMs: null }).state).toBe("no-heartbeat")
    expect(groupStatus({ ...live, lastHeartbeatAgoMs: 9_001 }).state).toBe("no-heartbeat")
    expect(groupStatus({ ...live, lastHeartbeatAgoMs: 9_000 }).state).toBe("live")
    const stale = groupStatus({ ...live, lastHeartbeatAgoMs: 42_000 })
    expect(stale.state === "live" ? "" : stale.reason).toContain("42 s ago")
  })

  test("live groups first, then by stream and group", () => {
    const view = (stream: string, group: string, state: GroupView["status"]["state"]) =>
      ({
        report: { stream, group },
        status: state === "live" ? { state } : { state, reason: "" },
      }) as unknown as GroupView
    const ordered = orderGroups([
      view("a", "dead", "lease-expired"),
      view("b", "y", "live"),
      view("a", "stale", "no-heartbeat"),
      view("b", "x", "live"),
      view("c", "z", "no-coordinator"),
    ]).map((g) => `${g.report.stream}/${g.report.group}`)
    expect(ordered).toEqual(["b/x", "b/y", "a/dead", "a/stale", "c/z"])
  })

  test("a member's colour is a hash of its id: the same every time, whatever else is seen", () => {
    const ids = Array.from({ length: 40 }, (_, i) => `pod-${i}-m0`)
    const first = ids.map(memberColor)
    expect([...ids].reverse().map(memberColor).reverse()).toEqual(first)
    expect(first.every((c) => /^hsl\(\d+ \d+% \d+%\)$/.test(c))).toBe(true)
    // ids that differ by one character get different colours
    expect(new Set(first).size).toBeGreaterThan(35)
  })
})

describe("who may open the dashboard", () => {
  const req = (url: string, host?: string, authorization?: string) => ({
    url,
    headers: {
      ...(host !== undefined ? { host } : {}),
      ...(authorization !== undefined ? { authorization } : {}),
    },
  })
  test("without a token: only a loopback Host (a rebound DNS name is refused)", () => {
    expect(authorized(req("/", "127.0.0.1:7070"), undefined)).toBe(true)
    expect(authorized(req("/", "localhost:7070"), undefined)).toBe(true)
    expect(authorized(req("/", "[::1]:7070"), undefined)).toBe(true)
    expect(authorized(req("/", "evil.example:7070"), undefined)).toBe(false)
    expect(authorized(req("/", "127.0.0.1.evil.example"), undefined)).toBe(false)
    expect(authorized(req("/"), undefined)).toBe(false)
  })
  test("with a token: the token, in the query or as a bearer, whatever the Host", () => {
    expect(authorized(req("/?token=s3cret", "10.0.0.5:7070"), "s3cret")).toBe(true)
    expect(authorized(req("/events", "10.0.0.5", "Bearer s3cret"), "s3cret")).toBe(true)
    expect(authorized(req("/?token=s3cre", "10.0.0.5"), "s3cret")).toBe(false)
    expect(authorized(req("/?token=s3cretX", "10.0.0.5"), "s3cret")).toBe(false)
    expect(authorized(req("/", "127.0.0.1:7070"), "s3cret")).toBe(false)
  })
})

test("group keys: the Store revision key names the group; anything else is no group", () => {
  const { groupOfRevisionKey } = Keys.defaultKeys
  expect(groupOfRevisionKey("shardline:group:{orders:billing}:store:revision")).toEqual({
    stream: "orders",
    group: "billing",
  })
  expect(groupOfRevisionKey("shardline:group:{a%3Ab:c%7Bd}:store:revision")).toEqual({
    stream: "a:b",
    group: "c{d",
  })
  expect(groupOfRevisionKey("shardline:stream:{orders}:layout")).toBeUndefined()
  expect(groupOfRevisionKey("shardline:group:{orders:billing}:store:batches")).toBeUndefined()
  expect(groupOfRevisionKey("shardline:{orders:3}")).toBeUndefined()
  // schema 1's key, and another namespace's: not this namespace's group
  expect(groupOfRevisionKey("{shardline:orders:billing}:store:revision")).toBeUndefined()
  expect(groupOfRevisionKey("other:group:{orders:billing}:store:revision")).toBeUndefined()
})

const USER = "shardline-dashboard-test"
const PASSWORD = "read-only-for-tests"

for (const target of redisTargets()) {
  const acquire = Effect.gen(function* () {
    const admin = yield* connect(target)
    const nodes: ReadonlyArray<Redis> =
      admin.client instanceof Cluster ? admin.client.nodes("master") : [admin.client]
    const rules = Acl.readOnlyRules({ cluster: admin.isCluster })
    yield* Effect.promise(() =>
      Promise.all(
        nodes.map(async (node) => {
          await node.call("ACL", "SETUSER", USER, "reset", "on", `>${PASSWORD}`, ...rules)
          await node.call("ACL", "LOG", "RESET")
        }),
      ),
    )
    return { admin, nodes }
  })

  describeTarget("the read-only (dashboard) ACL user", target, acquire, (subject) => {
    it.live("none of its commands writes (COMMAND INFO)", () =>
      Effect.gen(function* () {
        const { nodes } = subject()
        for (const command of Acl.readOnlyCommands({ cluster: true })) {
          const [name, sub] = command.split("|")
          const info = (yield* Effect.promise(() =>
            nodes[0]!.call("COMMAND", "INFO", sub === undefined ? name! : `${name}|${sub}`),
          )) as Array<[string, number, Array<string>] | null>
          assert.isNotNull(info[0], `${command} is a command of this server`)
          assert.notInclude(info[0]![2], "write", `${command} must not be a write command`)
        }
      }),
    )

    it.live(
      "lists and inspects a stored group, refreshes the dashboard's state, and writes nothing",
      () =>
        Effect.gen(function* () {
          const { admin, nodes } = subject()
          const stream = unique("dash")
          const key = { stream, group: "g" }
          // a group stored by its coordinator, through the admin connection
          const store = RedisStore.makeWith(admin)
          const config = configFor(key)
          yield* store.commit(key, 0, Coordinator.createGroup(config, 1_000))
          const ports = yield* Layer.build(
            RedisPorts.layer(
              readOnlyConnection({ ...target.options, username: USER, password: PASSWORD }),
            ),
          )
          const listed = yield* listGroups(Context.get(ports, RedisConnection.RedisConnection))
          assert.deepInclude(listed, key)
          const report = yield* inspectReport(ports, key, 10)
          assert.isTrue(Option.isSome(report))
          const state = yield* readState(ports, { group: key }, new Map(), "test", () => 2_000)
          assert.deepStrictEqual(state.errors, [])
          assert.strictEqual(state.groups[0]!.report.shards.length, config.shardCount)
          // stored, but no coordinator ever held its lease: not shown as live
          assert.strictEqual(state.groups[0]!.status.state, "lease-expired")
          assert.strictEqual(state.groups[0]!.report.serving, false)
          assert.strictEqual(state.groups[0]!.report.lastHeartbeatAgoMs, null)
          // what the server refused this user (the log is the server's: other tests' users too)
          const log = yield* Effect.promise(() =>
            Promise.all(
              nodes.map((node) => node.call("ACL", "LOG") as Promise<Array<Array<unknown>>>),
            ),
          )
          const refusedHere = log
            .flat()
            .map((entry) => {
              const fields = new Map<string, unknown>()
              for (let i = 0; i + 1 < entry.length; i += 2)
                fields.set(String(entry[i]), entry[i + 1])
              return fields
            })
            .filter((f) => f.get("username") === USER)
            .map((f) => `${String(f.get("reason"))} ${String(f.get("object"))}`)
          assert.deepStrictEqual(refusedHere, [], "the read-only user was refused nothing")
          // and it cannot write
          const connection = Context.get(ports, RedisConnection.RedisConnection)
          const refused = yield* Effect.exit(
            connection.command("SET (must be refused)", (c) =>
              c.set(Keys.defaultKeys.ownerTokenKey(stream, 0, "g"), "99"),
            ),
          )
          assert.isTrue(refused._tag === "Failure")
          assert.match(String(refused), /NOPERM/)
        }).pipe(Effect.scoped),
    )
  })
}
