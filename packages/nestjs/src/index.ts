/**
 * `@shardline/nestjs`: Shardline consumer groups in a NestJS application
 * (docs/nestjs.md). Import `ShardlineModule.forRoot(options)` (or
 * `forRootAsync`), put `@StreamListener` methods on your providers, and the
 * runtime starts with them on application bootstrap and stops on shutdown.
 * `@StreamListener`, `Message` and the other declarations are
 * `@shardline/member-runtime`'s, re-exported. The Terminus health indicator
 * is `@shardline/nestjs/terminus`.
 *
 * @example
 * import { Injectable, Module } from "@nestjs/common"
 * import { type Message, ShardlineModule, StreamListener } from "@shardline/nestjs"
 *
 * @Injectable()
 * class Billing {
 *   constructor(private readonly ledger: Ledger) {}
 *   @StreamListener({ stream: "orders", group: "billing", concurrency: 2 })
 *   async onOrder(message: Message) { await this.ledger.charge(message.key, message.fields) }
 * }
 *
 * @Module({
 *   imports: [ShardlineModule.forRoot({ redis: { url: "redis://localhost:6379" } })],
 *   providers: [Ledger, Billing],
 * })
 * class AppModule {}
 */
export {
  type Batch,
  type BatchContext,
  type Health,
  type Message,
  type MessageContext,
  StreamListener,
  type StreamListenerOptions,
} from "@shardline/member-runtime"
export { SHARDLINE_MODULE_OPTIONS, type ShardlineModuleOptions } from "./options.js"
export { Shardline } from "./Shardline.js"
export { ShardlineModule, type ShardlineModuleAsyncOptions } from "./ShardlineModule.js"
