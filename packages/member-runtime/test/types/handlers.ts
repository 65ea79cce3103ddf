/**
 * Type rules of `@StreamListener` and `consumer` (docs/runtime.md, "Declaring
 * consumers"), compiled by test/handlerTypes.test.ts with TC39 decorators and
 * again with `experimentalDecorators`. Each `@ts-expect-error` must meet an
 * error: a rule that stops holding leaves the directive unused, which is
 * itself a compile error.
 */
import {
  type Batch,
  type BatchContext,
  type Codec,
  consumer,
  createProducer,
  type EachBatch,
  type EachMessage,
  type EffectProducer,
  effectConsumer,
  type Fields,
  type ListenerDecorator,
  type Message,
  type MessageContext,
  makeStreamProducer,
  memoryPorts,
  type Producer,
  type ReplayInfo,
  type ShardlineRuntime,
  type StandardSchemaV1,
  StreamListener,
  type StreamListenerOptions,
  type StreamProducerError,
  type StreamProducerServices,
} from "@shardline/member-runtime"
import { Effect } from "effect"
import { expectTypeOf } from "vitest"

const orders = { stream: "orders", group: "billing" } as const

// the decorator's type follows `batch`
expectTypeOf(StreamListener(orders)).toEqualTypeOf<ListenerDecorator<EachMessage>>()
expectTypeOf(StreamListener({ ...orders, batch: false })).toEqualTypeOf<
  ListenerDecorator<EachMessage>
>()
expectTypeOf(StreamListener({ ...orders, batch: true })).toEqualTypeOf<
  ListenerDecorator<EachBatch>
>()
declare const runtimeChoice: StreamListenerOptions
expectTypeOf(StreamListener(runtimeChoice)).toEqualTypeOf<
  ListenerDecorator<EachMessage | EachBatch>
>()

export class Accepted {
  readonly prefix = "bill"

  @StreamListener(orders)
  async full(message: Message, { signal }: MessageContext): Promise<void> {
    if (!signal.aborted) console.log(this.prefix, message.key)
  }

  @StreamListener(orders)
  messageOnly(message: Message): void {
    console.log(message.id)
  }

  @StreamListener(orders)
  async none() {}

  @StreamListener({ ...orders, batch: true })
  async batch(batch: Batch, { resolve }: BatchContext) {
    for (const m of batch.messages) resolve(m)
  }

  // `batch` known only at run time: a method that takes either
  @StreamListener(runtimeChoice)
  async either(_: Message | Batch) {}
}

export class Rejected {
  // @ts-expect-error a handler takes a Message, not a number
  @StreamListener(orders)
  async aNumber(n: number) {
    return n
  }

  // @ts-expect-error a per-message handler gets a MessageContext (no `resolve`)
  @StreamListener(orders)
  async batchContextOnMessage(_m: Message, { resolve }: BatchContext) {
    resolve("0-1")
  }

  // @ts-expect-error a batch listener's method takes a Batch
  @StreamListener({ ...orders, batch: true })
  async messageOnBatch(message: Message) {
    console.log(message.id)
  }

  // @ts-expect-error it must return void or a Promise of void (the ack depends on it settling)
  @StreamListener(orders)
  async returnsAValue(message: Message) {
    return message.id
  }

  // @ts-expect-error instance methods only
  @StreamListener(orders)
  static async onStatic(_m: Message) {}

  // @ts-expect-error an unknown option
  @StreamListener({ ...orders, concurency: 2 })
  async typo(_m: Message) {}
}

// exactly one of eachMessage and eachBatch
consumer({ ...orders, eachMessage: async (m, { signal }) => void [m.id, signal] })
consumer({ ...orders, eachBatch: async (b, { resolve }) => resolve(b.messages[0]!) })
// @ts-expect-error neither handler
consumer({ ...orders })
// @ts-expect-error both handlers
consumer({ ...orders, eachMessage: () => {}, eachBatch: () => {} })
// @ts-expect-error a handler of the wrong shape
consumer({ ...orders, eachMessage: (n: number) => void n })

effectConsumer({ ...orders, eachMessage: (m) => Effect.log(m.id) })
// @ts-expect-error neither handler
effectConsumer({ ...orders })
// @ts-expect-error both handlers
effectConsumer({ ...orders, eachMessage: () => Effect.void, eachBatch: () => Effect.void })

