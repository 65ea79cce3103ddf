/**
 * `shardline migrate-keys`: move a stream's keys from the unprefixed layout
 * of earlier versions (key schema 1) into the namespace (docs/redis.md,
 * "Keys"), with every process of the stream's groups stopped, so that this
 * version finds the groups' state, owner tokens, layout and unread entries
 * where it looks for them.
 *
 * - Data plane (`{<stream>:<shard>}`, `:owner:<group>`, `:dlq`, `:sealed`,
 *   `:idmp:<producer>`): `RENAMENX` to `<prefix>{<stream>:<shard>}...`, the
 *   same hash tag, so the same slot in a cluster; the stream object moves
 *   whole (entries, consumer groups, pending lists, TTL).
 * - Control plane (`{shardline:<stream>:<group>}:...`, `{shardline:<stream>}:layout`)
 *   to `<prefix>group:{...}:...` and `<prefix>stream:{...}:layout`:
 *   `RENAMENX` on a single node; in a cluster the tag changes, so `DUMP`,
 *   `RESTORE` (with the key's TTL) and `DEL`.
 * - Then `<prefix>schema` records this version.
 *
 * Found with SCAN (every master of a cluster). A key whose new name is
 * taken is left where it is and reported (nothing is overwritten); a run cut
 * short is finished by running it again (a moved key is gone from its old
 * name). Refused while a coordinator of an earlier version holds one of the
 * stream's groups' leases or serves it (`AdminRefused` `GroupLive`), unless
 * `force`. `from`: the prefix the old keys were written under (an earlier
 * version run with ioredis' `keyPrefix`); none by default.
 */
import type { BackendUnavailable } from "@shardline/core"
import {
  Acl,
  AdminRefused,
  KeySchema,
  type KeySchemaMismatch,
  Keys,
  type RedisConnection,
} from "@shardline/redis-store"
import { Effect } from "effect"
import { Cluster, type Redis } from "ioredis"

export interface MigrateOptions {
  readonly stream: string
  /** The prefix the schema-1 keys were written under ("" by default). */
  readonly from?: string
  /** Only say what would move. */
  readonly dryRun?: boolean
  /** Move even while an earlier version's coordinator holds a lease or serves. */
  readonly force?: boolean
}

export interface KeyMove {
  readonly from: string
  readonly to: string
}

export interface Migration {
  readonly stream: string
  /** The moves made (or, with `dryRun`, to make). */
  readonly moved: ReadonlyArray<KeyMove>
  /** Keys left where they are: their new name was taken. */
  readonly conflicts: ReadonlyArray<KeyMove>
  /** The groups whose control-plane keys were found. */
  readonly groups: ReadonlyArray<string>
}

const regExpEscape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** Every key matching `pattern`, on every master of a cluster. */
const scanAll = (connection: RedisConnection.RedisConnectionShape, pattern: string) =>
  connection.command("migrate-keys (SCAN)", async (client) => {
    const nodes: ReadonlyArray<Redis> =
      client instanceof Cluster ? client.nodes("master") : [client as Redis]
    const keys = new Set<string>()
    for (const node of nodes) {
      let cursor = "0"
      do {
        const [next, page] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1_000)
        cursor = next
        for (const k of page) keys.add(k)
      } while (cursor !== "0")
    }
    return [...keys].sort()
  })

/**
 * The schema-1 keys of `stream` under `from`, each with its name in the
 * namespace; keys already at their new name (schema 1 under this very
 * prefix: its shard keys are this schema's) are not listed.
 */
