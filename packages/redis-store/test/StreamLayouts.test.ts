/**
 * The StreamLayouts contract on core's memory bytes and on every Redis
 * target (each behind core's one decoder), then foreign values, truncated
 * JSON and another schema version under the layout key: CorruptLayout, and
 * never overwritten.
 */
import { assert, it } from "@effect/vitest"
import { Layout, ShardStreams, StreamLayouts } from "@shardline/core"
import { Effect, Option } from "effect"
import { defaultKeys, make as keySpace } from "../src/keys.js"
import * as RedisStreamLayouts from "../src/RedisStreamLayouts.js"
import { connect, describeTarget, redisTargets, unique } from "./support/targets.js"

const { layoutKey } = defaultKeys

const { StreamLayout, Reshard } = Layout

const contract = (subject: () => StreamLayouts.StreamLayoutsShape) => {
  it.live("none at first; save at 0 creates; compare-and-set on the revision", () =>
    Effect.gen(function* () {
      const layouts = subject()
      const stream = unique("orders")
      assert.isTrue(Option.isNone(yield* layouts.load(stream)))
      const record = StreamLayout.create(stream, 4)
      assert.strictEqual(yield* layouts.save(stream, 0, record), 1)
      const stale = yield* Effect.flip(layouts.save(stream, 0, record))
      assert.strictEqual(stale._tag, "StaleLayout")
      if (stale._tag === "StaleLayout") assert.strictEqual(stale.actualRevision, 1)
      const loaded = Option.getOrThrow(yield* layouts.load(stream))
      assert.deepStrictEqual(loaded, { record, revision: 1 })
      const resharded = StreamLayout.reshard(record, 8)
      assert.isTrue(resharded._tag === "Success")
      if (resharded._tag === "Success") {
        assert.strictEqual(yield* layouts.save(stream, 1, resharded.success), 2)
        assert.deepStrictEqual(
          Option.getOrThrow(yield* layouts.load(stream)).record,
          resharded.success,
        )
      }
    }),
  )

  it.live("concurrent saves at one revision: exactly one wins; Reshard.update retries", () =>
    Effect.gen(function* () {
      const layouts = subject()
      const stream = unique("orders")
      yield* layouts.save(stream, 0, StreamLayout.create(stream, 4))
      const results = yield* Effect.all(
        ["a", "b", "c", "d"].map((g) =>
          Effect.result(
            layouts.save(stream, 1, StreamLayout.registerGroup(StreamLayout.create(stream, 4), g)),
          ),
        ),
        { concurrency: "unbounded" },
      )
      assert.strictEqual(results.filter((r) => r._tag === "Success").length, 1)
      // read-modify-write through core's Reshard: every group lands
      yield* Effect.all(
        ["e", "f", "g"].map((g) =>
          Reshard.registerGroup(stream, g).pipe(
            Effect.provideService(StreamLayouts.StreamLayouts, layouts),
          ),
        ),
        { concurrency: "unbounded" },
      )
      const groups = Object.keys(Option.getOrThrow(yield* layouts.load(stream)).record.groups)
      for (const g of ["e", "f", "g"]) assert.include(groups, g)
    }),
  )

  it.live("a record of another stream under this stream is CorruptLayout", () =>
    Effect.gen(function* () {
      const layouts = subject()
      const stream = unique("orders")
      yield* layouts.save(stream, 0, StreamLayout.create(`${stream}-other`, 4))
      const error = yield* Effect.flip(layouts.load(stream))
      assert.strictEqual(error._tag, "CorruptLayout")
    }),
  )
}

describeTarget(
  "StreamLayouts contract",
  { name: "memory (core)" },
  StreamLayouts.makeMemory,
  (subject) => contract(subject),
)

for (const target of redisTargets()) {
  const acquire = Effect.map(connect(target), (connection) => ({
    connection,
    layouts: RedisStreamLayouts.makeWith(connection),
  }))

  describeTarget("StreamLayouts contract", target, acquire, (subject) =>
    contract(() => subject().layouts),
  )

  describeTarget("StreamLayouts bad input", target, acquire, (subject) => {
    const raw = () => subject().connection.client

    it.live("the layout key is <prefix>stream:{<stream>}:layout (names URI-encoded)", () =>
      Effect.sync(() => {
        assert.strictEqual(layoutKey("orders"), "shardline:stream:{orders}:layout")
        assert.strictEqual(keySpace("t/a:").layoutKey("a}b"), "t/a:stream:{a%7Db}:layout")
      }),
    )

    it.live("foreign values, truncated JSON, another version: CorruptLayout, left as is", () =>
      Effect.gen(function* () {
        const { layouts } = subject()
        const valid = (stream: string) => JSON.stringify(StreamLayout.create(stream, 4))
        const cases: ReadonlyArray<
          readonly [string, (key: string, stream: string) => Promise<unknown>]
        > = [
          ["a string", (k) => raw().set(k, "not a hash")],
          ["a list", (k) => raw().rpush(k, "x")],
          ["a hash without a revision", (k, s) => raw().hset(k, "record", valid(s))],
          [
            "a revision that is not an integer",
            (k, s) => raw().hset(k, "record", valid(s), "revision", "x"),
          ],
          [
            "truncated JSON",
            (k, s) => raw().hset(k, "record", valid(s).slice(0, 20), "revision", "3"),
          ],
          [
            "another version",
            (k, s) =>
              raw().hset(
                k,
                "record",
                JSON.stringify({ ...StreamLayout.create(s, 4), version: 7 }),
                "revision",
                "3",
              ),
          ],
        ]
        for (const [name, plant] of cases) {
          const stream = unique("bad")
          const key = layoutKey(stream)
          yield* Effect.promise(() => plant(key, stream))
          const type = yield* Effect.promise(() => raw().type(key))
          const dump = () =>
            Effect.promise(
              (): Promise<unknown> =>
                type === "hash"
                  ? raw().hgetall(key)
                  : type === "list"
                    ? raw().lrange(key, 0, -1)
                    : raw().get(key),
            )
          const before = yield* dump()
          const error = yield* Effect.flip(layouts.load(stream))
          assert.strictEqual(error._tag, "CorruptLayout", name)
          // core's Reshard never saves what it could not load
          const reshard = yield* Effect.flip(
            Reshard.reshardStream(stream, 8).pipe(
              Effect.provideService(StreamLayouts.StreamLayouts, layouts),
              Effect.provide(ShardStreams.layerMemory),
            ),
          )
          assert.strictEqual(reshard._tag, "CorruptLayout", name)
          // a value that is not ours (no integer revision) refuses any save
          if (name !== "truncated JSON" && name !== "another version")
            for (const revision of [0, 3])
              assert.strictEqual(
                (yield* Effect.flip(layouts.save(stream, revision, StreamLayout.create(stream, 2))))
                  ._tag,
                "BackendUnavailable",
                name,
              )
          assert.deepStrictEqual(yield* dump(), before, name)
        }
      }),
    )
  })
}
