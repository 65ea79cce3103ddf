/**
 * `@StreamListener` at run time under both decorator flavours: the same
 * class (test/fixtures/decoratedListeners.ts) compiled with TC39 standard
 * decorators and with `experimentalDecorators` handles every message on the
 * memory ports, with `this` the instance, inherited listeners and overrides.
 * docs/runtime.md, "Declaring consumers".
 */
import { describe, expect, it } from "vitest"
import { memoryPorts } from "../src/Ports.js"
import { start } from "../src/Runtime.js"
import { listenersOf, StreamListener } from "../src/StreamListener.js"
import type * as Fixture from "./fixtures/decoratedListeners.js"
import { until } from "./support/until.js"

const fixtureUrl = new URL("./fixtures/decoratedListeners.ts", import.meta.url).pathname

const flavours = {
  standard: () => import("./fixtures/decoratedListeners.js") as Promise<typeof Fixture>,
  legacy: () =>
    import(/* @vite-ignore */ `${fixtureUrl}?legacy-decorators`) as Promise<typeof Fixture>,
}

const run = async (instance: Fixture.Orders, total: number) => {
  const runtime = await start({
    ports: memoryPorts(),
    handleSignals: false,
    memberBase: "pod",
    listeners: [instance],
  })
  try {
    await runtime
      .producer("orders")
      .sendBatch(Array.from({ length: total }, (_, n) => ({ key: `k${n % 7}`, fields: {} })))
    await until(
      "every message billed and audited",
      () => instance.billed.size === total && instance.audited.size === total,
      {
        explain: () =>
          `billed ${instance.billed.size}, audited ${instance.audited.size}, ${JSON.stringify(runtime.members().map((m) => [m.group, m.memberId, m.owned]))}`,
      },
    )
    return runtime.members().map((m) => `${m.group}/${m.memberId}`)
  } finally {
    await runtime.stop()
  }
}

describe.each(Object.entries(flavours))(
  "@StreamListener compiled as %s decorators",
  (flavour, load) => {
    it("registers where its flavour can: per instance (standard) or on the prototype (legacy)", async () => {
      const { Orders } = await load()
      expect(listenersOf(new Orders()).map((d) => d.label)).toEqual([
        "Orders.onOrder",
        "Orders.onBatch",
      ])
      // an object that never ran the constructor: only a legacy decorator,
      // which runs once on the class, has registered anything for it
      const bare = Object.create(Orders.prototype) as object
      expect(listenersOf(bare).length).toBe(flavour === "legacy" ? 2 : 0)
    })

    it("handles every message with `this` the instance (listener concurrency 2 and a batch listener)", async () => {
      const { Orders } = await load()
      expect(await run(new Orders(), 200)).toEqual([
        "billing/pod-m0",
        "billing/pod-m1",
        "audit/pod-m0",
      ])
    })

    it("a subclass inherits the listeners and its override runs", async () => {
      const { CountingOrders } = await load()
      const instance = new CountingOrders()
      await run(instance, 50)
      expect(instance.overrides).toBeGreaterThanOrEqual(50)
    })
  },
)

describe("@StreamListener refuses what it cannot run", () => {
  const decorator = StreamListener({ stream: "s", group: "g" }) as unknown as (
    ...args: ReadonlyArray<unknown>
  ) => void

  it("a static method (legacy: the target is the class itself)", () => {
    class Target {
      static handle() {}
      instance() {}
    }
    const descriptor = Object.getOwnPropertyDescriptor(Target, "handle")
    expect(() => decorator(Target, "handle", descriptor)).toThrow(
      "@StreamListener: handle must be an instance method",
    )
  })

  it("a static method (standard)", () => {
    const context = { kind: "method", name: "handle", static: true, addInitializer: () => {} }
    expect(() => decorator(() => {}, context)).toThrow(
      "@StreamListener: handle must be an instance method",
    )
  })

  it("anything but a method (a field, an accessor, a plain call)", () => {
    expect(() => decorator({}, "field", undefined)).toThrow(
      "@StreamListener: decorate a class method",
    )
    expect(() => decorator({}, "value", { get: () => 1 })).toThrow(
      "@StreamListener: decorate a class method",
    )
    expect(() => decorator(() => {}, { kind: "field", name: "x" })).toThrow(
      "@StreamListener: decorate a class method",
    )
    expect(() => decorator()).toThrow("@StreamListener: decorate a class method")
  })
})
