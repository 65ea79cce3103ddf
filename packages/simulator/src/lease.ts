/**
 * The coordinator lease: one holder at a time with a TTL, renewed every
 * TTL/3 by a holder that is alive, not paused and still leading; once it
 * lapses the live candidates race and the "store" stream picks the winner.
 * Every acquisition gets a strictly larger fencing token (the lease token
 * the leader's election records).
 *
 * @module
 */
import type { Ctx } from "./ctx.js"
import { timing } from "./options.js"
import { K } from "./world.js"

export class Lease {
  holder = -1
  expires = 0
  token = 0

  constructor(private readonly ctx: Ctx) {}

  start(): void {
    this.ctx.w.q.push(0, K.LEASE)
  }

  held(node: number): boolean {
    return this.holder === node && this.ctx.w.now < this.expires
  }

  tick(): void {
    const { w, coord } = this.ctx
    const holder = coord.nodes[this.holder]
    if (this.ctx.store.down) {
      // Redis is down: nobody renews or acquires; a lease that lapses
      // meanwhile is lost, and the next tick after the outage elects again.
    } else if (holder?.alive && !holder.paused && holder.shell !== null && w.now < this.expires) {
      this.expires = w.now + timing.coordinatorLeaseMs
      coord.followStream(holder)
    } else if (w.now >= this.expires) {
      const candidates = coord.nodes.filter((c) => c.alive && !c.paused)
      if (candidates.length > 0) {
        const c = candidates[w.rng.store.int(candidates.length)]!
        if (holder !== undefined && holder !== c)
          w.mark("rebalance", `coordinator failover #${holder.idx} -> #${c.idx}`)
        this.holder = c.idx
        this.expires = w.now + timing.coordinatorLeaseMs
        this.token++
        coord.becomeLeader(c)
      }
    }
    w.q.push(w.now + timing.coordinatorLeaseMs / 3, K.LEASE)
  }
}
