/**
 * Transactional handlers (docs/simulator.md, Transactions; issue 24): the
 * transactions checker on hand-made traces, CI seeds with `tx` on under
 * crashes, pauses, partitions and storage outages (fenced and failed
 * commits), lost commit answers, coordinator failovers and reshards, every
 * one held to exactly-once effects with its fault paths' counters asserted,
 * and the model's two mutants (`--broken tx-*`) caught by the checker.
 */
import { beforeAll, describe, expect, it } from "vitest"
import { parseArgs } from "../src/args.js"
import type { Violation } from "../src/checkers/types.js"
import type { Ctx } from "../src/ctx.js"
import {
  defaultOptions,
  replayCommand,
  reshardShape,
  runSeed,
  type SimOptions,
  TransactionChecker,
} from "../src/index.js"
import { Transactions } from "../src/transactions.js"
import { range, runSet, type SetResult, smallOptions } from "./helpers.js"

const collect = () => {
  const out: Array<Violation> = []
  return { out, report: (v: Violation) => out.push(v) }
}

describe("transactions checker (hand-made traces)", () => {
  // 2 shards, 2 keys per shard: key = shard * 2 + id % 2.
  const checker = () => new TransactionChecker(2, 4, (k) => `key-${k}`)
  const produce = (c: TransactionChecker, shard: number, n: number) => {
    for (let id = 0; id < n; id++) c.produced(shard, id, shard * 2 + (id % 2))
  }

  it("passes when every effect is applied once, in order", () => {
    const c = checker()
    produce(c, 0, 5)
    produce(c, 1, 3)
    for (let id = 0; id < 5; id++) c.apply(0, id)
    for (let id = 0; id < 3; id++) c.apply(1, id)
    const { out, report } = collect()
    expect(c.finish(1000, report)).toBe(0)
    expect(out).toEqual([])
    expect(c.effects).toBe(8)
  })

  it("reports an effect applied twice with the full counts", () => {
    const c = checker()
    produce(c, 0, 4)
    for (let id = 0; id < 4; id++) c.apply(0, id)
    c.apply(0, 2)
    const { out, report } = collect()
    expect(c.finish(1000, report)).toBe(1)
    expect(out).toHaveLength(1)
    expect(out[0]!.checker).toBe("transactions")
    expect(out[0]!.message).toContain("of 4 message(s), 0 never applied, 1 applied more than once")
    expect(out[0]!.message).toContain("key-0: counter 3, messages 2")
  })

  it("reports an effect never applied (a commit lost, or an effect dropped)", () => {
    const c = checker()
    produce(c, 1, 3)
    c.apply(1, 0)
    c.apply(1, 2)
    const { out, report } = collect()
    expect(c.finish(1000, report)).toBe(1)
    expect(out[0]!.message).toContain("1 never applied")
    expect(out[0]!.message).toContain("key-3: counter 0, messages 1")
  })

  it("reports an output behind a later message of its key, even when counts add up", () => {
    const c = checker()
    produce(c, 0, 4) // key 0: ids 0, 2; key 1: ids 1, 3
    c.apply(0, 2)
    c.apply(0, 0)
    c.apply(0, 1)
    c.apply(0, 3)
    const { out, report } = collect()
    c.finish(1000, report)
    expect(out).toHaveLength(1)
    expect(out[0]!.message).toContain("1 output(s) behind a later message of their key")
    expect(out[0]!.message).toContain("0 key counter(s) wrong")
  })
})

describe("--tx on the command line", () => {
  it("turns the mode on, and a replay command carries it", () => {
    const o = parseArgs(["churn", "--seed", "3", "--tx"]).options
    expect(o.tx).toBe(true)
    expect(replayCommand(o)).toContain(" --tx")
    expect(replayCommand({ ...o, tx: undefined })).not.toContain("--tx")
    expect(parseArgs(["churn", "--broken", "tx-effects-at-handle"]).options.broken).toBe(
      "tx-effects-at-handle",
    )
  })
})

