/**
 * Example: the Effect API. `make` is scoped and needs the port services;
 * handlers and hooks are Effects (interrupted when the member must give up
 * the shard). The same program runs on Redis by providing the Redis ports.
 *
 * Run: pnpm --filter @shardline/member-runtime example effectApi
 */
import { pathToFileURL } from "node:url"
import { effectConsumer, make, memoryPorts } from "@shardline/member-runtime"
import { Effect, Ref } from "effect"

export const program = (messages: number) =>
  Effect.gen(function* () {
    const seen = yield* Ref.make(0)
    const runtime = yield* make({
      memberBase: "effect-pod",
      consumers: [
        effectConsumer({
          stream: "events",
          group: "indexer",
          shardCount: 4,
          heartbeatIntervalMs: 200,
          sessionTimeoutMs: 3_000,
          eachMessage: (message) =>
            Effect.andThen(
              Ref.update(seen, (n) => n + 1),
              Effect.logDebug(message.id),
            ),
          onRevoked: ({ shard }) => Effect.logInfo(`shard ${shard} revoked`),
        }),
      ],
    })
    const producer = yield* runtime.producer("events")
    yield* producer.sendBatch(Array.from({ length: messages }, (_, i) => ({ key: `doc-${i}` })))
    while ((yield* Ref.get(seen)) < messages) yield* Effect.sleep(10)
    yield* runtime.stop
    return yield* Ref.get(seen)
  }).pipe(Effect.scoped, Effect.provide(memoryPorts().layer))

export const main = (messages = 50) => Effect.runPromise(program(messages))

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) console.log(await main())
