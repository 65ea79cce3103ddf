/**
 * The network between member processes and coordinator candidates: loss,
 * duplication, delay (and so reordering), and per-member links whose two
 * directions fail independently: `drop` (partition), `hold` (a stalled
 * connection: messages queue up and are flushed, reordered, when it heals:
 * requests delayed past a self-fence and a rejoin), `lag` (every message
 * takes a fixed extra time: answers that arrive after their lease). A
 * request goes to the group's request list (the coordinator transport on
 * Redis); the candidate whose serve claims the group's presence when it
 * arrives takes it, if any does (`CoordinatorHost.arrive`). It also keeps
 * each member's last requests so the `replay` fault can deliver an old one
 * again.
 *
 * @module
 */
import type { HeartbeatRequest, HeartbeatResponse } from "@shardline/core"
import type { Forgery } from "./checkers/requests.js"
import type { Ctx } from "./ctx.js"
import type { NetworkOptions } from "./options.js"
import { K } from "./world.js"

/** A request on the wire, with who sent it (process id), when, and what was forged into it. */
export interface Req {
  readonly pid: number
  readonly seq: number
  /** When its process sent it (true time; a replay keeps the original's). */
  readonly sentAt: number
  readonly request: HeartbeatRequest
  readonly forgery?: Forgery | undefined
}

export type LinkMode = "ok" | "drop" | "hold" | "lag"

interface Held {
  readonly kind: number
  readonly a: number
  readonly b: number
  readonly p: unknown
}

/** One member's link; `out` = member -> coordinator, `back` = coordinator -> member. */
export class Link {
  out: LinkMode = "ok"
  back: LinkMode = "ok"
  outLagMs = 0
  backLagMs = 0
  readonly heldOut: Array<Held> = []
  readonly heldIn: Array<Held> = []
}

const HISTORY = 16

export class Network {
  options: NetworkOptions
  readonly links: Array<Link>
  /**
   * Per member: bit 1 set while its `out` link is not "ok", bit 2 while
   * `back` is not: a message on a healthy link is scheduled without a look
   * at the link object (docs/simulator.md, Speed).
   */
  private readonly faulty: Uint8Array
  /**
   * Per member: its last HISTORY requests (any process, any lifecycle), for
   * `replay`; flat, member `slot` at HISTORY * slot (one array instead of an
   * array per member: a send touches one entry, not an array object and its
   * backing store; docs/simulator.md, Speed).
   */
  private readonly history: Array<Req | undefined>
  private readonly historyCount: Uint8Array
  private readonly historyAt: Int32Array
  /** Per member: when its last few requests or answers were lost (the collateral checker's excuse). */
  private readonly losses: Array<Array<number>>
  /** Per member: what to do right after a coordinator received its next request (a `stall`). */
  private readonly armed: Array<(() => void) | undefined>

  constructor(
    private readonly ctx: Ctx,
    options: NetworkOptions,
    members: number,
  ) {
    this.options = options
    this.links = Array.from({ length: members }, () => new Link())
    this.faulty = new Uint8Array(members)
    this.history = new Array(members * HISTORY).fill(undefined)
    this.historyCount = new Uint8Array(members)
    this.historyAt = new Int32Array(members)
    this.armed = new Array(members).fill(undefined)
    this.losses = Array.from({ length: members }, () => [])
  }

  /** How many of member `slot`'s requests and answers were lost at or after `since`. */
  lostSince(slot: number, since: number): number {
    let n = 0
    for (const t of this.losses[slot]!) if (t >= since) n++
    return n
  }

  private noteLoss(slot: number, kind: number): void {
    if (kind === K.NOTICE) return
    const l = this.losses[slot]!
    l.push(this.ctx.w.now)
    if (l.length > 8) l.shift()
  }

  /** Runs `then` right after a coordinator receives member `slot`'s next request. */
  arm(slot: number, then: () => void): void {
    this.armed[slot] = then
  }

  /** A coordinator received a request of member `slot` (before it answers). */
  handled(slot: number): void {
    const then = this.armed[slot]
    if (then === undefined) return
    this.armed[slot] = undefined
    then()
  }

  delay(): number {
    return 0.2 + this.ctx.w.rng.network.exp(this.options.delayMeanMs)
  }

  private lost(): boolean {
    return this.ctx.w.rng.network.chance(this.options.lossP)
  }

