/**
 * The data plane: one stream per shard with its owner token (written by the
 * coordinator before it tells anyone; tokens only grow), a read cursor, the
 * pending entries (delivered, not acknowledged: re-delivered to the next
 * owner first) and the fenced read / ack of a batch. With the storage fence
 * off (`--fence off`) reads and acks accept any token. It also keeps who
 * reads each shard (processes whose loop runs and is not draining), the
 * member-side view that convergence and starvation are measured on.
 *
 * @module
 */
import type { Fence } from "@shardline/core"
import type { Ctx } from "./ctx.js"
import { FAULT_KINDS, timing } from "./options.js"
import type { Transactions } from "./transactions.js"

/** A fence write waiting on a hung storage node (the `fence-hang` fault). */
interface HungWrite {
  readonly fence: Fence
  /** It runs anyway and only its answer is lost, should its deadline pass first. */
  readonly lands: boolean
  readonly answer: (written: boolean) => void
  done: boolean
}

export class DataPlane {
  /** Storage owner token per shard. */
  readonly fence: Int32Array
  readonly cursor: Int32Array
  readonly pel: Array<Set<number>>
  /**
   * Per shard: messages undelivered or pending (delivered, not acknowledged),
   * kept up to date on produce and ack so the read loops' "anything to read?"
   * is one array load (docs/simulator.md, Speed).
   */
  private readonly backlogN: Int32Array
  private readonly messages: Ctx["checks"]["messages"]
  /** Processes reading each shard, and one of them (pid, -1 if none). */
  readonly readers: Int32Array
  readonly readerPid: Int32Array
  /** Shards whose reader count is not exactly one. */
  notSingle: number
  readonly backlogSince: Float64Array
  readonly servedAt: Float64Array
  readonly ownedSince: Float64Array
  readonly ackedPerShard: Float64Array
  /** Sealed shards (an earlier layout generation's): appends are refused. */
  readonly sealed: Uint8Array
  /**
   * Readers a balanced group has on each shard: 1 on the stream's current
   * generation, 0 elsewhere (earlier generations must end up drained and
   * unread). `notSingle` counts shards whose reader count differs from it.
   */
  readonly expect: Uint8Array
  fencedReads = 0
  fencedAcks = 0
  /** Acks accepted with the fence off from processes whose lifecycle was fenced or replaced. */
  zombieAcks = 0
  /** Transactional handlers (`--tx`): batches commit through `tx.commit` instead of `ack`. */
  tx: Transactions | undefined = undefined
  /**
   * The `evict` fault (docs/protocol.md rule 26): per shard, whether its
   * owner token is missing (until a coordinator writes one again), and what
   * of its data vanished, not noticed yet: 2 the group's consumer group, 3
   * the shard stream (with the group). `streamStart`: the first id the
   * shard's stream still holds.
   */
  readonly tokenGone: Uint8Array
  readonly gone: Uint8Array
  readonly streamStart: Int32Array
  /**
   * The `fence-hang` fault: shards whose storage node hangs (a hung or
   * partitioned cluster master holding the shard's owner-token key): the
   * coordinator's fence writes and token reads there do not answer until
   * the command deadline or the heal.
   */
  readonly hung: Uint8Array
  private readonly hungWrites = new Map<number, Array<HungWrite>>()

  constructor(
    private readonly ctx: Ctx,
    readonly storageFence: boolean,
  ) {
    const S = ctx.w.S
    this.fence = new Int32Array(S)
    this.cursor = new Int32Array(S)
    this.pel = Array.from({ length: S }, () => new Set<number>())
    this.backlogN = new Int32Array(S)
    this.messages = ctx.checks.messages
    this.readers = new Int32Array(S)
    this.readerPid = new Int32Array(S).fill(-1)
    this.sealed = new Uint8Array(S)
    this.expect = new Uint8Array(S)
    const first = ctx.options.shards
    for (let s = 0; s < first; s++) this.expect[s] = 1
    this.notSingle = first
    this.backlogSince = new Float64Array(S)
    this.servedAt = new Float64Array(S)
    this.ownedSince = new Float64Array(S)
    this.ackedPerShard = new Float64Array(S)
    this.tokenGone = new Uint8Array(S)
    this.gone = new Uint8Array(S)
    this.streamStart = new Int32Array(S)
    this.hung = new Uint8Array(S)
  }

