/**
 * The example's module (docs/nestjs.md): the runtime's options from the
 * environment (as a Kubernetes Deployment sets it: examples/kubernetes),
 * through `forRootAsync`.
 */
import { Module } from "@nestjs/common"
import { ShardlineModule } from "@shardline/nestjs"
import { Billing, Receipts } from "./billing.js"
import { type Settings, settingsFrom } from "./settings.js"

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
      useFactory: (settings: Settings) => ({
        redis: { url: settings.redisUrl },
        coordinator: settings.coordinator,
        // the member id comes from POD_IP (or the pod's HOSTNAME) by default
        shutdownTimeoutMs: settings.shutdownTimeoutMs,
        http: { port: settings.httpPort },
      }),
    }),
  ],
  providers: [Receipts, Billing],
})
export class AppModule {}
