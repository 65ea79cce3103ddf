/**
 * One TCP proxy for the tests' network faults (`@shardline/redis-store/testing`;
 * docs/redis.md, "Test servers"): a client connects to the proxy, the proxy
 * connects to the target, and every chunk either side sends is forwarded in
 * order, with what the test asked for:
 * - latency: each chunk waits `delayMs` (per direction) after it arrived
 *   and never overtakes the one before it, as on a slow link (this kernel
 *   has no `tc netem`; issue 32 item 7 asks for an in-order delay proxy);
 *   the delay can change while connections are open;
 * - a lost reply: armed (`loseNextReply`), the next request runs and its
 *   reply is dropped with the connection, as a cut or a CLIENT KILL right
 *   after the command ran (test/lostReply.test.ts);
 * - a held link: `hold()` stops forwarding what the target sends (a lagging
 *   replica's link in test/durability.test.ts); held bytes are never
 *   delivered, they die with the target, as unreplicated writes do.
 */
import net from "node:net"

/** Milliseconds added per direction: `toTarget` (requests), `toClient` (replies). */
export interface ProxyDelay {
  readonly toTarget: number
  readonly toClient: number
}

export interface ProxyOptions {
  /** The address to listen on (default 127.0.0.1), e.g. a network namespace's host address. */
  readonly host?: string
  /** The delay from the start (default none); a number is that much each way. */
  readonly delayMs?: number | Partial<ProxyDelay>
}

export interface TcpProxy {
  readonly host: string
  readonly port: number
  /** `host:port` of the proxy, for a client's options. */
  readonly address: string
  /**
   * Sets the delay of every chunk from now on, on open connections too
   * (a number: that much each way). A chunk is never forwarded before the
   * one that came before it in its direction, so lowering the delay keeps
   * the order.
   */
  readonly setDelay: (delay: number | Partial<ProxyDelay>) => void
  readonly delay: () => ProxyDelay
  /** The next request on any connection runs; its reply is lost and its connection closed. */
  readonly loseNextReply: () => void
  /** Replies lost so far. */
  readonly lost: () => number
  /** From now on, what the target sends is held and never delivered. */
  readonly hold: () => void
  /** Connections the proxy forwards now. */
  readonly connections: () => number
  readonly close: () => Promise<void>
}

const asDelay = (delay: number | Partial<ProxyDelay>, base: ProxyDelay): ProxyDelay => {
  const d =
    typeof delay === "number"
      ? { toTarget: delay, toClient: delay }
      : { toTarget: delay.toTarget ?? base.toTarget, toClient: delay.toClient ?? base.toClient }
  for (const ms of [d.toTarget, d.toClient])
    if (!(Number.isFinite(ms) && ms >= 0))
      throw new RangeError(`a proxy delay must be a finite number of ms >= 0, got ${ms}`)
  return d
}

/**
 * One direction of one connection: chunks forwarded in arrival order, each
 * no earlier than `delay()` ms after it arrived.
 */
const pipe = (to: net.Socket, delay: () => number) => {
  const queue: Array<{ readonly due: number; readonly chunk: Buffer }> = []
  let timer: NodeJS.Timeout | undefined
  const drain = () => {
    timer = undefined
    const now = performance.now()
    while (queue.length > 0 && queue[0]!.due <= now) to.write(queue.shift()!.chunk)
    if (queue.length > 0) timer = setTimeout(drain, Math.max(0, queue[0]!.due - now))
  }
  return {
    push: (chunk: Buffer) => {
      const ms = delay()
      if (ms === 0 && queue.length === 0) {
        to.write(chunk)
        return
      }
      // first in, first out: a chunk waits for the one ahead of it even
      // when the delay dropped since (its own due time may be earlier)
      const due = performance.now() + ms
      queue.push({ due, chunk })
      if (timer === undefined) timer = setTimeout(drain, Math.max(0, due - performance.now()))
    },
    stop: () => {
      if (timer !== undefined) clearTimeout(timer)
      queue.length = 0
    },
  }
}

/** Starts a proxy to `target` on a free port (see the module comment). */
export const startProxy = (
  target: { readonly host: string; readonly port: number },
  options: ProxyOptions = {},
): Promise<TcpProxy> =>
  new Promise((resolve, reject) => {
    let delay = asDelay(options.delayMs ?? 0, { toTarget: 0, toClient: 0 })
    let armed = false
    let holding = false
    let lost = 0
    const sockets = new Set<net.Socket>()
    let open = 0
    const server = net.createServer((client) => {
      const upstream = net.connect(target.port, target.host)
      client.setNoDelay(true)
      upstream.setNoDelay(true)
      sockets.add(client).add(upstream)
      open++
      const toTarget = pipe(upstream, () => delay.toTarget)
      const toClient = pipe(client, () => delay.toClient)
      let victim = false
      let ended = false
      const end = () => {
        if (ended) return
        ended = true
        open--
        toTarget.stop()
        toClient.stop()
        client.destroy()
        upstream.destroy()
        sockets.delete(client)
        sockets.delete(upstream)
      }
      client.on("data", (chunk: Buffer) => {
        if (armed && !victim) {
          armed = false
          victim = true
        }
        toTarget.push(chunk)
      })
      upstream.on("data", (chunk: Buffer) => {
        if (victim) {
          lost++
          end()
          return
        }
        if (!holding) toClient.push(chunk)
      })
      client.on("close", end).on("error", end)
      upstream.on("close", end).on("error", end)
    })
    server.on("error", reject)
    const host = options.host ?? "127.0.0.1"
    server.listen(0, host, () => {
      const port = (server.address() as net.AddressInfo).port
      resolve({
        host,
        port,
        address: `${host}:${port}`,
        setDelay: (next) => {
          delay = asDelay(next, delay)
        },
        delay: () => delay,
        loseNextReply: () => {
          armed = true
        },
        lost: () => lost,
        hold: () => {
          holding = true
        },
        connections: () => open,
        close: () =>
          new Promise<void>((done) => {
            for (const s of sockets) s.destroy()
            server.close(() => done())
          }),
      })
    })
  })
