/**
 * The stream's layout (the `StreamLayouts` port, simulated) and its keyed
 * producers, for the reshard scenarios (docs/resharding.md). The record and
 * every decision on it come from core's pure `Layout.StreamLayout` (reshard,
 * rollback, registerGroup, groupDrainedBelow, retire); keys are routed with
 * core's `Layout.shardOf` (keyHash over contiguous hash ranges).
 *
 * A reshard or rollback writes the new record and seals every earlier
 * generation's shards in the data plane in the same event (appends to them
 * are refused from then on). Producers each cache the generation they last
 * loaded: producer 0 hears of a change at once, the others never do and
 * learn it only from a refused append (`ShardSealed`), after which they
 * reload and route the key again, as docs/resharding.md prescribes. Every
 * key belongs to one producer, so a key's production order is its append
 * order.
 *
 * @module
 */
import { Layout, type ShardLayout } from "@shardline/core"
import { Result } from "effect"
import { GROUP } from "./coordinator.js"
import type { Ctx } from "./ctx.js"
import { reshardCounts } from "./options.js"
import { K } from "./world.js"

type Record = ReturnType<typeof Layout.StreamLayout.create>

export const PRODUCERS = 4

export class StreamLayouts {
  record: Record
  /** Per producer: the layout generation it routes by. */
  private readonly producerLayout: Array<ShardLayout>
  /** The keys (`key-<i>`); key i belongs to producer i mod PRODUCERS. */
  readonly keys: ReadonlyArray<string>
  private readonly counts: ReadonlyArray<number>
  /** Index into `counts` of the next change. */
  private nextChange = 1
  /** reshard-rollback: roll back once the group's leader adopted the reshard. */
  private rollbackPending = false
  /** Leader crashes scheduled mid-migration (at most one per run). */
  private crashes = 0

  constructor(
    private readonly ctx: Ctx,
    readonly enabled: boolean,
    keyCount: number,
  ) {
    const o = ctx.options
    this.counts = reshardCounts(o.scenario, o.shards)
    this.record = Layout.StreamLayout.create(GROUP, o.shards)
    const first = this.record.generations[0]!
    this.producerLayout = Array.from({ length: PRODUCERS }, () => first)
    this.keys = Array.from({ length: keyCount }, (_, i) => `key-${i}`)
  }

  /** The oldest live generation (a group is created on it). */
  origin(): ShardLayout {
    return this.record.generations[0]!
  }

  current(): ShardLayout {
    return Layout.StreamLayout.current(this.record)
  }

  /** The coordinator registers its group on the stream (idempotent). */
  registerGroup(): void {
    this.record = Layout.StreamLayout.registerGroup(this.record, GROUP)
  }

  /**
   * The group's migration completed at `generation`: record its progress and
   * retire the generations every group (here: the one) is past.
   */
  groupDrainedBelow(generation: number): void {
    const before = this.record
    this.record = Layout.StreamLayout.retire(
      Layout.StreamLayout.groupDrainedBelow(this.record, GROUP, generation),
    )
    if (this.record.generations.length < before.generations.length) {
      this.ctx.w.count(
        "reshard:generationsRetired",
        before.generations.length - this.record.generations.length,
      )
      this.ctx.w.mark("phase", `generations below ${generation} retired`)
    }
  }

