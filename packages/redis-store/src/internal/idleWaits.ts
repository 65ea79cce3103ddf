/**
 * Idle waits that share blocking connections (docs/redis.md, "Idle shards":
 * "Many idle shards, a few connections"). `ShardStreams.waitForEntries` of
 * many shards on one server leave as a few multi-key `XREAD BLOCK` calls,
 * not one blocking connection per waiting shard: a member owning 1,024 idle
 * shards held 1,029 connections before, and a pool of 128 idle connections
 * churned whenever more shards than that went idle at once.
 *
 * - A **batch** is one `XREAD COUNT 1 BLOCK t STREAMS k1..kn id1..idn` on a
 *   dedicated connection; each (key, id) pair is a slot with its waiters. The
 *   same key may appear with two ids (two groups of one stream): Redis
 *   answers each pair, and an entry id answered for a key wakes every waiter
 *   on that key waiting from below it.
 * - A new waiter **joins a batch in flight** that already waits on its key
 *   from its id (a shard that timed out and waits again: no command).
 *   Otherwise it is pending: pending waiters leave as a new batch while
 *   fewer than `minBatches` are in flight; beyond that they are merged into
 *   the youngest batch in flight that has room, which `CLIENT UNBLOCK` ends
 *   at once (it answers as if timed out) so that it is sent again with them.
 *   No batch has room, or the server refuses CLIENT ID / UNBLOCK (an ACL
 *   without them), or the unblock found nothing blocked yet: a new batch.
 * - A waiter's own timeout is a local timer: it leaves without waking its
 *   batch; a batch blocks until the last of its waiters' deadlines and is
 *   sent again, without the ones gone, only when it returns. A timer that
 *   fires before any XREAD of its key came back (a key not seen yet, a short
 *   timeout on a slow round trip) answers with one non-blocking XREAD of
 *   the key instead, so the caller gets what Redis says of it (entries,
 *   none, or WRONGTYPE), as a wait of its own would. A batch that
 *   returns early (an entry on one key, an unblock, anyone's CLIENT UNBLOCK)
 *   resolves `true` for the woken and sends the rest again: a waiter is
 *   resolved `false` only at its deadline.
 * - An error reply (WRONGTYPE on one key) fails no other waiter: the
 *   waiters of a batch of several slots each wait again alone, so the error
 *   comes back to the one waiting on that key. A lost connection fails the
 *   waiters of its batch (their callers see BackendUnavailable) and nothing
 *   else.
 *
 * Waiting is never a fence: a missed or early wake-up costs a read or a
 * timeout, never an entry (docs/runtime.md, "Polling adapter").
 */
import type { Redis } from "ioredis"
import { compare } from "./streamId.js"

/** A dedicated connection, as `RedisConnection.lease` hands it out. */
export interface WaitConnection {
  readonly client: Redis
  readonly release: (healthy: boolean) => void
}

export interface IdleWaitsOptions {
  /** A dedicated connection for a batch (no reconnect, no resend, no auto-pipelining). */
  readonly open: () => WaitConnection
  /** Sends `CLIENT UNBLOCK <id>` (on the command connection). */
  readonly unblock: (clientId: number) => Promise<unknown>
  /**
   * A non-blocking `XREAD COUNT 1 STREAMS key from` (on the command
   * connection): whether the stream has an entry after `from`; rejects as
   * XREAD does (WRONGTYPE).
   */
  readonly check: (key: string, from: string) => Promise<boolean>
  /** Batches sent before pending waiters are merged into one in flight (default 4). */
  readonly minBatches?: number
  /** At most this many slots in one batch (default 128). */
  readonly maxSlots?: number
  readonly now?: () => number
}

export interface IdleWaits {
  /**
   * Resolves `true` once the stream `key` has an entry after `from`,
   * `false` after `timeoutMs` without one; `signal` withdraws the wait.
   */
  readonly wait: (
    key: string,
    from: string,
    timeoutMs: number,
    signal?: AbortSignal,
  ) => Promise<boolean>
  /** Batches in flight and spare connections (for tests and metrics). */
  readonly stats: () => { readonly batches: number; readonly connections: number }
}

interface Waiter {
  readonly key: string
  readonly from: string
  readonly deadline: number
  /** Waits in a batch of its own (after an error reply in a shared one). */
  alone: boolean
  settled: boolean
  slot: Slot | undefined
  timer: ReturnType<typeof setTimeout> | undefined
  readonly resolve: (woken: boolean) => void
  readonly reject: (error: unknown) => void
}

interface Slot {
  readonly key: string
  readonly from: string
  readonly waiters: Set<Waiter>
}

