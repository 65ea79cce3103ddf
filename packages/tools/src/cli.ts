#!/usr/bin/env node
/**
 * `shardline`: inspect a group, reshard a stream, run a coordinator, all on
 * Redis alone (docs/redis.md, "CLI").
 *
 *   shardline inspect --redis <url> --stream S --group G [--json] [--audit N]
 *   shardline reshard --redis <url> --stream S --shards M
 *   shardline reshard --redis <url> --stream S --rollback
 *   shardline coordinator --redis <url> --stream S --group G [--shards N]
 *       [--session-timeout ms] [--heartbeat-interval ms] [--rebalance-timeout ms]
 *       [--lease-ttl ms] [--holder id]
 *   shardline dlq list|count|show|replay|purge --redis <url> --stream S --group G ...
 *   shardline groups list|delete --redis <url> --stream S [--group G] [--force] [--dry-run]
 *   shardline dashboard --redis <url> [--port N] [--host H] [--token T]
 *       [--stream S --group G] [--interval ms]   (src/dashboard/, docs/observability.md)
 *   shardline migrate-keys --redis <url> --stream S [--from-prefix P] [--dry-run] [--force]
 *       (an earlier version's unprefixed keys into the namespace: src/MigrateKeys.ts)
 *
 *   shardline --help | --version
 *
 * The `shardline` bin of @shardline/member-runtime runs this module's `run`.
 * `--cluster host:port,...` instead of `--redis` for a Redis Cluster, or
 * `--sentinels host:port,... --sentinel-name N` for the primary N of Redis
 * Sentinel (`--username` / `--password` for the primary's ACL user,
 * `--sentinel-username` / `--sentinel-password` for the sentinels' own);
 * `--connect-timeout ms` bounds connecting (default 10,000);
 * `--command-timeout-ms n` is every command's deadline (`commandTimeoutMs`,
 * default 5,000; docs/redis.md "Command deadline");
 * `--prefix P` names the namespace of the keys (default `shardline:`,
 * docs/redis.md "Keys"). A command that writes refuses a server whose
 * `maxmemory-policy` is not `noeviction` unless `--allow-eviction` (one
 * that only reads warns on stderr; docs/redis.md, "Eviction"). A group that
 * does not exist, a refusal, another key schema in the namespace, or a
 * Redis that cannot be reached is one line on stderr and exit code 2; bad
 * usage is exit code 64.
 */
import { readFileSync, realpathSync } from "node:fs"
import os from "node:os"
import { fileURLToPath } from "node:url"
import {
  CoordinatorCandidate,
  type CoordinatorHost,
  CoordinatorTransport,
  decodeGroupConfig,
  type GroupKey,
  inspectGroup,
  Layout,
} from "@shardline/core"
import {
  Acl,
  type AdminRefused,
  KeySchema,
  RedisConnection,
  RedisPorts,
} from "@shardline/redis-store"
import { untilStopped } from "@shardline/redis-store/internal"
import { Context, Data, Effect, Exit, Layer, Logger, Option, type Scope } from "effect"
import * as Admin from "./Admin.js"
import { collect, type InspectReport } from "./inspect.js"
import * as MigrateKeys from "./MigrateKeys.js"

/** A failure the CLI reports as one line (exit 2). */
class CliFailure extends Data.TaggedError("CliFailure")<{ readonly message: string }> {}

class UsageError {
  readonly _tag = "UsageError"
  constructor(readonly message: string) {}
}

const USAGE = `usage:
  shardline inspect --redis <url> --stream S [--group G] [--json] [--audit N]
      (without --group: every group of the stream)
  shardline reshard --redis <url> --stream S (--shards M | --rollback)
  shardline coordinator --redis <url> --stream S --group G [--shards N]
      [--session-timeout ms] [--heartbeat-interval ms] [--rebalance-timeout ms]
      [--start-at earliest|latest|<entry id>] [--lease-ttl ms] [--holder id]
  shardline dlq list --redis <url> --stream S --group G [--shard N] [--count N] [--json]
  shardline dlq count --redis <url> --stream S --group G [--shard N] [--json]
  shardline dlq show --redis <url> --stream S --shard N --id ID [--json]
  shardline dlq replay --redis <url> --stream S --group G [--shard N [--id ID]] [--count N] [--dry-run] [--json]
  shardline dlq purge --redis <url> --stream S --group G (--all | --shard N [--id ID]) [--count N]
  shardline groups list --redis <url> --stream S [--json]
  shardline groups delete --redis <url> --stream S --group G [--dry-run] [--force]
  shardline dashboard --redis <url> [--port N (7070)] [--host H (127.0.0.1)] [--token T]
      [--stream S --group G] [--interval ms]
  shardline migrate-keys --redis <url> --stream S [--from-prefix P] [--dry-run] [--force] [--json]
      (every process of the stream's groups stopped: an earlier version's keys into the namespace)
  shardline --help | --version
  (--cluster host:port,... instead of --redis for a Redis Cluster;
   --sentinels host:port,... --sentinel-name N instead of --redis for the primary N
   of Redis Sentinel; --username U --password P: the primary's ACL user (with
   --redis, in the URL), --sentinel-username U --sentinel-password P: the
   sentinels' own;
   --connect-timeout ms: how long connecting may take, default 10000;
   --command-timeout-ms n: how long any command may wait for its reply, default 5000;
   --prefix P: the namespace of Shardline's keys, default shardline:;
   --allow-eviction: write to a server whose maxmemory-policy is not noeviction)`

