/**
 * StreamLayouts port: the layout record of each stream (docs/resharding.md),
 * shared by its producers and every group consuming it, written with a
 * compare-and-set on its revision. A backend stores bytes; this module
 * decodes them with `StreamLayoutRecord` (a record that does not decode, or
 * belongs to another stream, is a `CorruptLayout` and is never overwritten).
 *
 * @example
 * const layouts = yield* StreamLayouts.StreamLayouts
 * const stored = yield* layouts.load("orders") // Option<{ record, revision }>
 */
import { Context, Effect, Layer, Option, Result, Schema } from "effect"
import { type BackendUnavailable, CorruptLayout, StaleLayout } from "../Errors.js"
import { StreamLayoutRecord } from "../layout/StreamLayout.js"

export interface StoredLayout {
  readonly record: StreamLayoutRecord
  /** Revision of the stored record (the expected revision of the next save). */
  readonly revision: number
}

export interface StreamLayoutsShape {
  /** The stream's layout, or none when the stream has none yet. */
  readonly load: (
    stream: string,
  ) => Effect.Effect<Option.Option<StoredLayout>, CorruptLayout | BackendUnavailable>
  /**
   * Store `record` if the stored revision is `expectedRevision` (0: none yet);
   * returns the new revision.
   */
  readonly save: (
    stream: string,
    expectedRevision: number,
    record: StreamLayoutRecord,
  ) => Effect.Effect<number, StaleLayout | BackendUnavailable>
}

export class StreamLayouts extends Context.Service<StreamLayouts, StreamLayoutsShape>()(
  "@shardline/core/StreamLayouts",
) {}

/** A byte-level backend: the record's JSON and its revision, with a compare-and-set write. */
export interface Encoded {
  readonly load: (
    stream: string,
  ) => Effect.Effect<
    Option.Option<{ readonly bytes: string; readonly revision: number }>,
    BackendUnavailable
  >
  readonly save: (
    stream: string,
    expectedRevision: number,
    bytes: string,
  ) => Effect.Effect<number, StaleLayout | BackendUnavailable>
}

const RecordJson = Schema.fromJsonString(StreamLayoutRecord)
const decode = Schema.decodeUnknownResult(RecordJson)
const encode = Schema.encodeSync(RecordJson)

/** A StreamLayouts over a byte backend: the one decoder every backend shares. */
export const makeEncoded = (backend: Encoded): StreamLayoutsShape => ({
  load: (stream) =>
    Effect.flatMap(backend.load(stream), (stored) => {
      if (Option.isNone(stored)) return Effect.succeed(Option.none())
      const decoded = decode(stored.value.bytes)
      if (Result.isFailure(decoded))
        return Effect.fail(new CorruptLayout({ stream, message: decoded.failure.message }))
      if (decoded.success.stream !== stream)
        return Effect.fail(
          new CorruptLayout({
            stream,
            message: `the stored layout belongs to stream ${decoded.success.stream}`,
          }),
        )
      return Effect.succeed(
        Option.some({ record: decoded.success, revision: stored.value.revision }),
      )
    }),
  save: (stream, expectedRevision, record) =>
    backend.save(stream, expectedRevision, encode(record)),
})

/** Memory bytes (with a test hook to replace them). */
export const makeMemoryEncoded = (): Encoded & {
  readonly corrupt: (stream: string, bytes: string) => void
} => {
  const stored = new Map<string, { bytes: string; revision: number }>()
  return {
    load: (stream) => Effect.sync(() => Option.fromNullishOr(stored.get(stream))),
    save: (stream, expectedRevision, bytes) =>
      Effect.suspend(() => {
        const actual = stored.get(stream)?.revision ?? 0
        if (actual !== expectedRevision)
          return Effect.fail(new StaleLayout({ stream, expectedRevision, actualRevision: actual }))
        stored.set(stream, { bytes, revision: actual + 1 })
        return Effect.succeed(actual + 1)
      }),
    corrupt: (stream, bytes) => {
      stored.set(stream, { bytes, revision: (stored.get(stream)?.revision ?? 0) + 1 })
    },
  }
}

export const makeMemory: Effect.Effect<StreamLayoutsShape> = Effect.sync(() =>
  makeEncoded(makeMemoryEncoded()),
)

export const layerMemory: Layer.Layer<StreamLayouts> = Layer.effect(StreamLayouts, makeMemory)