interface Batch {
  readonly connection: WaitConnection
  readonly slots: Map<string, Slot>
  /** An unblock was sent for this batch: pending waiters wait for its return. */
  unblocking: boolean
}

/** Within this of its deadline a waiter back from a batch is timed out, not sent again. */
const SLACK_MS = 2

/** Keys remembered as seen (then forgotten all at once: a forgotten key costs one check). */
const SEEN_KEYS = 16_384

const slotKey = (key: string, from: string): string => `${from}\u0000${key}`

/** A Redis error reply (the connection is fine), not a lost connection. */
const isReplyError = (error: unknown): boolean =>
  error instanceof Error && error.name === "ReplyError"

export const makeIdleWaits = (options: IdleWaitsOptions): IdleWaits => {
  const minBatches = options.minBatches ?? 4
  const maxSlots = options.maxSlots ?? 128
  const now = options.now ?? (() => performance.now())
  const inFlight = new Set<Batch>()
  const spare: Array<WaitConnection> = []
  /** CLIENT ID of each batch connection (undefined: refused or not known yet). */
  const ids = new WeakMap<Redis, number>()
  let canUnblock = true
  /** Keys an XREAD came back for (so of a type XREAD takes): a timeout on them needs no check. */
  const seen = new Set<string>()
  const sawKey = (key: string) => {
    if (seen.size >= SEEN_KEYS) seen.clear()
    seen.add(key)
  }
  let pending: Array<Waiter> = []
  let scheduled = false

  const detach = (w: Waiter) => {
    w.settled = true
    if (w.timer !== undefined) clearTimeout(w.timer)
    w.slot?.waiters.delete(w)
    w.slot = undefined
  }
  const settle = (w: Waiter, woken: boolean) => {
    if (w.settled) return
    detach(w)
    w.resolve(woken)
  }
  const fail = (w: Waiter, error: unknown) => {
    if (w.settled) return
    detach(w)
    w.reject(error)
  }

  const schedule = () => {
    if (scheduled) return
    scheduled = true
    queueMicrotask(flush)
  }

  const connection = (): WaitConnection => {
    for (let spared = spare.pop(); spared !== undefined; spared = spare.pop()) {
      // one closed while spare (a server restart) would fail its batch's waits: dropped
      if (spared.client.status !== "end" && spared.client.status !== "close") return spared
      spared.release(false)
    }
    const opened = options.open()
    // sent before the batch's XREAD on the same connection, so known by the time it blocks
    opened.client.call("CLIENT", "ID").then(
      (id) => ids.set(opened.client, Number(id)),
      () => {
        canUnblock = false
      },
    )
    return opened
  }

  const send = (waiters: ReadonlyArray<Waiter>) => {
    const batch: Batch = { connection: connection(), slots: new Map(), unblocking: false }
    let last = 0
    for (const w of waiters) {
      const k = slotKey(w.key, w.from)
      let slot = batch.slots.get(k)
      if (slot === undefined) {
        slot = { key: w.key, from: w.from, waiters: new Set() }
        batch.slots.set(k, slot)
      }
      slot.waiters.add(w)
      w.slot = slot
      last = Math.max(last, w.deadline)
    }
    const keys: Array<string> = []
    const froms: Array<string> = []
    for (const slot of batch.slots.values()) {
      keys.push(slot.key)
      froms.push(slot.from)
    }
    inFlight.add(batch)
    const block = Math.max(1, Math.ceil(last - now()))
    batch.connection.client.xread("COUNT", 1, "BLOCK", block, "STREAMS", ...keys, ...froms).then(
      (reply) => returned(batch, reply),
      (error: unknown) => failed(batch, error),
    )
  }

  const live = (batch: Batch): Array<Waiter> => {
    const out: Array<Waiter> = []
    for (const slot of batch.slots.values()) for (const w of slot.waiters) out.push(w)
    return out
  }

  const keep = (c: WaitConnection) => {
    if (spare.length < minBatches) spare.push(c)
    else c.release(true)
  }

  /** Sends `waiters` as batches of at most `maxSlots` slots, whatever is in flight. */
  const sendAll = (waiters: ReadonlyArray<Waiter>) => {
    for (let i = 0; i < waiters.length; i += maxSlots) send(waiters.slice(i, i + maxSlots))
  }

  /** Back from Redis: wake whoever has an entry, send the rest again. */
  const returned = (
    batch: Batch,
    reply: ReadonlyArray<[string, ReadonlyArray<[string, unknown]>]> | null,
  ) => {
    inFlight.delete(batch)
    for (const slot of batch.slots.values()) sawKey(slot.key)
    for (const [key, entries] of reply ?? []) {
      const id = entries[0]?.[0]
      if (id === undefined) continue
      for (const slot of batch.slots.values())
        if (slot.key === key && compare(slot.from, id) < 0)
          for (const w of [...slot.waiters]) settle(w, true)
    }
    const t = now()
    const again: Array<Waiter> = []
    for (const w of live(batch)) {
      w.slot?.waiters.delete(w)
      w.slot = undefined
      if (w.deadline - t <= SLACK_MS) settle(w, false)
      else again.push(w)
    }
    keep(batch.connection)
    if (batch.unblocking) {
      // ended to take the pending in: they go out with it now, not merged again elsewhere
      const all = again.concat(pending).filter((w) => !w.settled)
      pending = all.filter((w) => w.alone)
      sendAll(all.filter((w) => !w.alone))
    } else pending = again.concat(pending)
    schedule()
  }

  const failed = (batch: Batch, error: unknown) => {
    inFlight.delete(batch)
    const waiters = live(batch)
    if (isReplyError(error)) {
      keep(batch.connection)
      if (batch.slots.size === 1) for (const w of waiters) fail(w, error)
      else {
        // which key it was is not said: each waits again alone, and only that one fails
        for (const w of waiters) {
          w.slot?.waiters.delete(w)
          w.slot = undefined
          w.alone = true
        }
        pending = waiters.concat(pending)
      }
    } else {
      batch.connection.release(false)
      for (const w of waiters) fail(w, error)
    }
    schedule()
  }

  /** The youngest batch in flight with room for `n` more slots whose connection has an id. */
  const mergeTarget = (n: number): Batch | undefined => {
    let found: Batch | undefined
    for (const b of inFlight)
      if (b.slots.size + n <= maxSlots && ids.has(b.connection.client)) found = b
    return found
  }

  function flush() {
    scheduled = false
    const shared: Array<Waiter> = []
    for (const w of pending) {
      if (w.settled) continue
      if (w.alone) send([w])
      else shared.push(w)
    }
    pending = []
    if (shared.length === 0) return
    // an unblock under way brings its batch back: these go out with it
    for (const b of inFlight)
      if (b.unblocking) {
        pending = shared
        return
      }
    let i = 0
    for (; i < shared.length && inFlight.size < minBatches; i += maxSlots)
      send(shared.slice(i, i + maxSlots))
    if (i >= shared.length) return
    const rest = shared.slice(i)
    const target = canUnblock ? mergeTarget(rest.length) : undefined
    if (target === undefined) return sendAll(rest)
    pending = rest
    target.unblocking = true
    options.unblock(ids.get(target.connection.client) as number).then(
      (unblocked) => {
        if (Number(unblocked) === 1 || !inFlight.has(target)) return // its return sends them
        // nothing blocked on it yet (its XREAD not there) or it just returned: send them now
        target.unblocking = false
        const waiting = pending.filter((w) => !w.settled)
        pending = waiting.filter((w) => w.alone)
        sendAll(waiting.filter((w) => !w.alone))
        schedule()
      },
      () => {
        // refused (an ACL without CLIENT UNBLOCK): batches of their own from now on
        canUnblock = false
        target.unblocking = false
        schedule()
      },
    )
  }

  const wait = (key: string, from: string, timeoutMs: number, signal?: AbortSignal) =>
    new Promise<boolean>((resolve, reject) => {
      const w: Waiter = {
        key,
        from,
        deadline: now() + timeoutMs,
        alone: false,
        settled: false,
        slot: undefined,
        timer: undefined,
        resolve,
        reject,
      }
      w.timer = setTimeout(
        () => {
          w.timer = undefined
          if (w.settled) return
          if (seen.has(key)) return settle(w, false)
          options.check(key, from).then(
            (woken) => {
              sawKey(key)
              settle(w, woken)
            },
            (error: unknown) => fail(w, error),
          )
        },
        Math.max(0, timeoutMs),
      )
      if (signal !== undefined) {
        if (signal.aborted) return detach(w)
        signal.addEventListener("abort", () => detach(w), { once: true })
      }
      // a batch in flight already waits on this key from this id: join it (no command)
      const k = slotKey(key, from)
      for (const b of inFlight) {
        const slot = b.slots.get(k)
        if (slot !== undefined && !b.unblocking) {
          slot.waiters.add(w)
          w.slot = slot
          return
        }
      }
      pending.push(w)
      schedule()
    })

  return {
    wait,
    stats: () => ({ batches: inFlight.size, connections: inFlight.size + spare.length }),
  }
}
