/**
 * A TCP proxy in front of a Redis node that can lose one reply: armed, it
 * lets the next request through to Redis (which runs it) and then drops that
 * connection's reply and closes the connection, as a network cut or a
 * server-side CLIENT KILL right after the command ran does. What the client
 * does next (fail the command, or silently run it again on a new connection)
 * is what test/lostReply.test.ts checks.
 */
import net from "node:net"

export interface LossyProxy {
  readonly port: number
  /** The next request on any connection runs; its reply is lost and its connection closed. */
  readonly loseNextReply: () => void
  /** Replies lost so far. */
  readonly lost: () => number
  readonly close: () => Promise<void>
}

export const startLossyProxy = (target: { host: string; port: number }): Promise<LossyProxy> =>
  new Promise((resolve, reject) => {
    let armed = false
    let lost = 0
    const sockets = new Set<net.Socket>()
    const server = net.createServer((client) => {
      const upstream = net.connect(target)
      sockets.add(client)
      sockets.add(upstream)
      let victim = false
      client.on("data", (chunk) => {
        if (armed && !victim) {
          armed = false
          victim = true
        }
        upstream.write(chunk)
      })
      upstream.on("data", (chunk) => {
        if (victim) {
          lost++
          client.destroy()
          upstream.destroy()
          return
        }
        client.write(chunk)
      })
      const end = () => {
        client.destroy()
        upstream.destroy()
        sockets.delete(client)
        sockets.delete(upstream)
      }
      client.on("close", end)
      upstream.on("close", end)
      client.on("error", end)
      upstream.on("error", end)
    })
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as net.AddressInfo
      resolve({
        port: address.port,
        loseNextReply: () => {
          armed = true
        },
        lost: () => lost,
        close: () =>
          new Promise<void>((done) => {
            for (const s of sockets) s.destroy()
            server.close(() => done())
          }),
      })
    })
  })
