/**
 * Faults. Each episodic kind is one entry below: how often it strikes, what
 * it injects and how it heals; the kinds that act on every message or at
 * setup (loss, dup, delay, clock, weights, configs) live in the per-subsystem
 * options (options.ts). Episodes of a kind arrive as a Poisson process whose
 * rate is drawn per seed (its intensity), per member for member faults. No
 * new episode starts after the safety phase; the liveness phase heals every
 * open one.
 *
 * Every kind counts what it did (`w.count`), so tests can assert that each
 * path was reached.
 *
 * @module
 */
import type { HeartbeatRequest } from "@shardline/core"
import type { Forgery } from "./checkers/requests.js"
import type { Ctx } from "./ctx.js"
import type { Prng } from "./engine/Prng.js"
import {
  type Proc,
  REFUSE_ACK,
  REFUSE_COMMIT,
  REFUSE_HEARTBEAT,
  REFUSE_READ,
  type Slot,
} from "./members.js"
import type { LinkMode } from "./network.js"
import { CONTINUOUS_FAULTS, FAULT_KINDS, type FaultKind, timing } from "./options.js"
import { K } from "./world.js"

/** An injected fault that heals after `afterMs` (or at the liveness phase). */
export interface Episode {
  readonly afterMs: number
  heal(): void
}

interface FaultDef {
  /** "member": the rate grows with sqrt(members); "group"/"coordinator": it does not. */
  readonly scope: "member" | "group" | "coordinator"
  /** Relative rate (1 = one episode per ~40 s per unit of scope at intensity 1). */
  readonly rate: number
  readonly inject: (ctx: Ctx, r: Prng) => ReadonlyArray<Episode>
}

const none: ReadonlyArray<Episode> = []

const anySlot = (ctx: Ctx, r: Prng): Slot => ctx.members.slots[r.int(ctx.members.slots.length)]!

/** The newest process of a random member, if it has one. */
const anyProc = (ctx: Ctx, r: Prng): Proc | undefined => {
  const slot = anySlot(ctx, r)
  return slot.procs[slot.procs.length - 1]
}

const link = (
  ctx: Ctx,
  slot: Slot,
  dir: "out" | "in",
  mode: LinkMode,
  afterMs: number,
  lagMs = 0,
): Episode => {
  ctx.net.set(slot.idx, dir, mode, lagMs)
  ctx.w.count(`net:${dir}:${mode}`)
  return { afterMs, heal: () => ctx.net.set(slot.idx, dir, "ok") }
}

const duration = (r: Prng) => r.range(500, 20_000)