interface Args {
  readonly command: string
  readonly flags: Map<string, string | true>
}

const BOOLEAN_FLAGS = new Set([
  "json",
  "rollback",
  "help",
  "all",
  "force",
  "dry-run",
  "allow-eviction",
])

/** Commands with a subcommand: `dlq list`, `groups delete`, ... */
const SUBCOMMANDS: Readonly<Record<string, ReadonlyArray<string>>> = {
  dlq: ["list", "count", "show", "replay", "purge"],
  groups: ["list", "delete"],
}

export const parseArgs = (argv: ReadonlyArray<string>): Args => {
  let [command = "help", ...rest] = argv
  const subcommands = SUBCOMMANDS[command]
  if (subcommands !== undefined) {
    const sub = rest[0]
    if (sub === undefined || !subcommands.includes(sub))
      throw new UsageError(`${command} needs one of: ${subcommands.join(", ")}`)
    command = `${command} ${sub}`
    rest = rest.slice(1)
  }
  const flags = new Map<string, string | true>()
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!
    if (!arg.startsWith("--")) throw new UsageError(`unexpected argument: ${arg}`)
    const eq = arg.indexOf("=")
    const name = eq > 0 ? arg.slice(2, eq) : arg.slice(2)
    if (eq > 0) flags.set(name, arg.slice(eq + 1))
    else if (BOOLEAN_FLAGS.has(name)) flags.set(name, true)
    else {
      const value = rest[++i]
      if (value === undefined) throw new UsageError(`--${name} needs a value`)
      flags.set(name, value)
    }
  }
  return { command, flags }
}

const text = (args: Args, name: string): string => {
  const v = args.flags.get(name)
  if (typeof v !== "string" || v === "") throw new UsageError(`--${name} is required`)
  return v
}

const optionalInt = (args: Args, name: string): number | undefined => {
  const v = args.flags.get(name)
  if (v === undefined) return undefined
  const n = Number(v)
  if (typeof v !== "string" || !Number.isSafeInteger(n) || n < 1)
    throw new UsageError(`--${name} must be a positive integer, got ${String(v)}`)
  return n
}

/** Connection options from --redis / --cluster; `failFast`: no reconnection (one-shot commands). */
const connectionOptions = (
  args: Args,
  failFast: boolean,
): RedisConnection.RedisConnectionOptions => {
  // A one-shot command gives up after three quick reconnections (a refused
  // port fails in well under a second); the connect timeout is generous
  // because a process still starting on a loaded machine may not run its
  // connect callback for seconds (ioredis then closes the socket)
  // no CLIENT SETINFO: inspect and the dashboard run as read-only ACL users (Acl.readOnlyRules)
  const redis = failFast
    ? {
        retryStrategy: (times: number) => (times > 3 ? null : 200),
        maxRetriesPerRequest: 3,
        connectTimeout: 10_000,
        disableClientInfo: true,
      }
    : { connectTimeout: 10_000, disableClientInfo: true }
  const prefix = args.flags.get("prefix")
  const connectTimeoutMs = optionalInt(args, "connect-timeout")
  // every command's deadline (docs/redis.md, "Command deadline")
  const commandTimeoutMs = optionalInt(args, "command-timeout-ms")
  // a server that evicts keys: a command that writes is refused unless
  // --allow-eviction; one that only reads warns (docs/redis.md, "Eviction")
  const allowEviction =
    args.flags.has("allow-eviction") || READ_ONLY.has(args.command) || args.command === "dashboard"
  const common = {
    ...(typeof prefix === "string" ? { keyPrefix: prefix } : {}),
    ...(connectTimeoutMs === undefined ? {} : { connectTimeoutMs }),
    ...(commandTimeoutMs === undefined ? {} : { commandTimeoutMs }),
    allowEviction,
  }
  const given = ["redis", "cluster", "sentinels"].filter((f) => args.flags.has(f))
  if (given.length > 1)
    throw new UsageError(
      `give one of --redis, --cluster and --sentinels, not ${given.join(" and ")}`,
    )
  for (const flag of ["sentinel-name", "sentinel-username", "sentinel-password"])
    if (args.flags.has(flag) && !args.flags.has("sentinels"))
      throw new UsageError(`--${flag} goes with --sentinels`)
  for (const flag of ["username", "password"])
    if (args.flags.has(flag) && !args.flags.has("sentinels"))
      throw new UsageError(
        `--${flag} goes with --sentinels (with --redis or --cluster, give the user in the URL or use a URL)`,
      )
  const cluster = args.flags.get("cluster")
  if (typeof cluster === "string")
    return {
      cluster: {
        nodes: cluster.split(","),
        options: failFast ? { clusterRetryStrategy: () => null } : {},
      },
      redis,
      ...common,
    }
  const sentinels = args.flags.get("sentinels")
  if (typeof sentinels === "string") {
    const nodes = sentinels.split(",")
    for (const node of nodes)
      if (!/^\[?[^\s[\]]+?\]?:\d{1,5}$/.test(node))
        throw new UsageError(
          `--sentinels takes host:port,host:port,..., got ${JSON.stringify(node)}`,
        )
    const flag = (name: string) => {
      const v = args.flags.get(name)
      return typeof v === "string" ? v : undefined
    }
    const username = flag("username")
    const password = flag("password")
    const sentinelUsername = flag("sentinel-username")
    const sentinelPassword = flag("sentinel-password")
    return {
      sentinel: {
        sentinels: nodes,
        name: text(args, "sentinel-name"),
        ...(sentinelUsername === undefined ? {} : { username: sentinelUsername }),
        ...(sentinelPassword === undefined ? {} : { password: sentinelPassword }),
      },
      ...(username === undefined ? {} : { username }),
      ...(password === undefined ? {} : { password }),
      // a one-shot command gives up when no sentinel answers three times in a row
      redis: failFast
        ? { ...redis, sentinelRetryStrategy: (times: number) => (times > 3 ? null : 200) }
        : redis,
      ...common,
    }
  }
  return { url: text(args, "redis"), redis, ...common }
}

