/**
 * A small NestJS application for the module's tests: a `Ledger` service
 * injected into `Billing`, whose `@StreamListener` method records into it
 * (dependency injection inside a handler), and a request-scoped provider
 * with a listener that discovery must skip.
 */
import { Inject, Injectable, Scope } from "@nestjs/common"
import type { Message, MessageContext } from "../src/index.js"
import { StreamListener } from "../src/index.js"

export const timing = {
  shardCount: 4,
  sessionTimeoutMs: 3_000,
  heartbeatIntervalMs: 100,
  rebalanceTimeoutMs: 3_000,
} as const

@Injectable()
export class Ledger {
  readonly charged = new Map<string, Array<string>>()
  readonly members = new Set<string>()
  charge(key: string, n: string, memberId: string) {
    this.charged.set(key, [...(this.charged.get(key) ?? []), n])
    this.members.add(memberId)
  }
  get count() {
    let total = 0
    for (const ns of this.charged.values()) total += ns.length
    return total
  }
}

@Injectable()
export class Billing {
  // injected by type: Nest reads the emitted design:paramtypes, as apps compile it
  constructor(readonly ledger: Ledger) {}

  @StreamListener({ stream: "orders", group: "billing", concurrency: 2, ...timing })
  async onOrder(message: Message, context: MessageContext) {
    this.ledger.charge(message.key ?? "", message.fields.n ?? "", context.memberId)
  }
}

/** Per request: never a listener (discovery skips it). */
@Injectable({ scope: Scope.REQUEST })
export class PerRequest {
  constructor(@Inject(Ledger) readonly ledger: Ledger) {}

  @StreamListener({ stream: "orders", group: "per-request", ...timing })
  async onOrder(_message: Message) {}
}

/** Poll until `done`; `what` (a function: read when it fails) says what was awaited. */
export const until = async (
  what: string | (() => string),
  done: () => boolean,
  timeoutMs = 30_000,
) => {
  const deadline = Date.now() + timeoutMs
  while (!done()) {
    if (Date.now() > deadline)
      throw new Error(
        `not reached within ${timeoutMs} ms: ${typeof what === "string" ? what : what()}`,
      )
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