export const FAULTS: Partial<Record<FaultKind, FaultDef>> = {
  partition: {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      const d = duration(r)
      ctx.w.mark("fault", `partition ${slot.id}`)
      return [link(ctx, slot, "out", "drop", d), link(ctx, slot, "in", "drop", d)]
    },
  },
  oneway: {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      ctx.w.mark("fault", `one-way partition ${slot.id}`)
      return [link(ctx, slot, r.chance(0.5) ? "in" : "out", "drop", duration(r))]
    },
  },
  /**
   * A stalled or slow connection, each direction on its own: `hold` queues
   * messages and flushes them, reordered, when it heals (requests delayed
   * past a self-fence and a rejoin), `lag` delays each by a fixed 2-12 s
   * (answers that arrive after their lease), `drop` loses them. One in three
   * is a stall: right after the coordinator received the member's next
   * request the link breaks, requests are lost for 10-20 s and the answer
   * already on its way arrives 2-8 s late (accepted: sent within the lease).
   */
  clog: {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      if (r.chance(1 / 3)) {
        const lag = r.range(2_000, 8_000)
        const out = r.range(10_000, 20_000)
        ctx.net.arm(slot.idx, () => {
          ctx.w.count("clog:stalls")
          ctx.w.mark("fault", `stall ${slot.id}: answers ${Math.round(lag)} ms late, requests lost`)
          ctx.faults.open(FAULT_KINDS.indexOf("clog"), link(ctx, slot, "out", "drop", out))
          ctx.faults.open(
            FAULT_KINDS.indexOf("clog"),
            link(ctx, slot, "in", "lag", lag + 1_000, lag),
          )
        })
        return none
      }
      const modes: ReadonlyArray<LinkMode> = ["hold", "lag", "drop", "ok"]
      let out = modes[r.int(4)]!
      const inn = modes[r.int(4)]!
      if (out !== "hold" && out !== "lag" && inn !== "hold" && inn !== "lag") out = "hold"
      ctx.w.mark("fault", `clog ${slot.id} out=${out} in=${inn}`)
      const eps: Array<Episode> = []
      for (const [dir, mode] of [
        ["out", out],
        ["in", inn],
      ] as const)
        if (mode !== "ok")
          eps.push(link(ctx, slot, dir, mode, r.range(500, 25_000), r.range(2_000, 12_000)))
      return eps
    },
  },
  "store-partition": {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      slot.partStore = true
      ctx.w.count("store:partitions")
      ctx.w.mark("fault", `store partition ${slot.id}`)
      return [{ afterMs: duration(r), heal: () => (slot.partStore = false) }]
    },
  },
  crash: {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const p = anyProc(ctx, r)
      if (p === undefined) return none
      ctx.members.stop(p)
      ctx.w.count("crash:restartLater")
      ctx.w.mark("fault", `crash ${p.label}`)
      const slot = p.slot
      return [{ afterMs: duration(r), heal: () => restart(ctx, slot) }]
    },
  },
  /** A crash without restart: the member is gone for good (never the last one). */
  kill: {
    scope: "member",
    rate: 0.3,
    inject: (ctx, r) => {
      const p = anyProc(ctx, r)
      if (p === undefined || !p.slot.wanted) return none
      const wanted = ctx.members.slots.filter((s) => s.wanted).length
      if (wanted <= Math.max(1, Math.floor(ctx.members.slots.length / 2))) return none
      p.slot.wanted = false
      for (const q of [...p.slot.procs]) ctx.members.stop(q)
      ctx.w.count("kill:forGood")
      ctx.w.mark("fault", `kill ${p.slot.id} (no restart)`)
      return none
    },
  },
  pause: {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const p = anyProc(ctx, r)
      if (p === undefined || p.paused) return none
      ctx.members.pause(p)
      ctx.w.count("pause:processes")
      ctx.w.mark("fault", `pause ${p.label}`)
      return [
        {
          afterMs: r.range(2_000, timing.sessionTimeoutMs * 2),
          heal: () => ctx.members.resume(p.pid),
        },
      ]
    },
  },
  "slow-drain": {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      slot.slowDrain = true
      ctx.w.mark("fault", `slow drain ${slot.id}`)
      return [{ afterMs: duration(r), heal: () => (slot.slowDrain = false) }]
    },
  },
  "coord-crash": {
    scope: "coordinator",
    rate: 1,
    inject: (ctx, r) => {
      const c = ctx.coord.nodes[ctx.lease.holder]
      if (c === undefined || !c.alive) return none
      ctx.coord.crash(c)
      ctx.w.count("coordinator:crashes")
      return [{ afterMs: duration(r), heal: () => ctx.coord.restart(c.idx) }]
    },
  },
  "coord-stale": {
    scope: "coordinator",
    rate: 1,
    inject: (ctx, r) => {
      const c = ctx.coord.nodes[ctx.lease.holder]
      if (c === undefined || c.paused || !c.alive) return none
      ctx.coord.pause(c)
      ctx.w.count("coordinator:stalePauses")
      return [
        {
          afterMs: r.range(timing.coordinatorLeaseMs * 1.5, timing.sessionTimeoutMs * 1.5),
          heal: () => ctx.coord.resume(c.idx),
        },
      ]
    },
  },
  /**
   * A second process with the same member id and a larger incarnation while
   * the first is alive (or paused). The first must end up superseded; when
   * the episode heals one of the two exits: the old one, or the new one (the
   * old standby must then take over once the new one expired).
   */
  twin: {
    scope: "member",
    rate: 0.5,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      const first = slot.procs[slot.procs.length - 1]
      if (first === undefined || slot.procs.length > 1) return none
      const eps: Array<Episode> = []
      if (r.chance(0.5) && !first.paused) {
        ctx.members.pause(first)
        ctx.w.count("twin:firstPaused")
        eps.push({ afterMs: r.range(1_000, 15_000), heal: () => ctx.members.resume(first.pid) })
      }
      const second = ctx.members.start(slot, true)
      ctx.w.count("twin:started")
      ctx.w.mark("fault", `twin of ${first.label}: ${second.label}`)
      const keepOld = r.chance(0.5)
      eps.push({
        afterMs: r.range(2_000, 30_000),
        heal: () => {
          ctx.w.count(keepOld ? "twin:newExited" : "twin:oldExited")
          ctx.members.stop(keepOld ? second : first)
        },
      })
      return eps
    },
  },
  /**
   * Colliding incarnations (issue 20, finding 4): a second process of a live
   * member id starts in the same millisecond as the first and so draws the
   * same incarnation; only its 96-bit instance differs (docs/protocol.md rule
   * 24). Its join must not be taken for a resend of the first's: exactly one
   * of the two holds the id (the larger instance), the other is superseded.
   * At heal one of them exits.
   */
  collide: {
    scope: "member",
    rate: 0.5,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      const first = slot.procs[slot.procs.length - 1]
      if (first === undefined || slot.procs.length > 1 || first.paused) return none
      const second = ctx.members.start(slot, true, first)
      ctx.w.count("collide:started")
      ctx.w.mark("fault", `same incarnation as ${first.label}: ${second.label}`)
      const keepFirst = r.chance(0.5)
      return [
        {
          afterMs: r.range(2_000, 30_000),
          heal: () => {
            ctx.w.count(keepFirst ? "collide:secondExited" : "collide:firstExited")
            ctx.members.stop(keepFirst ? second : first)
          },
        },
      ]
    },
  },
  /**
   * NTP steps a coordinator candidate's wall clock (never its monotonic
   * clock) by 1-60 s, back or forward, for good (docs/protocol.md rule 21):
   * no lease or deadline may move, and owner tokens, whose floor follows
   * the wall clock (rule 16), must still rise.
   */
  "clock-step": {
    scope: "coordinator",
    rate: 1,
    inject: (ctx, r) => {
      const c = ctx.coord.nodes[r.int(ctx.coord.nodes.length)]!
      const step = (r.chance(0.5) ? -1 : 1) * r.range(1_000, 60_000)
      c.wallStepMs += step
      ctx.w.count(step < 0 ? "clockStep:back" : "clockStep:forward")
      if (c.idx === ctx.lease.holder) ctx.w.count("clockStep:leader")
      ctx.w.mark("fault", `coordinator #${c.idx} wall clock stepped ${Math.round(step)} ms`)
      return none
    },
  },
  /**
   * Redis is down (restarted, failed over, unreachable) for 0.5 s to 95% of
   * the session (past members' leases, 85% of it, and the coordinator's): no request or answer crosses the coordinator transport, no
   * commit, no lease renewal or election, no read or ack (issue 19 finding
   * 3). An outage shorter than the session must cost no fence, no expiry and
   * no rejoin (docs/protocol.md rule 22): members suspend and resume.
   */
  "redis-outage": {
    scope: "group",
    rate: 0.5,
    inject: (ctx, r) => {
      if (ctx.store.down) return none
      ctx.coord.redisDown()
      ctx.w.count("redis:outages")
      ctx.w.mark("fault", "redis down")
      return [
        {
          afterMs: r.range(500, timing.sessionTimeoutMs * 0.95),
          heal: () => ctx.coord.redisBack(),
        },
      ]
    },
  },
  /**
   * Key eviction (docs/protocol.md rule 26): a shard's owner token, its
   * group's consumer group or the shard stream itself vanishes, as a Redis
   * with an evicting `maxmemory-policy` (or an operator's DEL) does. Modelled
   * as redis-store and the runtime handle it: a missing token refuses every
   * token (the shard waits until a coordinator writes one again: its owner
   * reports it and the leader writes the same token, rule 30, or its next
   * grant, a takeover's re-fence); a vanished group or stream is `DataLost`
   * at the next fenced call, said once, and the group is created again at
   * the stream's start (what a vanished stream held is reported lost, the
   * rest is delivered again). Not with fan-out groups, transactional
   * handlers or a reshard (their streams are not modelled under it).
   */
  evict: {
    scope: "group",
    rate: 1.5,
    inject: (ctx, r) => {
      const what = (["token", "group", "stream"] as const)[r.int(3)]!
      const shard = r.int(ctx.options.shards)
      if (ctx.fanout.enabled || ctx.data.tx !== undefined || ctx.layouts.enabled) return none
      // A missing token ends by the protocol alone: the owner reports it and
      // the leader writes the same token again (docs/protocol.md rule 30).
      ctx.data.evict(shard, what)
      return none
    },
  },
  /**
   * A serve replaced behind its candidate's back (docs/protocol.md rule 25;
   * the production stall: a lease holder that renewed its lease and served
   * nobody). Half the time a **late claim**: another candidate's serve,
   * started under the last term it held (its check decided to serve, then
   * it paused before the claim landed, or it held the lease only briefly;
   * a candidate that never led has no such serve, and then nothing happens),
   * claims the group's presence only now (when it wakes, if paused),
   * replacing the holder's serve; that candidate's next check stops it (it
   * holds no lease), so nobody serves unless the holder notices and serves
   * again. Half the time a **brief term**: the holder pauses past its lease
   * (1.2-2 lease TTLs), a standby takes the lease, its serve claims the
   * presence, and it crashes right after (restarted 2-10 s later). Then the
   * third candidate takes over if it can; if it is down or paused, the
   * holder's host takes the lease again when it wakes, under a new token,
   * silently (its renewal loop or a heartbeat), while its serve is the
   * replaced one. Either way the holder's check may be starved (CPU
   * starvation: its serve loop seen 0.2-1 TTL late after a late claim, 0.5-1
   * TTL late after its pause).
   */
  "stale-claim": {
    scope: "coordinator",
    rate: 0.5,
    inject: (ctx, r) => {
      const { coord, lease, w } = ctx
      const T = timing.coordinatorLeaseMs
      const h = coord.nodes[lease.holder]
      if (h === undefined || !h.alive || h.paused || h.token === 0 || h.serve === null) return none
      const others = coord.nodes.filter((c) => c !== h && c.alive)
      if (others.length === 0) return none
      if (r.chance(0.5)) {
        // only a candidate that led before can have a serve of its own in flight
        const led = others.filter((c) => c.lastToken > 0)
        if (led.length === 0) return none
        const x = led[r.int(led.length)]!
        w.count("staleClaim:lateClaim")
        if (r.chance(0.5)) coord.starveCheck(h, r.range(0.2 * T, T))
        coord.lateClaim(x.idx)
        return none
      }
      w.count("staleClaim:briefTerm")
      const pausedFor = r.range(1.2 * T, 2 * T)
      const starved = r.range(0.5 * T, T)
      const down = r.range(2_000, 10_000)
      const k = FAULT_KINDS.indexOf("stale-claim")
      coord.pause(h)
      coord.armClaim(h.idx, (x) => {
        w.count("staleClaim:successorCrashed")
        // right after its claim, in an event of its own
        ctx.faults.open(k, {
          afterMs: 0,
          heal: () => {
            if (!x.alive || ctx.sampler.liveness) return
            coord.crash(x)
            ctx.faults.open(k, { afterMs: down, heal: () => coord.restart(x.idx) })
          },
        })
      })
      return [
        {
          afterMs: pausedFor,
          heal: () => {
            coord.disarmClaim()
            coord.resume(h.idx)
            coord.starveCheck(h, starved)
          },
        },
      ]
    },
  },
  /**
   * A store command that never answers (a hung master, a connection that
   * drops packets without a reset): the lease holder's next commit or
   * fence write hangs until its deadline (`commandTimeoutMs`, docs/redis.md
   * "Command deadline"; docs/protocol.md rule 27), its outcome unknown (it
   * ran half the time), then fails and the host steps down. Meanwhile its
   * lock is held: no heartbeat is answered, no deadline runs, while its
   * renewal loop keeps the lease (rule 20). Half the time it is the next
   * command a due deadline makes. Opt-in (`OPT_IN_FAULTS`).
   */
  "hung-store": {
    scope: "coordinator",
    rate: 1,
    inject: (ctx, r) => {
      const c = ctx.coord.nodes[ctx.lease.holder]
      if (c === undefined || !c.alive || c.shell === null || c.hung || c.hangArmed !== undefined)
        return none
      // half the time the command a due deadline makes (an expiry, a revoke
      // timeout): a host that kept its shell would have lost that deadline
      const deadline = r.chance(0.5)
      ctx.coord.armHang(c, deadline)
      ctx.w.count(deadline ? "hungStore:armedDeadline" : "hungStore:armed")
      return none
    },
  },
  /**
   * Handlers that ignore their abort signal (docs/protocol.md rule 19's
   * limit; docs/runtime.md "A handler past its drain"): for the episode, a
   * member's handler in flight when its shard is revoked runs 1.2-3 revoke
   * timeouts (past the drain deadline: rule 4 fences the member), and one
   * in flight when its loops are stopped at once (a fence, a lost lease)
   * runs 0.5-3 revoke timeouts more. The loop is reported drained only when
   * the handler returns; its late ack (worst case: the handler acks on its
   * own) goes to storage with its old token. Opt-in (`OPT_IN_FAULTS`).
   */
  "handler-ignores-abort": {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      const slot = anySlot(ctx, r)
      slot.ignoresAbort = true
      ctx.w.count("ignoresAbort:episodes")
      ctx.w.mark("fault", `handlers of ${slot.id} ignore their abort signal`)
      return [{ afterMs: duration(r), heal: () => (slot.ignoresAbort = false) }]
    },
  },
  /**
   * Refused commands. A third of the episodes, a full server
   * (`maxmemory` with `noeviction`: `OOM command not allowed when used
   * memory > 'maxmemory'`) for 0.5-8 s: every heartbeat (LPUSH), Store
   * commit and fence write, and transactional commit is refused, reads and
   * acks go on (docs/redis.md, "Eviction"); the leader's refused commit is
   * a backend failure and it steps down. The rest, one member's Redis user
   * after an ACL change (`NOPERM`) for 0.5-20 s: a drawn mix of its reads,
   * acks, heartbeats and transactional commits is refused. A refused
   * command wrote nothing: a refused read reads nothing and is tried again,
   * a refused ack leaves the batch pending (read and handled again), a
   * refused heartbeat is a failed one (retried), a refused commit commits
   * nothing. Opt-in (`OPT_IN_FAULTS`).
   */
  refused: {
    scope: "member",
    rate: 1,
    inject: (ctx, r) => {
      if (r.chance(1 / 3)) {
        if (ctx.store.refusing || ctx.store.down) return none
        ctx.coord.refuseStart()
        ctx.w.count("refused:oom")
        ctx.w.mark("fault", "redis full: writes refused (OOM)")
        return [{ afterMs: r.range(500, 8_000), heal: () => ctx.coord.refuseEnd() }]
      }
      const slot = anySlot(ctx, r)
      const bits = [REFUSE_READ, REFUSE_ACK, REFUSE_HEARTBEAT, REFUSE_COMMIT]
      let mask = 0
      for (const b of bits) if (r.chance(0.5)) mask |= b
      if (mask === 0) mask = bits[r.int(bits.length)]!
      slot.refused |= mask
      ctx.w.count("refused:noperm")
      ctx.w.mark("fault", `${slot.id}'s Redis user refused (NOPERM): mask ${mask}`)
      return [{ afterMs: duration(r), heal: () => (slot.refused = 0) }]
    },
  },
  /**
   * A metadata rewind (docs/protocol.md rule 23): the Store's replica stops
   * replicating, and 1-15 s later the Store fails over to it (an async
   * failover, the Store on another master than the shards), losing every
   * commit since while the owner tokens written meanwhile stay. The leader's
   * next commit fails its compare-and-set and it loads again, or a new
   * leader loads: either way the load sees older metadata than the fence
   * keys. No failover at the liveness phase (the replica catches up). Not
   * with a reshard (its layout records are not modelled under it). Opt-in
   * (`OPT_IN_FAULTS`).
   */
  "store-rewind": {
    scope: "group",
    rate: 1,
    inject: (ctx, r) => {
      if (ctx.layouts.enabled || !ctx.store.lagBehind()) return none
      ctx.w.count("rewind:replicaLags")
      return [
        {
          afterMs: r.range(1_000, 15_000),
          heal: () => {
            if (ctx.faults.ending) {
              ctx.store.catchUp()
              return
            }
            const lost = ctx.store.failover()
            if (lost === 0) return
            // (a stopped process's request may still be on its way)
            for (const p of ctx.members.procs)
              ctx.checks.requests.rewoundUnder(p.id, p.state.memberEpoch)
            ctx.w.count("rewind:failovers")
            ctx.w.count("rewind:commitsLost", lost)
            ctx.w.mark("fault", `store failed over to a replica: ${lost} commit(s) lost`)
          },
        },
      ]
    },
  },
  /**
   * The member's next heartbeats carry a forged ownership report: a claim
   * of a shard it does not hold, a REVOKING of a shard not its own, a REVOKED
   * of a shard it still reads (fence on only), or, whenever one of its
   * shards is being revoked, a REVOKED naming an older grant's token for it
   * (1-3 lies).
   */
  forge: {
    scope: "member",
    rate: 0.5,
    inject: (ctx, r) => {
      const p = anyProc(ctx, r)
      if (p === undefined) return none
      p.forgeKind = r.int(ctx.data.storageFence ? 4 : 3)
      if (p.forgeKind === 2 && !ctx.data.storageFence) p.forgeKind = 3
      p.forgeLeft = 1 + r.int(3)
      ctx.w.mark("fault", `forge ${p.label}`)
      return none
    },
  },
  /** One of the member's old requests (any of its processes, any lifecycle) is delivered again. */
  replay: {
    scope: "member",
    rate: 4,
    inject: (ctx, r) => {
      if (ctx.net.replay(anySlot(ctx, r).idx)) ctx.w.count("replay:requests")
      return none
    },
  },
  /**
   * Back-to-back rebalances inside the revoke timeout: 2-5 members leave or
   * join at random times within 1.2 revoke timeouts; the episode restores
   * them 5-15 s later.
   */
  burst: {
    scope: "group",
    rate: 3,
    inject: (ctx, r) => {
      const { w, members } = ctx
      const n = 2 + r.int(4)
      const toggled: Array<Slot> = []
      let wanted = members.slots.filter((s) => s.wanted).length
      for (let i = 0; i < n; i++) {
        const slot = anySlot(ctx, r)
        if (toggled.includes(slot)) continue
        if (slot.wanted && wanted <= 1) continue
        wanted += slot.wanted ? -1 : 1
        toggled.push(slot)
        w.q.push(
          w.now + r.range(0, timing.revokeTimeoutMs * 1.2),
          K.ACTION,
          slot.wanted ? 1 : 0,
          slot.idx,
        )
      }
      if (toggled.length === 0) return none
      w.count("burst:episodes")
      w.count("burst:changes", toggled.length)
      const back = toggled.map((s) => (s.wanted ? 0 : 1))
      return [
        {
          afterMs: r.range(5_000, 15_000),
          heal: () => {
            for (let i = 0; i < toggled.length; i++)
              w.q.push(w.now + i * 300, K.ACTION, back[i]!, toggled[i]!.idx)
          },
        },
      ]
    },
  },
  /**
   * A graceful stop of the lease holder's process (a rolling deploy, a
   * scale-down: SIGTERM; docs/protocol.md rule 20): it hands over at once
   * (`CoordinatorHost.gracefulStop` in coordinator.ts); a new process starts
   * 1-10 s later as a standby.
   */
  "coord-stop": {
    scope: "coordinator",
    rate: 1,
    inject: (ctx, r) => {
      const c = ctx.coord.nodes[ctx.lease.holder]
      if (c === undefined || !c.alive || c.paused || c.hung || c.token === 0 || ctx.store.down)
        return none
      ctx.coord.gracefulStop(c)
      ctx.w.count("coordStop:stops")
      return [{ afterMs: r.range(1_000, 10_000), heal: () => ctx.coord.restart(c.idx) }]
    },
  },
  /**
   * The cluster outbox relay (docs/exactly-once.md, "Redis Cluster and the
   * outbox"): relays fail for 0.5-4 s at a time (a target node down, a send
   * refused); the first failure reshards the target stream meanwhile, so
   * waiting entries are re-routed; in reshard scenarios a failure comes at
   * every seal (`outbox.ts`). Only with `--tx`.
   */
  "outbox-relay": {
    scope: "group",
    rate: 1,
    inject: (ctx, r) => {
      if (ctx.outbox === undefined) return none
      ctx.outbox.failFor(r.range(500, 4_000))
      return none
    },
  } /**
   * One shard's storage node hangs (a hung or partitioned cluster master
   * holding the shard's owner-token key; docs/protocol.md rules 27 and 31)
   * for 1-8 s: the coordinator's fence writes and token reads for that
   * shard do not answer until the command deadline (`commandTimeoutMs`) or
   * the heal, whichever first; half the time a write whose deadline passed
   * ran anyway (its answer lost). Everything else goes on. Half the
   * episodes hang a shard a grant is about to need (one being revoked or
   * unowned, by the committed view), the rest any shard. Opt-in.
   */,
  "fence-hang": {
    scope: "group",
    rate: 6,
    inject: (ctx, r) => {
      const { data, checks, w } = ctx
      const S = checks.view.shardSpace
      const moving: Array<number> = []
      if (r.chance(0.5))
        for (let s = 0; s < S; s++)
          if (
            data.hung[s] !== 1 &&
            (checks.view.revocation[s] != null || checks.view.owner[s] === null)
          )
            moving.push(s)
      const shard = moving.length > 0 ? moving[r.int(moving.length)]! : r.int(S)
      if (data.hung[shard] === 1) return none
      data.hang(shard)
      w.count("fenceHang:episodes")
      w.mark("fault", `shard ${shard}: its storage node hangs`)
      return [{ afterMs: r.range(1_000, 8_000), heal: () => data.unhang(shard) }]
    },
  },
}