  /** `shard`'s storage node hangs (the `fence-hang` fault). */
  hang(shard: number): void {
    this.hung[shard] = 1
  }

  /** `shard`'s storage node answers again: every write waiting on it lands and is answered now. */
  unhang(shard: number): void {
    this.hung[shard] = 0
    const waiting = this.hungWrites.get(shard) ?? []
    this.hungWrites.delete(shard)
    for (const h of waiting) {
      if (h.done) continue
      h.done = true
      this.ctx.w.count("fenceHang:writeAnsweredAtHeal")
      h.answer(this.lateWrite(h.fence))
    }
  }

  /**
   * A hung write that runs late: storage refuses a token below the one it
   * holds now (`OwnerTokenRegression`: the shard was granted again
   * meanwhile), as `setOwnerToken` does.
   */
  private lateWrite(f: Fence): boolean {
    if (this.tokenGone[f.shard] !== 1 && f.token < this.fence[f.shard]!) {
      this.ctx.w.count("fenceHang:lateWriteRefused")
      return false
    }
    this.writeFences([f])
    return true
  }

  /**
   * One grant's fence write, made by the coordinator outside its lock, one
   * write per shard (docs/protocol.md rule 31): answered at once (`answer`
   * called before this returns), or, on a hung node, at the heal (written)
   * or at the command deadline (`commandTimeoutMs`: failed, though half the
   * time it ran and only its answer was lost; docs/protocol.md rule 27).
   */
  writeFence(f: Fence, answer: (written: boolean) => void): void {
    if (this.hung[f.shard] !== 1) {
      this.writeFences([f])
      answer(true)
      return
    }
    const w = this.ctx.w
    w.count("fenceHang:writesHung")
    const h: HungWrite = { fence: f, lands: w.rng.faultEvents.chance(0.5), answer, done: false }
    const list = this.hungWrites.get(f.shard)
    if (list === undefined) this.hungWrites.set(f.shard, [h])
    else list.push(h)
    this.ctx.faults.open(FAULT_KINDS.indexOf("fence-hang"), {
      afterMs: timing.commandTimeoutMs,
      heal: () => {
        if (h.done) return
        h.done = true
        w.count("fenceHang:writeFailed")
        if (h.lands && this.lateWrite(f)) w.count("fenceHang:writeLandedUnanswered")
        h.answer(false)
      },
    })
  }

  /**
   * What of `shard` a fenced call finds vanished (rule 26): "token" (every
   * token is refused: the shard waits until a coordinator writes one),
   * "group" or "stream" (`DataLost`: never an empty read), or undefined.
   * With the storage fence off the token is not looked at.
   */
  vanished(shard: number): "token" | "group" | "stream" | undefined {
    if (
      this.tokenGone[shard] === 1 &&
      this.storageFence &&
      // BROKEN ON PURPOSE with `missing-token-is-zero`: a missing token read as 0
      this.ctx.options.broken !== "missing-token-is-zero"
    )
      return "token"
    const g = this.gone[shard]!
    return g === 0 ? undefined : g === 2 ? "group" : "stream"
  }

  /**
   * The `evict` fault: the owner token, the consumer group or the stream of
   * `shard` vanishes (deleted, or evicted by a server with an evicting
   * `maxmemory-policy`). A vanished stream takes every entry it held.
   */
  evict(shard: number, what: "token" | "group" | "stream"): void {
    const w = this.ctx.w
    w.count(`evict:${what}`)
    w.mark("fault", `shard ${shard}: its ${what === "token" ? "owner token" : what} vanished`)
    if (what === "token") {
      this.tokenGone[shard] = 1
      return
    }
    if (what === "stream") {
      const produced = this.messages.producedOn(shard)
      this.messages.vanish(shard, this.streamStart[shard]!, produced)
      this.streamStart[shard] = produced
      this.gone[shard] = 3
    } else this.gone[shard] = Math.max(this.gone[shard]!, 2)
  }

