/**
 * OwnerFence port: the coordinator's write of per-(shard, group) owner tokens
 * to storage. The coordinator writes a grant's fence after the commit and
 * before the member is told (docs/protocol.md, rule 1 step 6), and re-asserts
 * every accepted owner's token when it takes over. A failed write is a
 * `FenceWriteFailed`; the host then withholds the grant from its member
 * (listed as pending) and retries it (docs/protocol.md rule 31). The host
 * writes one shard per call, outside its lock, so each write has its own
 * deadline and a slow shard holds up no other.
 *
 * `make` / `layer` write through the `ShardStreams` in context
 * (`setOwnerToken`, one call per fence), so they serve the memory data plane
 * and any other `ShardStreams` alike. `layerNoop` writes nothing: for a
 * coordinator without a data plane (unit tests, demos), never in production.
 *
 * @example
 * const fence = yield* OwnerFence.OwnerFence
 * yield* fence.write({ stream: "orders", group: "workers" }, [{ shard: 3, token: 7, memberId: "pod-1-m0" }])
 */
import { Context, Effect, Layer } from "effect"
import type { Fence } from "../coordinator/Coordinator.js"
import { FenceWriteFailed } from "../Errors.js"
import type { GroupKey } from "./GroupKey.js"
import { ShardStreams } from "./ShardStreams.js"

export type { Fence } from "../coordinator/Coordinator.js"

export interface OwnerFenceShape {
  /** Raise each fence's owner token for the group; equal tokens are no-ops (re-fencing is safe). */
  readonly write: (
    key: GroupKey,
    fences: ReadonlyArray<Fence>,
  ) => Effect.Effect<void, FenceWriteFailed>
  /**
   * The owner token storage holds for each of `shards` (0: none). A new
   * leader compares them with its state to find a metadata rewind
   * (docs/protocol.md rule 23).
   */
  readonly read: (
    key: GroupKey,
    shards: ReadonlyArray<number>,
  ) => Effect.Effect<
    ReadonlyArray<{ readonly shard: number; readonly token: number }>,
    FenceWriteFailed
  >
}

export class OwnerFence extends Context.Service<OwnerFence, OwnerFenceShape>()(
  "@shardline/core/OwnerFence",
) {}

const failed = (key: GroupKey, cause: unknown, message: string) =>
  new FenceWriteFailed({ stream: key.stream, group: key.group, message, cause })

/** Owner tokens read per shard at most this many at once. */
const READ_CONCURRENCY = 64

/** Fences written with `ShardStreams.setOwnerToken` of the ShardStreams in context. */
export const make: Effect.Effect<OwnerFenceShape, never, ShardStreams> = ShardStreams.useSync(
  (streams): OwnerFenceShape => ({
    read: (key, shards) =>
      Effect.forEach(
        shards,
        (shard) =>
          Effect.map(
            streams.ownerToken({ stream: key.stream, shard, group: key.group }),
            (token) => ({ shard, token }),
          ),
        { concurrency: READ_CONCURRENCY },
      ).pipe(
        Effect.mapError((cause) =>
          failed(key, cause, `reading owner tokens: ${cause._tag}: ${cause.message}`),
        ),
      ),
    write: (key, fences) =>
      Effect.forEach(
        fences,
        (f) =>
          streams.setOwnerToken({
            stream: key.stream,
            shard: f.shard,
            group: key.group,
            token: f.token,
            // the group is created on the shard at its first grant only: a
            // later grant or a re-fence never re-creates what vanished
            // (docs/protocol.md rule 26)
            createGroup: f.first === true,
            // a new group starts where its config says (docs/runtime.md, "Where a new group starts")
            ...(f.first === true && f.startAt !== undefined
              ? {
                  createAt:
                    f.startAt === "latest"
                      ? "end"
                      : f.startAt.includes("-")
                        ? f.startAt
                        : `${f.startAt}-0`,
                }
              : {}),
          }),
        { discard: true },
      ).pipe(
        Effect.mapError((cause) =>
          failed(
            key,
            cause,
            cause._tag === "OwnerTokenRegression"
              ? `${cause._tag}: shard ${cause.shard} token ${cause.token} is below ${cause.currentToken}`
              : `${cause._tag}: ${cause.message}`,
          ),
        ),
      ),
  }),
)

export const layer: Layer.Layer<OwnerFence, never, ShardStreams> = Layer.effect(OwnerFence, make)

/** Writes nothing and reads no tokens (a coordinator without a data plane: unit tests, demos). */
export const noop: OwnerFenceShape = { write: () => Effect.void, read: () => Effect.succeed([]) }

export const layerNoop: Layer.Layer<OwnerFence> = Layer.succeed(OwnerFence, noop)