const restart = (ctx: Ctx, slot: Slot) => {
  if (slot.wanted && slot.procs.length === 0) ctx.members.start(slot)
}

export class Faults {
  private readonly episodes = new Map<number, Episode>()
  private nextId = 1

  constructor(
    private readonly ctx: Ctx,
    private readonly endSafety: number,
  ) {}

  start(): void {
    for (let k = 0; k < FAULT_KINDS.length; k++) {
      const kind = FAULT_KINDS[k]!
      if (
        this.ctx.mix.intensity[kind] > 0 &&
        !CONTINUOUS_FAULTS.has(kind) &&
        FAULTS[kind] !== undefined
      )
        this.ctx.w.q.push(this.gap(kind), K.FAULT, k)
    }
  }

  private gap(kind: FaultKind): number {
    const def = FAULTS[kind]!
    const level = this.ctx.mix.intensity[kind]
    const scale = def.scope === "member" ? Math.sqrt(this.ctx.options.members) : 1
    return this.ctx.w.now + this.ctx.w.rng.faultEvents.exp(40_000 / (level * scale * def.rate))
  }

  fault(k: number): void {
    const { w, sampler } = this.ctx
    if (w.now >= this.endSafety) return
    const kind = FAULT_KINDS[k]!
    w.q.push(this.gap(kind), K.FAULT, k)
    const episodes = FAULTS[kind]!.inject(this.ctx, w.rng.faultEvents)
    w.count(`fault:${kind}`)
    sampler.changed()
    for (const ep of episodes) this.open(k, ep)
  }

