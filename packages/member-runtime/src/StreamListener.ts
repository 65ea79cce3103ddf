/**
 * `@StreamListener`: Kafka-style listener concurrency on a class method
 * (docs/runtime.md, "Declaring consumers"). With `concurrency: C` the runtime
 * creates C logical members `<base>-m0 .. <base>-m{C-1}`, each with its own
 * heartbeat loop, Redis consumer name, member epoch, metadata version and
 * shards (docs/requirements.md). There is no single-member toggle: for one
 * explicit member use `consumer(...)`.
 *
 * Both decorator flavours work: TC39 standard decorators (TypeScript 5+, the
 * default) and `experimentalDecorators` (NestJS and other legacy-decorator
 * code). The method's signature is checked in both: `(message: Message,
 * context: MessageContext)`, or with `batch: true` `(batch: Batch, context:
 * BatchContext)`, returning `void` or `Promise<void>`; anything else is a type
 * error. TypeScript does not type a decorated method's parameters from its
 * decorator, so annotate them (`{ signal }: MessageContext`).
 *
 * Node 20 has no `Symbol.metadata`, so the decorator keeps no class
 * metadata: a standard decorator registers the method on each instance as it
 * is constructed (`context.addInitializer`), a legacy one on the class's
 * prototype; `start({ listeners: [instance] })` reads both back
 * (`listenersOf`).
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
import type { Fields } from "./Codec.js"
import type { CommonOptions, LostHookInfo, ShardHookInfo } from "./Config.js"
import type { CodecOptions, ConsumerDefinition, RawCodec, TypedCodec } from "./Consumer.js"
import type { EachBatch, EachMessage } from "./Message.js"

/**
 * `@StreamListener` options; `T` is the decoded message type (`codec` and
 * `schema`: docs/runtime.md, "Typed messages").
 */
