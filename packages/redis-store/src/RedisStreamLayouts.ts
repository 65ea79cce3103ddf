/**
 * StreamLayouts on Redis (docs/redis.md, "StreamLayouts"): core's
 * byte-level `StreamLayouts.Encoded` backend behind core's one decoder.
 *
 * One hash per stream, `<prefix>stream:{<stream>}:layout` { record (JSON),
 * revision }, read by one script and written by a compare-and-set script on
 * the revision. A value Shardline did not write there is a `CorruptLayout`
 * on load and is never overwritten (save fails `BackendUnavailable` naming
 * the key).
 */
import {
  BackendUnavailable,
  CorruptLayout,
  type ForeignValue,
  StaleLayout,
  StreamLayouts,
} from "@shardline/core"
import { Effect, Layer, Option } from "effect"
import { Code, evalScript } from "./internal/reply.js"
import * as RedisConnection from "./RedisConnection.js"
import { Scripts } from "./scripts.js"

type Stored = { readonly bytes: string; readonly revision: number }

const asUnavailable = (error: BackendUnavailable | ForeignValue): BackendUnavailable =>
  error._tag === "BackendUnavailable"
    ? error
    : new BackendUnavailable({
        operation: "stream layout",
        message: `${error.key} holds a value Shardline did not write: ${error.message}`,
        cause: error,
      })

const loadRaw = (connection: RedisConnection.RedisConnectionShape, stream: string) =>
  evalScript(
    connection,
    "layout load",
    Scripts.layoutLoad,
    [connection.keys.layoutKey(stream)],
    [],
  ).pipe(
    Effect.map(
      (reply): Option.Option<Stored> =>
        reply.length < 3
          ? Option.none()
          : Option.some({ bytes: String(reply[1]), revision: Number(reply[2]) }),
    ),
  )

/** The byte-level backend (`StreamLayouts.Encoded`) over a connection. */
export const makeEncodedWith = (
  connection: RedisConnection.RedisConnectionShape,
): StreamLayouts.Encoded => ({
  load: (stream) => Effect.mapError(loadRaw(connection, stream), asUnavailable),
  save: (stream, expectedRevision, bytes) =>
    evalScript(
      connection,
      "layout save",
      Scripts.layoutSave,
      [connection.keys.layoutKey(stream)],
      [String(expectedRevision), bytes],
    ).pipe(
      Effect.mapError(asUnavailable),
      Effect.flatMap((reply) =>
        reply[0] === Code.Stale
          ? Effect.fail(
              new StaleLayout({ stream, expectedRevision, actualRevision: Number(reply[1]) }),
            )
          : Effect.succeed(Number(reply[1])),
      ),
    ),
})

/**
 * `StreamLayouts` over a connection: core's decoder over the Redis bytes; a
 * foreign value under the layout key is a `CorruptLayout`.
 */
export const makeWith = (
  connection: RedisConnection.RedisConnectionShape,
): StreamLayouts.StreamLayoutsShape => {
  const backend = makeEncodedWith(connection)
  const decoder = StreamLayouts.makeEncoded(backend)
  return {
    load: (stream) =>
      loadRaw(connection, stream).pipe(
        Effect.catchTag("ForeignValue", (e) =>
          Effect.fail(new CorruptLayout({ stream, message: `${e.key}: ${e.message}` })),
        ),
        Effect.flatMap((stored) =>
          // core's one decoder, over the bytes just read
          StreamLayouts.makeEncoded({
            load: () => Effect.succeed(stored),
            save: backend.save,
          }).load(stream),
        ),
      ),
    save: decoder.save,
  }
}

/** `StreamLayouts` on the `RedisConnection` in context. */
export const make: Effect.Effect<
  StreamLayouts.StreamLayoutsShape,
  never,
  RedisConnection.RedisConnection
> = RedisConnection.RedisConnection.useSync(makeWith)

export const layerFromConnection: Layer.Layer<
  StreamLayouts.StreamLayouts,
  never,
  RedisConnection.RedisConnection
> = Layer.effect(StreamLayouts.StreamLayouts, make)

/** `StreamLayouts` on a connection of its own (closed with the layer). */
export const layer = (
  options: RedisConnection.RedisConnectionOptions,
): Layer.Layer<StreamLayouts.StreamLayouts, RedisConnection.ConnectError> =>
  layerFromConnection.pipe(Layer.provide(RedisConnection.layer(options)))