/** Commands that only read: they check the key schema without recording it. */
const READ_ONLY = new Set(["inspect", "dlq list", "dlq count", "dlq show", "groups list"])
/** Commands that work on another key schema's keys: no check. */
const NO_SCHEMA_CHECK = new Set(["migrate-keys"])

/**
 * The ports on one connection, or a one-line failure when Redis cannot be
 * reached or the namespace holds another key schema: the stream (and group)
 * the command names is checked for keys of an earlier layout, and a writing
 * command records this version (src/KeySchema.ts).
 */
const withPorts = <A, E>(
  args: Args,
  failFast: boolean,
  transport: RedisPorts.RedisPortsOptions["transport"],
  use: (ports: Context.Context<RedisPorts.RedisPorts>) => Effect.Effect<A, E, Scope.Scope>,
): Effect.Effect<A, E | CliFailure> =>
  Effect.scoped(
    Effect.flatMap(
      Layer.build(
        RedisPorts.layer({
          ...connectionOptions(args, failFast),
          ...(transport === undefined ? {} : { transport }),
        }),
      ).pipe(
        Effect.mapError(
          (e) =>
            new CliFailure({
              message:
                e._tag === "KeySchemaMismatch" ||
                e._tag === "InvalidKeyPrefix" ||
                e._tag === "TopologyMismatch" ||
                e._tag === "EvictionPolicyRefused"
                  ? `${e._tag}: ${e.message}`
                  : `cannot reach Redis (${describeTarget(args)}): ${e.message}`,
            }),
        ),
        Effect.tap((ports) => {
          const stream = args.flags.get("stream")
          const group = args.flags.get("group")
          if (typeof stream !== "string" || NO_SCHEMA_CHECK.has(args.command)) return Effect.void
          return KeySchema.ensure(
            Context.get(ports, RedisConnection.RedisConnection),
            [typeof group === "string" ? { stream, group } : { stream }],
            { readOnly: READ_ONLY.has(args.command) },
          ).pipe(Effect.mapError((e) => new CliFailure({ message: oneLine(e) })))
        }),
      ),
      use,
    ),
  )

const describeTarget = (args: Args) => {
  const sentinels = args.flags.get("sentinels")
  if (typeof sentinels === "string")
    return `${String(args.flags.get("sentinel-name") ?? "?")} of the sentinels ${sentinels}`
  return String(args.flags.get("cluster") ?? args.flags.get("redis") ?? "?")
}

const oneLine = (e: { readonly _tag: string; readonly message?: string }) =>
  `${e._tag}: ${(e.message ?? "").split("\n")[0]}`

// ---------------------------------------------------------------------------
// inspect

const inspect = (args: Args) => {
  const stream = text(args, "stream")
  const auditCount = optionalInt(args, "audit") ?? 10
  if (!args.flags.has("group")) return inspectAll(args, stream, auditCount)
  const key: GroupKey = { stream, group: text(args, "group") }
  return withPorts(args, true, undefined, (ports) =>
    Effect.gen(function* () {
      const found = yield* inspectGroup(key).pipe(
        Effect.provide(ports),
        Effect.mapError((e) => new CliFailure({ message: oneLine(e) })),
      )
      if (Option.isNone(found))
        return yield* new CliFailure({
          message: `group ${key.group} on stream ${key.stream} does not exist (nothing stored for it)`,
        })
      const report = yield* collect(ports, key, found.value, auditCount).pipe(
        Effect.mapError((e) => new CliFailure({ message: e.message })),
      )
      return args.flags.has("json") ? JSON.stringify(report, null, 2) : table(report)
    }),
  )
}