export interface StreamListenerOptions<T = Fields> extends CommonOptions, CodecOptions<T> {
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

/**
 * What `@StreamListener(options)` returns: a method decorator for either
 * flavour whose method must be a `Handler` (`EachMessage` or `EachBatch`).
 */
export interface ListenerDecorator<Handler> {
  /** TC39 standard decorator (no `experimentalDecorators`); instance methods only. */
  // biome-ignore lint/suspicious/noExplicitAny: the constraint of ClassMethodDecoratorContext
  <This extends object, Method extends Handler & ((this: This, ...args: any) => any)>(
    method: Method,
    context: ClassMethodDecoratorContext<This, Method> & { readonly static: false },
  ): void
  /** `experimentalDecorators` (legacy) decorator; a static method's target is its class: refused. */
  <Target extends object, Method extends Handler>(
    // biome-ignore lint/suspicious/noExplicitAny: any constructor
    target: Target & (Target extends abstract new (...args: any) => unknown ? never : unknown),
    propertyKey: string | symbol,
    descriptor: TypedPropertyDescriptor<Method>,
  ): void
}

interface Registration {
  readonly name: string
  readonly options: StreamListenerOptions
  readonly method: (...args: ReadonlyArray<never>) => unknown
}

/** Standard decorators: per instance, filled by `context.addInitializer`. */
const registrations = new WeakMap<object, Array<Registration>>()

/** Legacy decorators: per prototype (they run once per class, before any instance). */
const prototypeRegistrations = new WeakMap<
  object,
  Array<{ readonly key: string | symbol; readonly options: StreamListenerOptions }>
>()

const isStandardContext = (u: unknown): u is ClassMethodDecoratorContext =>
  typeof u === "object" &&
  u !== null &&
  (u as { kind?: unknown }).kind === "method" &&
  typeof (u as { addInitializer?: unknown }).addInitializer === "function"

const decorate =
  (options: StreamListenerOptions) =>
  (...args: ReadonlyArray<unknown>): void => {
    const [first, second, third] = args
    if (args.length === 2 && isStandardContext(second)) {
      const context = second
      if (context.static)
        throw new TypeError(`@StreamListener: ${String(context.name)} must be an instance method`)
      const name = String(context.name)
      context.addInitializer(function (this: unknown) {
        const self = this as object
        const bound = (...a: ReadonlyArray<never>): unknown =>
          Reflect.apply(context.access.get(self) as Function, self, a)
        const list = registrations.get(self) ?? []
        list.push({ name, options, method: bound })
        registrations.set(self, list)
      })
      return
    }
    if (
      args.length === 3 &&
      (typeof second === "string" || typeof second === "symbol") &&
      typeof (third as PropertyDescriptor | undefined)?.value === "function"
    ) {
      if (typeof first === "function")
        throw new TypeError(`@StreamListener: ${String(second)} must be an instance method`)
      const target = first as object
      const list = prototypeRegistrations.get(target) ?? []
      list.push({ key: second, options })
      prototypeRegistrations.set(target, list)
      return
    }
    throw new TypeError("@StreamListener: decorate a class method")
  }

/**
 * Mark a method as the handler of a stream listener (see the module doc):
 * `(message: Message, context: MessageContext)`, or with `batch: true`
 * `(batch: Batch, context: BatchContext)`.
 */
export function StreamListener<T = Fields>(
  options: StreamListenerOptions<T> & RawCodec & { readonly batch: true },
): ListenerDecorator<EachBatch<T>>
export function StreamListener<T = Fields>(
  options: StreamListenerOptions<T> & RawCodec & { readonly batch?: false | undefined },
): ListenerDecorator<EachMessage<T>>
/**
 * A typed listener (`codec: "json"` or a codec object): its method takes
 * `Message<T>` (or `Batch<T>`), `T` from the schema or the type argument
 * (`@StreamListener<Order>({ ..., codec: "json" })`), else `unknown`.
 */
export function StreamListener<T>(
  options: StreamListenerOptions<T> & TypedCodec<T> & { readonly batch: true },
): ListenerDecorator<EachBatch<T>>
export function StreamListener<T>(
  options: StreamListenerOptions<T> & TypedCodec<T> & { readonly batch?: false | undefined },
): ListenerDecorator<EachMessage<T>>
/** `batch` known only at run time: the method must accept either. */
export function StreamListener(
  options: StreamListenerOptions,
): ListenerDecorator<EachMessage | EachBatch>
// biome-ignore lint/suspicious/noExplicitAny: the implementation of the typed overloads
export function StreamListener(options: StreamListenerOptions<any>): ListenerDecorator<never> {
  return decorate(options as StreamListenerOptions) as ListenerDecorator<never>
}

/** Legacy registrations of the instance's class chain, most derived first, one per key. */
const legacyRegistrations = (instance: object): Array<Registration> => {
  const out: Array<Registration> = []
  const seen = new Set<string | symbol>()
  for (
    let proto = Object.getPrototypeOf(instance);
    proto !== null;
    proto = Object.getPrototypeOf(proto)
  ) {
    for (const { key, options } of prototypeRegistrations.get(proto) ?? []) {
      if (seen.has(key)) continue
      seen.add(key)
      const method = (...a: ReadonlyArray<never>): unknown =>
        Reflect.apply((instance as Record<string | symbol, Function>)[key]!, instance, a)
      out.push({ name: String(key), options, method })
    }
  }
  return out
}

/** The consumer definitions of an instance's `@StreamListener` methods. */
export const listenersOf = (instance: object): Array<ConsumerDefinition> => {
  const className = (instance.constructor as { name?: string } | undefined)?.name || "listener"
  return [...(registrations.get(instance) ?? []), ...legacyRegistrations(instance)].map((r) => ({
    _tag: "ConsumerDefinition",
    kind: "listener",
    label: `${className}.${r.name}`,
    style: "promise",
    options: r.options,
    method: r.method,
  }))
}
