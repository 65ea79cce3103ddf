/**
 * Bad configuration fails at start, before anything connects, with an
 * `InvalidRuntimeConfig` naming the field. One case per kind of mistake.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ConsumerOptions, consumer, effectConsumer } from "../src/Consumer.js"
import type { InvalidRuntimeConfig } from "../src/Errors.js"
import { memoryPorts } from "../src/Ports.js"
import { make, type RuntimeOptions, start } from "../src/Runtime.js"
import { StreamListener, type StreamListenerOptions } from "../src/StreamListener.js"

const ok: ConsumerOptions = { stream: "orders", group: "g", eachMessage: () => {} }

class OneListener {
  @StreamListener({ stream: "orders", group: "g" })
  async handle() {}
}

/** The error `make` fails with for these options (and that nothing started: no member, no coordinator). */
const failureOf = (options: RuntimeOptions) =>
  Effect.gen(function* () {
    const ports = memoryPorts()
    const error = yield* Effect.flip(make(options).pipe(Effect.provide(ports.layer)))
    // nothing connected: no heartbeat reached a coordinator, no group was created
    const info = yield* ports.streams.info("orders", 0)
    assert.strictEqual(info.groups.length, 0)
    // the memory ports have no Redis connection: only configuration errors
    assert.strictEqual(error._tag, "InvalidRuntimeConfig")
    return error as InvalidRuntimeConfig
  })

