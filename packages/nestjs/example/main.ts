/**
 * The example application (docs/nestjs.md): a Nest application context (no
 * HTTP framework needed: the runtime's own endpoint serves `/livez`,
 * `/readyz` and `/metrics`), with shutdown hooks, so SIGTERM drains the
 * listeners and leaves the group before the process exits.
 *
 *   REDIS_URL=redis://localhost:6379 HTTP_PORT=9464 node dist/main.js
 */
import "reflect-metadata"
import { NestFactory } from "@nestjs/core"
import type { RuntimeEvent } from "@shardline/member-runtime"
import { Shardline } from "@shardline/nestjs"
import { AppModule } from "./app.module.js"

const app = await NestFactory.createApplicationContext(AppModule, { logger: ["error", "warn"] })
app.enableShutdownHooks()
const shardline = app.get(Shardline)
shardline.runtime.on((event: RuntimeEvent) => {
  if (event.type === "joined" || event.type === "left")
    console.log(JSON.stringify({ event: event.type, memberId: event.memberId }))
})
console.log(JSON.stringify({ event: "started", memberBase: shardline.runtime.memberBase }))
void shardline.runtime.stopped.then(() => console.log(JSON.stringify({ event: "stopped" })))
