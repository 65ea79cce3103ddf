/**
 * The gated fence in a Redis Cluster (docs/redis.md, "The gated fence in a
 * cluster"): each read's MULTI (internal/gatedRead.ts) goes to the node that
 * owns the shard's slot, on a dedicated wire of that node; the reads of one
 * node ready together leave as their own transactions in one write (a
 * MULTI over several slots is refused: CROSSSLOT), each judged alone.
 *
 * Every key of a shard shares the hash tag `{<stream>:<shard>}` (src/keys.ts),
 * so a gated read's transaction is single-slot. The route is the cluster
 * client's slot map (`Cluster.slots`, the NAT-mapped master of each slot);
 * a node's wire is opened lazily, from the cluster client's connection to
 * that node (`RedisConnection.leaseNode`: the cluster's AUTH, TLS and NAT
 * map), and like a single node's it never reconnects or resends.
 *
 * Why a stale route is harmless: a node that does not own the slot (the slot
 * moved: MOVED; or is migrating and the gate key, which never exists outside
 * the transaction, is missing: ASK or TRYAGAIN) refuses the transaction's
 * keyed commands when they are queued, or the whole transaction at EXEC, and
 * Redis then runs none of it. The read refreshes the slot map and takes the
 * script (the cluster client follows MOVED and ASK itself, with ASKING). No
 * ASKING is ever sent on a wire, so a transaction never runs on a node that
 * is importing the slot.
 */
import type { ShardStreams } from "@shardline/core"
import calculateSlot from "cluster-key-slot"
import type { Cluster, Redis } from "ioredis"
import type { RedisConnectionShape } from "../RedisConnection.js"
import { type GatedRoute, ready } from "./gatedRead.js"
import { adopt, type Wire } from "./wire.js"

interface NodeWire {
  /** The node's wire, counting its sends in flight. */
  readonly wire: Promise<Wire>
  /** What `wire` resolved to (to see it closed without awaiting). */
  live: Wire | undefined
  /** Sends written and not yet answered. */
  inFlight: number
  /** Out of the route (its node no longer a master): closed once idle. */
  retired: boolean
  shut: boolean
  readonly release: () => void
}

const shut = (entry: NodeWire) => {
  if (entry.shut) return
  entry.shut = true
  entry.live?.close()
  entry.release()
}

/** Closes a retired wire once no read is waiting on it. */
const shutIfIdle = (entry: NodeWire) => {
  if (entry.retired && entry.inFlight === 0 && entry.live !== undefined) shut(entry)
}

/** The `host:port` a cluster client's node connection is known by in its slot map. */
const nodeKey = (node: Redis): string => `${node.options.host}:${node.options.port}`

/** One route per cluster client: every `ShardStreams` of a connection shares its node wires. */
const routes = new WeakMap<object, GatedRoute>()

/**
 * Routes gated reads to the node of each shard's slot, a wire per node
 * (opened on its first read; closed when it fails, when a refresh of the
 * slot map no longer lists the node as a master, and with the connection:
 * `leaseNode`).
 */
export const clusterRoute = (connection: RedisConnectionShape): GatedRoute => {
  const shared = routes.get(connection.client)
  if (shared !== undefined) return shared
  const route = makeRoute(connection)
  routes.set(connection.client, route)
  return route
}

const makeRoute = (connection: RedisConnectionShape): GatedRoute => {
  const cluster = connection.client as Cluster
  const { shardKey } = connection.keys
  const wires = new Map<string, NodeWire>()

  /** A failed wire: closed now (its reads in flight have failed already). */
  const close = (key: string, which?: Promise<Wire>) => {
    const entry = wires.get(key)
    if (entry === undefined || (which !== undefined && entry.wire !== which)) return
    wires.delete(key)
    shut(entry)
  }

  // after each refresh of the slot map: a node that owns no slot any more
  // (removed, or a master demoted by a failover) gets no more reads, and
  // its wire closes once the reads already sent there are answered (a
  // demoted master refuses them: MOVED, and they take the script); closing
  // it under them would fail them for nothing
  cluster.on("refresh", () => {
    const masters = new Set(cluster.nodes("master").map(nodeKey))
    for (const [key, entry] of [...wires])
      if (!masters.has(key)) {
        wires.delete(key)
        entry.retired = true
        shutIfIdle(entry)
      }
  })

  const open = (o: ShardStreams.ReadOptions): Promise<Wire> | undefined => {
    const owner = cluster.slots[calculateSlot(shardKey(o.stream, o.shard))]?.[0]
    if (owner === undefined) return undefined
    const known = wires.get(owner)
    if (known !== undefined && known.live?.closed() !== true) return known.wire
    if (known !== undefined) close(owner)
    // the cluster client's own connection to the owner (its options, NAT-mapped
    // address); none when the slot map names a node not yet in its pool (e.g.
    // an unmapped MOVED target): the script then
    const node = cluster.nodes("master").find((n) => nodeKey(n) === owner)
    if (node === undefined) return undefined
    const lease = connection.leaseNode(node)
    const entry: NodeWire = {
      live: undefined,
      inFlight: 0,
      retired: false,
      shut: false,
      release: lease.release,
      wire: ready(lease.client).then((): Wire => {
        const w = adopt(lease.client)
        entry.live = w
        if (entry.shut) w.close()
        // retired while it opened: the reads awaiting it send first (they
        // resume before any macrotask), then it closes once they are answered
        else if (entry.retired) setImmediate(() => shutIfIdle(entry))
        return {
          send: (commands) => {
            entry.inFlight++
            return w.send(commands).finally(() => {
              entry.inFlight--
              shutIfIdle(entry)
            })
          },
          closed: w.closed,
          close: w.close,
        }
      }),
    }
    wires.set(owner, entry)
    return entry.wire
  }

  return {
    open,
    drop: (failed) => {
      for (const [key, entry] of wires) if (entry.wire === failed) close(key, failed)
    },
    redirected: (error) => {
      // MOVED: the slot map is stale (the script this read falls back to
      // follows the redirection; the next reads need the new owner too).
      // ASK / TRYAGAIN: the slot is migrating and the map is right; until
      // the move ends, each gated read of the slot costs one refused round
      // trip before its script. Concurrent refreshes are one (ioredis).
      if (error.message.startsWith("MOVED ")) cluster.refreshSlotsCache()
    },
  }
}
