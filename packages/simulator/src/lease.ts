/**
 * The coordinator lease as the lease store (Redis) holds it: one holder at a
 * time with an expiry, and a fencing token that every acquisition raises
 * (the lease token the leader's election records; a new token is a new
 * term, docs/protocol.md rule 25). Who asks for it, renews it or gives it
 * up, and when, is the candidates' business (`coordinator.ts`: each host's
 * renewal loop, each candidate's check, a heartbeat that finds its host's
 * lease ended); this only answers them, by true time.
 *
 * @module
 */
import type { Ctx } from "./ctx.js"
import { timing } from "./options.js"

export class Lease {
  holder = -1
  expires = 0
  token = 0

  constructor(private readonly ctx: Ctx) {}

  /** Candidate `node` holds a lease that has not run out. */
  held(node: number): boolean {
    return this.holder === node && this.ctx.w.now < this.expires
  }

  /** Someone holds a lease that has not run out. */
  get taken(): boolean {
    return this.holder >= 0 && this.ctx.w.now < this.expires
  }

  /** A free lease goes to `node` under a new token (the caller checked it is free). */
  acquire(node: number): number {
    this.holder = node
    this.expires = this.ctx.w.now + timing.coordinatorLeaseMs
    return ++this.token
  }

  /** Extends `node`'s lease of term `token`; false when it is no longer that lease. */
  renew(node: number, token: number): boolean {
    if (!this.held(node) || this.token !== token) return false
    this.expires = this.ctx.w.now + timing.coordinatorLeaseMs
    return true
  }

  /** `node` gives up its lease of term `token` (a resignation): free at once. */
  release(node: number, token: number): void {
    if (this.held(node) && this.token === token) this.expires = this.ctx.w.now
  }
}
