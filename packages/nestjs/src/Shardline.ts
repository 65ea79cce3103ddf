/**
 * The `Shardline` service (docs/nestjs.md): it owns the runtime of the
 * application. On application bootstrap (every provider constructed) it
 * discovers the `@StreamListener` methods of providers and controllers
 * through Nest's `DiscoveryService`, reading member-runtime's own
 * registrations (`listenersOf`), and starts the runtime with them; handlers
 * run as methods of the provider instances Nest built, so their injected
 * dependencies are there. It stops the runtime (drain, leave, close) in
 * `onModuleDestroy`, the first shutdown phase: on `app.close()` or, with
 * `app.enableShutdownHooks()`, on SIGTERM.
 *
 * @example
 * @Injectable()
 * class Checkout {
 *   constructor(private readonly shardline: Shardline) {}
 *   order(customer: string) {
 *     return this.shardline.producer("orders").send(customer, { amount: "12.50" })
 *   }
 * }
 */
import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from "@nestjs/common"
import { DiscoveryService } from "@nestjs/core"
import {
  type Health,
  listenersOf,
  type Producer,
  type ProducerOptions,
  type ShardlineRuntime,
  start,
} from "@shardline/member-runtime"
import { SHARDLINE_MODULE_OPTIONS, type ShardlineModuleOptions } from "./options.js"

@Injectable()
export class Shardline implements OnApplicationBootstrap, OnModuleDestroy {
  #runtime: ShardlineRuntime | undefined
  #stopped = false
  readonly #producers = new Map<string, Producer>()

  constructor(
    @Inject(SHARDLINE_MODULE_OPTIONS) private readonly options: ShardlineModuleOptions,
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
  ) {}

  /** The running runtime; throws before application bootstrap. */
  get runtime(): ShardlineRuntime {
    if (this.#runtime === undefined)
      throw new Error(
        "Shardline: the runtime starts on application bootstrap (app.init() or app.listen()); it is not running yet",
      )
    return this.#runtime
  }

  /**
   * A raw (string map) producer on `stream` (one per stream, kept), from
   * application bootstrap on. For typed messages use
   * `shardline.runtime.producer<T>(stream, { codec: "json" })`.
   */
  producer(
    stream: string,
    options?: Partial<ProducerOptions> & { readonly codec?: "raw" },
  ): Producer {
    if (options !== undefined) return this.runtime.producer(stream, options)
    let producer = this.#producers.get(stream)
    if (producer === undefined) {
      producer = this.runtime.producer(stream)
      this.#producers.set(stream, producer)
    }
    return producer
  }

  /**
   * The runtime's health (docs/runtime.md, "Health"); before it started,
   * neither live nor ready (`state: "stopped"`).
   */
  health(): Health {
    return this.#runtime?.health() ?? { live: false, ready: false, state: "stopped", details: [] }
  }

  /** The instances with `@StreamListener` methods among the application's providers and controllers. */
  discoverListeners(): Array<object> {
    const seen = new Set<object>()
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      // request- and transient-scoped instances are per request or per consumer, not per process
      if (!wrapper.isDependencyTreeStatic() || wrapper.isTransient) continue
      const instance: unknown = wrapper.instance
      if (typeof instance !== "object" || instance === null || instance === this) continue
      if (seen.has(instance)) continue
      if (listenersOf(instance).length > 0) seen.add(instance)
    }
    return [...seen]
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.#runtime !== undefined || this.#stopped) return
    const { discover = true, listeners = [], ...rest } = this.options
    const all = [...listeners, ...(discover ? this.discoverListeners() : [])]
    this.#runtime = await start({
      ...rest,
      listeners: [...new Set(all)],
      handleSignals: false,
    })
  }

  async onModuleDestroy(): Promise<void> {
    this.#stopped = true
    await this.#runtime?.stop()
  }
}
