/**
 * The Lua scripts (src/lua/*.lua, each documenting its KEYS and ARGV), with
 * the shared prelude's helpers each uses prepended (`preludeFor`). They are
 * registered as ioredis commands (`scripts` option), so ioredis sends
 * EVALSHA and falls back to EVAL on NOSCRIPT, on a single node and in a
 * cluster (routed by the first key).
 */
import { Transaction } from "@shardline/core"
import type { Cluster, Redis } from "ioredis"
import ack from "./lua/ack.lua"
import append from "./lua/append.lua"
import claimPending from "./lua/claim-pending.lua"
import commit from "./lua/commit.lua"
import deadLetter from "./lua/dead-letter.lua"
import dlqReplayAppend from "./lua/dlq-replay-append.lua"
import dlqReplayRemove from "./lua/dlq-replay-remove.lua"
import dlqReplayRoute from "./lua/dlq-replay-route.lua"
import drainState from "./lua/drain-state.lua"
import gate from "./lua/gate.lua"
import gateFast from "./lua/gate-fast.lua"
import hbHandback from "./lua/hb-handback.lua"
import hbPush from "./lua/hb-push.lua"
import hbReply from "./lua/hb-reply.lua"
import hbServing from "./lua/hb-serving.lua"
import layoutLoad from "./lua/layout-load.lua"
import layoutSave from "./lua/layout-save.lua"
import leaseAcquire from "./lua/lease-acquire.lua"
import leaseRenew from "./lua/lease-renew.lua"
import nack from "./lua/nack.lua"
import outboxDeliver from "./lua/outbox-deliver.lua"
import outboxRead from "./lua/outbox-read.lua"
import outboxRemove from "./lua/outbox-remove.lua"
import outboxReroute from "./lua/outbox-reroute.lua"
import prelude from "./lua/prelude.lua"
import read from "./lua/read.lua"
import retireShard from "./lua/retire-shard.lua"
import seal from "./lua/seal.lua"
import setOwnerToken from "./lua/set-owner-token.lua"
import setPosition from "./lua/set-position.lua"
import storeAppend from "./lua/store-append.lua"
import storeLoad from "./lua/store-load.lua"
import storeReplace from "./lua/store-replace.lua"

export interface Script {
  /** The ioredis command name it is registered under. */
  readonly name: string
  readonly numberOfKeys: number
  readonly lua: string
}