  /**
   * The scenario's next layout change (`kind` 0: reshard to the next count;
   * 1: rollback), (`kind` 2) a burst of messages that leaves a backlog on
   * the shards about to be sealed, or (3, 4) crash / restart coordinator
   * candidate `node`.
   */
  change(kind: number, node = -1): void {
    const { w, data } = this.ctx
    if (kind === 3 || kind === 4) {
      this.coordinator(kind, node)
      return
    }
    if (kind === 2) {
      // 300 per shard, at most what one member's workers work off in a few
      // seconds (messages take 1-8 ms; with extreme weights one member may
      // own nearly every shard): a backlog the group cannot drain by the end
      // would be reported as lost, not as a resharding fault
      const o = this.ctx.options
      const n = Math.min(300 * o.shards, 1_000 * o.workers)
      for (let i = 0; i < n; i++) this.ctx.workload.produceKeyed(true)
      w.count("reshard:burstMessages", n)
      return
    }
    if (!this.enabled || this.nextChange >= this.counts.length) return
    // the group adopted a generation it has not finished draining (the committed view)
    const midMigration = this.ctx.checks.view.migrating
    const next =
      kind === 1
        ? Layout.StreamLayout.rollback(this.record)
        : Layout.StreamLayout.reshard(this.record, this.counts[this.nextChange]!)
    if (Result.isFailure(next)) {
      w.count(`reshard:refused:${next.failure.reason}`)
      w.mark("action", `layout change refused: ${next.failure.message}`)
      return
    }
    this.nextChange++
    this.record = next.success
    const g = this.current()
    w.count(kind === 1 ? "reshard:rollbacks" : "reshard:reshards")
    if (kind === 1 && midMigration) w.count("reshard:rollbackMidMigration")
    w.mark(
      "action",
      `${kind === 1 ? "rollback" : "reshard"}: generation ${g.generation}, ${g.shardCount} shards (ids ${g.firstShard}..${g.firstShard + g.shardCount - 1})`,
    )
    // Seal every earlier generation in the same event (Reshard.sealEarlier).
    for (const e of this.record.generations.slice(0, -1))
      for (let s = e.firstShard; s < e.firstShard + e.shardCount; s++) data.seal(s)
    // the `outbox-relay` fault aims a relay failure at the seal
    this.ctx.outbox?.sealedNow()
    data.setCurrent((s) => Layout.contains(g, s))
    this.producerLayout[0] = g
    if (kind === 0 && this.ctx.options.scenario === "reshard-rollback") this.rollbackPending = true
  }

  /**
   * The group's leader committed the adoption of a newer generation: in
   * reshard-rollback the operator rolls back now or within 800 ms, while the
   * group is still draining the old generation.
   */
  adopted(): void {
    const { w, lease } = this.ctx
    const r = w.rng.scenario
    if (this.rollbackPending) {
      this.rollbackPending = false
      w.q.push(w.now + (r.chance(0.5) ? 0 : r.range(0, 800)), K.RESHARD, 1)
    }
    // Half the time the leader crashes mid-migration (restarted 2-6 s later).
    if (this.crashes++ === 0 && r.chance(0.5)) {
      const at = w.now + r.range(0, 500)
      w.q.push(at, K.RESHARD, 3, lease.holder)
      w.q.push(at + r.range(2_000, 6_000), K.RESHARD, 4, lease.holder)
    }
  }

  /** Scenario-driven coordinator crash (3) and restart (4) of candidate `node`. */
  coordinator(kind: number, node: number): void {
    const { w, coord } = this.ctx
    const c = coord.nodes[node]
    if (c === undefined) return
    if (kind === 3) {
      if (!c.alive) return
      if (this.ctx.checks.view.migrating) w.count("reshard:leaderCrashMidMigration")
      coord.crash(c)
    } else coord.restart(node)
  }

  /**
   * Producer of `key` appends one message: routed by the generation it
   * knows; refused on a sealed shard, it reloads the layout and routes again.
   * Returns the shard and the generation it was written under.
   */
  route(key: number): { readonly shard: number; readonly generation: number } {
    const { w, data } = this.ctx
    const p = key % PRODUCERS
    for (;;) {
      const g = this.producerLayout[p]!
      const shard = Layout.shardOf(g, this.keys[key]!)
      if (!data.sealed[shard]) return { shard, generation: g.generation }
      w.count("producer:appendRefusedSealed")
      this.producerLayout[p] = this.current()
    }
  }

  /** Schedules the scenario's layout changes. */
  schedule(): void {
    if (!this.enabled) return
    const { w, options } = this.ctx
    const D = options.durationMs
    const r = w.rng.scenario
    const at = D * r.range(0.25, 0.4)
    // a backlog on the old generation, so the cutover has something to wait for
    w.q.push(at - r.range(0, 300), K.RESHARD, 2)
    w.q.push(at, K.RESHARD, 0)
  }
}