const plan = (connection: RedisConnection.RedisConnectionShape, stream: string, from: string) =>
  Effect.gen(function* () {
    const keys = connection.keys
    const encoded = encodeURIComponent(stream)
    const moves: Array<KeyMove> = []
    const groups = new Set<string>()
    // the data plane: {<stream>:<shard>} and its suffixes (not a gate key: it
    // exists only inside a gated read's MULTI)
    const shardPattern = new RegExp(
      `^${regExpEscape(from)}\\{${regExpEscape(stream)}:(\\d+)\\}(|:owner:.+|:dlq|:sealed|:idmp:.+)$`,
      "s",
    )
    for (const key of yield* scanAll(connection, `${Keys.globEscape(`${from}{${stream}:`)}*`)) {
      const m = shardPattern.exec(key)
      if (m === null) continue
      const to = keys.shardKey(stream, Number(m[1])) + m[2]
      if (to !== key) moves.push({ from: key, to })
    }
    // the control plane: {shardline:<stream>:<group>}... and {shardline:<stream>}:layout
    const groupPattern = new RegExp(
      `^${regExpEscape(from)}\\{shardline:${regExpEscape(encoded)}:([^:{}]+)\\}(:.+)$`,
      "s",
    )
    for (const key of yield* scanAll(
      connection,
      `${Keys.globEscape(`${from}{shardline:${encoded}:`)}*`,
    )) {
      const m = groupPattern.exec(key)
      if (m === null) continue
      let group: string
      try {
        group = decodeURIComponent(m[1]!)
      } catch {
        continue
      }
      groups.add(group)
      moves.push({ from: key, to: keys.groupBase({ stream, group }) + m[2] })
    }
    const layout = `${from}{shardline:${encoded}}:layout`
    if ((yield* connection.command("migrate-keys (EXISTS)", (c) => c.exists(layout))) > 0)
      moves.push({ from: layout, to: keys.layoutKey(stream) })
    return { moves, groups: [...groups].sort() }
  })

/** A coordinator of an earlier version holds one of these leases or serves: why, else undefined. */
const liveOld = (
  connection: RedisConnection.RedisConnectionShape,
  stream: string,
  from: string,
  groups: ReadonlyArray<string>,
) =>
  Effect.gen(function* () {
    const reasons: Array<string> = []
    for (const group of groups) {
      const tag = `${from}{shardline:${encodeURIComponent(stream)}:${encodeURIComponent(group)}}`
      const [lease, serving] = yield* connection.command("migrate-keys (liveness)", (c) =>
        Promise.all([c.exists(`${tag}:lease`), c.exists(`${tag}:hb:serving`)]),
      )
      if (lease > 0) reasons.push(`group ${group}: its coordinator lease is held (${tag}:lease)`)
      if (serving > 0) reasons.push(`group ${group}: a coordinator serves it (${tag}:hb:serving)`)
    }
    return reasons
  })

/** Move one key; false when its new name is taken (nothing changed). */
const move = (connection: RedisConnection.RedisConnectionShape, m: KeyMove) =>
  connection.command("migrate-keys (move)", async (client): Promise<boolean> => {
    // same slot (always on a single node): one atomic RENAMENX, TTL and all
    const sameSlot = !(client instanceof Cluster) || Acl.keySlot(m.from) === Acl.keySlot(m.to)
    if (sameSlot) {
      const renamed = await client.renamenx(m.from, m.to).catch((error: Error) => {
        // moved by a run cut short after its RENAMENX: nothing left to move
        if (/no such key/i.test(error.message)) return 1
        throw error
      })
      return renamed === 1
    }
    if ((await client.exists(m.to)) > 0) return false
    const payload = await client.dumpBuffer(m.from)
    if (payload === null) return true
    const ttl = await client.pttl(m.from)
    await client.restore(m.to, Math.max(ttl, 0), payload)
    await client.del(m.from)
    return true
  })

/**
 * Move `stream`'s schema-1 keys into the connection's namespace and record
 * this version there (see the module's comment). Fails `KeySchemaMismatch`
 * when the namespace records another version, `AdminRefused` (`GroupLive`)
 * while an earlier version's coordinator holds a lease or serves.
 *
 * @example
 * const done = yield* MigrateKeys.migrate(connection, { stream: "orders" })
 * // done.moved: [{ from: "{orders:0}", to: "shardline:{orders:0}" }, ...]
 */
export const migrate = (
  connection: RedisConnection.RedisConnectionShape,
  options: MigrateOptions,
): Effect.Effect<Migration, AdminRefused | KeySchemaMismatch | BackendUnavailable> =>
  Effect.gen(function* () {
    const keys = connection.keys
    const from = options.from ?? ""
    const recorded = yield* connection.command("migrate-keys (GET schema)", (c) =>
      c.get(keys.schema),
    )
    if (recorded !== null && recorded !== String(Keys.SCHEMA_VERSION))
      return yield* KeySchema.recordedMismatch(keys, recorded)
    const { moves, groups } = yield* plan(connection, options.stream, from)
    const live = yield* liveOld(connection, options.stream, from, groups)
    if (live.length > 0 && options.force !== true)
      return yield* new AdminRefused({
        reason: "GroupLive",
        message: `stream ${options.stream} is still in use by an earlier version: ${live.join("; ")}. Stop every process of its groups first (a lease runs out by itself once its coordinator stopped)`,
      })
    if (options.dryRun === true)
      return { stream: options.stream, moved: moves, conflicts: [], groups }
    const moved: Array<KeyMove> = []
    const conflicts: Array<KeyMove> = []
    for (const m of moves) ((yield* move(connection, m)) ? moved : conflicts).push(m)
    if (conflicts.length === 0)
      yield* connection.command("migrate-keys (SET schema)", (c) =>
        c.set(keys.schema, String(Keys.SCHEMA_VERSION), "NX"),
      )
    return { stream: options.stream, moved, conflicts, groups }
  })