/** `inspect` without `--group`: every group of the stream that has stored state. */
const inspectAll = (args: Args, stream: string, auditCount: number) =>
  withPorts(args, true, undefined, (ports) =>
    Effect.gen(function* () {
      const groups = yield* Admin.listGroups(stream).pipe(
        Effect.provide(ports),
        Effect.mapError(adminFailure),
      )
      const reports: Array<InspectReport> = []
      for (const g of groups) {
        const key = { stream, group: g.group }
        const found = yield* inspectGroup(key).pipe(
          Effect.provide(ports),
          Effect.mapError((e) => new CliFailure({ message: oneLine(e) })),
        )
        if (Option.isSome(found))
          reports.push(
            yield* collect(ports, key, found.value, auditCount).pipe(
              Effect.mapError((e) => new CliFailure({ message: e.message })),
            ),
          )
      }
      if (reports.length === 0)
        return yield* new CliFailure({
          message: `stream ${stream} has no group with stored state (groups seen: ${groups.map((g) => g.group).join(", ") || "none"})`,
        })
      return args.flags.has("json")
        ? JSON.stringify(reports, null, 2)
        : reports.map(table).join(`\n\n${"=".repeat(72)}\n\n`)
    }),
  )

const adminFailure = (e: AdminRefused | { readonly _tag: string; readonly message?: string }) =>
  new CliFailure({
    message:
      e._tag === "AdminRefused"
        ? `refused (${(e as AdminRefused).reason}): ${(e as AdminRefused).message}`
        : oneLine(e),
  })

// ---------------------------------------------------------------------------
// dlq and groups (src/Admin.ts)

const cut = (s: string, n: number) => (s.length <= n ? s : `${s.slice(0, n - 1)}…`)

const letterRows = (letters: ReadonlyArray<Admin.DeadLetter>) =>
  pad([
    ["shard", "dead-letter id", "original id", "key", "deliveries", "reason", "fields"],
    ...letters.map((l) => [
      String(l.shard),
      l.id,
      l.originalId,
      l.key ?? "-",
      String(l.deliveries),
      cut(l.reason, 60),
      cut(JSON.stringify(l.fields), 60),
    ]),
  ])

const optionalShard = (args: Args): number | undefined => {
  const v = args.flags.get("shard")
  if (v === undefined) return undefined
  const n = Number(v)
  if (typeof v !== "string" || !Number.isSafeInteger(n) || n < 0)
    throw new UsageError(`--shard must be a shard number (0 or more), got ${String(v)}`)
  return n
}

const dlq = (args: Args, sub: string) => {
  const stream = text(args, "stream")
  const json = args.flags.has("json")
  const shard = optionalShard(args)
  if (sub === "show") {
    if (shard === undefined) throw new UsageError("--shard is required")
    const id = text(args, "id")
    return withPorts(args, true, undefined, (ports) =>
      Admin.showDeadLetter({ stream, shard, id }).pipe(
        Effect.provide(ports),
        Effect.mapError(adminFailure),
        Effect.map((l) =>
          json
            ? JSON.stringify(l, null, 2)
            : [
                `dead letter ${l.id} of shard ${l.shard} (stream ${stream})`,
                `  group        ${l.group}`,
                `  original id  ${l.originalId}`,
                `  key          ${l.key ?? "-"}`,
                `  deliveries   ${l.deliveries}`,
                `  reason       ${l.reason}`,
                "  fields",
                ...Object.entries(l.fields).map(([k, v]) => `    ${k}: ${v}`),
              ].join("\n"),
        ),
      ),
    )
  }
  const group = text(args, "group")
  const id = args.flags.get("id")
  if (id !== undefined && shard === undefined)
    throw new UsageError(
      "--id needs --shard (each shard's dead-letter stream numbers its own entries)",
    )
  const filter: Admin.DeadLetterFilter = {
    stream,
    group,
    ...(shard === undefined ? {} : { shard }),
    ...(typeof id === "string" ? { ids: [id] } : {}),
    ...(optionalInt(args, "count") === undefined ? {} : { limit: optionalInt(args, "count")! }),
  }
  const run = <A>(effect: Effect.Effect<A, Admin.AdminError, Admin.Services>) =>
    withPorts(args, true, undefined, (ports) =>
      effect.pipe(Effect.provide(ports), Effect.mapError(adminFailure)),
    )
  switch (sub) {
    case "list":
      return run(
        Effect.map(Admin.listDeadLetters(filter), (letters) =>
          json
            ? JSON.stringify(letters, null, 2)
            : letters.length === 0
              ? `group ${group} of stream ${stream} has no dead letters`
              : letterRows(letters),
        ),
      )
    case "count":
      return run(
        Effect.map(Admin.countDeadLetters(filter), (c) =>
          json
            ? JSON.stringify(c)
            : `group ${group} of stream ${stream}: ${c.total} dead letter(s)${
                c.total === 0
                  ? ""
                  : ` (${Object.entries(c.byShard)
                      .map(([s, n]) => `shard ${s}: ${n}`)
                      .join(", ")})`
              }`,
        ),
      )
    case "replay": {
      const dryRun = args.flags.has("dry-run")
      return run(
        Effect.map(Admin.replayDeadLetters({ ...filter, dryRun }), (r) =>
          json
            ? JSON.stringify(r, null, 2)
            : dryRun
              ? [
                  `dry run: would replay ${r.planned.length} dead letter(s) of group ${group} into stream ${stream}, for group ${group} only${
                    r.planned.length === 0
                      ? ""
                      : `: ${r.planned
                          .map(
                            (x) =>
                              `${x.from.shard}/${x.from.id} -> shard ${x.toShard} (key ${x.key === undefined ? "none" : JSON.stringify(x.key)}, replay ${x.count})`,
                          )
                          .join(", ")}`
                  }`,
                  ...r.skipped.map((x) => `would skip ${x.shard}/${x.id}: ${x.why}`),
                  "nothing was changed",
                ].join("\n")
              : [
                  `replayed ${r.replayed.length} dead letter(s) of group ${group} into stream ${stream}${
                    r.replayed.length === 0
                      ? ""
                      : `: ${r.replayed
                          .map(
                            (x) => `${x.from.shard}/${x.from.id} -> shard ${x.to.shard} ${x.to.id}`,
                          )
                          .join(", ")}`
                  }`,
                  ...r.skipped.map((x) => `skipped ${x.shard}/${x.id}: ${x.why}`),
                  ...(r.otherGroups.length > 0 && r.replayed.length > 0
                    ? [
                        `for group ${group} only: the stream's other groups (${r.otherGroups.join(", ")}) acknowledge them unseen`,
                      ]
                    : []),
                ].join("\n"),
        ),
      )
    }
    case "purge":
      if (!args.flags.has("all") && shard === undefined && typeof id !== "string")
        throw new UsageError("dlq purge needs --all or --shard N (with --id ID for one entry)")
      return run(
        Effect.map(
          Admin.purgeDeadLetters(filter),
          (n) =>
            `purged ${n} dead letter(s) of group ${group} of stream ${stream} (other groups' dead letters are kept)`,
        ),
      )
    default:
      throw new UsageError(`unknown dlq command: ${sub}`)
  }
}