  /**
   * A member's fenced call found the group or the stream of `shard` gone
   * (`DataLost`): it says so (the messages the stream took are reported
   * lost, not lost in silence) and creates the group again at the stream's
   * start, a fenced seek: what the stream still holds is delivered again.
   */
  recreate(shard: number): void {
    const w = this.ctx.w
    const what = this.gone[shard] === 3 ? "stream" : "group"
    w.count(`dataLost:${what}`)
    if (this.ctx.options.broken !== "vanished-read-as-empty") this.messages.reportLost(shard)
    this.gone[shard] = 0
    const start =
      // BROKEN ON PURPOSE with `vanished-read-as-empty`: the group is created
      // in silence at the stream's end, as if the read had found nothing
      this.ctx.options.broken === "vanished-read-as-empty"
        ? this.messages.producedOn(shard)
        : this.streamStart[shard]!
    const pel = this.pel[shard]!
    pel.clear()
    this.cursor[shard] = start
    this.backlogN[shard] = this.messages.producedOn(shard) - start
    if (this.backlogN[shard] === 0) this.backlogSince[shard] = Number.POSITIVE_INFINITY
  }

  /** Messages undelivered or pending over every shard. */
  totalBacklog(): number {
    let n = 0
    for (let s = 0; s < this.backlogN.length; s++) n += this.backlogN[s]!
    return n
  }

  /** Messages of `shard` undelivered or pending. */
  backlog(shard: number): number {
    return this.backlogN[shard]!
  }

  /** Fence tokens are written to storage before anyone is told. */
  writeFences(fences: ReadonlyArray<Fence>): void {
    for (const f of fences) {
      this.ctx.checks.tokens.fenceWrite(f.shard, f.token, this.ctx.w.now)
      if (f.token > this.fence[f.shard]!) this.fence[f.shard] = f.token
      // a missing token comes back with the next write (a grant, a takeover's re-fence)
      if (this.tokenGone[f.shard] === 1) {
        this.tokenGone[f.shard] = 0
        this.fence[f.shard] = f.token
        this.ctx.w.count("evict:tokenWrittenAgain")
      }
    }
    if (fences.length > 0) this.ctx.w.mark("fence", `${fences.length} shard token(s) written`)
  }

  /** A new message on `shard` (from the workload), with its key (-1: none); its id. */
  produced(shard: number, key = -1): number {
    const before = this.backlogN[shard]!
    this.backlogN[shard] = before + 1
    if (before === 0) this.backlogSince[shard] = this.ctx.w.now
    const id = this.messages.produce(shard)
    if (this.tx !== undefined) this.tx.produced(shard, id, key)
    return id
  }

  /** Seal `shard` (a reshard): appends refused; readers check whether it is drained. */
  seal(shard: number): void {
    if (this.sealed[shard]) return
    this.sealed[shard] = 1
    this.ctx.members.sealed(shard)
  }

  /**
   * `ShardStreams.drainState`: sealed, nothing undelivered, nothing pending.
   * BROKEN ON PURPOSE with `cutover-before-drain` (test-only): sealed is enough.
   */
  drained(shard: number): boolean {
    if (!this.sealed[shard]) return false
    if (this.ctx.options.broken === "cutover-before-drain") return true
    // not while its outbox holds an entry (docs/exactly-once.md, "Resharding and the outbox")
    return this.backlog(shard) === 0 && (this.ctx.outbox?.drainable(shard) ?? true)
  }

  /** The stream's current generation changed: `current(s)` says which shards a balanced group reads. */
  setCurrent(current: (shard: number) => boolean): void {
    let n = 0
    for (let s = 0; s < this.expect.length; s++) {
      this.expect[s] = current(s) ? 1 : 0
      if (this.readers[s] !== this.expect[s]) n++
    }
    this.notSingle = n
    this.ctx.sampler.changed()
  }