describe("fixed seeds: transactional handlers", () => {
  const fence = (seed: number) => (seed % 2 === 0 ? "on" : "off") as "on" | "off"
  const tx = { tx: true }
  const sets: Record<string, SetResult> = {}

  beforeAll(() => {
    sets.crashes = runSet(
      range(1, 80).map((s) =>
        smallOptions("swarm", s, {
          faults: "crash,kill,pause,clog,partition,store-partition,twin",
          fence: fence(s),
          ratePerShard: 5,
          ...tx,
        }),
      ),
    )
    sets.lost = runSet(
      range(1, 80).map((s) =>
        smallOptions("churn", s, {
          faults: "burst,loss,dup,delay,crash",
          fence: fence(s),
          ratePerShard: 5,
          ...tx,
        }),
      ),
    )
    sets.failover = runSet(
      range(1, 60).map((s) =>
        smallOptions("coordinator-failover", s, {
          faults: "coord-crash,coord-stale,redis-outage,loss,pause",
          fence: fence(s),
          ...tx,
        }),
      ),
    )
    sets.reshard = runSet(
      range(1, 60).map((s) =>
        reshardShape((["reshard-up", "reshard-down", "reshard-rollback"] as const)[s % 3]!, s, {
          fence: s % 4 === 0 ? "off" : "on",
          ...tx,
        }),
      ),
    )
    sets.exact = runSet(
      range(1, 20).map((s) =>
        smallOptions((["steady", "scale-out", "scale-in", "churn"] as const)[s % 4]!, s, tx),
      ),
    )
  }, 600_000)

  it("crashes, kills, pauses, stalls, partitions, storage outages, twins: 80 seeds, zero violations", () =>
    expect(sets.crashes!.failures).toEqual([]))
  it("lost, duplicated and delayed messages, lost commit answers: 80 seeds, zero violations", () =>
    expect(sets.lost!.failures).toEqual([]))
  it("coordinator failovers and Redis outages: 60 seeds, zero violations", () =>
    expect(sets.failover!.failures).toEqual([]))
  it("reshards up, down and rolled back: 60 seeds, zero violations", () =>
    expect(sets.reshard!.failures).toEqual([]))
  it("exact scenarios stay exact with transactions on: 20 seeds", () => {
    expect(sets.exact!.failures).toEqual([])
    expect(sets.exact!.exactRuns).toBe(20)
    expect(sets.exact!.counters["tx:answerLost"] ?? 0).toBe(0)
  })

  it.each([
    ["crashes", "tx:commitStalled", "commits stalled between the lease check and Redis"],
    [
      "crashes",
      "tx:stalledCommit:fenced",
      "stalled commits of a stale owner, refused by the token",
    ],
    ["crashes", "tx:stalledCommit:already", "stalled commits that found their messages committed"],
    ["crashes", "store:ackUnreachable", "commits that never reached storage"],
    ["crashes", "crash:restartLater", "processes crashed (mid-handler included)"],
    ["lost", "tx:answerLost", "commit answers lost after the commit ran"],
    ["lost", "tx:alreadyCommitted", "retried commits that found nothing pending"],
    ["failover", "coordinator:crashes", "coordinator crashes"],
    ["failover", "tx:answerLost", "commit answers lost across failovers"],
    ["reshard", "reshard:generationsRetired", "reshards completed"],
    ["reshard", "tx:alreadyCommitted", "retried commits during reshards"],
  ])("%s reaches %s (%s)", (set, counter) => {
    expect(sets[set]!.counters[counter] ?? 0).toBeGreaterThan(0)
  })

  it("every run applied at least as many effects as it produced messages", () => {
    for (const set of Object.values(sets))
      expect(set.counters["tx:effectsApplied"]).toBeGreaterThan(0)
  })
})

describe("the model's mutants are caught by the transactions checker", () => {
  const caught = (list: ReadonlyArray<SimOptions>) =>
    list.filter((o) => runSeed(o).summary.violations.some((v) => v.checker === "transactions"))
      .length

  it("effects at handle time: caught on crash / partition / storage-outage seeds without lost answers", () => {
    const list = range(1, 6).map((s) =>
      smallOptions("swarm", s, {
        faults: "crash,pause,partition,store-partition",
        ratePerShard: 5,
        broken: "tx-effects-at-handle",
      }),
    )
    expect(caught(list)).toBeGreaterThanOrEqual(5)
  })

  it("a commit without the pending check: caught on lost commit answers and on zombies with the fence off", () => {
    const lost = range(1, 3).map((s) =>
      smallOptions("churn", s, {
        faults: "burst,loss,dup",
        ratePerShard: 5,
        broken: "tx-commit-without-pending-check",
      }),
    )
    expect(caught(lost)).toBe(3)
    const zombies = range(1, 6).map((s) =>
      smallOptions("partition-storm", s, {
        faults: "partition,pause,clog",
        fence: "off",
        ratePerShard: 5,
        broken: "tx-commit-without-pending-check",
      }),
    )
    expect(caught(zombies)).toBeGreaterThanOrEqual(3)
  })

  it("the same seeds pass with the model as written", () => {
    const list = range(1, 6).map((s) =>
      smallOptions("partition-storm", s, {
        faults: "partition,pause,clog",
        fence: "off",
        ratePerShard: 5,
        tx: true,
      }),
    )
    expect(caught(list)).toBe(0)
  })

  it("turning transactions on without lost answers or stalls leaves every event as it was (same digest)", () => {
    for (const s of [1, 2, 3]) {
      const o = smallOptions("swarm", s, {
        faults: "crash,kill,partition,store-partition",
        ratePerShard: 5,
      })
      expect(runSeed({ ...o, tx: true }).summary.digest).toBe(runSeed(o).summary.digest)
    }
  })
})