const deletionLines = (d: Admin.GroupDeletion, verb: string) => [
  `${verb} group ${d.group} of stream ${d.stream}:`,
  `  Redis consumer groups on shards: ${d.consumerGroups.length === 0 ? "none" : ranges(d.consumerGroups)}`,
  `  owner tokens: ${d.ownerTokens.length === 0 ? "none" : d.ownerTokens.join(" ")}`,
  `  dead letters: ${d.deadLetters}`,
  `  keys: ${d.keys.length === 0 ? "none" : d.keys.join(" ")}`,
  `  its entry in the stream's layout: ${d.layoutEntry ? "yes" : "none"}`,
]

const groups = (args: Args, sub: string) => {
  const stream = text(args, "stream")
  const json = args.flags.has("json")
  if (sub === "list")
    return withPorts(args, true, undefined, (ports) =>
      Admin.listGroups(stream).pipe(
        Effect.provide(ports),
        Effect.mapError(adminFailure),
        Effect.map((gs) =>
          json
            ? JSON.stringify(gs, null, 2)
            : pad([
                [
                  "group",
                  "live",
                  "registered",
                  "stored",
                  "shards",
                  "members",
                  "dead letters",
                  "coordinator",
                ],
                ...gs.map((g) => [
                  g.group,
                  g.live ? "yes" : "no",
                  g.registered ? "yes" : "no",
                  g.stored ? "yes" : "no",
                  String(g.shards),
                  String(g.members),
                  String(g.deadLetters),
                  g.coordinator ?? "-",
                ]),
              ]),
        ),
      ),
    )
  const key = { stream, group: text(args, "group") }
  return withPorts(args, true, undefined, (ports) =>
    Effect.gen(function* () {
      if (args.flags.has("dry-run")) {
        const plan = yield* Admin.planGroupDeletion(key).pipe(
          Effect.provide(ports),
          Effect.mapError(adminFailure),
        )
        if (json) return JSON.stringify(plan, null, 2)
        return [
          ...deletionLines(plan, "would delete"),
          ...(plan.live
            ? [`  refused unless --force: it is live (${plan.liveBecause.join("; ")})`]
            : []),
        ].join("\n")
      }
      const done = yield* Admin.deleteGroup(key, { force: args.flags.has("force") }).pipe(
        Effect.provide(ports),
        Effect.mapError((e) =>
          e._tag === "AdminRefused" && e.reason === "GroupLive"
            ? new CliFailure({
                message: `refused (GroupLive): ${e.message} (--force deletes it anyway)`,
              })
            : adminFailure(e),
        ),
      )
      return json ? JSON.stringify(done, null, 2) : deletionLines(done, "deleted").join("\n")
    }),
  )
}

const pad = (rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)))
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join("  ")
        .trimEnd(),
    )
    .join("\n")
}

