/**
 * `@shardline/member-runtime`: Kafka-style consumer groups on Redis Streams
 * (docs/runtime.md). Declare consumers with `@StreamListener` (listener
 * concurrency = logical members) or `consumer(...)` (one member with local
 * workers), start a runtime, produce with `runtime.producer(stream)`.
 *
 * @example
 * import { start, StreamListener, type Message } from "@shardline/member-runtime"
 *
 * class Billing {
 *   @StreamListener({ stream: "orders", group: "billing", concurrency: 2 })
 *   async onOrder(message: Message) { console.log(message.key, message.fields) }
 * }
 * const runtime = await start({ listeners: [new Billing()] })
 * await runtime.producer("orders").send("customer-42", { amount: "12.50" })
 */
export {
  CONTENT_TYPE_FIELD,
  type Codec,
  type CodecOption,
  type Fields,
  jsonCodec,
  PAYLOAD_FIELD,
  type StandardSchemaV1,
} from "./Codec.js"
export type {
  AckPolicy,
  CircuitBreakerOptions,
  CommonOptions,
  LostHookInfo,
  RateLimitOptions,
  RetryBackoff,
  ShardHookInfo,
  StartAt,
  TransactionLimits,
} from "./Config.js"
export { DEFAULTS } from "./Config.js"
export {
  type CodecOptions,
  type ConsumerDefinition,
  type ConsumerOptions,
  consumer,
  type EffectConsumerOptions,
  effectConsumer,
  type OneHandler,
  type RawCodec,
  type TypedCodec,
} from "./Consumer.js"
export {
  type CoordinatedGroup,
  type CoordinatorOptions,
  type EffectCoordinator,
  groupConfigOf,
  makeCoordinator,
  type StandaloneCoordinator,
  startCoordinator,
} from "./Coordinator.js"
export * from "./Errors.js"
export {
  type DeadLetterCause,
  type EventHub,
  type EventHubStats,
  type EventListener,
  type HeartbeatFailure,
  makeEventHub,
  type RuntimeEvent,
  type RuntimeEventType,
} from "./Events.js"
export {
  type Health,
  livenessBoundMs,
  type MemberHealth,
  type RuntimeState,
} from "./Health.js"
export {
  HEALTH_PATHS,
  type HealthServer,
  type HealthSource,
  type HttpOptions,
  PROMETHEUS_CONTENT_TYPE,
  serveHealth,
} from "./HealthServer.js"
export { logicalMemberIds, memberBase, nextIncarnation } from "./Identity.js"
export type { BreakerState, BreakerView } from "./internal/CircuitBreaker.js"
export type { MemberError } from "./internal/Observer.js"
/** Where a producer learns a stream's shard layout: `fixed`, `mutable`, `fromStreamLayouts` (docs/runtime.md, "Producer"). */
export * as LayoutSource from "./LayoutSource.js"
export type { LogFields, Logger, LogLevel } from "./Logging.js"
export {
  type Batch,
  type BatchContext,
  type EachBatch,
  type EachBatchEffect,
  type EachMessage,
  type EachMessageEffect,
  KEY_FIELD,
  type Message,
  type MessageContext,
  REPLAY_FIELDS,
  type ReplayInfo,
} from "./Message.js"
/** The runtime's metrics as effect `Metric`s, and their Prometheus text (docs/runtime.md, "Metrics"). */
export * as Metrics from "./Metrics.js"
export {
  fromServices,
  type MemoryPorts,
  type MemoryPortsOptions,
  memoryPorts,
  type PortServices,
  type Ports,
} from "./Ports.js"
export {
  type EffectProducer,
  makeProducer,
  type OutgoingMessage,
  type Producer,
  type ProducerOptions,
  type SendArgs,
  type SendError,
  type SendOptions,
  type Sent,
} from "./Producer.js"
export {
  decodeRedisOptions,
  type RedisNode,
  type RedisOptions,
  RedisOptionsSchema,
  redisPorts,
} from "./Redis.js"
export {
  type EffectRuntime,
  type MemberView,
  make,
  type RuntimeOptions,
  type ShardlineRuntime,
  type StartOptions,
  start,
} from "./Runtime.js"
export {
  type CreateProducerOptions,
  createProducer,
  makeStreamProducer,
  producerPorts,
  type StreamProducerError,
  type StreamProducerOptions,
  type StreamProducerServices,
} from "./StandaloneProducer.js"
export {
  type ListenerDecorator,
  listenersOf,
  StreamListener,
  type StreamListenerOptions,
} from "./StreamListener.js"
export { type TelemetryOptions, TRACEPARENT_FIELD, TRACESTATE_FIELD } from "./Telemetry.js"
export type { Transaction } from "./Transaction.js"
