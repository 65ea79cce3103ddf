/**
 * `@StreamListener`: Kafka-style listener concurrency on a class method
 * (standard TypeScript decorators; no `experimentalDecorators`). With
 * `concurrency: C` the runtime creates C logical members `<base>-m0 ..
 * <base>-m{C-1}`, each with its own heartbeat loop, Redis consumer name,
 * member epoch, metadata version and shards (docs/requirements.md). There is
 * no single-member toggle: for one explicit member use `consumer(...)`.
 *
 * Node 20 has no `Symbol.metadata`, so the decorator keeps no class
 * metadata: it registers the method on each instance as it is constructed
 * (`context.addInitializer`), and `start({ listeners: [instance] })` reads
 * the registrations back (`listenersOf`).
 *
 * @example
 * class Billing {
 *   @StreamListener({ stream: "orders", group: "billing", concurrency: 4 })
 *   async onOrder(message: Message, { signal }: MessageContext) {
 *     await charge(message.key, message.fields, { signal })
 *   }
 * }
 * const runtime = await start({ listeners: [new Billing()] })
 */
import type { CommonOptions, LostHookInfo, ShardHookInfo } from "./Config.js"
import type { ConsumerDefinition } from "./Consumer.js"

export interface StreamListenerOptions extends CommonOptions {
  /** Logical members this listener creates in the process (default 1). */
  readonly concurrency?: number
  /** Local workers of each logical member (default 1). */
  readonly workersPerMember?: number
  /** The method takes `(batch: Batch, context: BatchContext)` instead of one message. */
  readonly batch?: boolean
  /** A batch method that returns resolves every message (default true). */
  readonly autoResolve?: boolean
  readonly onAssigned?: (info: ShardHookInfo) => void | Promise<void>
  readonly onRevoked?: (info: ShardHookInfo) => void | Promise<void>
  readonly onLost?: (info: LostHookInfo) => void | Promise<void>
}

interface Registration {
  readonly name: string
  readonly options: StreamListenerOptions
  readonly method: (...args: ReadonlyArray<never>) => unknown
}

const registrations = new WeakMap<object, Array<Registration>>()

/** Mark a method as the handler of a stream listener (see the module doc). */
export const StreamListener =
  (options: StreamListenerOptions) =>
  // biome-ignore lint/suspicious/noExplicitAny: the constraint of ClassMethodDecoratorContext
  <This extends object, Method extends (this: This, ...args: any) => unknown>(
    method: Method,
    context: ClassMethodDecoratorContext<This, Method>,
  ): void => {
    if (context.static)
      throw new TypeError(`@StreamListener: ${String(context.name)} must be an instance method`)
    const name = String(context.name)
    context.addInitializer(function (this: This) {
      const bound = (...args: ReadonlyArray<never>): unknown =>
        Reflect.apply(context.access.get(this) as Function, this, args)
      const list = registrations.get(this) ?? []
      list.push({ name, options, method: bound })
      registrations.set(this, list)
      void method
    })
  }

/** The consumer definitions of an instance's `@StreamListener` methods. */
export const listenersOf = (instance: object): Array<ConsumerDefinition> => {
  const className = (instance.constructor as { name?: string } | undefined)?.name || "listener"
  return (registrations.get(instance) ?? []).map((r) => ({
    _tag: "ConsumerDefinition",
    kind: "listener",
    label: `${className}.${r.name}`,
    style: "promise",
    options: r.options,
    method: r.method,
  }))
}