const ranges = (shards: ReadonlyArray<number>): string => {
  if (shards.length === 0) return "-"
  const out: Array<string> = []
  let start = shards[0]!
  let prev = start
  for (const s of [...shards.slice(1), Number.NaN]) {
    if (s === prev + 1) {
      prev = s
      continue
    }
    out.push(start === prev ? `${start}` : `${start}-${prev}`)
    start = s
    prev = s
  }
  return out.join(",")
}

export const table = (r: InspectReport): string => {
  const lines: Array<string> = []
  lines.push(`group ${r.group} on stream ${r.stream}`)
  lines.push(
    `  storeRevision ${r.storeRevision}  groupEpoch ${r.groupEpoch}  assignmentEpoch ${r.assignmentEpoch}`,
  )
  lines.push(
    `  coordinator ${r.coordinator === undefined ? "-" : `${r.coordinator.holder} (lease token ${r.coordinator.leaseToken})`}; lease ${r.lease === null ? "free" : `held by ${r.lease.holder}, token ${r.lease.token}, ${r.lease.ttlMs} ms left`}`,
  )
  lines.push(
    `  imbalance ${r.imbalance} (target ${r.targetImbalance}); rebalance ${r.rebalanceInProgress ? "in progress" : "settled"}; pending revocations ${r.pendingRevocations.length === 0 ? "none" : r.pendingRevocations.map((p) => `${p.shard} from ${p.from}`).join(", ")}`,
  )
  lines.push("")
  lines.push(
    pad([
      ["member", "epoch", "incarnation", "state", "owned", "target", "host"],
      ...r.members.map((m) => [
        m.memberId,
        String(m.memberEpoch),
        String(m.incarnation),
        m.state,
        ranges(m.owned),
        ranges(m.target),
        m.host,
      ]),
    ]),
  )
  lines.push("")
  const rs = r.resharding
  lines.push(
    `resharding: ${rs.phase}; layout generation ${rs.layout.generation} (${rs.layout.shardCount} shards from ${rs.layout.firstShard})${rs.phase === "migrating" ? `; draining ${rs.draining.map((g) => `gen ${g.generation}`).join(", ")}: ${rs.shardsDrained}/${rs.shardsToDrain} shards drained, backlog ${rs.backlogLeft}` : ""}`,
  )
  lines.push(
    `  stream generations ${rs.streamGenerations.map((g) => `${g.generation}:${g.firstShard}+${g.shardCount}`).join(" ")}; groups drained below ${
      Object.entries(rs.groupsDrainedBelow)
        .map(([g, n]) => `${g}=${n}`)
        .join(" ") || "-"
    }`,
  )
  lines.push("")
  const assignment = new Map(r.assignment.map((a) => [a.shard, a]))
  lines.push(
    pad([
      ["shard", "gen", "length", "pending", "lag", "dlq", "token", "owner", "target", "sealed"],
      ...r.shards.map((s) => {
        const a = assignment.get(s.shard)
        return [
          String(s.shard),
          String(s.generation),
          String(s.length),
          String(s.pending),
          String(s.lag),
          String(s.deadLetters),
          String(s.ownerToken),
          a === undefined
            ? "-"
            : `${a.owner ?? "-"}${a.owner !== null && !a.confirmed ? "?" : ""}${a.revokingFrom !== null ? " (revoking)" : ""}`,
          a?.target ?? "-",
          s.sealed ? (s.drained ? "drained" : s.relaying ? "relaying" : "yes") : "",
        ]
      }),
    ]),
  )
  lines.push("")
  lines.push(`dead letters: ${r.deadLetters}`)
  lines.push("")
  lines.push(`last ${r.audit.length} audit events:`)
  for (const e of r.audit) {
    const ev = e as { at?: number; kind?: string; memberId?: string; reason?: string }
    lines.push(
      `  ${ev.at === undefined ? "?" : new Date(ev.at).toISOString()}  ${ev.kind ?? "?"}${ev.memberId === undefined ? "" : ` ${ev.memberId}`}: ${ev.reason ?? ""}`,
    )
  }
  return lines.join("\n")
}

// ---------------------------------------------------------------------------
// reshard

const reshard = (args: Args) => {
  const stream = text(args, "stream")
  const rollback = args.flags.has("rollback")
  const shards = rollback ? undefined : optionalInt(args, "shards")
  if (!rollback && shards === undefined)
    throw new UsageError("--shards M or --rollback is required")
  return withPorts(args, true, undefined, (ports) =>
    Effect.gen(function* () {
      const operation =
        shards === undefined
          ? Layout.Reshard.rollbackStream(stream)
          : Layout.Reshard.reshardStream(stream, shards)
      const stored = yield* operation.pipe(
        Effect.provide(ports),
        Effect.mapError((e) =>
          e._tag === "ReshardRefused"
            ? new CliFailure({ message: `refused (${e.reason}): ${e.message}` })
            : new CliFailure({ message: oneLine(e) }),
        ),
      )
      const current = Layout.StreamLayout.current(stored.record)
      return `${rollback ? "rolled back" : "resharded"} stream ${stream}: generation ${current.generation}, ${current.shardCount} shards from ${current.firstShard} (layout revision ${stored.revision}); ${stored.record.generations.length - 1} earlier generation(s) sealed and draining`
    }),
  )
}