const cases: ReadonlyArray<readonly [string, RuntimeOptions, string]> = [
  ["an empty stream name", { consumers: [consumer({ ...ok, stream: "" })] }, "consumers[0].stream"],
  ["an empty group name", { consumers: [consumer({ ...ok, group: "" })] }, "consumers[0].group"],
  [
    "an unknown ack policy",
    { consumers: [consumer({ ...ok, ack: "nack-all" as never })] },
    "consumers[0].ack",
  ],
  [
    "zero local workers",
    { consumers: [consumer({ ...ok, runtimeMaxConcurrency: 0 })] },
    "consumers[0].runtimeMaxConcurrency",
  ],
  [
    "a zero batch size",
    { consumers: [consumer({ ...ok, batchSize: 0 })] },
    "consumers[0].batchSize",
  ],
  [
    "zero max deliveries",
    { consumers: [consumer({ ...ok, maxDeliveries: 0 })] },
    "consumers[0].maxDeliveries",
  ],
  [
    "a transaction limited to zero operations",
    { consumers: [consumer({ ...ok, transaction: { maxOperations: 0 } })] },
    "consumers[0].transaction.maxOperations",
  ],
  [
    "a transaction byte limit past 512 MiB",
    { consumers: [consumer({ ...ok, transaction: { maxBytes: 512 * 1_048_576 + 1 } })] },
    "consumers[0].transaction.maxBytes",
  ],
  [
    "a circuit breaker opening after zero failures",
    { consumers: [consumer({ ...ok, circuitBreaker: { failures: 0 } })] },
    "consumers[0].circuitBreaker.failures",
  ],
  [
    "a circuit breaker whose longest open period is below its first",
    {
      consumers: [
        consumer({ ...ok, circuitBreaker: { failures: 3, resetMs: 5_000, maxResetMs: 1_000 } }),
      ],
    },
    "consumers[0].circuitBreaker.maxResetMs",
  ],
  [
    "an unknown circuit breaker scope",
    {
      consumers: [consumer({ ...ok, circuitBreaker: { failures: 3, scope: "pod" as never } })],
    },
    "consumers[0].circuitBreaker.scope",
  ],
  [
    "a rate limit with a zero interval",
    { consumers: [consumer({ ...ok, rateLimit: { messages: 10, intervalMs: 0 } })] },
    "consumers[0].rateLimit.intervalMs",
  ],
  [
    "a logger without error()",
    { logger: { debug() {}, info() {}, warn() {} } as never, consumers: [consumer(ok)] },
    "logger",
  ],
  ["an unknown log level", { logLevel: "verbose" as never, consumers: [consumer(ok)] }, "logLevel"],
  [
    "a fractional shard count",
    { consumers: [consumer({ ...ok, shardCount: 2.5 })] },
    "consumers[0].shardCount",
  ],
  [
    "a heartbeat interval above the session timeout",
    { consumers: [consumer({ ...ok, heartbeatIntervalMs: 40_000, sessionTimeoutMs: 30_000 })] },
    "consumers[0].heartbeatIntervalMs",
  ],
  [
    "a safety margin that leaves no lease",
    {
      consumers: [
        consumer({
          ...ok,
          sessionTimeoutMs: 3_000,
          heartbeatIntervalMs: 1_000,
          safetyMarginMs: 2_500,
        }),
      ],
    },
    "consumers[0].safetyMarginMs",
  ],
  [
    "a drain timeout at or above the rebalance timeout",
    { consumers: [consumer({ ...ok, drainTimeoutMs: 60_000, rebalanceTimeoutMs: 60_000 })] },
    "consumers[0].drainTimeoutMs",
  ],
  [
    "a retry backoff cap below its start",
    { consumers: [consumer({ ...ok, retryBackoff: { initialMs: 500, maxMs: 100 } })] },
    "consumers[0].retryBackoff.maxMs",
  ],
  [
    "a negative handler timeout",
    { consumers: [consumer({ ...ok, handlerTimeoutMs: -1 })] },
    "consumers[0].handlerTimeoutMs",
  ],
  ["a weight of zero", { consumers: [consumer({ ...ok, weight: 0 })] }, "consumers[0].weight"],
  [
    "an unknown option (a typo)",
    { consumers: [consumer({ ...ok, concurency: 4 } as never)] },
    "consumers[0].concurency",
  ],
  [
    "no handler",
    // @ts-expect-error exactly one handler is also a type rule (the runtime checks untyped callers)
    { consumers: [consumer({ stream: "orders", group: "g" })] },
    "consumers[0].eachMessage",
  ],
  [
    "both handlers",
    // @ts-expect-error exactly one handler is also a type rule (the runtime checks untyped callers)
    { consumers: [consumer({ ...ok, eachBatch: () => {} })] },
    "consumers[0].eachBatch",
  ],
  [
    "a handler that is not a function",
    { consumers: [consumer({ ...ok, eachMessage: "handle" as never })] },
    "consumers[0].eachMessage",
  ],
  ["a consumer not made by consumer()", { consumers: [ok as never] }, "consumers[0]"],
  ["a listener instance without @StreamListener methods", { listeners: [{}] }, "listeners[0]"],
  [
    "the same member id twice in a group",
    {
      consumers: [consumer({ ...ok, memberId: "a" }), consumer({ ...ok, memberId: "a" })],
    },
    "consumers[1].memberId",
  ],
  [
    "two declarations of a group that disagree on its shard count",
    {
      consumers: [
        consumer({ ...ok, memberId: "a", shardCount: 8 }),
        effectConsumer({
          stream: "orders",
          group: "g",
          memberId: "b",
          shardCount: 16,
          eachMessage: () => Effect.void,
        }),
      ],
    },
    "consumers[1].shardCount",
  ],
  [
    "an unknown coordinator placement",
    { coordinator: "external" as never, consumers: [consumer(ok)] },
    "coordinator",
  ],
  [
    "a zero shutdown timeout",
    { shutdownTimeoutMs: 0, consumers: [consumer(ok)] },
    "shutdownTimeoutMs",
  ],
  ["an empty member base", { memberBase: "", consumers: [consumer(ok)] }, "memberBase"],
  [
    "a member base so long that <base>-m0 exceeds 256 characters",
    { memberBase: "h".repeat(255), listeners: [new OneListener()] },
    "memberBase",
  ],
]

describe("configuration is validated at start and errors name the field", () => {
  for (const [what, options, field] of cases)
    it.effect(what, () =>
      Effect.gen(function* () {
        const error = yield* failureOf(options)
        assert.strictEqual(error._tag, "InvalidRuntimeConfig")
        assert.strictEqual(error.field, field)
        assert.include(error.message, field)
      }),
    )

  it.effect("zero listener concurrency names the decorated method", () =>
    Effect.gen(function* () {
      const options: StreamListenerOptions = { stream: "orders", group: "g", concurrency: 0 }
      class Billing {
        @StreamListener(options)
        async onOrder() {}
      }
      const error = yield* failureOf({ listeners: [new Billing()] })
      assert.strictEqual(error.field, "Billing.onOrder.concurrency")
    }),
  )

  it("the Promise API rejects with the same typed error", async () => {
    const error = await start({
      handleSignals: false,
      consumers: [consumer({ ...ok, batchSize: -5 })],
    }).then(
      () => undefined,
      (e: unknown) => e as { _tag: string; field: string },
    )
    assert.strictEqual(error?._tag, "InvalidRuntimeConfig")
    assert.strictEqual(error?.field, "consumers[0].batchSize")
  })
})