  /**
   * Fenced read of up to a batch: pending entries first, then new ones.
   * Undefined when storage refuses the token. `skip`: pending entries the
   * loop does not read again (only `refused-ack-counted-as-acked` has any).
   */
  read(shard: number, token: number, skip?: ReadonlySet<number>): Array<number> | undefined {
    if (this.tokenGone[shard] === 1 && this.storageFence) {
      // only `missing-token-is-zero` gets here: the fence compares with 0
      this.ctx.checks.tokens.missingAccepted(shard, token, "read", this.ctx.w.now)
      return this.readBatch(shard, skip)
    }
    if (token > this.fence[shard]!)
      this.ctx.checks.tokens.unwritten(shard, token, this.fence[shard]!, this.ctx.w.now)
    if (this.storageFence && token < this.fence[shard]!) {
      this.fencedReads++
      return undefined
    }
    return this.readBatch(shard, skip)
  }

  private readBatch(shard: number, skip?: ReadonlySet<number>): Array<number> {
    const ids: Array<number> = []
    const B = timing.batchSize
    const fanout = this.ctx.fanout.enabled ? this.ctx.fanout : undefined
    for (const id of this.pel[shard]!) {
      if (ids.length >= B) break
      if (fanout?.isDeleted(shard, id)) {
        // Another group's xackdel deleted it: XREADGROUP returns it without fields.
        this.pel[shard]!.delete(id)
        this.backlogN[shard]!--
        continue
      }
      if (skip?.has(id) === true) continue
      ids.push(id)
    }
    const produced = this.messages.producedOn(shard)
    while (ids.length < B && this.cursor[shard]! < produced) {
      const id = this.cursor[shard]!
      this.cursor[shard] = id + 1
      if (fanout?.isDeleted(shard, id)) {
        this.backlogN[shard]!--
        continue
      }
      this.pel[shard]!.add(id)
      ids.push(id)
    }
    this.servedAt[shard] = this.ctx.w.now
    return ids
  }

  /** Fenced ack of a handled batch; false when storage refuses the token. */
  ack(shard: number, token: number, ids: ReadonlyArray<number>): boolean {
    if (this.tokenGone[shard] === 1 && this.storageFence)
      this.ctx.checks.tokens.missingAccepted(shard, token, "ack", this.ctx.w.now)
    else if (this.storageFence && token < this.fence[shard]!) {
      this.fencedAcks++
      return false
    }
    const pel = this.pel[shard]!
    const messages = this.messages
    const order = this.ctx.checks.keyOrder
    for (const id of ids) {
      if (pel.delete(id)) this.backlogN[shard]!--
      if (order !== undefined && messages.ackedCount(shard, id) === 0)
        order.acked(shard, id, this.ctx.w.now)
      messages.ack(shard, id)
    }
    this.ackedPerShard[shard]! += ids.length
    if (this.ctx.fanout.enabled) this.ctx.fanout.ackedByA(shard, ids)
    if (this.backlog(shard) === 0) this.backlogSince[shard] = Number.POSITIVE_INFINITY
    return true
  }

  /** Process `pid` started reading `shard`. */
  addReader(shard: number, pid: number): void {
    const n = ++this.readers[shard]!
    const e = this.expect[shard]!
    if (n === e) this.notSingle--
    else if (n === e + 1) this.notSingle++
    this.readerPid[shard] = pid
    this.ownedSince[shard] = this.ctx.w.now
    this.ctx.sampler.readersChanged(shard, pid, true)
  }

  /** Process `pid` stopped reading `shard` (draining, dropped or gone). */
  removeReader(shard: number, pid: number): void {
    const n = --this.readers[shard]!
    const e = this.expect[shard]!
    if (n === e) this.notSingle--
    else if (n === e - 1) this.notSingle++
    if (n === 0) this.readerPid[shard] = -1
    else if (this.readerPid[shard] === pid)
      this.readerPid[shard] = this.ctx.members.otherReader(shard, pid)
    this.ctx.sampler.readersChanged(shard, pid, false)
  }
}
