/**
 * The key schema's version in Redis (docs/redis.md, "Keys"): `<prefix>schema`
 * holds the version of the key layout the namespace's keys follow
 * (`Keys.SCHEMA_VERSION`). A version that finds another one there, or finds
 * a group's keys in the unprefixed layout of earlier versions (schema 1,
 * which recorded nothing), refuses to run (`KeySchemaMismatch`) instead of
 * starting the group afresh beside its real state and unread entries.
 *
 * - `checkRecorded`: at connect (`RedisConnection.make`), one GET.
 * - `ensure`: at start (a member runtime, `shardline coordinator`,
 *   `reshard` and the other CLI commands that name a stream): while nothing
 *   is recorded, look for schema-1 keys of those groups, then record this
 *   version (`SET NX`) unless read-only.
 */
import { BackendUnavailable } from "@shardline/core"
import { Effect } from "effect"
import { KeySchemaMismatch } from "./Errors.js"
import { type KeySpace, SCHEMA_VERSION, schema1Keys } from "./keys.js"
import type { Client, RedisConnectionShape } from "./RedisConnection.js"

/** A stream, and optionally one of its groups, whose keys `ensure` looks for. */
export interface SchemaTarget {
  readonly stream: string
  readonly group?: string
}

const EXPECTED = String(SCHEMA_VERSION)

const isNoPerm = (cause: unknown) =>
  /\bNOPERM\b/.test(cause instanceof Error ? cause.message : String(cause))

const unavailable = (operation: string, cause: unknown) =>
  new BackendUnavailable({
    operation,
    message: cause instanceof Error ? cause.message : String(cause),
    cause,
  })

/** `KeySchemaMismatch` for a value of `<prefix>schema` that is not this version. */
export const recordedMismatch = (keys: KeySpace, found: string): KeySchemaMismatch => {
  const version = /^\d{1,9}$/.test(found) ? Number(found) : undefined
  const what =
    version === undefined
      ? `${keys.schema} holds ${JSON.stringify(found.slice(0, 40))}, which Shardline did not write`
      : `its keys follow key schema ${version} (recorded in ${keys.schema}), written by ${version > SCHEMA_VERSION ? "a newer" : "an earlier"} version of Shardline`
  return new KeySchemaMismatch({
    prefix: keys.prefix,
    expected: SCHEMA_VERSION,
    found,
    keys: [keys.schema],
    message: `the namespace ${JSON.stringify(keys.prefix)} is not this version's: ${what}, and this version reads and writes key schema ${SCHEMA_VERSION}. Run the version that wrote them, or give this one a namespace of its own (keyPrefix, or --prefix for the shardline CLI); nothing was written (docs/redis.md, "Keys")`,
  })
}

/** The version recorded in the namespace: undefined when nothing is, else its value. */
const recorded = (client: Client, keys: KeySpace): Promise<string | undefined> =>
  client.get(keys.schema).then((v) => v ?? undefined)

/**
 * At connect: `KeySchemaMismatch` when `<prefix>schema` records another
 * version (or a value Shardline did not write); nothing when it records
 * this one or nothing. A user that may not read it (NOPERM) learns nothing
 * here: its own commands fail later, naming the rule.
 */
export const checkRecorded = (
  client: Client,
  keys: KeySpace,
): Effect.Effect<void, KeySchemaMismatch | BackendUnavailable> =>
  Effect.flatMap(
    Effect.tryPromise({
      try: () => recorded(client, keys),
      catch: (cause) => cause,
    }).pipe(
      Effect.catch((cause) =>
        isNoPerm(cause)
          ? Effect.succeed(undefined)
          : Effect.fail(unavailable("key schema (GET)", cause)),
      ),
    ),
    (found) =>
      found === undefined || found === EXPECTED ? Effect.void : recordedMismatch(keys, found),
  )