// ---------------------------------------------------------------------------
// migrate-keys (src/MigrateKeys.ts)

const migrateKeys = (args: Args) => {
  const stream = text(args, "stream")
  const from = args.flags.get("from-prefix")
  const dryRun = args.flags.has("dry-run")
  return withPorts(args, true, undefined, (ports) =>
    Effect.gen(function* () {
      const connection = Context.get(ports, RedisConnection.RedisConnection)
      const done = yield* MigrateKeys.migrate(connection, {
        stream,
        ...(typeof from === "string" ? { from } : {}),
        dryRun,
        force: args.flags.has("force"),
      }).pipe(Effect.mapError(adminFailure))
      if (args.flags.has("json")) return JSON.stringify(done, null, 2)
      const verb = dryRun ? "would move" : "moved"
      const lines = [
        `${verb} ${done.moved.length} key(s) of stream ${stream} into ${JSON.stringify(connection.keys.prefix)} (groups: ${done.groups.join(", ") || "none"})`,
        ...done.moved.map((m) => `  ${m.from} -> ${m.to}`),
      ]
      if (done.conflicts.length > 0)
        return yield* new CliFailure({
          message: `${lines.join("\n")}\nnot moved, their new name is taken (nothing was overwritten; key schema not recorded): ${done.conflicts.map((m) => `${m.from} -> ${m.to}`).join(", ")}`,
        })
      if (!dryRun) lines.push(`recorded key schema in ${connection.keys.schema}`)
      return lines.join("\n")
    }),
  )
}

// ---------------------------------------------------------------------------
// coordinator

const emit = (event: Record<string, unknown>) =>
  Effect.sync(() => {
    process.stdout.write(`${JSON.stringify({ at: Date.now(), ...event })}\n`)
  })

const coordinator = (args: Args) => {
  const stream = text(args, "stream")
  const group = text(args, "group")
  const sessionTimeoutMs = optionalInt(args, "session-timeout") ?? 30_000
  const config = {
    groupId: group,
    stream,
    shardCount: optionalInt(args, "shards") ?? 16,
    sessionTimeoutMs,
    rebalanceTimeoutMs: optionalInt(args, "rebalance-timeout") ?? sessionTimeoutMs,
    heartbeatIntervalMs: optionalInt(args, "heartbeat-interval") ?? 3_000,
    // where the group starts when it is created (docs/runtime.md, "Where a new group starts")
    ...(args.flags.has("start-at") ? { startAt: args.flags.get("start-at") } : {}),
  }
  const holder = String(args.flags.get("holder") ?? `${os.hostname()}-${process.pid}`)
  const leaseTtlMs = optionalInt(args, "lease-ttl")
  const servingTtlMs = optionalInt(args, "serving-ttl")
  const popBlockMs = optionalInt(args, "pop-block")
  const transportOptions = {
    ...(servingTtlMs === undefined ? {} : { servingTtlMs }),
    ...(popBlockMs === undefined ? {} : { popBlockMs }),
  }
  return withPorts(args, false, transportOptions, (ports) =>
    Effect.gen(function* () {
      const transport = Context.get(ports, CoordinatorTransport.CoordinatorTransport)
      const key = { stream, group }
      // the ACL user may run everything the group needs (docs/redis.md, "ACL")
      yield* Acl.checkPermissions(Context.get(ports, RedisConnection.RedisConnection), [key]).pipe(
        Effect.mapError((e) => new CliFailure({ message: e.message })),
      )
      const groupConfig = yield* decodeGroupConfig(config).pipe(
        Effect.mapError((e) => new CliFailure({ message: oneLine(e) })),
      )
      yield* emit({ event: "started", holder, stream, group })
      // serve the group's heartbeats only while this process holds its lease
      // (core's CoordinatorCandidate: a standby wakes when the holder's lease
      // ends or at its handover); report every change of role (stdout, one
      // JSON line each) until SIGTERM, then hand over
      let host: CoordinatorHost | undefined
      const storeRevision = Effect.map(
        Effect.suspend(() => host?.state ?? Effect.succeedNone),
        (state) =>
          Option.match(state, {
            onNone: () => ({}),
            onSome: (st) => ({ storeRevision: st.storeRevision }),
          }),
      )
      const reasonOf = Effect.map(
        Effect.suspend(() => host?.lastError ?? Effect.succeedNone),
        (r) => Option.match(r, { onNone: () => ({}), onSome: (reason) => ({ reason }) }),
      )
      const candidate = yield* CoordinatorCandidate.run({
        config: groupConfig,
        holder,
        transport,
        ...(leaseTtlMs === undefined ? {} : { leaseTtlMs }),
        onRole: (role) =>
          Effect.gen(function* () {
            yield* emit({
              event: role,
              holder,
              ...(yield* storeRevision),
              ...(role === "standby" ? yield* reasonOf : {}),
            })
          }),
      }).pipe(Effect.provide(ports))
      host = candidate.host
      if (!candidate.isServing()) yield* emit({ event: "standby", holder, ...(yield* reasonOf) })
      // SIGTERM, SIGINT, or npx's shell gone without passing a SIGTERM on
      yield* untilStopped()
      yield* emit({ event: "stopping", holder })
      return undefined
    }),
  )
}