describe("the commit (Transactions.commit, one step: token, pending, effects and ack)", () => {
  // A data plane of one shard: owner token 5, messages 0..3 pending.
  const setup = (broken?: SimOptions["broken"], fenceOn = true) => {
    const checker = new TransactionChecker(1, 8, (k) => `key-${k}`)
    const acked: Array<number> = []
    const counts: Record<string, number> = {}
    const data = {
      storageFence: fenceOn,
      fence: Int32Array.of(5),
      pel: [new Set([0, 1, 2, 3])],
      fencedAcks: 0,
      ack: (_shard: number, _token: number, ids: ReadonlyArray<number>) => {
        for (const id of ids) {
          data.pel[0]!.delete(id)
          acked.push(id)
        }
        return true
      },
    }
    const ctx = {
      options: { ...defaultOptions, broken },
      mix: { intensity: { loss: 0, clog: 0, pause: 0 } },
      data,
      w: { now: 0, count: (k: string) => (counts[k] = (counts[k] ?? 0) + 1) },
    } as unknown as Ctx
    const tx = new Transactions(ctx, checker)
    for (let id = 0; id < 4; id++) tx.produced(0, id, -1)
    return { tx, checker, acked, data, counts }
  }

  it("all pending, current token: applies every effect and acks, once", () => {
    const { tx, checker, acked } = setup()
    tx.handlerStarted(0, [0, 1])
    expect(checker.effects).toBe(0) // buffered while the handler runs
    expect(tx.commit(0, 5, [0, 1])).toBe("committed")
    expect(acked).toEqual([0, 1])
    expect([checker.appliedCount(0, 0), checker.appliedCount(0, 1)]).toEqual([1, 1])
  })

  it("a stale owner's commit writes nothing and acks nothing", () => {
    const { tx, checker, acked, data } = setup()
    expect(tx.commit(0, 4, [0, 1])).toBe("fenced")
    expect(checker.effects).toBe(0)
    expect(acked).toEqual([])
    expect(data.fencedAcks).toBe(1)
  })

  it("a commit of messages no longer pending (a lost answer's retry) applies nothing", () => {
    const { tx, checker, acked } = setup()
    expect(tx.commit(0, 5, [0, 1])).toBe("committed")
    expect(tx.commit(0, 5, [0, 1])).toBe("already")
    expect(checker.effects).toBe(2)
    expect(acked).toEqual([0, 1])
  })

  it("some no longer pending: nothing applied, nothing acked, the rest stay pending", () => {
    const { tx, checker, acked, data } = setup()
    tx.commit(0, 5, [0])
    expect(tx.commit(0, 5, [0, 1, 2])).toBe("partial")
    expect(checker.effects).toBe(1)
    expect(acked).toEqual([0])
    expect([...data.pel[0]!]).toEqual([1, 2, 3])
  })

  it("with the fence off a zombie's commit is stopped by the pending check alone", () => {
    const { tx, checker } = setup(undefined, false)
    expect(tx.commit(0, 9, [2, 3])).toBe("committed")
    expect(tx.commit(0, 1, [2, 3])).toBe("already")
    expect(checker.effects).toBe(2)
  })

  it("the mutants: effects at handle time, a commit without the pending check", () => {
    const atHandle = setup("tx-effects-at-handle")
    atHandle.tx.handlerStarted(0, [0, 1])
    expect(atHandle.checker.effects).toBe(2) // applied before any commit
    const noCheck = setup("tx-commit-without-pending-check")
    noCheck.tx.commit(0, 5, [0, 1])
    expect(noCheck.tx.commit(0, 5, [0, 1])).toBe("committed")
    expect(noCheck.checker.appliedCount(0, 0)).toBe(2)
  })
})
