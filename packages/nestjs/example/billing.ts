/**
 * The example's listener (docs/nestjs.md): `Billing` is an ordinary
 * provider; its `@StreamListener` method runs with the `Receipts` service
 * Nest injected.
 */
import { Injectable } from "@nestjs/common"
import { type Message, type MessageContext, StreamListener } from "@shardline/nestjs"
import { ORDERS } from "./settings.js"

@Injectable()
export class Receipts {
  private readonly seen = new Set<string>()
  record(message: Message, memberId: string) {
    // entry ids are per shard stream: the shard makes them unique
    this.seen.add(`${message.shard}/${message.id}`)
    console.log(
      JSON.stringify({ event: "billed", key: message.key, n: message.fields.n, memberId }),
    )
  }
  get count() {
    return this.seen.size
  }
}

@Injectable()
export class Billing {
  constructor(private readonly receipts: Receipts) {}

  @StreamListener({ ...ORDERS })
  async onOrder(message: Message, { memberId }: MessageContext) {
    this.receipts.record(message, memberId)
  }
}