  private duplicated(): boolean {
    return this.ctx.w.rng.network.chance(this.options.dupP)
  }

  /** Member `slot`'s process sends `req` to the group's request list. */
  toCoordinator(slot: number, req: Req, record = true): void {
    const w = this.ctx.w
    if (record) {
      // as an array per member filled to HISTORY, then overwritten in a ring
      const at = this.historyAt[slot]!
      this.history[slot * HISTORY + at] = req
      const n = this.historyCount[slot]!
      if (n < HISTORY) this.historyCount[slot] = n + 1
      this.historyAt[slot] = (at + 1) % HISTORY
    }
    // a = -1: the transport, not a candidate; who takes it is decided on arrival
    this.deliver(slot, "out", K.REQ_AT_COORD, -1, slot, req)
    if (this.duplicated()) {
      w.count("net:duplicated")
      this.deliver(slot, "out", K.REQ_AT_COORD, -1, slot, req)
    }
  }

  /** The coordinator answers request `seq` of process `pid` (member `slot`). */
  toMember(slot: number, pid: number, seq: number, response: HeartbeatResponse): void {
    this.deliver(slot, "in", K.RESP_AT_MEMBER, pid, seq, response)
    if (this.duplicated()) {
      this.ctx.w.count("net:duplicated")
      this.deliver(slot, "in", K.RESP_AT_MEMBER, pid, seq, response)
    }
  }

  /** A "look again" notice to process `pid` of member `slot`. */
  notice(slot: number, pid: number): void {
    this.deliver(slot, "in", K.NOTICE, pid, 0, undefined)
  }

  private deliver(
    slot: number,
    dir: "out" | "in",
    kind: number,
    a: number,
    b: number,
    p: unknown,
  ): void {
    const w = this.ctx.w
    if (this.ctx.store.down) {
      // The coordinator transport runs over Redis.
      w.count("redis:messagesLost")
      this.noteLoss(slot, kind)
      return
    }
    if (this.lost()) {
      w.count("net:lost")
      this.noteLoss(slot, kind)
      return
    }
    if ((this.faulty[slot]! & (dir === "out" ? 1 : 2)) === 0) {
      w.q.push(w.now + this.delay(), kind, a, b, p)
      return
    }
    const link = this.links[slot]!
    const mode = dir === "out" ? link.out : link.back
    switch (mode) {
      case "ok":
        w.q.push(w.now + this.delay(), kind, a, b, p)
        return
      case "drop":
        w.count("net:partitioned")
        return
      case "hold":
        w.count("net:held")
        ;(dir === "out" ? link.heldOut : link.heldIn).push({ kind, a, b, p })
        return
      case "lag":
        w.count("net:lagged")
        w.q.push(
          w.now + (dir === "out" ? link.outLagMs : link.backLagMs) + this.delay(),
          kind,
          a,
          b,
          p,
        )
        return
    }
  }

  /** Sets one direction of member `slot`'s link; healing a `hold` flushes it, reordered. */
  set(slot: number, dir: "out" | "in", mode: LinkMode, lagMs = 0): void {
    const link = this.links[slot]!
    const w = this.ctx.w
    if (dir === "out") {
      link.out = mode
      link.outLagMs = lagMs
    } else {
      link.back = mode
      link.backLagMs = lagMs
    }
    const bit = dir === "out" ? 1 : 2
    this.faulty[slot] = mode === "ok" ? this.faulty[slot]! & ~bit : this.faulty[slot]! | bit
    if (mode === "hold") return
    const held = dir === "out" ? link.heldOut : link.heldIn
    for (const m of held)
      w.q.push(w.now + this.delay() + w.rng.network.exp(150), m.kind, m.a, m.b, m.p)
    held.length = 0
  }

  /** Delivers one of member `slot`'s old requests again (the `replay` fault); false if none. */
  replay(slot: number): boolean {
    const n = this.historyCount[slot]!
    if (n === 0) return false
    const req = this.history[slot * HISTORY + this.ctx.w.rng.network.int(n)]!
    this.toCoordinator(slot, req, false)
    return true
  }

  /** Liveness phase: no loss, duplication or extra delay; every link heals. */
  heal(): void {
    this.options = { lossP: 0, dupP: 0, delayMeanMs: 1 }
    this.armed.fill(undefined)
    for (let i = 0; i < this.links.length; i++) {
      this.set(i, "out", "ok")
      this.set(i, "in", "ok")
    }
  }
}
