/**
 * `ShardlineModule` (docs/nestjs.md): the runtime as a global Nest module.
 * `forRoot(options)` takes `start`'s options (docs/runtime.md);
 * `forRootAsync({ imports, inject, useFactory })` builds them from other
 * providers (a `ConfigService`, say). Either way the `Shardline` service is
 * injectable everywhere, the runtime starts on application bootstrap with
 * every `@StreamListener` method of the application's providers, and stops
 * on shutdown.
 *
 * @example
 * @Module({
 *   imports: [ShardlineModule.forRoot({ redis: { url: "redis://localhost:6379" }, http: { port: 9464 } })],
 *   providers: [Billing], // a class with @StreamListener methods
 * })
 * class AppModule {}
 */
import {
  type DynamicModule,
  type InjectionToken,
  Module,
  type ModuleMetadata,
  type OptionalFactoryDependency,
} from "@nestjs/common"
import { DiscoveryModule } from "@nestjs/core"
import { SHARDLINE_MODULE_OPTIONS, type ShardlineModuleOptions } from "./options.js"
import { Shardline } from "./Shardline.js"

/** `forRootAsync`'s options: a factory of the module options, as Nest's other modules take. */
export interface ShardlineModuleAsyncOptions extends Pick<ModuleMetadata, "imports"> {
  readonly useFactory: (
    // biome-ignore lint/suspicious/noExplicitAny: whatever the injected providers are
    ...args: any[]
  ) => ShardlineModuleOptions | Promise<ShardlineModuleOptions>
  readonly inject?: Array<InjectionToken | OptionalFactoryDependency>
}

@Module({})
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest dynamic module is a class with static factories
export class ShardlineModule {
  /** The module with these options (see the module doc). */
  static forRoot(options: ShardlineModuleOptions = {}): DynamicModule {
    return {
      module: ShardlineModule,
      global: true,
      imports: [DiscoveryModule],
      providers: [{ provide: SHARDLINE_MODULE_OPTIONS, useValue: options }, Shardline],
      exports: [Shardline],
    }
  }

  /** The module with options from a factory over injected providers (see the module doc). */
  static forRootAsync(options: ShardlineModuleAsyncOptions): DynamicModule {
    return {
      module: ShardlineModule,
      global: true,
      imports: [DiscoveryModule, ...(options.imports ?? [])],
      providers: [
        {
          provide: SHARDLINE_MODULE_OPTIONS,
          useFactory: options.useFactory,
          inject: options.inject ?? [],
        },
        Shardline,
      ],
      exports: [Shardline],
    }
  }
}