// typed messages (docs/runtime.md, "Typed messages"): handlers typed by the codec and schema
declare const orderSchema: StandardSchemaV1<unknown, { readonly amount: number }>
type Order = { readonly amount: number }
consumer({
  ...orders,
  codec: "json",
  schema: orderSchema,
  eachMessage: (m) => {
    expectTypeOf(m.value).toEqualTypeOf<Order>()
    expectTypeOf(m.replay).toEqualTypeOf<ReplayInfo | undefined>()
  },
})
// json without a schema: unknown unless annotated or given
consumer({ ...orders, codec: "json", eachMessage: (m) => void expectTypeOf(m.value).toBeUnknown() })
consumer<Order>({ ...orders, codec: "json", eachMessage: (m) => void m.value.amount.toFixed() })
consumer({ ...orders, codec: "json", eachMessage: (m: Message<Order>) => void m.value.amount })
// raw (default): the fields
consumer({ ...orders, eachMessage: (m) => void expectTypeOf(m.value).toEqualTypeOf<Fields>() })
consumer({
  ...orders,
  codec: "json",
  schema: orderSchema,
  // @ts-expect-error the schema's output is Order: amount is a number
  eachMessage: (m) => void m.value.amount.toUpperCase(),
})
consumer({
  ...orders,
  codec: "json",
  schema: orderSchema,
  eachBatch: (b, { resolve }) => {
    expectTypeOf(b.messages[0]!.value).toEqualTypeOf<Order>()
    resolve(b.messages[0]!)
  },
})
effectConsumer({
  ...orders,
  codec: "json",
  schema: orderSchema,
  eachMessage: (m) => Effect.log(m.value.amount),
})
// a codec object types its messages
declare const pairCodec: Codec<readonly [string, number]>
consumer({
  ...orders,
  codec: pairCodec,
  eachMessage: (m) => void expectTypeOf(m.value).toEqualTypeOf<readonly [string, number]>(),
})

export class TypedListeners {
  @StreamListener({ ...orders, codec: "json", schema: orderSchema })
  async typed(message: Message<Order>) {
    console.log(message.value.amount)
  }

  @StreamListener({ ...orders, codec: "json", schema: orderSchema, batch: true })
  async typedBatch(batch: Batch<Order>) {
    console.log(batch.messages.length)
  }

  @StreamListener<Order>({ ...orders, codec: "json" })
  async given(message: Message<Order>) {
    console.log(message.value.amount)
  }

  // @ts-expect-error the schema decodes Order, not a string map
  @StreamListener({ ...orders, codec: "json", schema: orderSchema })
  async wrongType(message: Message) {
    console.log(message.value)
  }
}

// typed producers
declare const runtime: ShardlineRuntime
const typedProducer = runtime.producer<Order>("orders", { codec: "json" })
expectTypeOf(typedProducer).toEqualTypeOf<Producer<Order>>()
void typedProducer.send("k", { amount: 12.5 })
// @ts-expect-error a typed producer sends its T
void typedProducer.send("k", { amount: "12.50" })
// @ts-expect-error the value is required
void typedProducer.send("k")
const rawProducer = runtime.producer("orders")
expectTypeOf(rawProducer).toEqualTypeOf<Producer>()
void rawProducer.send("k")
void rawProducer.send("k", { amount: "12.50" })
// @ts-expect-error a raw producer sends a string map
void rawProducer.send("k", { amount: 12.5 })

// a producer of its own: the same codec option, the same typed send
export async function standaloneProducers() {
  const ports = memoryPorts()
  const typed = await createProducer<Order>({ ports, stream: "orders", codec: "json" })
  expectTypeOf(typed).toEqualTypeOf<Producer<Order>>()
  void typed.send("k", { amount: 12.5 })
  // @ts-expect-error a typed producer of its own sends its T
  void typed.send("k", { amount: "12.50" })
  void typed.sendBatch([{ key: "k", value: { amount: 1 } }])
  // @ts-expect-error a typed batch carries values of T
  void typed.sendBatch([{ key: "k", value: { amount: "1" } }])
  // a codec object gives T
  const pairs = await createProducer({ ports, stream: "orders", codec: pairCodec })
  expectTypeOf(pairs).toEqualTypeOf<Producer<readonly [string, number]>>()
  void pairs.send("k", ["a", 1])
  // @ts-expect-error the codec's T, not another tuple
  void pairs.send("k", ["a", "b"])
  const raw = await createProducer({ ports, stream: "orders" })
  expectTypeOf(raw).toEqualTypeOf<Producer>()
  // an inline codec object takes its parameter types from T, here and in runtime.producer
  const numbers = await createProducer<number>({
    ports,
    stream: "numbers",
    codec: { contentType: "text/plain", encode: (n) => n.toFixed(2), decode: Number },
  })
  expectTypeOf(numbers).toEqualTypeOf<Producer<number>>()
  const runtimeNumbers = runtime.producer<number>("numbers", {
    codec: { contentType: "text/plain", encode: (n) => n.toFixed(2), decode: Number },
  })
  expectTypeOf(runtimeNumbers).toEqualTypeOf<Producer<number>>()
  // @ts-expect-error a raw producer of its own sends a string map
  void raw.send("k", { amount: 12.5 })
  const effectTyped = makeStreamProducer<Order>({ stream: "orders", codec: "json" })
  expectTypeOf(effectTyped).toEqualTypeOf<
    Effect.Effect<EffectProducer<Order>, StreamProducerError, StreamProducerServices>
  >()
}
