/**
 * `ShardlineModule` with the real `@nestjs/core` and `@nestjs/testing` on
 * the memory ports (docs/nestjs.md): `@StreamListener` methods of providers
 * are discovered and run with their injected dependencies, the runtime
 * starts on bootstrap and stops on close, `forRootAsync` builds the options
 * from injected providers, and the Terminus indicator reports health.
 */
import "reflect-metadata"
import { Inject, Injectable, Module } from "@nestjs/common"
import { HealthCheckService, TerminusModule } from "@nestjs/terminus"
import { Test } from "@nestjs/testing"
import { memoryPorts } from "@shardline/member-runtime"
import { afterEach, describe, expect, it } from "vitest"
import { Shardline, ShardlineModule } from "../src/index.js"
import { ShardlineHealthIndicator } from "../src/terminus.js"
import { Billing, Ledger, PerRequest, until } from "./fixtures.js"

const closing: Array<{ close: () => Promise<void> }> = []
afterEach(async () => {
  for (const app of closing.splice(0)) await app.close()
})

const send = async (shardline: Shardline, total: number) => {
  await shardline
    .producer("orders")
    .sendBatch(
      Array.from({ length: total }, (_, n) => ({ key: `k${n % 7}`, fields: { n: String(n) } })),
    )
}

describe("ShardlineModule on the memory ports", () => {
  it("forRoot: discovers @StreamListener providers, injects their dependencies, starts on bootstrap, stops on close", async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ShardlineModule.forRoot({ ports: memoryPorts(), memberBase: "pod", logLevel: "silent" }),
      ],
      providers: [Ledger, Billing, PerRequest],
    }).compile()
    const shardline = moduleRef.get(Shardline)
    // not started before bootstrap
    expect(() => shardline.runtime).toThrow(/starts on application bootstrap/)
    expect(shardline.health()).toMatchObject({ live: false, ready: false })
    await moduleRef.init()
    closing.push(moduleRef)
    // the request-scoped listener is skipped: billing's two logical members only
    expect(shardline.runtime.members().map((m) => `${m.group}/${m.memberId}`)).toEqual([
      "billing/pod-m0",
      "billing/pod-m1",
    ])
    await send(shardline, 100)
    const ledger = moduleRef.get(Ledger)
    await until("every order charged", () => ledger.count === 100)
    // per key in order, through the injected Ledger, on both members
    expect(ledger.charged.get("k0")).toEqual(Array.from({ length: 15 }, (_, i) => String(i * 7)))
    await until("ready", () => shardline.health().ready)
    const runtime = shardline.runtime
    await moduleRef.close()
    closing.splice(0)
    expect(runtime.health().state).toBe("stopped")
    await runtime.stopped
  })

  it("forRootAsync: options from an injected provider of an imported module", async () => {
    const SETTINGS = Symbol("settings")
    @Module({
      providers: [{ provide: SETTINGS, useValue: { base: "async-pod" } }],
      exports: [SETTINGS],
    })
    class SettingsModule {}
    const moduleRef = await Test.createTestingModule({
      imports: [
        ShardlineModule.forRootAsync({
          imports: [SettingsModule],
          inject: [SETTINGS],
          useFactory: async (settings: { base: string }) => ({
            ports: memoryPorts(),
            memberBase: settings.base,
            logLevel: "silent",
          }),
        }),
      ],
      providers: [Ledger, Billing],
    }).compile()
    await moduleRef.init()
    closing.push(moduleRef)
    const shardline = moduleRef.get(Shardline)
    expect(shardline.runtime.memberBase).toBe("async-pod")
    await send(shardline, 20)
    await until("charged", () => moduleRef.get(Ledger).count === 20)
  })

  it("discover: false runs only the listeners given", async () => {
    const ledger = new Ledger()
    const moduleRef = await Test.createTestingModule({
      imports: [
        ShardlineModule.forRoot({
          ports: memoryPorts(),
          memberBase: "pod",
          logLevel: "silent",
          discover: false,
          listeners: [new Billing(ledger)],
        }),
      ],
      providers: [Ledger, Billing],
    }).compile()
    await moduleRef.init()
    closing.push(moduleRef)
    const shardline = moduleRef.get(Shardline)
    await send(shardline, 10)
    await until("charged by the given instance", () => ledger.count === 10)
    expect(moduleRef.get(Ledger).count).toBe(0)
  })

  it("a provider that injects Shardline produces; the Terminus indicator is up when ready, down when stopped", async () => {
    @Injectable()
    class Checkout {
      constructor(@Inject(Shardline) private readonly shardline: Shardline) {}
      order(customer: string, n: number) {
        return this.shardline.producer("orders").send(customer, { n: String(n) })
      }
    }
    const moduleRef = await Test.createTestingModule({
      imports: [
        TerminusModule,
        ShardlineModule.forRoot({ ports: memoryPorts(), memberBase: "pod", logLevel: "silent" }),
      ],
      providers: [Ledger, Billing, Checkout, ShardlineHealthIndicator],
    }).compile()
    await moduleRef.init()
    closing.push(moduleRef)
    await moduleRef.get(Checkout).order("alice", 1)
    await until("charged", () => moduleRef.get(Ledger).count === 1)
    const indicator = moduleRef.get(ShardlineHealthIndicator)
    const check = moduleRef.get(HealthCheckService)
    await until("ready", () => moduleRef.get(Shardline).health().ready)
    const up = await check.check([() => indicator.isReady(), () => indicator.isLive("loops")])
    expect(up.status).toBe("ok")
    expect(up.info?.shardline).toMatchObject({ status: "up", ready: true })
    expect(up.info?.loops).toMatchObject({ status: "up", live: true })
    await moduleRef.get(Shardline).runtime.stop()
    // Terminus answers a failed check with 503 (ServiceUnavailableException) naming the indicator
    const down = await check.check([() => indicator.isReady()]).catch((e: unknown) => e)
    expect(down).toMatchObject({ status: 503 })
    const response = (
      down as { getResponse: () => { error: Record<string, unknown> } }
    ).getResponse()
    expect(response.error.shardline).toMatchObject({ status: "down", state: "stopped" })
  })
})
