/**
 * `shardline dashboard` (docs/observability.md, "The dashboard"): a local web
 * page that shows a server's consumer groups live. Every refresh reads
 * Redis through the ports and `shardline inspect`'s code (src/inspect.ts:
 * one definition of the data) and pushes the result to the open pages as a
 * server-sent event. It never writes: it calls only inspect's readers, and
 * `Acl.readOnlyRules` is an ACL for a user that can run it and nothing more
 * (test: member-runtime test/redis/dashboard.test.ts runs it as that user).
 *
 * Bound to 127.0.0.1 by default, where a request must name the server by a
 * loopback host (a page of another site that rebinds its name to 127.0.0.1
 * is refused); bound elsewhere, every request needs the token (`--token`, or
 * one generated and printed with the URL).
 *
 * Routes: `/` the page (plain HTML, JS and SVG from this package, no build
 * step), `/events` the live state (text/event-stream), `/api/state` the
 * latest state as JSON.
 */
import { randomBytes, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { BackendUnavailable, GroupKey } from "@shardline/core"
import { RedisConnection, RedisPorts } from "@shardline/redis-store"
import { untilStopped } from "@shardline/redis-store/internal"
import { Context, Data, Effect, Exit, Layer, Option, type Scope } from "effect"
import { type InspectReport, inspectReport, listGroups } from "../inspect.js"
import { type AuditEntry, auditEntries, buildStrip, compareIds, type Strip } from "./ownership.js"
import page from "./page.html"

export interface DashboardOptions {
  /** How to reach Redis (the CLI's --redis / --cluster). */
  readonly connection: RedisConnection.RedisConnectionOptions
  /** Interface to listen on (default 127.0.0.1). */
  readonly host?: string
  /** Port (default 7070; 0: any free port). */
  readonly port?: number
  /** Required on every request when given; generated when bound beyond loopback. */
  readonly token?: string
  /** Only this group (default: every group stored on the server). */
  readonly group?: GroupKey
  /** Refresh period (default 1,000 ms). */
  readonly intervalMs?: number
  /** Audit events read per group and refresh (default 200). */
  readonly auditCount?: number
  /** Ownership history kept (default 15 minutes). */
  readonly windowMs?: number
}

/**
 * Whether a group is alive, as the page shows it: `live` only when a
 * coordinator holds the lease and serves, and a member heartbeated within
 * three heartbeat intervals; otherwise why not, most basic first.
 */
export type GroupStatus =
  | { readonly state: "live" }
  | { readonly state: "lease-expired" | "no-coordinator" | "no-heartbeat"; readonly reason: string }

/** A group as the page shows it: inspect's report, the strip, each shard's handling rate. */
export interface GroupView {
  readonly report: InspectReport
  readonly strip: Strip
  /** Entries acknowledged per second on each shard since the previous refresh (null: unknown yet). */
  readonly rates: Readonly<Record<number, number | null>>
  readonly status: GroupStatus
  /** Each member's colour: a hash of its id, so the same on every refresh and page. */
  readonly colors: Readonly<Record<string, string>>
}

/** `live`, or why the group is not (docs/observability.md, "The dashboard"). */
export const groupStatus = (
  report: Pick<
    InspectReport,
    "lease" | "serving" | "lastHeartbeatAgoMs" | "heartbeatIntervalMs" | "members"
  >,
): GroupStatus => {
  if (report.lease === null || report.lease.ttlMs === -2)
    return {
      state: "lease-expired",
      reason: "no coordinator holds the group's lease (it expired, or none ever did)",
    }
  if (!report.serving)
    return {
      state: "no-coordinator",
      reason: `${report.lease.holder} holds the lease but no coordinator serves the group's heartbeats`,
    }
  const staleAfterMs = 3 * report.heartbeatIntervalMs
  if (report.lastHeartbeatAgoMs === null || report.lastHeartbeatAgoMs > staleAfterMs)
    return {
      state: "no-heartbeat",
      reason:
        report.lastHeartbeatAgoMs === null
          ? "no member has heartbeated for a long while"
          : `the last member heartbeat was ${Math.round(report.lastHeartbeatAgoMs / 1000)} s ago (more than 3 heartbeat intervals)`,
    }
  return { state: "live" }
}

/**
 * A member's colour from a hash of its id (FNV-1a, 32 bits): the same on
 * every refresh and in every page, whatever order members are seen in.
 */
export const memberColor = (memberId: string): string => {
  let h = 0x811c9dc5
  for (let i = 0; i < memberId.length; i++) {
    h ^= memberId.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return `hsl(${h % 360} ${55 + ((h >>> 9) % 25)}% ${52 + ((h >>> 17) % 16)}%)`
}

/** Live groups first, then by stream and group. */
export const orderGroups = (groups: ReadonlyArray<GroupView>): Array<GroupView> =>
  [...groups].sort(
    (a, b) =>
      Number(b.status.state === "live") - Number(a.status.state === "live") ||
      (a.report.stream < b.report.stream ? -1 : a.report.stream > b.report.stream ? 1 : 0) ||
      (a.report.group < b.report.group ? -1 : a.report.group > b.report.group ? 1 : 0),
  )

export interface DashboardState {
  /** When this state was read (ms). */
  readonly at: number
  readonly target: string
  readonly groups: ReadonlyArray<GroupView>
  /** Groups listed but not readable this refresh, with why. */
  readonly errors: ReadonlyArray<{
    readonly stream: string
    readonly group: string
    readonly message: string
  }>
}

export interface Dashboard {
  readonly url: string
  readonly port: number
  readonly token: string | undefined
  /** The latest state (undefined before the first refresh ends). */
  readonly state: () => DashboardState | undefined
}

/** The dashboard could not start (its port is taken, ...). */
export class DashboardFailed extends Data.TaggedError("DashboardFailed")<{
  readonly message: string
}> {}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/

/**
 * The connection options the dashboard reads with: as given, without
 * ioredis's CLIENT SETINFO (a read-only ACL user has no reason to be allowed
 * it; `Acl.readOnlyRules`).
 */
export const readOnlyConnection = (
  c: RedisConnection.RedisConnectionOptions,
): RedisConnection.RedisConnectionOptions => ({
  ...c,
  redis: { ...c.redis, disableClientInfo: true },
  // CONFIG is refused to a read-only ACL user (docs/redis.md, "ACL: a least-privilege user")
  checkClusterSettings: false,
})

/** Is `host` (an interface to bind) loopback only? */
export const isLoopback = (host: string): boolean => LOOPBACK.test(host)

const hostOnly = (header: string): string => {
  if (header.startsWith("[")) return header.slice(1, header.indexOf("]"))
  const colon = header.lastIndexOf(":")
  return colon < 0 ? header : header.slice(0, colon)
}

const sameSecret = (given: string, token: string): boolean => {
  const a = Buffer.from(given)
  const b = Buffer.from(token)
  return a.length === b.length && timingSafeEqual(a, b)
}

/** Is this request allowed: the token when there is one, else a loopback Host header. */
export const authorized = (
  req: Pick<IncomingMessage, "headers" | "url">,
  token: string | undefined,
): boolean => {
  if (token !== undefined) {
    const url = new URL(req.url ?? "/", "http://x")
    const bearer = req.headers.authorization?.match(/^Bearer (.+)$/)?.[1]
    const given = url.searchParams.get("token") ?? bearer
    return given !== undefined && given !== null && sameSecret(given, token)
  }
  const host = req.headers.host
  return host !== undefined && isLoopback(hostOnly(host))
}

const keyString = (k: GroupKey) => JSON.stringify([k.stream, k.group])

/** The refresh loop's memory: audit events seen and the previous counts per shard. */
interface GroupMemory {
  readonly audit: Map<string, AuditEntry>
  previous: { readonly at: number; readonly acked: ReadonlyMap<number, number> } | undefined
}

/** Entries acknowledged on a shard so far: delivered minus still pending. */
const ackedOf = (s: InspectReport["shards"][number]): number | undefined =>
  s.entriesRead === null ? undefined : s.entriesRead - s.pending

/** Read every group once and build the state (no write: inspect's readers only). */
export const readState = (
  ports: Context.Context<RedisPorts.RedisPorts>,
  options: Pick<DashboardOptions, "group" | "auditCount" | "windowMs">,
  memory: Map<string, GroupMemory>,
  target: string,
  now: () => number,
): Effect.Effect<DashboardState, never> =>
  Effect.gen(function* () {
    const connection = Context.get(ports, RedisConnection.RedisConnection)
    const listed =
      options.group !== undefined
        ? Exit.succeed([options.group] as ReadonlyArray<GroupKey>)
        : yield* Effect.exit(listGroups(connection))
    const groups: Array<GroupView> = []
    const errors: Array<{ stream: string; group: string; message: string }> = []
    if (Exit.isFailure(listed)) {
      errors.push({ stream: "", group: "", message: String(listed.cause) })
      return { at: now(), target, groups, errors }
    }
    for (const key of listed.value) {
      const read = yield* Effect.exit(inspectReport(ports, key, options.auditCount ?? 200))
      if (Exit.isFailure(read) || Option.isNone(read.value)) {
        errors.push({
          ...key,
          message: Exit.isFailure(read)
            ? String(read.cause)
            : "nothing stored for this group (yet)",
        })
        continue
      }
      const report = read.value.value
      const at = now()
      let m = memory.get(keyString(key))
      if (m === undefined) {
        m = { audit: new Map(), previous: undefined }
        memory.set(keyString(key), m)
      }
      for (const e of auditEntries(report.audit)) m.audit.set(e.id, e)
      const windowMs = options.windowMs ?? 15 * 60_000
      // keep what the window needs (and at least the events of the last read)
      const kept = [...m.audit.values()].sort((a, b) => compareIds(a.id, b.id))
      for (const e of kept.slice(0, Math.max(0, kept.length - 5_000))) m.audit.delete(e.id)
      const oldest = kept.find((e) => m!.audit.has(e.id))?.at ?? at
      const from = Math.max(oldest, at - windowMs)
      const strip = buildStrip(
        [...m.audit.values()],
        report.shards.map((s) => ({
          shard: s.shard,
          owner: report.assignment.find((a) => a.shard === s.shard)?.owner ?? null,
        })),
        from,
        at,
      )
      const acked = new Map<number, number>()
      const rates: Record<number, number | null> = {}
      for (const s of report.shards) {
        const n = ackedOf(s)
        if (n !== undefined) acked.set(s.shard, n)
        const before = m.previous?.acked.get(s.shard)
        const seconds = m.previous === undefined ? 0 : (at - m.previous.at) / 1000
        rates[s.shard] =
          n === undefined || before === undefined || seconds <= 0
            ? null
            : Math.max(0, (n - before) / seconds)
      }
      m.previous = { at, acked }
      const members = new Set([
        ...report.members.map((x) => x.memberId),
        ...strip.shards.flatMap((x) =>
          x.segments.flatMap((seg) => (seg.owner === null ? [] : [seg.owner])),
        ),
        ...report.assignment.flatMap((a) => (a.owner === null ? [] : [a.owner])),
      ])
      const colors = Object.fromEntries([...members].map((id) => [id, memberColor(id)]))
      groups.push({ report, strip, rates, status: groupStatus(report), colors })
    }
    return { at: now(), target, groups: orderGroups(groups), errors }
  })

/** Serve the dashboard until the scope closes. */
export const serve = (
  options: DashboardOptions,
): Effect.Effect<Dashboard, RedisConnection.ConnectError | DashboardFailed, Scope.Scope> =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const token = options.token ?? (isLoopback(host) ? undefined : randomBytes(16).toString("hex"))
    const ports = yield* Layer.build(RedisPorts.layer(readOnlyConnection(options.connection)))
    const target = describeTarget(options.connection)
    const memory = new Map<string, GroupMemory>()
    let latest: DashboardState | undefined
    let body = ""
    const clients = new Set<ServerResponse>()
    const push = (state: DashboardState) => {
      latest = state
      body = JSON.stringify(state)
      for (const res of clients) res.write(`event: state\ndata: ${body}\n\n`)
    }

    const server = createServer((req, res) => handle(req, res))
    const handle = (req: IncomingMessage, res: ServerResponse) => {
      const headers = {
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
      }
      if (!authorized(req, token)) {
        res.writeHead(403, { ...headers, "content-type": "text/plain" })
        res.end(
          token === undefined
            ? "forbidden: address this dashboard as 127.0.0.1 or localhost\n"
            : "forbidden: a valid token is required (?token=...)\n",
        )
        return
      }
      if (req.method !== "GET" && req.method !== "HEAD") {
        res.writeHead(405, { ...headers, allow: "GET, HEAD" })
        res.end()
        return
      }
      const path = new URL(req.url ?? "/", "http://x").pathname
      if (path === "/") {
        res.writeHead(200, {
          ...headers,
          "content-type": "text/html; charset=utf-8",
          "content-security-policy":
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        })
        res.end(page)
      } else if (path === "/api/state") {
        res.writeHead(latest === undefined ? 503 : 200, {
          ...headers,
          "content-type": "application/json",
        })
        res.end(latest === undefined ? '{"error":"no state yet"}' : body)
      } else if (path === "/events") {
        res.writeHead(200, {
          ...headers,
          "content-type": "text/event-stream",
          connection: "keep-alive",
        })
        res.write("retry: 1000\n\n")
        if (latest !== undefined) res.write(`event: state\ndata: ${body}\n\n`)
        clients.add(res)
        req.on("close", () => clients.delete(res))
      } else {
        res.writeHead(404, { ...headers, "content-type": "text/plain" })
        res.end("not found\n")
      }
    }

    const port = yield* Effect.callback<number, BackendUnavailable | DashboardFailed>((resume) => {
      server.once("error", (error) =>
        resume(
          Effect.fail(
            new DashboardFailed({
              message: `cannot listen on ${host}:${options.port ?? 7070}: ${error.message}`,
            }),
          ),
        ),
      )
      server.listen(options.port ?? 7070, host, () => {
        const address = server.address()
        resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0))
      })
    })
    yield* Effect.addFinalizer(() =>
      Effect.callback<void>((resume) => {
        for (const res of clients) res.end()
        clients.clear()
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      }),
    )

    const refresh = Effect.flatMap(
      readState(ports, options, memory, target, () => Date.now()),
      (state) => Effect.sync(() => push(state)),
    )
    yield* refresh
    yield* Effect.forkScoped(
      Effect.forever(Effect.andThen(Effect.sleep(options.intervalMs ?? 1_000), refresh)),
    )
    const shown = host.includes(":") ? `[${host}]` : host
    return {
      url: `http://${shown}:${port}/${token === undefined ? "" : `?token=${token}`}`,
      port,
      token,
      state: () => latest,
    }
  })

const describeTarget = (c: RedisConnection.RedisConnectionOptions): string => {
  if (c.cluster !== undefined)
    return `cluster ${c.cluster.nodes.map((n) => (typeof n === "string" ? n : `${n.host}:${n.port}`)).join(",")}`
  if (c.url !== undefined) {
    try {
      const u = new URL(c.url)
      u.password = ""
      u.username = ""
      return u.toString()
    } catch {
      return "redis"
    }
  }
  return `${c.host ?? "127.0.0.1"}:${c.port ?? 6379}`
}

/**
 * Run the dashboard until SIGINT / SIGTERM, or until its parent is gone
 * (`npx shardline dashboard`: src/internal/untilStopped.ts); the CLI's
 * `dashboard` command.
 */
export const run = (
  options: DashboardOptions,
  announce: (line: string) => void,
): Effect.Effect<void, RedisConnection.ConnectError | DashboardFailed> =>
  Effect.scoped(
    Effect.gen(function* () {
      const dashboard = yield* serve(options)
      announce(`shardline dashboard on ${dashboard.url}`)
      // SIGTERM, SIGINT, or npx's shell gone without passing a SIGTERM on
      yield* untilStopped()
    }),
  )