/** The prelude's helpers (`local function <name>` ... `end`), each with its name. */
const HELPER = /^local function (\w+)\([\s\S]*?^end$/gm
const helpers = [...prelude.matchAll(HELPER)].map((m) => ({ name: m[1]!, text: m[0] }))

/**
 * The prelude as `body` needs it: the helpers it names (a word of its text)
 * and those they name, in the prelude's order; the others left out. Each
 * helper is a closure Redis makes on every call of the script: the whole
 * prelude cost the commit script about 7 µs a call (docs/exactly-once.md,
 * "Where the time goes").
 */
export const preludeFor = (body: string): string => {
  const names = (text: string) => new Set(text.match(/\w+/g) ?? [])
  const needed = new Set<string>()
  let named = names(body)
  for (let grew = true; grew; ) {
    grew = false
    for (const h of helpers)
      if (!needed.has(h.name) && named.has(h.name)) {
        needed.add(h.name)
        named = new Set([...named, ...names(h.text)])
        grew = true
      }
  }
  return prelude.replace(HELPER, (text, name: string) => (needed.has(name) ? text : ""))
}

const script = (name: string, numberOfKeys: number, body: string): Script => ({
  name: `shardline_${name}`,
  numberOfKeys,
  lua: `${preludeFor(body)}\n${body}`,
})

/**
 * The transaction allow-list as two Lua tables (commit.lua), from core's
 * `Transaction.COMMANDS`: one list for the runtime's handle, the memory port
 * and the script. `TX`: command -> the type it works on; `TXC`: command ->
 * the counter it changes. Flat tables of strings: the script builds them on
 * every call, and a table per command cost each commit about 3 µs.
 */
const allowList = [
  `local TX = { ${Object.entries(Transaction.COMMANDS)
    .map(([name, spec]) => `${name} = '${spec.type}'`)
    .join(", ")} }`,
  `local TXC = { ${Object.entries(Transaction.COMMANDS)
    .flatMap(([name, spec]) => (spec.counter === undefined ? [] : [`${name} = '${spec.counter}'`]))
    .join(", ")} }`,
].join("\n")

export const Scripts = {
  append: script("append", 3, append),
  seal: script("seal", 1, seal),
  drainState: script("drainState", 3, drainState),
  // variadic keys (the groups' owner tokens): numberOfKeys is passed per call
  retireShard: script("retireShard", -1, retireShard),
  setOwnerToken: script("setOwnerToken", 3, setOwnerToken),
  read: script("read", 2, read),
  gate: script("gate", 3, gate),
  // the gate's common case (the ack queued in the MULTI) without the prelude: it
  // costs Redis about half the full gate per batch (docs/runtime.md, "Where the time goes")
  gateFast: { name: "shardline_gateFast", numberOfKeys: 3, lua: gateFast },
  ack: script("ack", 2, ack),
  nack: script("nack", 2, nack),
  claimPending: script("claimPending", 2, claimPending),
  setPosition: script("setPosition", 2, setPosition),
  deadLetter: script("deadLetter", 3, deadLetter),
  // `shardline dlq replay` / `purge` (@shardline/tools, src/Admin.ts: they run
  // them through ./internal; registered here with the others, on every connection)
  dlqReplayRoute: script("dlqReplayRoute", 2, dlqReplayRoute),
  dlqReplayAppend: script("dlqReplayAppend", 3, dlqReplayAppend),
  dlqReplayRemove: script("dlqReplayRemove", 2, dlqReplayRemove),
  // variadic keys (the keys a transaction writes, its direct sends' targets)
  commit: script("commit", -1, `${allowList}\n${commit}`),
  outboxRead: script("outboxRead", 2, outboxRead),
  outboxDeliver: script("outboxDeliver", 3, outboxDeliver),
  outboxReroute: script("outboxReroute", 2, outboxReroute),
  outboxRemove: script("outboxRemove", 2, outboxRemove),
  leaseAcquire: script("leaseAcquire", 2, leaseAcquire),
  leaseRenew: script("leaseRenew", 1, leaseRenew),
  hbPush: script("hbPush", 3, hbPush),
  // variadic keys (one reply list per answer of a batch)
  hbReply: script("hbReply", -1, hbReply),
  hbServing: script("hbServing", 1, hbServing),
  hbHandback: script("hbHandback", 2, hbHandback),
  storeLoad: script("storeLoad", 3, storeLoad),
  storeAppend: script("storeAppend", 5, storeAppend),
  storeReplace: script("storeReplace", 3, storeReplace),
  layoutLoad: script("layoutLoad", 1, layoutLoad),
  layoutSave: script("layoutSave", 1, layoutSave),
} as const

/** The `scripts` option of `new Redis(...)` / `new Redis.Cluster(...)`. */
export const ioredisScripts: Record<string, { lua: string; numberOfKeys?: number }> =
  Object.fromEntries(
    Object.values(Scripts).map((s) => [
      s.name,
      s.numberOfKeys < 0 ? { lua: s.lua } : { lua: s.lua, numberOfKeys: s.numberOfKeys },
    ]),
  )

type ScriptCommand = (...args: ReadonlyArray<string>) => Promise<unknown>

/** Runs a registered script (EVALSHA, EVAL on NOSCRIPT). */
export const runScript = (
  client: Redis | Cluster,
  s: Script,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
): Promise<unknown> => {
  const command = (client as unknown as Record<string, ScriptCommand | undefined>)[s.name]
  if (command === undefined) {
    // a client made elsewhere (RedisConnection.fromClient): register on first use
    client.defineCommand(
      s.name,
      s.numberOfKeys < 0 ? { lua: s.lua } : { lua: s.lua, numberOfKeys: s.numberOfKeys },
    )
    return runScript(client, s, keys, args)
  }
  return s.numberOfKeys < 0
    ? command.call(client, String(keys.length), ...keys, ...args)
    : command.call(client, ...keys, ...args)
}
