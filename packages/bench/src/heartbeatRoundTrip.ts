/**
 * `pnpm --filter @shardline/bench bench:heartbeat-round-trip [members] [shards]`
 *
 * One member's heartbeat round trip through core, the part of the
 * simulator's heartbeat path that is core's (docs/simulator.md, Speed):
 * `MemberMachine.nextRequest`, `CoordinatorShell.heartbeat`, `apply` (and
 * any due deadline), `MemberMachine.step` on the answer (and the read loops
 * it starts or stops). Every member heartbeats once per round, in turn, as
 * in a big group where consecutive requests come from different members; the
 * group converges for 30 rounds first. Prints the CPU time per round trip
 * (least and median of 7 measurements of 10 rounds each; CPU time includes
 * the garbage collector's threads). No store, no I/O: the commits of the
 * steady state are counted as revisions only.
 *
 * @module
 */
import {
  CoordinatorShell,
  type HeartbeatResponse,
  MemberMachine,
  makeGroupConfig,
} from "@shardline/core"

const members = Number(process.argv[2] ?? 5_000)
const shards = Number(process.argv[3] ?? 1_024)
const config = makeGroupConfig({
  groupId: "g",
  stream: "g",
  shardCount: shards,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 10_000,
  heartbeatIntervalMs: 1_000,
})

let now = 1_000_000
let revision = 1
const created = CoordinatorShell.create(config, now, { holder: "c", leaseToken: 1 })
const shell = created.shell
shell.apply(created.step, revision)
const machines = Array.from({ length: members }, (_, i) =>
  MemberMachine.make(
    {
      group: "g",
      stream: "g",
      memberId: `member-${i}`,
      incarnation: 1,
      instance: `instance-${i}`,
      memberInfo: { consumerName: `member-${i}`, host: "bench", runtimeMaxConcurrency: 2 },
      heartbeatIntervalMs: 1_000,
    },
    now,
  ),
)

const answer = (m: MemberMachine.MemberState, seq: number, response: HeartbeatResponse) => {
  const commands = MemberMachine.step(m, { _tag: "ResponseReceived", seq, response, now })
  for (const c of commands)
    if (c._tag === "StartShard") MemberMachine.step(m, { _tag: "ShardStarted", shard: c.shard })
    else if (c._tag === "StopShard") MemberMachine.step(m, { _tag: "ShardDrained", shard: c.shard })
}

const round = () => {
  for (const m of machines) {
    const { seq, request } = MemberMachine.nextRequest(m, now)
    const step = shell.heartbeat(request, now)
    shell.apply(step, step.records.length > 0 ? ++revision : undefined)
    for (let due = shell.dueTimer(now); due !== undefined; due = shell.dueTimer(now))
      shell.apply(due, due.records.length > 0 ? ++revision : undefined)
    answer(m, seq, step.response)
  }
  now += 1_000
}

for (let i = 0; i < 30; i++) round()
const ROUNDS = 10
const perRoundTrip: Array<number> = []
for (let r = 0; r < 7; r++) {
  const start = process.cpuUsage()
  for (let i = 0; i < ROUNDS; i++) round()
  const used = process.cpuUsage(start)
  perRoundTrip.push((used.user + used.system) / (ROUNDS * members))
}
perRoundTrip.sort((a, b) => a - b)
process.stdout.write(
  `${members} members x ${shards} shards: ${perRoundTrip[0]!.toFixed(2)} us least, ${perRoundTrip[3]!.toFixed(2)} us median CPU per heartbeat round trip\n`,
)