/** Which of `candidates` exist (one EXISTS each: they may be in different slots); NOPERM: unseen. */
const existing = (client: Client, candidates: ReadonlyArray<string>) =>
  Effect.tryPromise({
    try: () =>
      Promise.all(
        candidates.map((key) =>
          client.exists(key).then(
            (n) => (n > 0 ? key : undefined),
            (cause: unknown) => {
              // a least-privilege user of this version may not see outside its namespace
              if (isNoPerm(cause)) return undefined
              throw cause
            },
          ),
        ),
      ),
    catch: (cause) => unavailable("key schema (EXISTS)", cause),
  }).pipe(Effect.map((found) => found.filter((k): k is string => k !== undefined)))

const describe = (target: SchemaTarget) =>
  target.group === undefined
    ? `stream ${JSON.stringify(target.stream)}`
    : `group ${JSON.stringify(target.group)} of stream ${JSON.stringify(target.stream)}`

/**
 * At start, for the streams and groups about to be used: `KeySchemaMismatch`
 * when the namespace records another version, or records none and one of
 * them has keys of the unprefixed layout of earlier versions (its Store
 * revision, lease, owner token on shard 0, or the stream's layout record;
 * also under the namespace's prefix, as an earlier version run with
 * ioredis' `keyPrefix` wrote them). Otherwise records this version
 * (`SET <prefix>schema NX`) unless `readOnly`.
 *
 * A user that may not read a key outside its namespace (this version's
 * least-privilege rules) cannot see schema-1 keys: that check is skipped
 * for it (docs/redis.md, "Keys", says how to upgrade).
 */
export const ensure = (
  connection: RedisConnectionShape,
  targets: ReadonlyArray<SchemaTarget>,
  options: { readonly readOnly?: boolean } = {},
): Effect.Effect<void, KeySchemaMismatch | BackendUnavailable> =>
  Effect.gen(function* () {
    const { client, keys } = connection
    const found = yield* Effect.tryPromise({
      try: () => recorded(client, keys),
      catch: (cause) => cause,
    }).pipe(
      Effect.catch((cause) =>
        isNoPerm(cause)
          ? Effect.succeed(undefined)
          : Effect.fail(unavailable("key schema (GET)", cause)),
      ),
    )
    if (found === EXPECTED) return
    if (found !== undefined) return yield* recordedMismatch(keys, found)
    for (const target of targets) {
      const old = yield* existing(client, [
        ...schema1Keys(target.stream, target.group),
        ...schema1Keys(target.stream, target.group, keys.prefix),
      ])
      if (old.length > 0)
        return yield* new KeySchemaMismatch({
          prefix: keys.prefix,
          expected: SCHEMA_VERSION,
          found: "1",
          keys: old,
          message: `${describe(target)} has keys in the unprefixed key layout of an earlier Shardline version (key schema 1): ${old.join(", ")}. This version (key schema ${SCHEMA_VERSION}) keeps every key under ${JSON.stringify(keys.prefix)} and would not see them: it would start afresh beside the group's stored state and unread entries. Either keep running the earlier version, or stop every process of the stream's groups and move its keys into the namespace: shardline migrate-keys --redis <url> --stream ${target.stream}${keys.prefix === "shardline:" ? "" : ` --prefix ${keys.prefix}`} (docs/redis.md, "Keys"); nothing was written`,
        })
    }
    if (options.readOnly === true) return
    const set = yield* Effect.tryPromise({
      try: () => client.set(keys.schema, EXPECTED, "NX"),
      catch: (cause) => unavailable("key schema (SET NX)", cause),
    })
    if (set !== "OK") {
      // recorded meanwhile by another process: it must be this version too
      const now = yield* Effect.tryPromise({
        try: () => recorded(client, keys),
        catch: (cause) => unavailable("key schema (GET)", cause),
      })
      if (now !== undefined && now !== EXPECTED) return yield* recordedMismatch(keys, now)
    }
  })
