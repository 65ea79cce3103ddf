/**
 * `@shardline/nestjs/terminus`: a health indicator for `@nestjs/terminus`
 * (docs/nestjs.md, "Health"), over `runtime.health()` (docs/runtime.md,
 * "Health"). `isReady` is up when every member joined and a coordinator
 * answers it, `isLive` when the heartbeat loops make progress; down, the
 * result names each member's reasons.
 *
 * @example
 * @Controller("health")
 * class HealthController {
 *   constructor(
 *     private readonly health: HealthCheckService,
 *     private readonly shardline: ShardlineHealthIndicator,
 *   ) {}
 *   @Get("ready") @HealthCheck()
 *   ready() { return this.health.check([() => this.shardline.isReady("shardline")]) }
 * }
 * // module: imports [TerminusModule, ShardlineModule.forRoot(...)], providers [ShardlineHealthIndicator]
 */
import { Inject, Injectable } from "@nestjs/common"
import { type HealthIndicatorResult, HealthIndicatorService } from "@nestjs/terminus"
import type { Health } from "@shardline/member-runtime"
import { Shardline } from "./Shardline.js"

@Injectable()
export class ShardlineHealthIndicator {
  constructor(
    @Inject(Shardline) private readonly shardline: Shardline,
    @Inject(HealthIndicatorService) private readonly indicators: HealthIndicatorService,
  ) {}

  /** Up when the runtime is ready: every member joined and a coordinator answers it. */
  isReady<const Key extends string = "shardline">(
    key: Key = "shardline" as Key,
  ): HealthIndicatorResult<Key> {
    return this.result(key, "ready")
  }

  /** Up when the runtime is live: its members' heartbeat loops make progress. */
  isLive<const Key extends string = "shardline">(
    key: Key = "shardline" as Key,
  ): HealthIndicatorResult<Key> {
    return this.result(key, "live")
  }

  private result<Key extends string>(key: Key, what: "ready" | "live"): HealthIndicatorResult<Key> {
    const health: Health = this.shardline.health()
    const session = this.indicators.check(key)
    const data = {
      live: health.live,
      ready: health.ready,
      state: health.state,
      members: health.details.map((d) => ({
        memberId: d.memberId,
        stream: d.stream,
        group: d.group,
        phase: d.phase,
        ...(d.reasons.length > 0 ? { reasons: d.reasons } : {}),
      })),
    }
    return health[what] ? session.up(data) : session.down(data)
  }
}
