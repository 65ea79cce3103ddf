/**
 * The example's module (docs/nestjs.md): the runtime's options from the
 * environment (as a Kubernetes Deployment sets it: examples/kubernetes),
 * through `forRootAsync`.
 */
import { Module } from "@nestjs/common"
import { ShardlineModule } from "@shardline/nestjs"
import { Billing, Receipts } from "./billing.js"

/** The environment the example reads. */
export const settingsFrom = (env: NodeJS.ProcessEnv) => ({
  redisUrl: env.REDIS_URL ?? "redis://localhost:6379",
  httpPort: Number(env.HTTP_PORT ?? 9464),
  shutdownTimeoutMs: Number(env.SHUTDOWN_TIMEOUT_MS ?? 30_000),
})

const SETTINGS = "SETTINGS"

@Module({
  providers: [{ provide: SETTINGS, useFactory: () => settingsFrom(process.env) }],
  exports: [SETTINGS],
})
class SettingsModule {}

@Module({
  imports: [
    ShardlineModule.forRootAsync({
      imports: [SettingsModule],
      inject: [SETTINGS],
      useFactory: (settings: ReturnType<typeof settingsFrom>) => ({
        redis: { url: settings.redisUrl },
        // the member id comes from POD_IP (or the pod's HOSTNAME) by default
        shutdownTimeoutMs: settings.shutdownTimeoutMs,
        http: { port: settings.httpPort },
      }),
    }),
  ],
  providers: [Receipts, Billing],
})
export class AppModule {}