  /** Registers an episode of kind `k` (healed after `ep.afterMs`, or at the liveness phase). */
  open(k: number, ep: Episode): void {
    const w = this.ctx.w
    const id = this.nextId++
    this.episodes.set(id, ep)
    w.q.push(w.now + ep.afterMs, K.HEAL, k, id)
  }

  heal(_k: number, id: number): void {
    const ep = this.episodes.get(id)
    if (ep === undefined) return
    this.episodes.delete(id)
    ep.heal()
    this.ctx.sampler.changed()
  }

  /** The safety phase is over: an episode healed now heals for good (no new harm). */
  get ending(): boolean {
    return this.ctx.w.now >= this.endSafety
  }

  /** Liveness phase: heal every open episode now. */
  healAll(): void {
    const eps = [...this.episodes.values()]
    this.episodes.clear()
    for (const ep of eps) ep.heal()
  }
}

/**
 * Forges the request's ownership report (the `forge` fault): a claim of a
 * shard the member does not hold, a REVOKING of a shard that is not its
 * own, or (storage fence on only) a REVOKED of a shard it still reads.
 */
export const forgeReport = (
  ctx: Ctx,
  p: Proc,
  request: HeartbeatRequest,
): { request: HeartbeatRequest; forgery: Forgery } | undefined => {
  const { w, checks, data } = ctx
  const r = w.rng.forge
  // shard ids the group knows (its layouts so far, per the committed view):
  // an id beyond them is a malformed request (INVALID_REQUEST), not a lie
  const S = checks.view.shardSpace
  const taken = new Set<number>(request.ownedShards)
  for (const x of request.revokingShards) taken.add(x.shard)
  const foreign = (): number | undefined => {
    const from = r.int(S)
    for (let k = 0; k < S; k++) {
      const s = (from + k) % S
      if (!taken.has(s) && checks.view.owner[s]?.memberId !== p.id) return s
    }
    return undefined
  }
  const kind = p.forgeKind
  if (kind === 3) {
    // A REVOKED naming an older grant's token, for a shard the member still
    // reads (a confirmed grant: leaving it out of the owned list once is
    // harmless) or still drains, while the coordinator revokes it: it must
    // be ignored (rule 10: a report names the grant it gives up).
    const view = checks.view
    const candidates: Array<{ shard: number; token: number; reading: boolean }> = []
    for (const x of request.revokingShards)
      if (x.state === "REVOKING" && x.token > 1)
        candidates.push({ shard: x.shard, token: x.token, reading: false })
    for (const shard of request.ownedShards) {
      const o = view.owner[shard]
      const run = p.runs.get(shard)
      if (
        o?.memberId === p.id &&
        o.confirmed &&
        o.token > 1 &&
        run !== undefined &&
        run.token === o.token
      )
        candidates.push({ shard, token: o.token, reading: true })
    }
    // The adversary knows the committed state and waits for a shard being
    // revoked from the member: that is where a wrongly accepted report
    // would free a shard the member still reads or drains.
    const revoked = candidates.filter((x) => view.revocation[x.shard]?.memberId === p.id)
    if (revoked.length === 0) return undefined
    const c = revoked[r.int(revoked.length)]!
    w.count("forge:staleTokenRevoked")
    const stale = { shard: c.shard, state: "REVOKED" as const, token: c.token - 1 }
    return {
      request: c.reading
        ? {
            ...request,
            ownedShards: request.ownedShards.filter((x) => x !== c.shard),
            revokingShards: [...request.revokingShards, stale],
          }
        : {
            ...request,
            revokingShards: request.revokingShards.map((y) => (y.shard === c.shard ? stale : y)),
          },
      forgery: { claims: [], revoking: [], revokedWhileReading: [] },
    }
  }
  if (kind === 0) {
    const s = foreign()
    if (s === undefined) return undefined
    w.count("forge:claim")
    return {
      request: { ...request, ownedShards: [...request.ownedShards, s] },
      forgery: { claims: [s], revoking: [], revokedWhileReading: [] },
    }
  }
  if (kind === 1) {
    const s = foreign()
    if (s === undefined) return undefined
    w.count("forge:revokingNotOwn")
    const token = Math.max(1, checks.view.owner[s]?.token ?? data.fence[s]!)
    return {
      request: {
        ...request,
        revokingShards: [...request.revokingShards, { shard: s, state: "REVOKING", token }],
      },
      forgery: { claims: [], revoking: [s], revokedWhileReading: [] },
    }
  }
  const reading = request.ownedShards.filter((s) => {
    const run = p.runs.get(s)
    return run !== undefined && !run.draining
  })
  if (reading.length === 0) return undefined
  const s = reading[r.int(reading.length)]!
  const token = p.runs.get(s)!.token
  w.count("forge:revokedWhileReading")
  p.byzantine ??= new Set()
  p.byzantine.add(s)
  return {
    request: {
      ...request,
      ownedShards: request.ownedShards.filter((x) => x !== s),
      revokingShards: [...request.revokingShards, { shard: s, state: "REVOKED", token }],
    },
    forgery: { claims: [], revoking: [], revokedWhileReading: [s] },
  }
}
