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
export type {
  AckPolicy,
  CircuitBreakerOptions,
  CommonOptions,
  LostHookInfo,
  RateLimitOptions,
  RetryBackoff,
  ShardHookInfo,
  TransactionLimits,
} from "./Config.js"
export { DEFAULTS } from "./Config.js"
export {
  type ConsumerDefinition,
  type ConsumerOptions,
  consumer,
  type EffectConsumerOptions,
  effectConsumer,
  type OneHandler,
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
  type EventHub,
  type EventHubStats,
  type EventListener,
  type HeartbeatFailure,
  makeEventHub,
  type RuntimeEvent,
  type RuntimeEventType,
} from "./Events.js"
export { logicalMemberIds, memberBase, nextIncarnation } from "./Identity.js"
export type { BreakerState, BreakerView } from "./internal/CircuitBreaker.js"
export type { MemberError } from "./internal/Observer.js"
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
} from "./Message.js"
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
} from "./StandaloneProducer.js"
export {
  type ListenerDecorator,
  listenersOf,
  StreamListener,
  type StreamListenerOptions,
} from "./StreamListener.js"
export { type TelemetryOptions, TRACEPARENT_FIELD, TRACESTATE_FIELD } from "./Telemetry.js"
export type { Transaction } from "./Transaction.js"