// ---------------------------------------------------------------------------
// dashboard (its own module: src/dashboard/server.ts)

const dashboard = (args: Args): Effect.Effect<undefined, CliFailure> => {
  const stream = args.flags.get("stream")
  const group = args.flags.get("group")
  if ((stream === undefined) !== (group === undefined))
    throw new UsageError("--stream and --group go together")
  const portFlag = args.flags.get("port")
  const port = portFlag === undefined ? undefined : Number(portFlag)
  if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65_535))
    throw new UsageError(`--port must be 0..65535, got ${String(portFlag)}`)
  const host = args.flags.get("host")
  const token = args.flags.get("token")
  const options = {
    connection: connectionOptions(args, false),
    ...(typeof host === "string" ? { host } : {}),
    ...(port !== undefined ? { port } : {}),
    ...(typeof token === "string" ? { token } : {}),
    ...(typeof stream === "string" && typeof group === "string"
      ? { group: { stream, group } }
      : {}),
    ...(optionalInt(args, "interval") !== undefined
      ? { intervalMs: optionalInt(args, "interval")! }
      : {}),
  }
  return Effect.promise(() => import("./dashboard/server.js")).pipe(
    Effect.flatMap((m) => m.run(options, (line) => process.stdout.write(`${line}\n`))),
    Effect.mapError((e) => new CliFailure({ message: oneLine(e) })),
    Effect.as(undefined),
  )
}

// ---------------------------------------------------------------------------
// main

/** Effect's warnings and errors as `shardline: warning: ...` lines on stderr. */
const stderrLogs = Logger.layer([
  Logger.make((o) => {
    if (o.logLevel !== "Warn" && o.logLevel !== "Error" && o.logLevel !== "Fatal") return
    const parts = Array.isArray(o.message) ? o.message : [o.message]
    process.stderr.write(
      `shardline: ${o.logLevel === "Warn" ? "warning" : "error"}: ${parts.map(String).join(" ")}\n`,
    )
  }),
])

/** This package's version (the CLI's `--version`). */
const version = (): string =>
  (
    JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
      version: string
    }
  ).version

export const main = async (argv: ReadonlyArray<string>): Promise<number> => {
  let program: Effect.Effect<string | undefined, CliFailure>
  if (argv[0] === "--version" || argv[0] === "-v") {
    process.stdout.write(`shardline ${version()}\n`)
    return 0
  }
  if (argv[0] === "--help" || argv[0] === "-h") {
    process.stdout.write(`${USAGE}\n`)
    return 0
  }
  try {
    const args = parseArgs(argv)
    if (args.command === "help" || args.flags.has("help")) {
      process.stdout.write(`${USAGE}\n`)
      return 0
    }
    switch (args.command) {
      case "inspect":
        program = inspect(args)
        break
      case "reshard":
        program = reshard(args)
        break
      case "coordinator":
        program = coordinator(args)
        break
      case "dlq list":
      case "dlq count":
      case "dlq show":
      case "dlq replay":
      case "dlq purge":
        program = dlq(args, args.command.slice(4))
        break
      case "groups list":
      case "groups delete":
        program = groups(args, args.command.slice(7))
        break
      case "dashboard":
        program = dashboard(args)
        break
      case "migrate-keys":
        program = migrateKeys(args)
        break
      default:
        throw new UsageError(`unknown command: ${args.command}`)
    }
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`shardline: ${e.message}\n${USAGE}\n`)
      return 64
    }
    throw e
  }
  // warnings (a server that evicts keys) on stderr: stdout is the command's output (--json)
  const exit = await Effect.runPromiseExit(program.pipe(Effect.provide(stderrLogs)))
  if (Exit.isSuccess(exit)) {
    if (exit.value !== undefined) process.stdout.write(`${exit.value}\n`)
    return 0
  }
  const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
  const message =
    failure !== undefined && failure._tag === "Fail" && failure.error instanceof CliFailure
      ? failure.error.message
      : `unexpected failure: ${String(exit.cause).split("\n")[0]}`
  process.stderr.write(`shardline: ${message}\n`)
  return 2
}

/** Runs the CLI as a process: sets the exit code, then exits once the command is done. */
export const run = (argv: ReadonlyArray<string>): void => {
  main(argv).then(
    (code) => {
      process.exitCode = code
      // close whatever ioredis left open (a one-shot command is done)
      setTimeout(() => process.exit(code), 100).unref()
    },
    (error: unknown) => {
      process.stderr.write(`shardline: unexpected failure: ${String(error)}\n`)
      process.exit(2)
    },
  )
}

// `node dist/cli.js ...` runs it; importing it (the bin shim, tests) does not
const isEntry = (() => {
  const entry = process.argv[1]
  if (entry === undefined) return false
  try {
    return realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url))
  } catch {
    return false
  }
})()

if (isEntry) run(process.argv.slice(2))
